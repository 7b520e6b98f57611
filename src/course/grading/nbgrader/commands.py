"""The nbgrader steps an instructor runs besides grading: release, feedback, export.

Each runs `nbgrader` as a subprocess in the course root (where nbgrader_config.py lives), under
course.grading.sandbox.reaper so nothing a submission starts survives. Autograde is class grading
(course.grading.classes.autograde); it uses `check_gradebook` and `record_assignment` from here.
"""

import csv
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import nbformat

from course.grading.nbgrader.gradebook import alembic_on_path, db_url
from course.grading.sandbox.bubblewrap import NO_SANDBOX_VARIABLE

ASSIGNMENT = "ch12"
REPO_ROOT = Path(__file__).resolve().parents[4]
# Cell metadata written by running a notebook; stripped so the committed release diffs cleanly.
RUN_METADATA = ("collapsed", "scrolled", "execution", "ExecuteTime")


class NbgraderError(RuntimeError):
    """An nbgrader step (other than grading one student) failed."""


def run_nbgrader(root, *args, check=True, sandbox=True):
    """`nbgrader ARGS` under the reaper in `root`, with this environment's bin first on PATH
    (nbgrader runs `alembic` by name); `sandbox=False` is the instructor's --no-sandbox.
    """
    env = {**os.environ, NO_SANDBOX_VARIABLE: "" if sandbox else "1"}
    alembic_on_path(env)
    cmd = [sys.executable, "-m", "course.grading.sandbox.reaper", sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.run(cmd, check=False, cwd=root, env=env, capture_output=True, text=True)
    if check and proc.returncode:
        raise NbgraderError(f"nbgrader {args[0]} failed: {cause(proc.stderr)}")
    return proc


def cause(log: str) -> str:
    """The one line of an nbgrader log that says why it failed (its last specific error)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    generic = ("Please see the", "There was an error processing assignment")
    errors = [line.split("]", 1)[1].strip() for line in lines if "| ERROR]" in line]
    specific = [line for line in errors if not line.startswith(generic) and not line.startswith("Traceback")]
    exceptions = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Mismatch)\b.*:", line)]
    found = re.sub(r"^[\w.]*\.(\w+: )", r"\1", (exceptions or specific or errors or lines or ["no output"])[-1])
    return found if len(found) <= 400 else found[:397] + "..."


def strip_outputs(path):
    """Clear outputs, execution counts and run metadata; nbgrader metadata stays."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in RUN_METADATA:
            cell.metadata.pop(key, None)
    for key in ("signature", "widgets"):
        nb.metadata.pop(key, None)
    nbformat.validate(nb)
    nbformat.write(nb, path)


def release(root=REPO_ROOT):
    """Generate the learner notebooks from solutions/ into notebooks/; return their paths."""
    run_nbgrader(root, "generate_assignment", ASSIGNMENT, "--force")
    paths = sorted((Path(root) / "notebooks" / ASSIGNMENT).glob("*.ipynb"))
    for path in paths:
        strip_outputs(path)
    return paths


def feedback(root=REPO_ROOT):
    """Feedback HTML for every autograded student (--force: manual grades change only the gradebook)."""
    run_nbgrader(root, "generate_feedback", ASSIGNMENT, "--force")
    return sorted(Path(root).glob(f"feedback/*/{ASSIGNMENT}/*.html"))


def export_grades(path="grades.csv", root=REPO_ROOT):
    """Export the gradebook to CSV at `path` (relative to the caller's directory), sorted by student."""
    path = Path(path).resolve()
    run_nbgrader(root, "export", "--to", str(path))
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        fields, rows = reader.fieldnames or [], sorted(reader, key=lambda row: (row.get("student_id", ""), row.get("assignment", "")))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def check_not_left_behind(root, url):
    """Refuse to start grading into a server's gradebook that holds no grades while gradebook.db in
    the course folder does: nbgrader has no way to carry grades from one database to another, and
    the hand grades given in formgrader exist nowhere else."""
    local = Path(root) / "gradebook.db"
    if url.startswith("sqlite") or not local.is_file():
        return
    with closing(sqlite3.connect(f"file:{local}?mode=ro", uri=True)) as db:
        try:
            students = db.execute("SELECT count(*) FROM submitted_assignment").fetchone()[0]
            by_hand = db.execute("SELECT count(*) FROM grade WHERE manual_score IS NOT NULL").fetchone()[0]
        except sqlite3.Error:
            return  # not a gradebook nbgrader made
    if not students:
        return
    from nbgrader.api import Gradebook, SubmittedAssignment
    from sqlalchemy.engine import make_url

    with Gradebook(url) as gb:
        if gb.db.query(SubmittedAssignment).first() is not None:
            return
    server = make_url(url).render_as_string(hide_password=True)
    raise NbgraderError(
        f"{local} holds the grades of {students} student(s), {by_hand} of them answers graded by hand, and the "
        f"gradebook at {server} holds none: grading into it would leave them all behind (nbgrader cannot carry "
        f"grades between databases). Keep grading into gradebook.db (unset COURSE_DB_URL or --db-url), or move "
        f"the file aside (mv gradebook.db gradebook-before-server.db) to grade every submission again into the "
        f"server; the hand grades must then be given again in formgrader.")


def check_gradebook(root):
    """Refuse to grade (before any student) if the gradebook's assignment differs from the release."""
    from nbgrader.api import Gradebook

    from course.grading.nbgrader.preprocessors import gradebook_problems

    release = root / "notebooks" / ASSIGNMENT
    with Gradebook(db_url(root)) as gb:
        problems = [
            problem
            for path in sorted(release.glob("*.ipynb"))
            for problem in gradebook_problems(gb, ASSIGNMENT, path.stem, release, root / "solutions" / ASSIGNMENT)
        ]
    if problems:
        raise NbgraderError(
            f"the gradebook's copy of {ASSIGNMENT} does not match the release ({'; '.join(problems[:3])}), so no grade "
            f"was recorded. Re-create it with `nbgrader generate_assignment {ASSIGNMENT} --force` and grade again.")


def record_assignment(root, url):
    """Make sure the gradebook holds the assignment, hidden tests included: on a fresh clone or a new
    database, `generate_assignment` into a scratch folder, so the committed release stays as it is.
    """
    gradebook = root / "gradebook.db"
    if url.startswith("sqlite") and gradebook.exists():  # plain sqlite3: a Gradebook would create the file
        with closing(sqlite3.connect(gradebook)) as db:
            if db.execute("SELECT 1 FROM assignment WHERE name=?", (ASSIGNMENT,)).fetchone():
                return
    elif not url.startswith("sqlite"):
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(url) as gb:
            try:
                gb.find_assignment(ASSIGNMENT)
                return
            except MissingEntry:
                pass
    with tempfile.TemporaryDirectory(prefix="ch12-release-") as scratch:
        run_nbgrader(root, "generate_assignment", ASSIGNMENT, "--force", f"--CourseDirectory.release_directory={scratch}")
