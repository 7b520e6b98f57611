"""A JupyterHub that serves this course to local Unix users (`jupyterhub -f deploy/jupyterhub_config.py`).

Learners log in with their Unix account (PAM) and get JupyterLab in their home folder, with the
learner's settings (jupyter/learner: the Assignments tab finds the course's exchange; no
formgrader, no Create Assignment). Instructors get JupyterLab in the course folder, opening the
formgrader. Every user's server and kernel is this course's environment, read-only to them.

Set by the environment (see the instructor guide, "A term on a JupyterHub"):
    COURSE_ROOT         the course folder (default: this repository), owned by an instructor
    COURSE_LEARNER_CONFIG  the learner's settings, readable by all (default: jupyter/learner here)
    COURSE_EXCHANGE     nbgrader's exchange, shared by everyone (default: /srv/nbgrader/exchange)
    COURSE_INSTRUCTORS  comma-separated Unix users who get the formgrader
    COURSE_HUB_URL      where the hub listens (default: http://127.0.0.1:8000); https://... with the two below
    COURSE_HUB_SSL_CERT, COURSE_HUB_SSL_KEY   the certificate and its key, for HTTPS (passwords cross the network)
    COURSE_IDLE_SECONDS a server idle this long is stopped (default: 3600; 0: never), by jupyterhub-idle-culler
    COURSE_HUB_API_URL, COURSE_PROXY_API_URL   its internal addresses (default: ports 8081 and 8001)
    COURSE_HUB_STATE    the hub's own database and cookie secret (default: /var/lib/ch12-hub)
    COURSE_DB_URL       a gradebook on a server (PostgreSQL), handed to instructors' servers only, so
                        that their formgrader grades in the gradebook `course autograde` writes
    COURSE_ROSTER       the class list, nbgrader's roster CSV (an `id` column; the instructor imports the
                        same file with `nbgrader db student import`): only they and the instructors log in
"""

import csv
import os
import sys
from pathlib import Path

course = Path(os.environ.get("COURSE_ROOT") or Path(__file__).resolve().parents[1]).resolve()
environment = Path(os.path.normpath(sys.executable)).parent  # the hub runs from the course environment
exchange = os.environ.get("COURSE_EXCHANGE") or "/srv/nbgrader/exchange"
instructors = {name.strip() for name in os.environ.get("COURSE_INSTRUCTORS", "").split(",") if name.strip()}
state = Path(os.environ.get("COURSE_HUB_STATE") or "/var/lib/ch12-hub")
# The learner's settings must be readable by every learner (the course folder is the instructor's alone).
learner_settings = os.environ.get("COURSE_LEARNER_CONFIG") or str(Path(__file__).resolve().parents[1] / "jupyter" / "learner")
instructor_settings = Path(__file__).resolve().parents[1] / "jupyter" / "instructor"  # no news pop-up in Lab
gradebook = os.environ.get("COURSE_DB_URL")  # its password, if any, must not reach a learner's server
roster = os.environ.get("COURSE_ROSTER")
state.mkdir(parents=True, exist_ok=True, mode=0o700)

c = get_config()  # noqa: F821 (traitlets provides it)
c.JupyterHub.bind_url = os.environ.get("COURSE_HUB_URL") or "http://127.0.0.1:8000"
if os.environ.get("COURSE_HUB_SSL_CERT"):  # learners type their Unix password into the login page
    c.JupyterHub.ssl_cert = os.environ["COURSE_HUB_SSL_CERT"]
    c.JupyterHub.ssl_key = os.environ["COURSE_HUB_SSL_KEY"]
c.JupyterHub.hub_bind_url = os.environ.get("COURSE_HUB_API_URL") or "http://127.0.0.1:8081"  # the hub, for servers
c.ConfigurableHTTPProxy.api_url = os.environ.get("COURSE_PROXY_API_URL") or "http://127.0.0.1:8001"
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
c.JupyterHub.authenticator_class = "pam"
if roster:  # the class and its instructors, nobody else of this machine's accounts
    with open(roster, newline="") as handle:
        c.Authenticator.allowed_users = {row["id"].strip() for row in csv.DictReader(handle)
                                         if (row.get("id") or "").strip()} | instructors
else:
    c.Authenticator.allow_all = True  # every local account may log in: set COURSE_ROSTER to restrict
c.Authenticator.admin_users = instructors
c.JupyterHub.spawner_class = "localprocess"  # each server runs as its Unix user
c.Spawner.cmd = [str(environment / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120
c.Spawner.environment = {"COURSE_EXCHANGE": exchange, "PATH": f"{environment}:/usr/local/bin:/usr/bin:/bin"}


def course_for(spawner):
    """Instructors: the course folder and the formgrader. Learners: their home, learner settings."""
    if spawner.user.name in instructors:
        spawner.notebook_dir = str(course)
        spawner.default_url = "/formgrader"
        # its nbgrader_config.py, wherever the server starts; the gradebook on a server, if any
        own = {"JUPYTER_CONFIG_PATH": os.pathsep.join([str(course), str(instructor_settings)]),
               **({"COURSE_DB_URL": gradebook} if gradebook else {})}
    else:
        own = {"JUPYTER_CONFIG_PATH": learner_settings}
    spawner.environment = {**spawner.environment, **own}  # a new dict: nothing one user gets is shared


c.Spawner.pre_spawn_hook = course_for

# A server nobody used for an hour is stopped (its kernels with it): JupyterHub's own culler, as a hub service.
idle = int(os.environ.get("COURSE_IDLE_SECONDS") or 3600)
if idle > 0:
    c.JupyterHub.services = [{"name": "idle-culler",
                              "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={idle}"]}]
    c.JupyterHub.load_roles = [{"name": "idle-culler", "services": ["idle-culler"],
                                "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]}]
