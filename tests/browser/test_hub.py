"""A term on a real JupyterHub, set up and run by following the instructor guide's hub section as
written ("A term on a JupyterHub", docs/instructor-guide.md), in Debian's chromium.

The guide's code blocks are run as they stand: only the example names that must differ on a test
machine are replaced (`GuidesMachine.names`: folders, ports, the repository, the PostgreSQL socket),
and step 1's package installs are checked rather than run (CI installs them). The accounts the
guide makes are real Unix accounts, removed after. The hub is started the guide's way without
systemd, with its settings file; the gradebook is on a PostgreSQL server (step 4), with peer
authentication as Debian's has it; the hub is served over HTTPS with a certificate made for the test.

The term: the teacher runs step 6's commands in a terminal of their Lab on the hub; two learners
(one complete, one with 01 and 02 only) log in, open *Nbgrader > Assignment List*, click Fetch, have
their answers saved (the contents API, as Lab saves) and click Submit; a third learner on the roster
hands nothing in. The teacher collects, autogrades and grades one written answer in formgrader's
page. The deadline is moved to now (step 6: the same command again), the second learner hands in
again (03 answered too), late, and the TA, in their own terminal, collects and grades (only that
resubmission) and returns feedback; each learner clicks Fetch Feedback; the teacher exports. Then: every
line of step 6 ran; the grades are exact (the absent learner's 0 included); the late one is marked
late, and formgrader shows the same gradebook (no gradebook.db exists); each learner has only their
own feedback, can read neither the other's work nor the gradebook; nothing of theirs is left running.
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
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import requests

from test_hostile_submissions import RELEASE, SOLUTIONS, notebook
from test_hub_config import lines, steps, without_systemd
from test_postgres_gradebook import serving

from .test_lab import screenshot

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ROOT = Path(__file__).resolve().parents[2]
COURSE_ID, PASSWORD = "crash-recovery", "ch12-Term-pw!"
ANN, BOB, CARL = "ch12ann", "ch12bob", "ch12carl"  # the roster; Carl never hands anything in
TEACHER, TA, STAFF = "ch12teacher", "ch12ta", "ch12staff"  # the guide's example names
ACCOUNTS = [TEACHER, TA, ANN, BOB, CARL]
HUB_LOG: list[Path] = []  # the running hub's log, for failure messages
RUNUSER = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "runuser"
NOTEBOOKS = ["01_claims.ipynb", "02_fencing.ipynb", "03_leases.ipynb", "04_recovery.ipynb", "05_checkpoint.ipynb"]
DUE = "2027-01-15 17:00:00 UTC"  # step 6's example deadline


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
    present = [user for user in users if _exists(user)]
    if not present:
        return []
    done = subprocess.run(["ps", "-o", "user=,pid=,args=", "-u", ",".join(present)], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if line.strip()]


def _exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


def hub_processes(base: Path) -> list[int]:
    """Processes the hub started that are still alive: its proxy (by its pid file), anything run from the
    test's folder (the culler, from the course environment)."""
    pids = set()
    proxy = base / "state" / "proxy.pid"
    if proxy.is_file() and proxy.read_text().strip().isdigit():
        try:
            if b"configurable-http-proxy" in Path(f"/proc/{int(proxy.read_text())}/cmdline").read_bytes():
                pids.add(int(proxy.read_text()))
        except OSError:
            pass
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(base).encode() in (entry / "cmdline").read_bytes():
                pids.add(int(entry.name))
        except OSError:
            continue
    return sorted(pid for pid in pids if Path(f"/proc/{pid}").exists() and pid != os.getpid()
                  and (Path(f"/proc/{pid}") / "stat").read_text().split(") ")[-1][:1] != "Z")


def remove_accounts() -> None:
    for user in ACCOUNTS:
        subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
    time.sleep(0.3)
    for user in ACCOUNTS:
        subprocess.run(["userdel", "-r", user], capture_output=True)
    subprocess.run(["groupdel", STAFF], capture_output=True)


def installed(package: str) -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return done.stdout.endswith("install ok installed")


