"""deploy/jupyterhub_config.py as JupyterHub loads it: the environment each user's server starts with.

The file is run as JupyterHub runs a config file (a traitlets `Config` from `get_config()`), and its
spawn hook is called on spawners built from that config the way JupyterHub builds them (traitlets
copies a configured value into each instance). No hub is started here: tests/browser/test_hub.py runs
a whole term through the same file.
"""

from __future__ import annotations

import json
import os
import re
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest
from traitlets import Any, Dict, Int, List, Unicode
from traitlets.config import Config, Configurable

ROOT = Path(__file__).resolve().parents[1]
HUB_CONFIG = ROOT / "deploy" / "jupyterhub_config.py"
GUIDE = ROOT / "docs" / "instructor-guide.md"


def hub_section() -> str:
    text = GUIDE.read_text()
    start = text.index("## A term on a JupyterHub")
    return text[start:text.index("\n## ", start + 1)]


def steps() -> list[str]:
    """The section's code blocks, in order: steps 1 to 6."""
    return re.findall(r"```bash\n(.*?)```", hub_section(), re.S)


def lines(block: str) -> list[str]:
    """A block's commands (a heredoc stays whole), comments and blank lines left out."""
    found, heredoc = [], None
    for line in block.splitlines():
        if heredoc is not None:
            found[-1] += "\n" + line
            heredoc = None if line == heredoc else heredoc
            continue
        if line.strip() and not line.lstrip().startswith("#"):
            found.append(line)
            marker = re.search(r"<<'(\w+)'", line)
            heredoc = marker.group(1) if marker else None
    return found


def without_systemd() -> str:
    """The command the guide gives for starting the hub without systemd."""
    return re.search(r"Without systemd, the same as root:\s*`([^`]+)`", hub_section()).group(1)


class Spawner(Configurable):
    """The traits of JupyterHub's Spawner that the config sets (so `c.Spawner` applies here)."""

    environment = Dict(config=True)
    notebook_dir = Unicode(config=True)
    default_url = Unicode(config=True)
    cmd = List(config=True)
    http_timeout = Int(config=True)
    pre_spawn_hook = Any(config=True)


def spawned(config: Config, user: str) -> Spawner:
    spawner = Spawner(config=config)
    spawner.user = SimpleNamespace(name=user)
    config.Spawner.pre_spawn_hook(spawner)
    return spawner


@pytest.fixture
def hub_config(tmp_path, monkeypatch):
    def load(**env: str) -> Config:
        monkeypatch.setenv("COURSE_HUB_STATE", str(tmp_path / "state"))
        monkeypatch.setenv("COURSE_INSTRUCTORS", "teacher")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        config = Config()
        runpy.run_path(str(HUB_CONFIG), init_globals={"get_config": lambda: config})
        return config
    return load


def test_the_gradebook_on_a_server_reaches_the_instructors_formgrader_and_no_learner(hub_config):
    url = "postgresql://grader:secret@db.example/ch12"
    config = hub_config(COURSE_DB_URL=url)
    teacher, ann, bob = (spawned(config, user) for user in ("teacher", "ann", "bob"))
    assert teacher.environment["COURSE_DB_URL"] == url, "formgrader must grade in the gradebook `course autograde` uses"
    for learner in (ann, bob):
        assert "COURSE_DB_URL" not in learner.environment, "a learner's server must not hold the gradebook's password"
        assert "secret" not in json.dumps(learner.environment)
    assert teacher.environment["COURSE_EXCHANGE"] == ann.environment["COURSE_EXCHANGE"], "one exchange for everyone"


def test_without_a_gradebook_url_nobody_gets_one(hub_config, monkeypatch):
    monkeypatch.delenv("COURSE_DB_URL", raising=False)
    config = hub_config()
    assert all("COURSE_DB_URL" not in spawned(config, user).environment for user in ("teacher", "ann"))


