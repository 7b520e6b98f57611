"""A term on one machine through nbgrader's exchange, with the commands an instructor and a learner
run (the Makefile's for the instructor; the learner's are what the Assignments tab runs):
release to the exchange, fetch, submit, collect, autograde, feedback, fetch the feedback.

The toy course of tests/test_grading_tools (3 autograded points, 1 written). The learner runs
with the learner's Jupyter configuration (jupyter/learner), as `make lab` gives it.
"""

from __future__ import annotations

import getpass
import subprocess
from pathlib import Path

import nbformat
import pytest

from test_grading_tools import build_course
from test_instructor_commands import BIN, ROOT, course_command
from test_postgres_gradebook import ordinary_path

pytestmark = pytest.mark.slow


def make_command(target: str) -> list[str]:
    """The command a Makefile target runs (from a dry run), to run it in the toy course."""
    dry = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60,
                         env=ordinary_path())
    program, *args = next(line for line in dry.stdout.splitlines() if "/nbgrader " in line).split()
    return [str(ROOT / program), *args]  # the Makefile names it relative to the repository


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, f"{' '.join(argv[:3])} failed:\n{(done.stdout + done.stderr)[-2000:]}"
    return done


def test_release_fetch_submit_collect_grade_and_return_feedback(tmp_path):
    root, home, exchange = tmp_path / "course", tmp_path / "learner", tmp_path / "exchange"
    root.mkdir()
    home.mkdir()
    build_course(root)
    instructor = {**ordinary_path(), "COURSE_EXCHANGE": str(exchange)}
    learner = {**instructor, "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter" / "learner"), "HOME": str(home)}
    course_command(root, "release")
    run(make_command("release-exchange"), root, instructor)

    listed = run([str(BIN / "nbgrader"), "list"], home, learner)
    assert "crash-recovery ch12" in listed.stdout + listed.stderr
    run([str(BIN / "nbgrader"), "fetch_assignment", "ch12"], home, learner)
    fetched = home / "ch12" / "toy.ipynb"
    nb = nbformat.read(fetched, as_version=4)
    assert "SECRET_MARKER" not in fetched.read_text(), "the fetched assignment holds no hidden test"
    nb.cells[1].source = "def double(x):\n    return 2 * x"
    nbformat.write(nb, fetched)
    run([str(BIN / "nbgrader"), "submit", "ch12"], home, learner)

    run(make_command("collect"), root, instructor)
    student = getpass.getuser()
    assert (root / "submitted" / student / "ch12" / "toy.ipynb").is_file()
    graded = course_command(root, "autograde", "--jobs", "1")
    assert student in graded.stdout and "3/4" in graded.stdout.replace(" ", "")
    course_command(root, "feedback")
    run(make_command("return-feedback"), root, instructor)

    run([str(BIN / "nbgrader"), "fetch_feedback", "ch12"], home, learner)
    feedback = list((home / "ch12" / "feedback").rglob("toy.html"))
    assert len(feedback) == 1, "the learner fetched their feedback"
    html = feedback[0].read_text()
    assert "SECRET_MARKER" not in html and "Score" in html


def test_a_link_in_a_submission_is_never_followed_when_it_is_collected(tmp_path):
    """A learner writes their exchange folder themselves; links there (to the solutions, to a file
    of the instructor's, to a device that never ends) stay behind when the instructor collects."""
    root, home, exchange = tmp_path / "course", tmp_path / "learner", tmp_path / "exchange"
    root.mkdir()
    home.mkdir()
    build_course(root)
    secret = tmp_path / "instructor-secret.txt"
    secret.write_text("SECRET_OF_THE_INSTRUCTOR")
    instructor = {**ordinary_path(), "COURSE_EXCHANGE": str(exchange)}
    learner = {**instructor, "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter" / "learner"), "HOME": str(home)}
    course_command(root, "release")
    run(make_command("release-exchange"), root, instructor)
    run([str(BIN / "nbgrader"), "fetch_assignment", "ch12"], home, learner)
    run([str(BIN / "nbgrader"), "submit", "ch12"], home, learner)
    (inbound,) = [p for p in (exchange / "crash-recovery" / "inbound").iterdir() if p.is_dir()]
    solution = root / "solutions" / "ch12" / "toy.ipynb"
    for name, target in (("notes.txt", secret), ("zero", Path("/dev/zero")), ("extra.ipynb", solution)):
        (inbound / name).symlink_to(target)

    done = run(make_command("collect"), root, instructor)
    collected = root / "submitted" / getpass.getuser() / "ch12"
    assert (collected / "toy.ipynb").is_file()
    assert not {"notes.txt", "zero", "extra.ipynb"} & {p.name for p in collected.iterdir()}, list(collected.iterdir())
    assert "is a link" in done.stdout + done.stderr
    assert not any("SECRET_OF_THE_INSTRUCTOR" in p.read_text(errors="replace") for p in collected.iterdir())
