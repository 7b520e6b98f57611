"""Grading tools against a toy ch12 course in a temporary directory.

One class of five learners is released, autograded and given feedback once (module fixture);
the tests read the outcome (marked slow: about 75 s of CPU, mostly nbgrader start-ups). The
real notebooks are not used: they are being written elsewhere.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from checked_answers import RELEASE
from conftest import assert_nothing_left, nbgrader_metadata, sandbox_cgroups, sandboxed_pids
from course.grading.classes.autograde import autograde
from course.grading.nbgrader import commands
from course.grading.nbgrader.preprocessors import StripHiddenTests

MARKER = "SECRET_MARKER_7f3a"  # appears only inside the hidden tests
HIDDEN_MESSAGE = "double(21) did not give 42: larger inputs must double too."
# Unique arguments so /proc can tell the submissions' children from anything else.
SESSION_CHILD = ["sleep", "611.0707"]
PLAIN_CHILD = ["sleep", "612.0707"]

SOLUTION = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"
SETUP = (  # a check reads only what setup cells, the check itself and the answers define
    "def check(condition, message):\n"
    "    if not condition:\n"
    "        raise AssertionError(message)"
)
VISIBLE = "check(double(2) == 4, f'double(2) returned {double(2)!r}; expected 4.')"
HIDDEN = (
    "check(double(0) == 0, 'double(0) returned something else; zero must stay zero.')\n"
    "### BEGIN HIDDEN TESTS\n"
    f"{MARKER} = double(21)\n"
    f"check({MARKER} == 42, {HIDDEN_MESSAGE!r})\n"
    "### END HIDDEN TESTS"
)
# Graded in name order: "solid" comes after both crashes, so it shows the class goes on.
STUDENTS = {
    # Right, and copied the visible test cell (JupyterLab's copy-paste copies its nbgrader metadata).
    "copier": "def double(x):\n    return 2 * x",
    "crasher": f"import os, subprocess\nsubprocess.Popen({PLAIN_CHILD})\nos.kill(os.getpid(), 9)",
    "looper": "while True:\n    pass",
    "partial": "def double(x):\n    return 2 * x if x < 10 else 0",
    "solid": (
        f"import subprocess\nsubprocess.Popen({SESSION_CHILD}, start_new_session=True)\n"
        "def double(x):\n    return 2 * x"
    ),
}


def build_course(root):
    """A ch12 course with one notebook: solution, visible test, hidden test, written answer."""
    (root / "solutions" / commands.ASSIGNMENT).mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(
        f"from course.grading.nbgrader.config import configure\nconfigure(c, {str(root)!r})\nc.StartChecks.cell_timeout = 5\n"
    )
    nb = new_notebook(
        cells=[
            new_code_cell(SETUP, metadata={**nbgrader_metadata("setup", locked=True), "tags": ["setup"]}),
            new_code_cell(SOLUTION, metadata=nbgrader_metadata("double", solution=True)),
            new_code_cell(VISIBLE, metadata=nbgrader_metadata("visible", grade=True, locked=True, points=1)),
            new_code_cell(HIDDEN, metadata=nbgrader_metadata("hidden", grade=True, locked=True, points=2)),
            new_markdown_cell("Why must doubling keep zero at zero?"),
            new_markdown_cell("YOUR ANSWER HERE", metadata=nbgrader_metadata("why", grade=True, solution=True, points=1)),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(nb, root / "solutions" / commands.ASSIGNMENT / "toy.ipynb")


def submit(root, student, solution):
    nb = nbformat.read(root / "notebooks" / commands.ASSIGNMENT / "toy.ipynb", as_version=4)
    nb.cells[1].source = solution
    nb.cells[5].source = "Because 2 * 0 == 0."
    if student == "copier":
        nb.cells.append(new_code_cell(nb.cells[2].source, metadata=dict(nb.cells[2].metadata)))
    folder = root / "submitted" / student / commands.ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "toy.ipynb")


def running(argv):
    """Pids whose command line is exactly argv."""
    wanted = "\0".join(argv) + "\0"
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_text() == wanted:
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    build_course(root)
    released = commands.release(root=root)
    for student, solution in STUDENTS.items():
        submit(root, student, solution)
    results = {r.student: r for r in autograde(root=root)}
    commands.feedback(root=root)
    yield root, released, results
    for argv in (SESSION_CHILD, PLAIN_CHILD):  # only if a test below is about to fail
        for pid in running(argv):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_release_has_no_solution_no_hidden_tests_no_outputs(course):
    _, released, _ = course
    assert [p.name for p in released] == ["toy.ipynb"]
    text = released[0].read_text()
    assert MARKER not in text and "return 2 * x" not in text
    nb = nbformat.read(released[0], as_version=4)
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")
    assert nb.cells[3].metadata.nbgrader["grade_id"] == "hidden"


@pytest.mark.slow
def test_feedback_explains_but_hides_hidden_tests(course):
    root, _, results = course
    assert results["partial"].score == 1  # visible passed, hidden failed
    autograded = (root / "autograded/partial/ch12/toy.ipynb").read_text()
    assert MARKER not in autograded  # hidden regions are stripped from every autograded notebook
    html = (root / "feedback/partial/ch12/toy.html").read_text()
    assert HIDDEN_MESSAGE in html
    assert MARKER not in html
    assert "BEGIN HIDDEN TESTS" not in html
    assert "hidden tests (not shown)" in html


@pytest.mark.slow
def test_correct_student_gets_every_automatic_point(course):
    solid = course[2]["solid"]
    assert (solid.score, solid.max_score, solid.reasons) == (3, 4, {})  # 1 point: manual answer


@pytest.mark.slow
def test_a_copied_test_cell_costs_nothing(course):
    copier = course[2]["copier"]
    assert (copier.score, copier.max_score, copier.reasons) == (3, 4, {})


@pytest.mark.slow
def test_looping_student_scores_zero_with_reason_and_class_is_graded(course):
    results = course[2]
    looper = results["looper"]
    assert looper.score == 0
    assert set(looper.reasons) == {"toy/visible", "toy/hidden"}
    assert "time limit" in looper.reasons["toy/hidden"]
    assert results["partial"].score == 1 and results["solid"].score == 3


@pytest.mark.slow
def test_a_submission_that_kills_its_own_process_scores_zero_with_reason_and_class_is_graded(course):
    results = course[2]
    crasher = results["crasher"]
    assert (crasher.score, crasher.max_score) == (0, 4)
    assert "process running the notebook ended" in crasher.reasons["toy/visible"]
    assert [r.score for r in results.values()] == [3, 0, 0, 1, 3]


@pytest.mark.slow
def test_no_child_of_a_submission_survives_grading(course):
    assert running(SESSION_CHILD) == []  # solid: start_new_session=True
    assert running(PLAIN_CHILD) == []  # crasher: orphaned when its learner process was SIGKILLed


def test_failure_in_one_notebook_keeps_the_others(monkeypatch):
    """With several notebooks, a crash is retried notebook by notebook and pinned on its own."""
    from course.grading.classes import unit

    calls = []

    def fake_convert(root, assignment, student, notebook):
        calls.append(notebook)
        crashed = notebook in ("*", "02_fencing")
        return commands.cause("[Autograde | ERROR] ValueError: bad notebook") if crashed else None

    monkeypatch.setattr(unit, "_convert", fake_convert)
    failures = unit._autograde(Path("."), "ch12", "s", ["01_claims", "02_fencing"])
    assert failures == {"02_fencing": "ValueError: bad notebook"}
    assert calls == ["*", "01_claims", "02_fencing"]


def test_hidden_regions_leave_the_autograded_notebook_as_one_placeholder_line():
    cell, _ = StripHiddenTests().preprocess_cell(new_code_cell(HIDDEN), {}, 0)
    assert MARKER not in cell.source and "HIDDEN TESTS" not in cell.source
    assert cell.source.splitlines()[-1] == "# hidden tests (not shown)"
    assert cell.source.splitlines()[:-1] == HIDDEN.split("### BEGIN")[0].splitlines()
    unclosed, _ = StripHiddenTests().preprocess_cell(new_code_cell("x = 1\n### BEGIN HIDDEN TESTS\nsecret()"), {}, 0)
    assert unclosed.source == "x = 1\n# hidden tests (not shown)", "an unclosed region runs to the end"


def test_an_nbgrader_failure_is_told_in_one_sentence(tmp_path):
    """Feedback for a course with nothing graded: the cause, not a traceback's tail."""
    (tmp_path / "nbgrader_config.py").write_text(
        f"from course.grading.nbgrader.config import configure\nconfigure(c, {str(tmp_path)!r})\n")
    with pytest.raises(commands.NbgraderError) as failed:
        commands.feedback(root=tmp_path)
    message = str(failed.value)
    assert message.startswith("nbgrader generate_feedback failed: ") and "\n" not in message
    assert "Traceback" not in message and len(message) < 500
    assert commands.cause("[X | ERROR] There was an error processing assignment\nValueError: bad cell 'x'\n") == (
        "ValueError: bad cell 'x'")
    assert commands.cause("    raise GradebookMismatch(\n    course.grading.nbgrader.preprocessors.GradebookMismatch: the "
                          "gradebook differs\n[A | ERROR] Please see the above") == "GradebookMismatch: the gradebook differs"