def test_each_server_reads_settings_that_keep_labs_news_pop_up_away(hub_config):
    """Learners and instructors alike: a folder on the server's config path disables JupyterLab's
    announcements (the "official Jupyter news?" pop-up); the instructor's also holds the course's
    nbgrader_config.py."""
    config = hub_config()
    for user in ("teacher", "ann"):
        folders = [Path(p) for p in spawned(config, user).environment["JUPYTER_CONFIG_PATH"].split(os.pathsep)]
        disabled = {}
        for folder in folders:
            page = folder / "labconfig" / "page_config.json"
            if page.is_file():
                disabled |= json.loads(page.read_text()).get("disabledExtensions", {})
        assert disabled.get("@jupyterlab/apputils-extension:announcements") is True, (user, folders)
    teacher = spawned(config, "teacher").environment["JUPYTER_CONFIG_PATH"].split(os.pathsep)
    assert any((Path(p) / "nbgrader_config.py").is_file() for p in teacher), teacher


def test_the_roster_is_who_may_log_in(hub_config, tmp_path):
    """With COURSE_ROSTER (nbgrader's roster CSV), the class and its instructors log in, no other
    account of the machine; without it, the config says every account may (the guide says to set it)."""
    roster = tmp_path / "roster.csv"
    roster.write_text("id,first_name,last_name,email\nann,Ann,A,\nbob,Bob,B,\n ,blank,row,\n")
    config = hub_config(COURSE_ROSTER=str(roster))
    assert config.Authenticator.allowed_users == {"ann", "bob", "teacher"}
    assert config.Authenticator.allow_all is not True


def test_without_a_roster_every_account_may_log_in(hub_config, monkeypatch):
    monkeypatch.delenv("COURSE_ROSTER", raising=False)
    assert hub_config().Authenticator.allow_all is True


def test_https_when_given_a_certificate_and_idle_servers_stopped(hub_config, tmp_path, monkeypatch):
    """Learners type their Unix password into the hub's login page: with COURSE_HUB_SSL_CERT and _KEY
    the hub serves it over HTTPS. JupyterHub's own culler stops a server idle for an hour, or
    COURSE_IDLE_SECONDS (0: never), and its service may do only that."""
    monkeypatch.delenv("COURSE_HUB_SSL_CERT", raising=False)
    monkeypatch.delenv("COURSE_IDLE_SECONDS", raising=False)
    plain = hub_config()
    assert "ssl_cert" not in plain.JupyterHub
    (culler,) = plain.JupyterHub.services
    assert culler["command"][1:] == ["-m", "jupyterhub_idle_culler", "--timeout=3600"]
    assert "delete:servers" in plain.JupyterHub.load_roles[0]["scopes"]
    assert "admin:users" not in plain.JupyterHub.load_roles[0]["scopes"]

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    secure = hub_config(COURSE_HUB_SSL_CERT=str(cert), COURSE_HUB_SSL_KEY=str(key), COURSE_IDLE_SECONDS="0")
    assert (secure.JupyterHub.ssl_cert, secure.JupyterHub.ssl_key) == (str(cert), str(key))
    assert "services" not in secure.JupyterHub


def test_a_staff_terminal_keeps_the_course_commands_on_its_path():
    """Jupyter starts a terminal as a login shell when its server was not started from one (as under
    JupyterHub), and Debian's /etc/profile then sets PATH anew, without the course's environment: the
    staff's server settings run a plain interactive bash, which keeps the PATH the hub gave it."""
    from course.lab.workspace import INSTRUCTOR_CONFIG

    settings = json.loads((INSTRUCTOR_CONFIG / "jupyter_server_config.json").read_text())
    assert settings["ServerApp"]["terminado_settings"]["shell_command"] == ["/bin/bash"]


def test_the_systemd_unit_starts_the_hub_as_the_guide_does_without_it():
    """Step 5 starts the hub with deploy/ch12-hub.service, and gives the same command for a machine
    without systemd (which the hub test runs): the same program, settings files and state folder."""
    unit = [line.split("=", 1) for line in (ROOT / "deploy" / "ch12-hub.service").read_text().splitlines()
            if "=" in line and not line.startswith("#")]
    settings = {key: [value for k, value in unit if k == key] for key, _ in unit}
    command = without_systemd()
    sourced = re.findall(r"\. (\S+);", command)
    assert [path.lstrip("-") for path in settings["EnvironmentFile"]] == sourced, (settings, command)
    assert [f"exec {settings['ExecStart'][0]}"] == [command.rsplit("; ", 1)[1]], (settings["ExecStart"], command)
    state = re.search(r"^COURSE_HUB_STATE=(\S+)$", steps()[4], re.M).group(1)
    assert settings["WorkingDirectory"] == [state] and state == f"/var/lib/{settings['StateDirectory'][0]}"
