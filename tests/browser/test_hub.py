"""A term on a real JupyterHub (deploy/jupyterhub_config.py), in Debian's chromium: real local
Unix users log in through the hub's login page, their servers run as them with the course
environment, and the work goes through nbgrader's exchange.

Two learners (one complete, one with 01 and 02 only) and one instructor, made by the test the
guide's way and removed after, and a third learner on the roster who never hands anything in. The
instructor imports the roster and releases; each learner logs in, opens *Nbgrader > Assignment
List*, clicks Fetch, has their answers saved (the contents API, as Lab saves) and clicks Submit; the
instructor collects, autogrades with --jobs 2 and grades one written answer in formgrader's page;
the second learner hands in again (03 answered too), which `course autograde` alone grades again;
then feedback, and each learner clicks Fetch Feedback. Then: the grades are exact (the absent
learner's 0 included), each learner has only their own feedback, neither can read the other's
submission or the gradebook, and nothing of theirs is left running.
"""

from __future__ import annotations

import csv
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
import requests

from test_hostile_submissions import RELEASE, SOLUTIONS, notebook

from .test_lab import screenshot

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ROOT = Path(__file__).resolve().parents[2]


def runnable_by_all(path: Path) -> bool:
    """Every folder on the way to `path`, and the file itself, may be entered and run by anyone."""
    real = path.resolve()
    return all(part.stat().st_mode & 0o001 for part in [*real.parents, real])


# A python3 every user can run (this test's own may live in a folder of root's, as pyenv's does).
SYSTEM_PYTHON = next((Path(found) for found in [shutil.which("python3", path=os.defpath)] if found
                      and runnable_by_all(Path(found))), None)
COURSE_ID, PASSWORD = "crash-recovery", "ch12-Term-pw!"
ANN, BOB, TEACHER = "ch12ann", "ch12bob", "ch12teacher"
CARL = "ch12carl"  # on the roster, with no account: a learner who never hands anything in
HUB_LOG: list[Path] = []  # the running hub's log, for failure messages
RUNUSER = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "runuser"
NOTEBOOKS = ["01_claims.ipynb", "02_fencing.ipynb", "03_leases.ipynb", "04_recovery.ipynb", "05_checkpoint.ipynb"]