@pytest.mark.slow
def test_no_sandbox_grades_anyway_and_every_report_line_says_so(course, tmp_path, capsys):
    root, _, _ = course
    submitted = tmp_path / "submitted"
    (submitted / "solid").mkdir(parents=True)
    import shutil

    shutil.copytree(root / "submitted" / "solid" / commands.ASSIGNMENT, submitted / "solid" / commands.ASSIGNMENT)
    (result,) = autograde(submitted, force=True, root=root, sandbox=False, report="unsandboxed.csv")
    assert (result.score, result.sandboxed) == (3, False)
    lines = capsys.readouterr().out.splitlines()[1:]
    assert lines and all("UNSANDBOXED" in line for line in lines)
    assert "UNSANDBOXED" in (root / "unsandboxed.csv").read_text()


def test_without_bubblewrap_grading_refuses_and_says_how_to_enable_it(tmp_path):
    course_command = Path(sys.executable).parent / "course"
    (tmp_path / "someone" / commands.ASSIGNMENT).mkdir(parents=True)
    done = subprocess.run([str(course_command), "autograde", "--submitted", str(tmp_path)], capture_output=True,
                          text=True, timeout=60, env={"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)})
    assert done.returncode != 0
    assert "apt-get install bubblewrap" in done.stderr and "--no-sandbox" in done.stderr
    assert "Traceback" not in done.stderr


def gradebook_rows(path):
    """Every row of the tables autograde writes, for "changed nothing" comparisons."""
    import sqlite3

    tables = ("student", "submitted_assignment", "submitted_notebook", "grade", "comment")
    with sqlite3.connect(path) as db:
        return {table: sorted(map(repr, db.execute(f"SELECT * FROM {table}"))) for table in tables}


@pytest.mark.slow
def test_recording_a_result_again_changes_nothing(course, tmp_path):
    """The unit's plain result, recorded twice by the coordinator: the second time is a no-op."""
    import shutil

    from course.grading.classes import coordinator, unit

    root, _, _ = course
    url = f"sqlite:///{root / 'gradebook.db'}"
    outcome = unit.grade(coordinator.definition(root, url, commands.ASSIGNMENT),
                         coordinator.submission(root / "submitted" / "partial" / commands.ASSIGNMENT, "partial"))
    assert (outcome["score"], outcome["max_score"]) == (1, 4)
    assert outcome["notebooks"]["toy"]["grades"]["hidden"]["auto_score"] == 0
    assert MARKER not in outcome["autograded"]["toy.ipynb"].decode()
    assert outcome["report"] == "Graded normally." and not any(outcome["findings"].values())
    copy = tmp_path / "course"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("autograded", "feedback"))
    copy_url = f"sqlite:///{copy / 'gradebook.db'}"
    before = gradebook_rows(copy / "gradebook.db")
    coordinator.record(copy_url, outcome, copy)
    once = gradebook_rows(copy / "gradebook.db")
    assert once == before, "the fixture recorded the same result: recording it again must change nothing"
    coordinator.record(copy_url, outcome, copy)
    assert gradebook_rows(copy / "gradebook.db") == once
    assert (copy / "autograded/partial/ch12/toy.ipynb").read_bytes() == outcome["autograded"]["toy.ipynb"]
    from nbgrader.api import Gradebook

    with Gradebook(copy_url) as gb:
        assert sorted(s.id for s in gb.students) == sorted(STUDENTS)
        assert len(gb.find_assignment(commands.ASSIGNMENT).submissions) == len(STUDENTS)
        assert gb.find_submission(commands.ASSIGNMENT, "partial").score == 1


def test_a_course_installed_below_tmp_is_seen_in_the_sandbox_and_cannot_be_written(tmp_path, monkeypatch):
    """The sandbox has a /tmp of its own; a clone of the course under the host's /tmp (its Python
    environment and packages) must still be bound into it, read-only."""
    from course.grading.sandbox import bubblewrap as sandbox

    sandbox.ensure_available()
    installed = tmp_path / "clone"
    installed.mkdir()
    (installed / "marker.txt").write_text("the course's files")
    folders = sandbox.readable_folders()
    monkeypatch.setattr(sandbox, "readable_folders", lambda: (*folders, str(installed)))
    probe = ("import pathlib, sys\nprint(pathlib.Path(sys.argv[1], 'marker.txt').read_text())\n"
             "try:\n    pathlib.Path(sys.argv[1], 'written.txt').write_text('x')\nexcept OSError as error:\n"
             "    print(type(error).__name__)\n")
    done = subprocess.run(sandbox.Sandbox().command([sys.executable, "-c", probe, str(installed)]),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-1000:]
    assert done.stdout.split("\n")[:2] == ["the course's files", "OSError"], done.stdout
    assert not (installed / "written.txt").exists()


def test_a_worker_starts_the_checks_that_took_longest_last_time_first(monkeypatch):
    from course.grading.judge import checks

    monkeypatch.setattr(checks, "last_seconds", {("04", "slow"): 4.5, ("01", "quick"): 0.2, ("02", "middle"): 1.0})
    batch = [{"notebook": n, "cell": c} for n, c in (("01", "quick"), ("02", "new"), ("04", "slow"), ("02", "middle"))]
    assert [job["cell"] for job in checks.longest_first(batch)] == ["slow", "middle", "quick", "new"]


def test_before_any_check_was_timed_the_course_s_slow_checks_start_first(monkeypatch):
    """A worker's first student, and every student of plain nbgrader: nothing timed yet. The checks
    the release tags `slow` (the checkpoint's, which wait on real leases) go first, the rest keep
    their order, so the longest do not trail behind the quick ones."""
    from course.grading.judge import checks

    monkeypatch.setattr(checks, "last_seconds", {})
    batch = [job for notebook in sorted(RELEASE.glob("*.ipynb"))
             for job in checks.notebook_jobs(notebook.stem, RELEASE, {})]
    slow = [job["cell"] for job in batch if job["slow"]]
    assert {"test_run_once", "test_crash_matrix"} <= set(slow) and len(slow) < len(batch) / 2
    ordered = [job["cell"] for job in checks.longest_first(batch)]
    assert ordered == slow + [job["cell"] for job in batch if not job["slow"]]


def test_before_the_first_sandbox_every_course_module_has_up_to_date_bytecode():
    """Inside the sandbox the course's packages are read-only: a module without bytecode on disk
    would be compiled again by every sandboxed process."""
    import importlib.util
    import struct

    import course.checkpoint.worker as module
    from course.grading.sandbox import bubblewrap as sandbox

    source = Path(module.__file__)
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.unlink(missing_ok=True)
    sandbox.course_bytecode.cache_clear()
    sandbox.Sandbox().command(["true"])
    data = cached.read_bytes()
    flags, mtime, size = struct.unpack("<III", data[4:16])
    assert data[:4] == importlib.util.MAGIC_NUMBER
    assert (flags, mtime, size) == (0, int(source.stat().st_mtime) & 0xFFFFFFFF, source.stat().st_size & 0xFFFFFFFF)


def test_a_grading_process_leaves_out_the_iri_grammar_and_still_validates_cell_metadata():
    """rfc3987_syntax (2 s of CPU to import, only for jsonschema's "iri" format) is left out of
    every process that imports course.grading first; nbgrader's metadata schema still rejects."""
    probe = (
        "import sys\nimport course.grading.nbgrader.commands\nfrom nbgrader.nbgraderformat import ValidationError, v3\n"
        "print(sys.modules['rfc3987_syntax'] is None)\n"
        "from nbformat.v4 import new_code_cell\n"
        "cell = new_code_cell(metadata={'nbgrader': {'grade': True, 'solution': False, 'locked': False, "
        "'grade_id': 'x', 'schema_version': 3, 'points': 'many'}})\n"
        "try:\n    v3.MetadataValidatorV3().validate_cell(cell)\nexcept ValidationError as error:\n    print('refused')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-1000:]
    assert done.stdout.split() == ["True", "refused"]


def test_a_worker_keeps_one_engine_per_gradebook_and_its_scratch_commits_skip_the_flush(tmp_path, monkeypatch):
    import sqlite3
    from contextlib import closing

    from nbgrader import api
    from sqlalchemy import text

    from course.grading.classes import unit

    monkeypatch.setattr(api, "create_engine", api.create_engine)  # put back after the test
    unit._one_engine_per_gradebook()
    first, second = tmp_path / "one.db", tmp_path / "two.db"
    engines, modes = [], []
    for path in (first, first, second):
        with api.Gradebook(f"sqlite:///{path}") as gb:
            engines.append(gb.engine)
            modes.append(gb.db.execute(text("PRAGMA synchronous")).scalar_one())
            if path == first and not gb.students:
                gb.add_student("s1")
    assert engines[0] is engines[1] and engines[2] is not engines[0]
    assert modes == [0, 0, 0]  # OFF
    with closing(sqlite3.connect(first)) as db:  # what was committed through the shared engine is in the file
        assert db.execute("SELECT id FROM student").fetchall() == [("s1",)]


WORKER_THAT_FAILS_A_NOTEBOOK = """
import json, os, sys
from pathlib import Path
from course.grading.classes import coordinator, unit
from course.grading.nbgrader import preprocessors as protect
from course.grading.nbgrader.gradebook import db_url

def fails(self, nb, resources):  # after StartChecks, before any verdict is read
    raise RuntimeError("nbgrader gives this notebook up")

root = Path(sys.argv[1])
assignment = coordinator.definition(root, db_url(root), "ch12")
unit.warm_up()
protect.DecideByJudge.preprocess = fails
outcome = unit.run(assignment, coordinator.submission(Path(sys.argv[2]), "slow"))
print(json.dumps(outcome["reasons"]), flush=True)
os._exit(0)  # as a process pool's worker ends: threads still running are not waited for
"""


@pytest.mark.slow
def test_a_notebook_nbgrader_drops_mid_grading_leaves_no_check_running_behind(course, tmp_path):
    """nbgrader drops a notebook's started checks when it fails on that notebook before reading
    their verdicts. The worker still waits for them before its clean-up: nothing of them (judge,
    learner process, cgroup) may outlive the student."""
    root, _, _ = course
    slow = tmp_path / "slow"  # its checks are still running when nbgrader gives the notebook up
    shutil.copytree(root / "submitted" / "solid" / commands.ASSIGNMENT, slow)
    nb = nbformat.read(slow / "toy.ipynb", as_version=4)
    nb.cells[1].source = "import time\n\ndef double(x):\n    time.sleep(3)\n    return 2 * x"
    nbformat.write(nb, slow / "toy.ipynb")
    before = sandbox_cgroups()
    done = subprocess.run([sys.executable, "-c", WORKER_THAT_FAILS_A_NOTEBOOK, str(root), str(slow)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    reasons = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(reasons) == ["toy/hidden", "toy/visible"], reasons  # the notebook is reported, not graded
    assert sandbox_cgroups() <= before, "a sandbox's cgroup outlived its student"
    # Only this run's sandboxes: the other test worker's graders may be running judges right now.
    assert not sandboxed_pids(), "a judge or learner process outlived its student"


def test_the_cgroup_of_a_grader_killed_mid_student_is_removed_by_the_next_one():
    """A grading worker SIGKILLed mid-student (a Dask worker lost, an instructor's kill -9) cannot
    remove its sandboxes' cgroups; the next sandbox made on the machine removes them."""
    from course.grading.sandbox.cgroup import Cgroup

    mine = Cgroup.create(16, 256 * 1024 * 1024)
    if mine is None:
        pytest.skip("no writable cgroup file system here (not root): sandboxes are bound by rlimits")
    mine.remove()
    maker = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom course.grading.sandbox.cgroup import Cgroup\n"
         "group = Cgroup.create(16, 256 * 1024 * 1024)\nprint(*group.folders, flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        folders = [Path(f) for f in maker.stdout.readline().split()]
        assert folders and all(f.is_dir() for f in folders)
        os.kill(maker.pid, signal.SIGKILL)
        maker.wait(10)
        assert all(f.is_dir() for f in folders)  # nobody removed them
        fresh = Cgroup.create(16, 256 * 1024 * 1024)
        fresh.remove()
        assert not any(f.exists() for f in folders)
    finally:
        maker.kill()
        maker.wait(10)


def test_a_test_judges_only_the_cgroups_of_its_own_run():
    """Another grader on the machine (a second course copy) makes groups while the tests run; the
    tests' count of groups left behind must not include them."""
    from course.grading.sandbox.cgroup import LABEL_VARIABLE, Cgroup

    mine = Cgroup.create(16, 256 * 1024 * 1024)
    if mine is None:
        pytest.skip("no writable cgroup file system here (not root): sandboxes are bound by rlimits")
    other = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom course.grading.sandbox.cgroup import Cgroup\n"
         "group = Cgroup.create(16, 256 * 1024 * 1024)\nprint(*group.folders, flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, LABEL_VARIABLE: "anothercourse"})
    try:
        theirs = other.stdout.readline().split()
        assert theirs and all(Path(f).is_dir() for f in theirs)
        counted = sandbox_cgroups()
        assert {str(f) for f in mine.folders} <= counted and not counted & set(theirs)
    finally:
        mine.remove()
        other.kill()
        other.wait(10)
        Cgroup.create(16, 256 * 1024 * 1024).remove()  # removes the killed grader's groups


def test_a_grader_started_through_a_folder_the_sandbox_lacks_still_runs_its_checks(tmp_path):
    """Python keeps the path it was started by: `../.venv/bin/python` run from tests/ names the
    interpreter through tests/, which the sandbox does not have. Every check then died unstarted
    and every submission scored nothing; the sandbox now names the interpreter without the detour."""
    detour = tmp_path / "detour"
    detour.mkdir()
    python = os.path.relpath(sys.executable, detour)  # run from `detour`: ../../.venv/bin/python
    probe = ("import sys\nsys.path.insert(0, sys.argv[1])\nfrom checked_answers import failed, verdicts\n"
             "print(failed(verdicts('01_claims.ipynb', {'claim': 'def claim(db, owner, **options):\\n    return None\\n'}, "
             "only={'test_claim_acquires', 'test_claim_dataclass'})))\n")
    done = subprocess.run([python, "-c", probe, str(Path(__file__).parent)], cwd=detour, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ("{'test_claim_acquires': 'CheckFailed: claim returned None; "
                                   "expected a Claim for the oldest READY assignment.'}")


def test_a_check_whose_experiment_failed_after_its_retries_is_reported_for_regrading(tmp_path):
    """The judge says so from the course's own check: an `expect` whose message its source begins
    with GRADING ERROR (04, 07), or one about a checkpoint case whose experiment went wrong (05). The
    same words raised by the learner's code count for nothing, and the report reads the findings
    stored in the cells, not what their outputs say."""
    from course.checkpoint.evidence import CaseEvidence
    from course.lessons.checks import expect
    from course.grading import findings, wire
    from course.grading.classes.autograde import StudentResult
    from course.grading.classes.report import findings as counted, reason
    from course.grading.judge import findings as judged, messages
    from course.grading.nbgrader.preprocessors import verdict_outputs

    staged = 'expect(built(), "GRADING ERROR, not a mistake in your answer: the situation was not built")\n'
    checkpoint = 'expect(case.passed, f"The killed-holder case failed: {explain(case)}.")\n'
    harness = CaseEvidence("killed", "k", "learner", 3.0, failures=["the old worker never reported a prepared order"])
    learners = CaseEvidence("killed", "k", "learner", 3.0, failures=["generation 1 (revisit `claim` in 01_claims)"])

    class GraderError(Exception):  # a learner's, named like the grader's
        pass

    def forged():
        raise wire.rebuild_error(wire.describe_error(GraderError("GRADING ERROR, not your code: the experiment "
                                                                 "itself went wrong")))

    def verdict(check: str, **names) -> dict:
        try:
            exec(compile(check, messages.FILENAME, "exec"), {"expect": expect, "explain": str, **names})
        except BaseException as error:
            return {"passed": False, "ename": type(error).__name__, "message": str(error),
                    "findings": judged.of_check(error, {"check": check})}
        return {"passed": True}

    verdicts = [verdict(staged, built=lambda: False), verdict(checkpoint, case=harness),
                verdict(staged, built=forged), verdict(checkpoint, case=learners)]
    assert [v["findings"] for v in verdicts] == [["grading_error"], ["grading_error"], [], []]
    cells = []
    for found in verdicts:
        cells.append(new_code_cell("expect(...)", outputs=verdict_outputs(found)))
        findings.mark(cells[-1], found["findings"])
    nbformat.write(new_notebook(cells=cells), tmp_path / "04_recovery.ipynb")
    found = counted(tmp_path)
    assert found["grading_error"] == 2 and sum(found.values()) == 2
    line = reason(StudentResult("s", 10.0, 87.0, findings=found))
    assert "grading error, not a mistake of theirs (grade it again) (2 cells)" in line


LEASE_CHECK = (  # the visible part takes a lease on the wall clock; the hidden part needs it still live
    "import time\n"
    "lease_until = time.time() + 6\n"
    "check(double(0) == 0, 'double(0) returned something else; zero must stay zero.')\n"
    "### BEGIN HIDDEN TESTS\n"
    "check(time.time() < lease_until, 'the lease the visible part took ran out before the hidden part ran.')\n"
    "### END HIDDEN TESTS"
)
HOLDER = """
import sys, time
from course.grading.judge.phases import VISIBLE, Gate
gate = Gate()
held = gate.enter(VISIBLE, 60)
print("held", flush=True)
deadline = time.monotonic() + 120
while gate._free("hidden.wait") and time.monotonic() < deadline:  # until a check waits for the hidden phase
    time.sleep(0.05)
time.sleep(8)  # longer than the check's lease
"""


@pytest.mark.slow
def test_a_check_waits_for_its_phase_before_its_first_statement_not_between_its_parts(tmp_path):
    """Another grading on this machine holds the visible phase (a long notebook run) while a check
    with a hidden part is due. Its visible part takes a 6 s lease and its hidden part needs it live:
    the check must wait before it starts, not between its parts, or a correct answer loses points."""
    build_course(tmp_path)
    source = tmp_path / "solutions" / commands.ASSIGNMENT / "toy.ipynb"
    nb = nbformat.read(source, as_version=4)
    nb.cells[3].source = LEASE_CHECK
    nbformat.write(nb, source)
    commands.release(root=tmp_path)
    submit(tmp_path, "steady", "def double(x):\n    return 2 * x")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        (result,) = autograde(root=tmp_path)
        assert holder.wait(timeout=150) == 0
    finally:
        holder.kill()
        holder.wait()
    graded = nbformat.read(tmp_path / "autograded/steady" / commands.ASSIGNMENT / "toy.ipynb", as_version=4)
    assert result.score == 3, [cell.outputs for cell in graded.cells if cell.cell_type == "code"]


COURSE_MADE = {  # checks a correct answer passes in Lab and cannot pass at grading, by the check's own making
    "reads_a_helper": "check(double(3) == twice(3), 'double(3) differs from twice(3).')",  # `twice`: a locked, non-setup cell
    "passes_a_fraction": "from fractions import Fraction\ncheck(double(Fraction(1, 2)) == 1, 'double(1/2) is not 1.')",
}


@pytest.mark.slow
def test_a_check_that_cannot_run_as_written_is_a_grading_error_never_graded_normally(tmp_path):
    build_course(tmp_path)
    source = tmp_path / "solutions" / commands.ASSIGNMENT / "toy.ipynb"
    nb = nbformat.read(source, as_version=4)
    nb.cells[3:3] = [new_code_cell("def twice(x):\n    return 2 * x", metadata=nbgrader_metadata("helper", locked=True)),
                     *(new_code_cell(check, metadata=nbgrader_metadata(name, grade=True, locked=True, points=1))
                       for name, check in COURSE_MADE.items())]
    nbformat.write(nb, source)
    commands.release(root=tmp_path)
    submit(tmp_path, "right", "def double(x):\n    return 2 * x")
    (result,) = autograde(root=tmp_path)
    assert result.score == 3 and result.findings["grading_error"] == 2, result  # visible 1 + hidden 2; none of these
    graded = nbformat.read(tmp_path / "autograded/right" / commands.ASSIGNMENT / "toy.ipynb", as_version=4)
    said = {cell.metadata.nbgrader["grade_id"]: cell.outputs[0]["evalue"] for cell in graded.cells
            if cell.metadata.get("nbgrader", {}).get("grade_id") in COURSE_MADE}
    assert "reads `twice`" in said["reads_a_helper"] and "cannot reach" in said["passes_a_fraction"], said
    assert all(message.startswith("grading error: the check") and "not your answer's" in message
               for message in said.values()), said