@dataclass
class GuidesMachine:
    """Where the guide's example names live on this test machine."""

    base: Path
    hub: str
    cert: Path
    names: dict[str, str]

    def literal(self, text: str) -> str:
        """`text` with each example name replaced by this machine's (longest first)."""
        for name in sorted(self.names, key=len, reverse=True):
            text = text.replace(name, self.names[name])
        return text

    def path(self, example: str) -> Path:
        return Path(self.literal(example))

    def as_root(self, script: str, **env: str) -> str:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", self.literal(script)], cwd=self.base / "admin",
                              input=f"{PASSWORD}\n" * 20, capture_output=True, text=True, timeout=900,
                              env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                   "TMPDIR": str(self.base / "tmp"), **env})  # pip's scratch goes with the rest
        said = (done.stdout + done.stderr)[-3000:]
        assert done.returncode == 0, f"the guide's step failed:\n{self.literal(script)}\n{said}"
        return done.stdout


def working_tree_repository(into: Path) -> Path:
    """The repository as it stands (uncommitted changes included), for step 1's `git clone`."""
    into.mkdir(parents=True)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the working tree"]):
        subprocess.run([*git, *argv], cwd=into, check=True, capture_output=True)
    return into


@pytest.fixture
def machine():
    """Steps 1 to 5 of the guide, run on this machine; the hub running. Removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("the guide's steps make Unix accounts and run as root (CI runs as root)")
    base = Path(tempfile.mkdtemp(prefix="ch12-hub-"))
    base.chmod(0o755)
    remove_accounts()  # a run that died before its teardown
    process = log = None
    hub_left: list[int] = []
    with serving(peer=True) as (_, _, sockets):
        try:
            port, api, proxy = free_ports(3)
            (base / "admin").mkdir()
            (base / "tmp").mkdir()
            (base / "admin" / "roster.csv").write_text(
                "id,first_name,last_name,email\n" + "".join(f"{u},{u},Learner,\n" for u in (ANN, BOB, CARL)))
            tls = base / "tls"
            tls.mkdir()
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                            "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tls / "key.pem"),
                            "-out", str(tls / "cert.pem")], check=True, capture_output=True)
            names = {"/srv/ch12-code": str(base / "code"), "/srv/ch12": str(base / "course"),
                     "/srv/nbgrader/exchange": str(base / "exchange"), "/var/lib/ch12-hub": str(base / "state"),
                     "/etc/ch12-hub.env": str(base / "hub.env"), "/etc/ch12-gradebook.env": str(base / "gradebook.env"),
                     "/etc/ssl/ch12": str(tls), "/var/run/postgresql": str(sockets),
                     "<this repository>": str(working_tree_repository(base / "repository")),
                     "0.0.0.0:443": f"127.0.0.1:{port}", "127.0.0.1:8081": f"127.0.0.1:{api}",
                     "127.0.0.1:8001": f"127.0.0.1:{proxy}"}
            here = GuidesMachine(base, f"https://127.0.0.1:{port}", tls / "cert.pem", names)
            machine_step, accounts, course, gradebook, hub_step, _ = steps()
            for line in lines(machine_step):  # 1: the packages CI installed, checked; the environment built
                if line.startswith("apt-get install"):
                    missing = [p for p in shlex.split(line)[3:] if not (installed(p) or shutil.which(p))]
                    assert not missing, f"step 1's packages are not installed: {missing} (.ci/run installs them)"
                elif line.startswith("npm install"):
                    assert shutil.which("configurable-http-proxy"), "step 1's proxy is missing (.ci/run installs it)"
                else:
                    here.as_root(line)
            here.as_root(accounts)
            here.as_root(course)
            here.as_root(gradebook, PGHOST=str(sockets))  # the machine's server: at its own socket here
            hub_lines = lines(hub_step)
            assert any("systemctl enable" in line for line in hub_lines), "step 5 starts the hub with systemd"
            for line in hub_lines:
                if "systemctl" not in line:  # no systemd here: the guide's command without it, below
                    here.as_root(line)
            log = open(base / "hub.log", "w")
            HUB_LOG[:] = [base / "hub.log"]
            process = subprocess.Popen(["bash", "-c", here.literal(without_systemd())], cwd=base, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                try:
                    if requests.get(f"{here.hub}/hub/api", timeout=2, verify=str(here.cert)).status_code == 200:
                        break
                except requests.ConnectionError:
                    pass
                assert process.poll() is None, (base / "hub.log").read_text()[-3000:]
                time.sleep(0.5)
            else:
                pytest.fail("the hub did not answer within 90 s:\n" + (base / "hub.log").read_text()[-3000:])
            yield here
        finally:
            if process is not None:
                os.killpg(process.pid, signal.SIGTERM)  # the hub (the guide's command ends in `exec` it) stops
                try:                                     # every server it started before it ends
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    pass
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(10)
            hub_left = hub_processes(base)  # its proxy and its culler run in sessions of their own
            for pid in hub_left:
                os.kill(pid, signal.SIGKILL)
            if log is not None:
                log.close()
            deadline = time.monotonic() + 15
            while users_processes(ACCOUNTS) and time.monotonic() < deadline:
                time.sleep(0.2)
            left = users_processes(ACCOUNTS)
            remove_accounts()
            shutil.rmtree(base, ignore_errors=True)
    assert not left, f"left running after the hub stopped: {left}"
    assert not hub_left, f"the hub's own processes outlived it: {hub_left}"


def log_in(browser, hub: str, user: str, lands: str):
    """A chromium context logged in through the hub's login page; its page once on `lands`. (The
    certificate is the test's own: chromium is told to accept it.)"""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, ignore_https_errors=True)
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
        self.open_panel()

    def open_panel(self) -> None:
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

    def __init__(self, machine: GuidesMachine, user: str) -> None:
        hub = machine.hub
        self.hub, self.user, self.http = hub, user, requests.Session()
        self.http.verify = str(machine.cert)
        self.http.trust_env = False  # else a CA bundle named in the environment takes the place of `verify`
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
            assert time.monotonic() < deadline, \
                f"{user}'s server did not start ({page.status_code}):\n{HUB_LOG[0].read_text()[-3000:]}"
            time.sleep(1)

    def url(self, path: str) -> str:
        return f"{self.hub}/user/{self.user}/{path}"

    def get(self, path: str):
        done = self.http.get(self.url(path), timeout=60)
        assert done.ok, f"{self.user} GET {path}: {done.status_code} {done.text[-500:]}"
        return done.json()

    def xsrf(self) -> str:
        return next(c.value for c in self.http.cookies if c.name == "_xsrf" and c.path.startswith(f"/user/{self.user}"))

    def assignments(self) -> list[dict]:
        return self.get(f"assignments?course_id={COURSE_ID}")["value"]

    def save(self, name: str, nb: nbformat.NotebookNode) -> None:
        done = self.http.put(self.url(f"api/contents/ch12/{name}"), headers={"X-XSRFToken": self.xsrf()}, timeout=60,
                             json={"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(nb))})
        assert done.ok, done.text[-1000:]


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


class Terminal:
    """A terminal of a user's Lab on the hub (*File > New > Terminal*), driven over its websocket as
    Lab drives it: what is typed goes in, what the shell writes comes back."""

    def __init__(self, session: Browser, cert: Path) -> None:
        import websocket

        made = session.http.post(session.url("api/terminals"), headers={"X-XSRFToken": session.xsrf()}, timeout=60)
        assert made.ok, made.text[-500:]
        socket_url = session.url(f"terminals/websocket/{made.json()['name']}").replace("https://", "wss://", 1)
        cookies = "; ".join(f"{c.name}={c.value}" for c in session.http.cookies)
        self.user = session.user
        self.socket = websocket.create_connection(socket_url, cookie=cookies, origin=session.hub, timeout=5,
                                                  sslopt={"cert_reqs": ssl.CERT_REQUIRED, "ca_certs": str(cert)})
        self.socket.send(json.dumps(["set_size", 50, 400, 800, 4000]))
        self.ran: list[str] = []
        self.run("echo ready")

    def run(self, line: str, timeout: float = 900) -> str:
        """Type `line` and wait for it to end; what it printed (colour codes and carriage returns out)."""
        import websocket

        self.socket.send(json.dumps(["stdin", f"{line}\r"]))
        self.socket.send(json.dumps(["stdin", 'echo "::done:$?::"\r']))
        seen, deadline = "", time.monotonic() + timeout
        while not (ended := re.search(r"::done:(\d+)::", seen)):
            assert time.monotonic() < deadline, f"{self.user}'s terminal: `{line}` went on:\n{seen[-3000:]}"
            try:
                message = json.loads(self.socket.recv())
            except websocket.WebSocketTimeoutException:
                continue
            if message[0] == "stdout":
                seen += ANSI.sub("", message[1])
        assert ended.group(1) == "0", f"{self.user}'s terminal: `{line}` failed ({ended.group(1)}):\n{seen[-3000:]}"
        self.ran.append(line)
        return seen[:ended.start()]

    def close(self) -> None:
        self.socket.close()


def autograded_points(names: list[str]) -> float:
    """The points of the release's autograded cells in `names` (what a complete answer to each earns)."""
    return sum(float(cell.metadata["nbgrader"].get("points", 0)) for name in names
               for cell in nbformat.read(RELEASE / name, as_version=4).cells
               if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("grade"))


def written_points(names: list[str]) -> float:
    """The points of the release's written answers in `names` (graded by hand)."""
    return sum(float(cell.metadata["nbgrader"].get("points", 0)) for name in names
               for cell in nbformat.read(RELEASE / name, as_version=4).cells
               if cell.cell_type == "markdown" and cell.get("metadata", {}).get("nbgrader", {}).get("grade"))


def summary(output: str) -> dict[str, str]:
    """`course autograde`'s summary lines, by student."""
    return {line.split()[0]: line for line in output.splitlines() if line.split() and line.split()[0] in ACCOUNTS}


def test_a_term_on_a_jupyterhub_set_up_and_run_as_the_guide_says(machine, browser, output_path):
    term = lines(steps()[5])
    step = {word: next(machine.literal(line) for line in term if line.startswith(word)) for word in
            ("cd ", "nbgrader db student", "course release", "nbgrader db assignment", "nbgrader collect",
             "course autograde", "course feedback", "course grades")}
    teacher = Browser(machine, TEACHER)
    assert teacher.http.get(teacher.url("formgrader/api/assignments"), timeout=60).ok, "the staff get the formgrader"
    desk = Terminal(teacher, machine.cert)
    desk.run(step["cd "])
    desk.run(step["nbgrader db student"])
    desk.run(step["course release"])
    desk.run(step["nbgrader db assignment"])

    answers = {ANN: {name: notebook(name, SOLUTIONS) for name in NOTEBOOKS},
               BOB: {name: notebook(name, SOLUTIONS if name < "03" else RELEASE) for name in NOTEBOOKS}}
    learners = {user: Learner(browser, machine.hub, user) for user in answers}
    sessions = {user: Browser(machine, user) for user in answers}  # the same users' files, saved as Lab saves
    for user, learner in learners.items():
        session = sessions[user]
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

    desk.run(step["nbgrader collect"])
    graded = summary(desk.run(step["course autograde"]))
    assert {ANN, BOB, CARL} <= set(graded) and "No submission." in graded[CARL], graded
    assert "Late" not in graded[ANN] + graded[BOB], "handed in before the deadline"

    submitted = teacher.get("formgrader/api/submitted_notebooks/ch12/03_leases")  # a written answer, graded by hand
    ann_notebook = next(s for s in submitted if s["student"] == ANN)
    written = next(g for g in teacher.get(f"formgrader/api/grades?submission_id={ann_notebook['id']}")
                   if g["needs_manual_grade"])
    context, page = log_in(browser, machine.hub, TEACHER, "formgrader")  # formgrader's page, through the hub
    page.goto(teacher.url(f"formgrader/submissions/{ann_notebook['id']}/"), timeout=90_000)
    score = page.locator(f"input.score#{written['name']}")
    score.fill(f"{written['max_score']:g}")
    score.press("Tab")  # formgrader saves a score when its field changes
    deadline = time.monotonic() + 60
    while teacher.get(f"formgrader/api/grade/{written['id']}")["manual_score"] is None:
        assert time.monotonic() < deadline, "formgrader did not save the written answer's score"
        time.sleep(0.5)
    screenshot(page, output_path, "hub-formgrader-graded.png")
    context.close()

    # The deadline moved to now (step 6: the same command again); Bob hands in again, 03 answered too: late.
    due = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    desk.run(step["nbgrader db assignment"].replace(DUE, due))
    time.sleep(1)
    sessions[BOB].save("03_leases.ipynb", notebook("03_leases.ipynb", SOLUTIONS))
    learners[BOB].click("Submit")
    deadline = time.monotonic() + 120
    while sum(len(a.get("submissions", [])) for a in sessions[BOB].assignments() if a["status"] == "submitted") < 2:
        assert time.monotonic() < deadline, f"bob's second submission did not arrive: {sessions[BOB].assignments()}"
        time.sleep(1)

    # The TA, in a terminal of their own: the same course folder, the same gradebook.
    assistant = Terminal(Browser(machine, TA), machine.cert)
    assistant.run(step["cd "])
    assistant.run(step["nbgrader collect"])
    regraded = assistant.run(step["course autograde"])
    assert f"were not graded again (`make autograde FORCE=1`, or --force, grades them again): {ANN}" in regraded
    again = summary(regraded)
    assert set(again) == {BOB, CARL} and "No submission." in again[CARL], regraded
    assert re.search(r"Late by (\d+ h )?\d+ min \(no penalty\)\.", again[BOB]), regraded
    assistant.run(step["course feedback"])
    for user, learner in learners.items():
        learner.page.reload()  # the panel lists what the exchange holds when it opens
        learner.open_panel()
        learner.click("Fetch Feedback")
        feedback = Path(pwd.getpwnam(user).pw_dir) / "ch12" / "feedback"
        deadline = time.monotonic() + 60
        while not list(feedback.rglob("*.html")) and time.monotonic() < deadline:
            time.sleep(0.5)
        screenshot(learner.page, output_path, f"hub-{user}-feedback.png")
        learner.context.close()
    desk.run(step["course grades"])
    assert {machine.literal(line) for line in term} <= set(desk.ran) | set(assistant.ran), "every command of step 6 ran"
    desk.close()
    assistant.close()

    course = machine.path("/srv/ch12")
    with open(course / "grades.csv", newline="") as handle:
        exported = {row["student_id"]: row for row in csv.DictReader(handle)}
    everything, bobs = autograded_points(NOTEBOOKS), autograded_points([n for n in NOTEBOOKS if n < "04"])
    assert {s: float(row["score"]) for s, row in exported.items()} == \
        {ANN: everything + written["max_score"], BOB: bobs, CARL: 0.0}, exported
    assert exported[BOB]["timestamp"] > exported[BOB]["duedate"] > exported[ANN]["timestamp"], exported
    # What still waits: the written answers each wrote (less Ann's one graded in formgrader, above; one left as
    # released scores 0 at once), and the checks of the notebooks each left unanswered.
    waiting = {user: float(exported[user]["by_hand"]) for user in (ANN, BOB)}
    assert waiting == {ANN: written_points(NOTEBOOKS) - written["max_score"],
                       BOB: written_points([n for n in NOTEBOOKS if n < "04"])}, waiting
    unanswered = {user: {part.split("/")[0] + ".ipynb" for part in exported[user]["failed"].split()} for user in (ANN, BOB)}
    checked = {n.name for n in RELEASE.glob("*.ipynb") if autograded_points([n.name])}  # 01b and 05b: by hand only
    assert unanswered == {ANN: checked - set(NOTEBOOKS), BOB: checked - {n for n in NOTEBOOKS if n < "04"}}, unanswered

    # Formgrader on the hub reads the same gradebook, on the server (there is no gradebook.db): the due
    # date, Bob's late submission, the hand grade given in its page.
    assert not (course / "gradebook.db").exists(), "a gradebook file was made beside the server's"
    assignment = teacher.get("formgrader/api/assignment/ch12")
    handed = {s["student"]: s for s in teacher.get("formgrader/api/submissions/ch12")}
    assert handed[BOB]["timestamp"] > assignment["duedate"] > handed[ANN]["timestamp"], (assignment, handed)
    assert teacher.get(f"formgrader/api/grade/{written['id']}")["manual_score"] == written["max_score"]

    for user, other in ((ANN, BOB), (BOB, ANN)):
        home = Path(pwd.getpwnam(user).pw_dir)
        mine = sorted(p.name for p in (home / "ch12" / "feedback").rglob("*.html"))
        assert mine == sorted(p.name.replace(".ipynb", ".html") for p in RELEASE.glob("*.ipynb")), (user, mine)
        for target in (Path(pwd.getpwnam(other).pw_dir) / "ch12" / "01_claims.ipynb", course / "submitted",
                       machine.path("/srv/nbgrader/exchange") / COURSE_ID / "inbound"):
            denied = subprocess.run([RUNUSER, "-u", user, "--", "ls", "-l", str(target)], capture_output=True,
                                    text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, cwd="/")
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, (user, target, denied.stdout)