def as_user(user: str, *argv: str, cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([RUNUSER, "-u", user, "--", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=env)
    assert not check or done.returncode == 0, f"{user}: {' '.join(argv[:3])} failed:\n{(done.stdout + done.stderr)[-2500:]}"
    return done


def free_ports(count: int) -> list[int]:
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def users_processes(users: list[str]) -> list[str]:
    done = subprocess.run(["ps", "-o", "user=,pid=,args=", "-u", ",".join(users)], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if line.strip()]


def guides_useradd() -> list[str]:
    """The options the guide's hub section makes an account with: the test makes its own the same way,
    so that what it checks of a learner's privacy is what the guide's recipe gives."""
    line = next(line for line in (ROOT / "docs" / "instructor-guide.md").read_text().splitlines()
                if line.startswith("useradd "))
    words = shlex.split(line.split("&&")[0])
    return words[1:-1]  # between `useradd` and the account's name


@pytest.fixture
def accounts():
    if os.geteuid() != 0:
        pytest.skip("making Unix accounts needs root (CI runs as root)")
    for user in (ANN, BOB, TEACHER):
        subprocess.run(["userdel", "-r", user], capture_output=True)
        subprocess.run(["useradd", *guides_useradd(), "-s", "/bin/bash", user], check=True, capture_output=True)
        subprocess.run(["chpasswd"], input=f"{user}:{PASSWORD}", text=True, check=True, capture_output=True)
    try:
        yield
    finally:
        deadline = time.monotonic() + 15  # the hub stops every server it started when it stops
        while users_processes([ANN, BOB, TEACHER]) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = users_processes([ANN, BOB, TEACHER])
        for user in (ANN, BOB, TEACHER):
            subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
        time.sleep(0.5)
        for user in (ANN, BOB, TEACHER):
            subprocess.run(["userdel", "-r", user], capture_output=True)
        assert not left, f"left running after the hub stopped: {left}"


@pytest.fixture(scope="module")
def environment():
    """The course environment every user runs, as the guide has an instructor build it: a system
    Python's venv with the course (and JupyterHub) installed, readable by all."""
    if SYSTEM_PYTHON is None:
        pytest.fail(f"no python3 on {os.defpath} that every user can run, to build the class's environment with")
    base = Path(tempfile.mkdtemp(prefix="ch12-hub-env-"))
    base.chmod(0o755)
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", str(base / "env")], check=True, capture_output=True, timeout=300)
    done = subprocess.run([str(base / "env" / "bin" / "pip"), "install", "--quiet", f"{ROOT}[course,hub]"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    yield base / "env" / "bin"
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def hub(accounts, environment):
    """The course folder (the instructor's), the exchange, and a running hub: (url, course, env)."""
    base = Path(tempfile.mkdtemp(prefix="ch12-hub-"))
    base.chmod(0o755)
    course, exchange, state = base / "course", base / "exchange", base / "state"
    course.mkdir()
    for part in ("solutions", "notebooks", "jupyter"):
        shutil.copytree(ROOT / part, course / part)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    (course / "roster.csv").write_text("id,first_name,last_name,email\n" +
                                       "".join(f"{user},{user},Learner,\n" for user in (ANN, BOB, CARL)))
    exchange.mkdir()
    shutil.copytree(ROOT / "jupyter" / "learner", base / "learner")  # readable by every learner
    teacher = pwd.getpwnam(TEACHER)
    for path in [course, exchange, *course.rglob("*")]:
        os.chown(path, teacher.pw_uid, teacher.pw_gid)
    course.chmod(0o700)  # the gradebook and the submissions are the instructor's alone
    port, api, proxy = free_ports(3)
    env = {**os.environ, "COURSE_ROOT": str(course), "COURSE_EXCHANGE": str(exchange), "COURSE_INSTRUCTORS": TEACHER,
           "COURSE_HUB_URL": f"http://127.0.0.1:{port}", "COURSE_HUB_API_URL": f"http://127.0.0.1:{api}",
           "COURSE_PROXY_API_URL": f"http://127.0.0.1:{proxy}", "COURSE_HUB_STATE": str(state),
           "COURSE_LEARNER_CONFIG": str(base / "learner"), "COURSE_ROSTER": str(course / "roster.csv")}
    log = open(base / "hub.log", "w")
    HUB_LOG[:] = [base / "hub.log"]
    process = subprocess.Popen([str(environment / "jupyterhub"), "-f", str(ROOT / "deploy" / "jupyterhub_config.py")],
                               cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/hub/api", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert process.poll() is None, (base / "hub.log").read_text()[-3000:]
            time.sleep(0.5)
        else:
            pytest.fail("the hub did not answer within 90 s:\n" + (base / "hub.log").read_text()[-3000:])
        yield url, course, {**env, "HOME": teacher.pw_dir, "PATH": "/usr/bin:/bin"}, environment
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def log_in(browser, hub: str, user: str, lands: str):
    """A chromium context logged in through the hub's login page; its page once on `lands`."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(f"{hub}/hub/login", timeout=60_000)
    page.fill("#username_input", user)
    page.fill("#password_input", PASSWORD)
    page.click("#login_submit")
    page.wait_for_url(re.compile(f"/user/{user}/{lands}"), timeout=180_000)
    return context, page


class Learner:
    """A learner in chromium: logged in through the hub's login page, the Assignments panel open."""

    def __init__(self, browser, hub: str, user: str) -> None:
        self.user = user
        self.context, self.page = log_in(browser, hub, user, "lab")
        page = self.page
        page.locator("#jp-MainMenu .lm-MenuBar-item", has_text="Nbgrader").click(timeout=120_000)
        page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
        self.panel = page.locator("#nbgrader-assignment-list")
        self.panel.wait_for(timeout=60_000)

    def click(self, button: str) -> None:
        self.panel.get_by_role("button", name=button, exact=True).first.click(timeout=120_000)

    def wait_for(self, button: str) -> None:
        self.panel.get_by_role("button", name=button, exact=True).first.wait_for(timeout=120_000)


class Browser:
    """One user's session with the hub: logged in through its login form, server spawned."""

    def __init__(self, hub: str, user: str) -> None:
        self.hub, self.user, self.http = hub, user, requests.Session()
        form = self.http.get(f"{hub}/hub/login", timeout=30)
        xsrf = self.http.cookies.get("_xsrf") or re.search(r'name="_xsrf" value="([^"]+)"', form.text).group(1)
        done = self.http.post(f"{hub}/hub/login?next=/hub/spawn/{user}", timeout=180,
                              data={"username": user, "password": PASSWORD, "_xsrf": xsrf})
        assert done.ok, f"{user} could not log in ({done.status_code}); the hub said:\n{HUB_LOG[0].read_text()[-3000:]}"
        deadline = time.monotonic() + 180
        while True:  # the spawn may still be pending; the server then sends us through the hub's OAuth
            page = self.http.get(f"{hub}/user/{user}/lab", timeout=60)
            if page.ok and "jupyter-config-data" in page.text:
                self.lab = page.text
                break
            assert time.monotonic() < deadline, f"{user}'s server did not start ({page.status_code}):\n{HUB_LOG[0].read_text()[-3000:]}"
            time.sleep(1)

    def url(self, path: str) -> str:
        return f"{self.hub}/user/{self.user}/{path}"

    def post(self, path: str, **kwargs) -> requests.Response:
        xsrf = next(c.value for c in self.http.cookies if c.name == "_xsrf" and c.path.startswith(f"/user/{self.user}"))
        return self.http.post(self.url(path), headers={"X-XSRFToken": xsrf}, timeout=300, **kwargs)

    def assignments(self, action: str = "") -> list[dict]:
        if not action:
            return self.http.get(self.url(f"assignments?course_id={COURSE_ID}"), timeout=60).json()["value"]
        done = self.post(f"assignments/{action}", data={"course_id": COURSE_ID, "assignment_id": "ch12"})
        assert done.ok and json.loads(done.text).get("success", True), done.text[-2000:]
        return json.loads(done.text)["value"]

    def save(self, name: str, nb: nbformat.NotebookNode) -> None:
        xsrf = next(c.value for c in self.http.cookies if c.name == "_xsrf" and c.path.startswith(f"/user/{self.user}"))
        done = self.http.put(self.url(f"api/contents/ch12/{name}"), headers={"X-XSRFToken": xsrf}, timeout=60,
                             json={"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))})
        assert done.ok, done.text[-1000:]


def autograded_points(names: list[str]) -> float:
    """The points of the release's autograded cells in `names` (what a complete answer to each earns)."""
    return sum(float(cell.metadata["nbgrader"].get("points", 0)) for name in names
               for cell in nbformat.read(RELEASE / name, as_version=4).cells
               if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("grade"))


def test_a_term_on_a_real_jupyterhub(hub, browser, output_path):
    url, course, teacher_env, bin_ = hub
    as_user(TEACHER, str(bin_ / "nbgrader"), "db", "student", "import", "roster.csv", cwd=course, env=teacher_env)
    as_user(TEACHER, str(bin_ / "course"), "release", cwd=course, env=teacher_env)
    as_user(TEACHER, str(bin_ / "nbgrader"), "release_assignment", "ch12", "--force", cwd=course, env=teacher_env)

    answers = {ANN: {name: notebook(name, SOLUTIONS) for name in NOTEBOOKS},
               BOB: {name: notebook(name, SOLUTIONS if name < "03" else RELEASE) for name in NOTEBOOKS}}
    learners = {user: Learner(browser, url, user) for user in answers}
    for user, learner in learners.items():
        session = Browser(url, user)  # the same user's files, saved the way Lab saves them
        assert "@jupyter/nbgrader:create-assignment" in session.lab, "learners' Lab hides Create Assignment"
        assert session.http.get(session.url("formgrader"), timeout=60).status_code == 404, "no formgrader for learners"
        learner.click("Fetch")
        learner.wait_for("Submit")
        for name, nb in answers[user].items():
            session.save(name, nb)
        learner.click("Submit")
        learner.panel.get_by_text("There are no submitted assignments").wait_for(state="hidden", timeout=120_000)
        screenshot(learner.page, output_path, f"hub-{user}-submitted.png")
        assert sorted(a["status"] for a in session.assignments()) == ["fetched", "submitted"], session.assignments()

    as_user(TEACHER, str(bin_ / "nbgrader"), "collect", "ch12", "--update", cwd=course, env=teacher_env)
    graded = as_user(TEACHER, str(bin_ / "course"), "autograde", "--jobs", "2", cwd=course, env=teacher_env)
    assert ANN in graded.stdout and BOB in graded.stdout

    teacher = Browser(url, TEACHER)
    assignments = teacher.http.get(teacher.url("formgrader/api/assignments"), timeout=60)
    assert assignments.ok and "ch12" in assignments.text, "the instructor gets the formgrader"
    submitted = teacher.http.get(teacher.url("formgrader/api/submitted_notebooks/ch12/01_claims"), timeout=60).json()
    ann_notebook = next(s for s in submitted if s["student"] == ANN)
    grades = teacher.http.get(teacher.url(f"formgrader/api/grades?submission_id={ann_notebook['id']}"), timeout=60).json()
    written = next(g for g in grades if g["needs_manual_grade"])
    context, page = log_in(browser, url, TEACHER, "formgrader")  # `make formgrader`'s page, through the hub
    page.goto(teacher.url(f"formgrader/submissions/{ann_notebook['id']}/"), timeout=90_000)
    score = page.locator(f"input.score#{written['name']}")
    score.fill(f"{written['max_score']:g}")
    score.press("Tab")  # formgrader saves a score when its field changes
    deadline = time.monotonic() + 60
    while teacher.http.get(teacher.url(f"formgrader/api/grade/{written['id']}"), timeout=60).json()["manual_score"] is None:
        assert time.monotonic() < deadline, "formgrader did not save the written answer's score"
        time.sleep(0.5)
    screenshot(page, output_path, "hub-formgrader-graded.png")
    context.close()

    # Bob hands in again, 03 answered too: collected with --update, graded by `course autograde` alone.
    bob = Browser(url, BOB)
    bob.save("03_leases.ipynb", notebook("03_leases.ipynb", SOLUTIONS))
    learners[BOB].click("Submit")
    deadline = time.monotonic() + 120
    while sum(len(a.get("submissions", [])) for a in bob.assignments() if a["status"] == "submitted") < 2:
        assert time.monotonic() < deadline, f"bob's second submission did not arrive: {bob.assignments()}"
        time.sleep(1)
    as_user(TEACHER, str(bin_ / "nbgrader"), "collect", "ch12", "--update", cwd=course, env=teacher_env)
    regraded = as_user(TEACHER, str(bin_ / "course"), "autograde", "--jobs", "2", cwd=course, env=teacher_env)
    assert f"were not graded again (`make autograde FORCE=1`, or --force, grades them again): {ANN}" in regraded.stdout
    carl_line = next(line for line in regraded.stdout.splitlines() if line.startswith(CARL))
    assert "No submission." in carl_line, regraded.stdout

    as_user(TEACHER, str(bin_ / "course"), "feedback", cwd=course, env=teacher_env)
    as_user(TEACHER, str(bin_ / "nbgrader"), "release_feedback", "ch12", cwd=course, env=teacher_env)
    for user, learner in learners.items():
        learner.page.reload()  # the panel lists what the exchange holds when it opens
        learner.page.locator("#jp-MainMenu .lm-MenuBar-item", has_text="Nbgrader").click(timeout=120_000)
        learner.page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
        learner.click("Fetch Feedback")
        feedback = Path(pwd.getpwnam(user).pw_dir) / "ch12" / "feedback"
        deadline = time.monotonic() + 60
        while not list(feedback.rglob("*.html")) and time.monotonic() < deadline:
            time.sleep(0.5)
        screenshot(learner.page, output_path, f"hub-{user}-feedback.png")
        learner.context.close()
    exported = Path(pwd.getpwnam(TEACHER).pw_dir) / "grades.csv"
    as_user(TEACHER, str(bin_ / "course"), "grades", "--output", str(exported), cwd=course, env=teacher_env)
    with open(exported, newline="") as handle:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    everything, bobs = autograded_points(NOTEBOOKS), autograded_points([n for n in NOTEBOOKS if n < "04"])
    assert scores == {ANN: everything + written["max_score"], BOB: bobs, CARL: 0.0}, scores

    for user, other in ((ANN, BOB), (BOB, ANN)):
        home = Path(pwd.getpwnam(user).pw_dir)
        mine = sorted(p.name for p in (home / "ch12" / "feedback").rglob("*.html"))
        assert mine == sorted(p.name.replace(".ipynb", ".html") for p in RELEASE.glob("*.ipynb")), (user, mine)
        for target in (Path(pwd.getpwnam(other).pw_dir) / "ch12" / "01_claims.ipynb", course / "gradebook.db",
                       Path(teacher_env["COURSE_EXCHANGE"]) / COURSE_ID / "inbound"):
            denied = as_user(user, "ls", "-l", str(target), cwd=Path("/"), env={"PATH": "/usr/bin:/bin"}, check=False)
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, (user, target, denied.stdout)
