"""The instructor's grading commands, run as an instructor runs them: the installed `course` and
`nbgrader` commands, from the course folder, with an ordinary PATH (the environment not activated).

A toy course (tests/test_grading_tools.build_course): one notebook, 3 autograded points and one
written answer worth 1 point, graded by hand.
"""

from __future__ import annotations

import csv
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from conftest import nbgrader_metadata
from test_grading_tools import COURSE_MADE, build_course, submit
from test_postgres_gradebook import ordinary_path

pytestmark = pytest.mark.slow
BIN = Path(os.path.normpath(sys.executable)).parent
ROOT = Path(__file__).resolve().parents[1]
RIGHT, HALF = "def double(x):\n    return 2 * x", "def double(x):\n    return 2 * x if x < 10 else 0"


def course_command(root: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([str(BIN / "course"), *args], cwd=root, capture_output=True, text=True, timeout=600,
                          env=ordinary_path())
    assert done.returncode == 0, f"course {args[0]} failed: {done.stderr[-2000:]}"
    assert "Warning" not in done.stderr, f"a library's warning among the progress bar: {done.stderr[-1000:]}"
    return done


def report(root: Path) -> dict[str, dict[str, str]]:
    with open(root / "grading-report.csv", newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def stamped(gradebook: Path) -> bool:
    with closing(sqlite3.connect(gradebook)) as db:
        return db.execute("SELECT count(*) FROM sqlite_master WHERE name='alembic_version'").fetchone()[0] == 1


@pytest.fixture
def toy(tmp_path):
    root = tmp_path / "course"
    root.mkdir()
    build_course(root)
    released = course_command(root, "release", "--no-verify")  # the exchange test releases as an instructor does
    assert "Released 1 notebook(s)" in released.stdout and (root / "notebooks" / "ch12" / "toy.ipynb").is_file()
    submit(root, "solid", RIGHT)
    return root


def test_release_refuses_solutions_that_lose_points_under_the_judge(tmp_path):
    """A check that passes in the author's kernel but cannot run at grading would cost every learner
    its points: `course release` grades the solutions through the judge first, and releases nothing."""
    root = tmp_path / "course"
    root.mkdir()
    build_course(root)
    source = root / "solutions" / "ch12" / "toy.ipynb"
    nb = nbformat.read(source, as_version=4)
    nb.cells.insert(3, new_code_cell(COURSE_MADE["reads_a_helper"], metadata=nbgrader_metadata("uses_helper", grade=True,
                                                                                             locked=True, points=1)))
    nbformat.write(nb, source)
    done = subprocess.run([str(BIN / "course"), "release"], cwd=root, capture_output=True, text=True, timeout=600,
                          env=ordinary_path())
    assert done.returncode != 0 and "nothing was released" in done.stderr, done.stderr[-2000:]
    assert "toy/uses_helper: the solution scored 0 of 1" in done.stderr and "reads `twice`" in done.stderr, done.stderr
    assert "toy/visible" not in done.stderr and not (root / "notebooks").exists()


def test_a_gradebook_left_half_made_is_finished_and_graded_into(toy):
    """nbgrader makes a gradebook's tables, then runs `alembic` by name to stamp their version; an
    instructor without the environment on PATH got the tables only, and every later autograde died."""
    (toy / "gradebook.db").unlink()  # as on a fresh clone: no gradebook yet
    half = subprocess.run([str(BIN / "python"), "-c", "from nbgrader.api import Gradebook; Gradebook('sqlite:///gradebook.db')"],
                          cwd=toy, capture_output=True, text=True, timeout=120, env=ordinary_path())
    assert "alembic" in half.stderr and not stamped(toy / "gradebook.db"), "the half-made gradebook, as nbgrader leaves it"

    done = course_command(toy, "autograde", "--jobs", "1")
    assert "half-made" in done.stdout and stamped(toy / "gradebook.db")
    assert report(toy)["solid"]["score"] == "3.0"


def test_plain_nbgrader_makes_a_stamped_gradebook_without_the_environment_on_path(toy):
    """nbgrader_config.py puts the environment's bin on PATH for every nbgrader command."""
    done = subprocess.run([str(BIN / "nbgrader"), "db", "student", "add", "someone"], cwd=toy, capture_output=True,
                          text=True, timeout=120, env=ordinary_path())
    assert done.returncode == 0, done.stderr[-2000:]
    assert stamped(toy / "gradebook.db")


def test_a_new_gradebook_grades_everyone_and_the_report_is_the_gradebooks(toy):
    submit(toy, "gone", RIGHT)
    first = course_command(toy, "autograde", "--jobs", "1")
    assert "Graded normally. 1 points to grade by hand." in first.stdout, "the summary names what waits for manual grading"
    assert first.stderr.rstrip().endswith("failing=0, left=0]"), f"the bar's last word: {first.stderr[-200:]!r}"
    assert report(toy)["solid"]["by_hand"] == "1.0" and sorted(report(toy)) == ["gone", "solid"]

    # A new gradebook (moving to a server, say): autograded/ holds solid and gone, the gradebook has nobody,
    # and gone has left the course.
    (toy / "gradebook.db").rename(toy / "old-gradebook.db")
    shutil.rmtree(toy / "submitted" / "gone")
    submit(toy, "partial", HALF)
    again = course_command(toy, "autograde", "--jobs", "1")
    assert "not graded again" not in again.stdout, "a student the gradebook does not hold is graded"
    assert "gone" not in report(toy), "the report is the gradebook's: gone is in the old one only"
    with closing(sqlite3.connect(toy / "gradebook.db")) as db:
        held = {row[0] for row in db.execute("SELECT student.id FROM submitted_assignment JOIN student "
                                               "ON student.id = submitted_assignment.student_id")}
    assert held == {"solid", "partial"}

    # Nothing new: both are skipped, and the command says how to grade them again.
    skipped = course_command(toy, "autograde", "--jobs", "1")
    assert "2 student(s) already in the gradebook, with no newer submission, were not graded again" in skipped.stdout
    assert "FORCE=1" in skipped.stdout
    assert sorted(report(toy)) == ["partial", "solid"], "the report lists every student of the gradebook"
    assert report(toy)["partial"]["score"] == "1.0" and report(toy)["solid"]["score"] == "3.0"
    # What each student still lacks, by check: the half-right answer fails the hidden test only.
    assert report(toy)["partial"]["failed"] == "toy/hidden" and report(toy)["solid"]["failed"] == ""

    forced = course_command(toy, "autograde", "--jobs", "1", "--force")
    assert "not graded again" not in forced.stdout and "partial" in forced.stdout and "solid" in forced.stdout


def forge(folder: Path) -> None:
    """A notebook of the submission's own, its cells marked as only the grader marks them."""
    marked = nbformat.v4.new_notebook(cells=[new_code_cell("pass", metadata={"course_findings": [
        "unsandboxed", "grading_error", "timeouts"]}) for _ in range(3)])
    nbformat.write(marked, folder / "zz_forged.ipynb")


def resubmit(root: Path, student: str, answer: str, when: str) -> None:
    """A submission as `nbgrader collect --update` leaves it: the notebook and its timestamp.txt."""
    shutil.rmtree(root / "submitted" / student, ignore_errors=True)
    submit(root, student, answer)
    (root / "submitted" / student / "ch12" / "timestamp.txt").write_text(when)


def graded_at(root: Path) -> dict[str, str]:
    """{student: when the gradebook says their submission was made}."""
    with closing(sqlite3.connect(root / "gradebook.db")) as db:
        return dict(db.execute("SELECT student_id, timestamp FROM submitted_assignment"))


def test_a_resubmission_is_graded_again_alone_and_one_student_on_request(toy):
    """nbgrader's rule without --force: a submission newer than the one graded is graded again, and
    nobody else; `--student` grades the one named (a newer submission, or with --force)."""
    resubmit(toy, "solid", HALF, "2026-12-01 09:00:00.000000 UTC")
    resubmit(toy, "zoe", RIGHT, "2026-12-01 10:00:00.000000 UTC")
    first = course_command(toy, "autograde", "--jobs", "1")
    assert report(toy)["solid"]["score"] == "1.0" and report(toy)["zoe"]["score"] == "3.0", first.stdout
    zoe_graded = (toy / "autograded" / "zoe" / "ch12" / "toy.ipynb").stat().st_mtime_ns

    resubmit(toy, "solid", RIGHT, "2026-12-02 17:30:00.000000 UTC")  # the same student, a day later, fixed
    again = course_command(toy, "autograde", "--jobs", "1")
    assert "1 student(s) already in the gradebook, with no newer submission, were not graded again" in again.stdout
    assert ": zoe" in again.stdout and report(toy)["solid"]["score"] == "3.0"
    assert graded_at(toy)["solid"].startswith("2026-12-02 17:30"), graded_at(toy)
    assert (toy / "autograded" / "zoe" / "ch12" / "toy.ipynb").stat().st_mtime_ns == zoe_graded, "zoe was regraded"

    resubmit(toy, "zoe", HALF, "2026-12-03 08:00:00.000000 UTC")
    resubmit(toy, "solid", HALF, "2026-12-03 08:05:00.000000 UTC")
    one = course_command(toy, "autograde", "--jobs", "1", "--student", "zoe")
    assert report(toy)["zoe"]["score"] == "1.0" and report(toy)["solid"]["score"] == "3.0", "only zoe is graded"
    done = subprocess.run([str(BIN / "course"), "autograde", "--student", "nobody"], cwd=toy, capture_output=True,
                          text=True, timeout=600, env=ordinary_path())
    assert done.returncode != 0 and "no submission of ch12 from nobody" in done.stderr, done.stderr[-1000:]
    assert "zoe" in one.stdout


def test_after_a_regrade_the_report_counts_what_formgrader_asks_to_grade_by_hand(toy):
    """A written answer graded by hand, then the class regraded (--force): nbgrader asks for the hand
    grade to be looked at again (the answer may have changed), and the report says the same."""
    course_command(toy, "autograde", "--jobs", "1")
    with closing(sqlite3.connect(toy / "gradebook.db")) as db, db:  # what formgrader saves for a hand grade
        db.execute("UPDATE grade SET manual_score = 1.0, needs_manual_grade = 0 WHERE needs_manual_grade = 1")
    course_command(toy, "autograde", "--jobs", "1")  # nothing newer: nothing changes
    assert report(toy)["solid"]["by_hand"] == "0.0"

    course_command(toy, "autograde", "--jobs", "1", "--force")
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{toy / 'gradebook.db'}") as gb:  # what formgrader lists as needing a hand grade
        flagged = sum(g.max_score for nb in gb.find_submission("ch12", "solid").notebooks for g in nb.grades
                      if g.needs_manual_grade)
    assert flagged == 1.0, "nbgrader's rule: an answer graded by hand before a regrade is looked at again"
    assert float(report(toy)["solid"]["by_hand"]) == flagged, report(toy)["solid"]


def test_a_student_on_the_roster_who_handed_nothing_in_is_listed_with_zero_everywhere(toy, tmp_path):
    """The roster is nbgrader's own (`nbgrader db student import`); a student on it with no submission
    is in the command's summary, the report and the exported grades, with 0 and "no submission"."""
    roster = tmp_path / "roster.csv"
    roster.write_text("id,first_name,last_name,email\ncarl,Carl,Absent,\nsolid,Sol,Id,\n")
    imported = subprocess.run([str(BIN / "nbgrader"), "db", "student", "import", str(roster)], cwd=toy,
                              capture_output=True, text=True, timeout=120, env=ordinary_path())
    assert imported.returncode == 0, imported.stderr[-2000:]
    done = course_command(toy, "autograde", "--jobs", "1")
    line = next(line for line in done.stdout.splitlines() if line.startswith("carl "))
    assert "0/4" in line and "No submission." in line, done.stdout
    assert report(toy)["carl"]["score"] == "0.0" and report(toy)["carl"]["reason"] == "No submission."
    assert report(toy)["solid"]["score"] == "3.0"
    course_command(toy, "grades", "--output", str(tmp_path / "grades.csv"))
    with open(tmp_path / "grades.csv", newline="") as handle:
        exported = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    assert exported == {"carl": 0.0, "solid": 3.0}


def test_make_passes_force_and_grades_come_out_sorted(toy, tmp_path):
    dry = subprocess.run(["make", "-n", "-C", str(ROOT), "autograde", "FORCE=1", "JOBS=3"], capture_output=True,
                         text=True, timeout=60, env=ordinary_path())
    command = next(line for line in dry.stdout.splitlines() if "course autograde" in line)
    assert "--force" in command.split() and "--jobs 3" in command
    for student in ("zoe", "adam"):
        submit(toy, student, RIGHT)
    course_command(toy, "autograde", "--jobs", "2")
    done = course_command(toy, "grades", "--output", str(tmp_path / "grades.csv"))
    assert str(tmp_path / "grades.csv") in done.stdout
    with open(tmp_path / "grades.csv", newline="") as handle:
        assert [row["student_id"] for row in csv.DictReader(handle)] == ["adam", "solid", "zoe"]
    feedback = course_command(toy, "feedback")
    assert "Feedback for 3 student(s)" in feedback.stdout
    assert sorted(p.name for p in (toy / "feedback").iterdir()) == ["adam", "solid", "zoe"]
    shutil.rmtree(toy / "feedback")


def test_feedback_says_a_written_answer_is_not_graded_yet_until_it_is(toy):
    course_command(toy, "autograde", "--jobs", "1")
    course_command(toy, "feedback")
    html = (toy / "feedback" / "solid" / "ch12" / "toy.html").read_text()
    assert "Not graded yet." in html, "a written answer waiting for its grader is not shown as a plain 0"
    # What the sentence says is what the page shows: the answer's 0 of 1, and a total that counts it as 0.
    assert "counts as 0 of its 1 point, here and in the total at the top" in html
    assert "Score: 0.0 / 1.0" in html and "Score: 3.0 / 4.0" in html

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{toy / 'gradebook.db'}") as gb:  # what formgrader does when the answer is graded
        grade = gb.find_grade("why", "toy", "ch12", "solid")
        grade.manual_score = 1.0
        gb.db.commit()
    course_command(toy, "feedback")
    html = (toy / "feedback" / "solid" / "ch12" / "toy.html").read_text()
    assert "Not graded yet." not in html and "Score: 4.0 / 4.0" in html


def test_late_work_plain_nbgrader_and_hand_grades_reach_the_report_and_the_csv(toy, tmp_path):
    """The due date is nbgrader's (`nbgrader db assignment add ch12 --duedate`); a submission after it
    is marked late in the summary, grading-report.csv and grades.csv. Plain `nbgrader autograde` writes
    the report too, and `course grades` writes it again with what formgrader changed since. A notebook a
    submission adds, with the grader's own marks written into its cells, labels nothing on either
    grading path (nbgrader carries the release's notebooks only into autograded/, which the report reads)."""
    resubmit(toy, "solid", RIGHT, "2026-12-01 09:00:00.000000 UTC")
    resubmit(toy, "tardy", HALF, "2026-12-03 11:30:00.000000 UTC")
    forge(toy / "submitted" / "tardy" / "ch12")
    due = subprocess.run([str(BIN / "nbgrader"), "db", "assignment", "add", "ch12", "--duedate",
                          "2026-12-02 09:00:00 UTC"], cwd=toy, capture_output=True, text=True, timeout=120,
                         env=ordinary_path())
    assert due.returncode == 0, due.stderr[-2000:]
    done = course_command(toy, "autograde", "--jobs", "1")
    line = next(line for line in done.stdout.splitlines() if line.startswith("tardy "))
    assert "Late by 1 d 2 h 30 min (no penalty)." in line and "1 check short of full points." in line, done.stdout
    assert "Late" not in next(line for line in done.stdout.splitlines() if line.startswith("solid "))
    assert (report(toy)["tardy"]["late"], report(toy)["solid"]["late"]) == (str(26 * 3600 + 1800), "0")
    course_command(toy, "grades", "--output", str(tmp_path / "grades.csv"))
    with open(tmp_path / "grades.csv", newline="") as handle:
        exported = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert exported["tardy"]["timestamp"].startswith("2026-12-03 11:30") and exported["tardy"]["duedate"]
    assert (exported["tardy"]["failed"], exported["tardy"]["by_hand"]) == ("toy/hidden", "1.0")

    # Plain nbgrader grades a newcomer: the report gains its line, and keeps the others'.
    resubmit(toy, "newcomer", RIGHT, "2026-12-01 10:00:00.000000 UTC")
    forge(toy / "submitted" / "newcomer" / "ch12")
    plain = subprocess.run([str(BIN / "nbgrader"), "autograde", "ch12", "--student", "newcomer"], cwd=toy,
                           capture_output=True, text=True, timeout=600, env=ordinary_path())
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert sorted(report(toy)) == ["newcomer", "solid", "tardy"] and report(toy)["newcomer"]["score"] == "3.0"
    assert report(toy)["tardy"]["failed"] == "toy/hidden", "the other students' lines are kept"
    rows = report(toy)
    assert {k: v for k, v in rows["newcomer"].items() if k != "student"} == \
        {k: v for k, v in rows["solid"].items() if k != "student"}, "the forged notebook labelled its student"
    assert rows["tardy"]["reason"].startswith("Graded normally.") and rows["tardy"]["sandboxed"] == "True", rows

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{toy / 'gradebook.db'}") as gb:  # what formgrader saves for a hand grade
        grade = gb.find_grade("why", "toy", "ch12", "tardy")
        grade.manual_score, grade.needs_manual_grade = 1.0, False
        gb.db.commit()
    course_command(toy, "grades", "--output", str(tmp_path / "grades.csv"))
    assert (report(toy)["tardy"]["by_hand"], report(toy)["tardy"]["score"]) == ("0.0", "2.0")


def test_a_submissions_timestamp_is_read_only_from_a_regular_file_of_its_own(tmp_path):
    """A submission names what `course autograde` reads to decide a resubmission: a folder or file
    that is a link (to another student's, say), a FIFO that would block, or text that is no time
    counts as no timestamp, and the gradebook's stands."""
    from course.grading.classes.report import handed_in_at as _timestamp

    def folder(student: str) -> Path:
        made = tmp_path / student / "ch12"
        made.mkdir(parents=True)
        return made

    folder("ann").joinpath("timestamp.txt").write_text("2026-12-02 17:30:00.000000 UTC")
    (tmp_path / "bob").mkdir()
    (tmp_path / "bob" / "ch12").symlink_to(tmp_path / "ann" / "ch12")
    folder("cat").joinpath("timestamp.txt").symlink_to(tmp_path / "ann" / "ch12" / "timestamp.txt")
    os.mkfifo(folder("dan") / "timestamp.txt")
    folder("eve").joinpath("timestamp.txt").write_text("yesterday, roughly")
    seen = {student: _timestamp(tmp_path, student) for student in ("ann", "bob", "cat", "dan", "eve", "nobody")}
    assert seen["ann"] is not None and seen["ann"].isoformat() == "2026-12-02T17:30:00"
    assert {student: when for student, when in seen.items() if student != "ann"} == dict.fromkeys(
        ("bob", "cat", "dan", "eve", "nobody"))
