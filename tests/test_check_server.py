"""One sandbox per student's checks, one forked process per check: what a check can do to the rest.

Each test grades `01_claims` with the solution's answers except a hostile `claim`, through the
real sandbox and check server (`checked_answers.verdicts`), and asserts on the verdicts and on
the machine afterwards: `test_claim_dataclass` never calls `claim`, so it must still pass.
"""

from __future__ import annotations

import os
import uuid

import pytest

from checked_answers import verdicts
from conftest import assert_nothing_left, sandbox_cgroups

pytestmark = pytest.mark.slow
NOTEBOOK = "01_claims.ipynb"
SOME = {"test_claim_dataclass", "test_claim_acquires", "test_claim_replacement", "test_claim_selection"}


def grade(claim: str, timeout: float = 120) -> dict[str, dict]:
    before = sandbox_cgroups()
    found = verdicts(NOTEBOOK, {"claim": claim}, only=SOME, timeout=timeout)
    assert sandbox_cgroups() <= before, "a sandbox's cgroup outlived its checks"
    return found


def test_a_check_that_kills_its_server_costs_only_its_own_points():
    found = grade("import os, signal\ndef claim(db, owner, **options):\n    os.kill(os.getppid(), signal.SIGKILL)\n")
    assert found["test_claim_dataclass"]["passed"], found["test_claim_dataclass"]
    for cell in SOME - {"test_claim_dataclass"}:
        assert not found[cell]["passed"] and found[cell]["ename"] in ("CheckerError", "CheckFailed"), found[cell]


def test_what_a_check_leaves_running_is_killed_when_it_ends():
    marker = f"sleep {600 + uuid.uuid4().int % 1000}"
    claim = (f"import subprocess\ndef claim(db, owner, **options):\n"
             f"    subprocess.Popen({marker.split()!r}, start_new_session=True)\n    return None\n")
    grade(claim)
    assert_nothing_left(marker, within=10)


def test_a_check_past_its_time_is_stopped_with_everything_it_started():
    marker = f"sleep {1600 + uuid.uuid4().int % 1000}"
    claim = (f"import subprocess, time\ndef claim(db, owner, **options):\n"
             f"    subprocess.Popen({marker.split()!r})\n    time.sleep(600)\n")
    found = grade(claim, timeout=8)
    assert found["test_claim_dataclass"]["passed"]
    for cell in SOME - {"test_claim_dataclass"}:
        assert found[cell]["ename"] == "CheckTimeout" and "8 s" in found[cell]["message"], found[cell]
    assert_nothing_left(marker, within=10)


def test_checks_of_one_group_each_get_a_temporary_folder_of_their_own():
    claim = ("import os, tempfile\ndef claim(db, owner, **options):\n"
             "    folder = tempfile.gettempdir()\n    seen = sorted(os.listdir(folder))\n"
             "    open(os.path.join(folder, 'mine'), 'w').close()\n"
             "    raise RuntimeError(f'{folder} {os.getpid()} {seen}')\n")
    found = grade(claim)
    said = [found[cell]["message"].split(" ", 2) for cell in SOME - {"test_claim_dataclass"}]
    folders, pids = {s[0] for s in said}, {s[1] for s in said}
    assert len(folders) == len(pids) == len(said), said
    assert all("'mine'" not in seen for _, _, seen in said), said  # nothing of a sibling's
    assert all(not os.path.exists(folder) or folder.startswith("/tmp/check-") for folder in folders)


def test_one_students_notebooks_share_one_check_server_and_each_gets_its_own_verdicts(monkeypatch, tmp_path):
    """A grading unit starts all of a student's checks at once, in one sandbox (a server costs a
    Python start and the course's imports); the verdicts still go back to their own notebook."""
    import json
    import shutil

    from checked_answers import RELEASE, SOLUTIONS
    from course.grading import jobs

    started = []

    class CountedServer(jobs.CheckServer):
        def __init__(self, *args, **kwargs):
            started.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(jobs, "CheckServer", CountedServer)
    for path in SOLUTIONS.glob("*.ipynb"):
        shutil.copy(path, tmp_path / path.name)
    built = {}
    for notebook in ("01_claims", "02_fencing"):
        cells = json.loads((SOLUTIONS / f"{notebook}.ipynb").read_text())["cells"]
        full = {c["metadata"]["nbgrader"]["grade_id"]: jobs.cell_text(c["source"]) for c in cells
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")}
        built[notebook], _ = jobs.notebook_jobs(notebook, RELEASE, full, cells)
    pending = jobs.start_checks(built, tmp_path, RELEASE, timeout=120)
    found = {notebook: checks.results() for notebook, checks in pending.items()}
    assert len(started) == 1, started
    assert {n: sorted(v) for n, v in found.items()} == {n: sorted(j["cell"] for j in b) for n, b in built.items()}
    assert {n: [c for c, v in verdicts.items() if not v["passed"]] for n, verdicts in found.items()} == {
        "01_claims": [], "02_fencing": []}
