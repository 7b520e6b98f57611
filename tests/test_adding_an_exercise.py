"""The instructor guide's "Adding or changing an exercise", followed as a new instructor would.

The exercise is the guide's own: `lease_left` in `03_leases`, its test cell taken word for word
from the guide's "A test cell, top to bottom", each cell's metadata as the guide's table of cells
gives it. Then the guide's steps: `course check-authoring` names the collision the guide warns of
(`lease_left` is a loop variable in 03), the answer is renamed, the check is clean; `course release`
grades the solutions through the judge and releases; three students are graded: a right answer
written differently (full marks), a plausible mistake (none) and the release as handed out (none).

To keep CI short, the course graded here holds only `03_leases` (the guide's course holds all
seven); check-authoring reads all seven, as it would in the repository.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from conftest import assert_nothing_left
from course.cli import main
from course.grading.nbgrader import commands

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "ch12"
GUIDE = ROOT / "docs" / "instructor-guide.md"
NOTEBOOK = "03_leases.ipynb"
SECTION = "## Adding or changing an exercise"
NEW_NAME = "lease_remaining"  # what the instructor renames `lease_left` to, after check-authoring's finding

# The instructor's solution (the guide shows only the test cell).
SOLUTION = ("def lease_left(db, claim, now):\n    ### BEGIN SOLUTION\n"
            "    expires = db.connection.execute(\"SELECT expires FROM assistant_work WHERE id=?\",\n"
            "                                    (claim.id,)).fetchone()[0]\n"
            "    return max(0.0, expires - now)\n    ### END SOLUTION\n")
RIGHT_ANOTHER_WAY = ("from sovereign_agent.records import lease_expiry\n\n"
                     f"def {NEW_NAME}(db, claim, now):\n    left = lease_expiry(db.connection, claim.id) - now\n"
                     "    return left if left > 0 else 0.0\n")
NEGATIVE_AFTER_EXPIRY = (f"def {NEW_NAME}(db, claim, now):\n"
                         "    row = db.connection.execute(\"SELECT expires FROM assistant_work WHERE id=?\",\n"
                         "                                (claim.id,)).fetchone()\n"
                         "    return row[0] - now\n")


def guide_test_cell() -> str:
    """The guide's example test cell, as printed under "A test cell, top to bottom"."""
    section = GUIDE.read_text().split(SECTION, 1)[1]
    block = section.split("**A test cell, top to bottom.**", 1)[1]
    return re.search(r"```python\n(.*?)```", block, re.S).group(1)


def cell(kind: str, grade_id: str, source: str) -> nbformat.NotebookNode:
    """A cell with the metadata the guide's "The cells." gives its kind."""
    if kind == "answer":  # Autograded answer; tag raises-exception; a task: its minutes
        grading = {"grade": False, "locked": False, "solution": True}
        extra = {"course": {"minutes": 10}}
    else:  # Autograded tests, with points; raises-exception; the misconception it points to (none here)
        grading = {"grade": True, "locked": True, "solution": False, "points": 2}
        extra = {"course": {"misconception": None}}
    metadata = {"nbgrader": {**grading, "grade_id": grade_id, "schema_version": 3, "task": False},
                "tags": ["raises-exception"], **extra}
    return nbformat.v4.new_code_cell(source, metadata=metadata)


def add_exercise(folder: Path) -> None:
    path = folder / NOTEBOOK
    document = nbformat.read(path, as_version=4)
    document.cells += [cell("answer", "lease_left", SOLUTION), cell("test", "test_lease_left", guide_test_cell())]
    nbformat.write(document, path)


def rename(folder: Path) -> None:
    """`lease_left` becomes NEW_NAME in the two new cells (the course's own cells keep their loop variable)."""
    path = folder / NOTEBOOK
    document = nbformat.read(path, as_version=4)
    for new in document.cells[-2:]:
        new.source = re.sub(r"\blease_left\b", NEW_NAME, new.source)
        new.metadata["nbgrader"]["grade_id"] = re.sub(r"\blease_left\b", NEW_NAME, new.metadata["nbgrader"]["grade_id"])
    nbformat.write(document, path)


def check_authoring(folder: Path) -> tuple[int, list[str]]:
    done = CliRunner().invoke(main, ["check-authoring", str(folder)], catch_exceptions=False)
    return done.exit_code, done.output.splitlines()


def submission(release: Path, answer: str | None) -> nbformat.NotebookNode:
    """The release's 03 with the new answer cell written (None: as handed out); every other answer
    left as released."""
    document = nbformat.read(release / NOTEBOOK, as_version=4)
    if answer is not None:
        answer_cell = next(c for c in document.cells if c.metadata.get("nbgrader", {}).get("grade_id") == NEW_NAME)
        answer_cell.source = answer
    return document


@pytest.mark.slow
def test_the_guides_exercise_is_checked_released_and_graded_as_the_guide_says(tmp_path):
    # 1. The cells, then `course check-authoring`: the guide's name collides, as the guide warns.
    solutions = tmp_path / "solutions" / commands.ASSIGNMENT
    shutil.copytree(SOLUTIONS, solutions)
    add_exercise(solutions)
    code, lines = check_authoring(solutions)
    assert code == 1 and any(line.startswith(f"{NOTEBOOK} ") and "binds `lease_left`" in line for line in lines), lines
    rename(solutions)
    code, lines = check_authoring(solutions)
    assert (code, lines) == (0, [f"No findings in {solutions}."]), lines

    # 2. `course release`: the solutions are graded through the judge first, then released.
    course = tmp_path / "course"
    (course / "solutions" / commands.ASSIGNMENT).mkdir(parents=True)
    shutil.copy(solutions / NOTEBOOK, course / "solutions" / commands.ASSIGNMENT)
    (course / "nbgrader_config.py").write_text(
        "from pathlib import Path\nfrom course.grading.nbgrader.config import configure\n"
        "configure(c, Path(__file__).resolve().parent)\n")
    done = CliRunner().invoke(main, ["release", "--root", str(course)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    release = course / "notebooks" / commands.ASSIGNMENT
    released = (release / NOTEBOOK).read_text()
    assert "lease_remaining(db, held, 1040.0)" not in released, "the hidden part reached the release"
    assert "raise NotImplementedError" in released

    # 3. Three students, graded as a class.
    for student, answer in {"right": RIGHT_ANOTHER_WAY, "negative": NEGATIVE_AFTER_EXPIRY, "blank": None}.items():
        folder = course / "submitted" / student / commands.ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(submission(release, answer), folder / NOTEBOOK)
    done = CliRunner().invoke(main, ["autograde", "--root", str(course), "--jobs", "2"], catch_exceptions=False)
    assert done.exit_code == 0, done.output

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {student: gradebook.find_grade("test_lease_left", NOTEBOOK[:-6], commands.ASSIGNMENT, student).score
                  for student in ("right", "negative", "blank")}
    assert scores == {"right": 2.0, "negative": 0.0, "blank": 0.0}, scores
    assert_nothing_left(course)
