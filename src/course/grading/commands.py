"""Instructor commands: release, autograde, feedback, export grades.

Each runs `nbgrader` as a subprocess in the course root (where nbgrader_config.py lives), under
course.grading.reaper so nothing a submission starts survives its grading.
"""

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course.grading import integrity_report as integrity
from course.grading.sandbox import NO_SANDBOX_VARIABLE, ensure_available

ASSIGNMENT = "ch12"
REPO_ROOT = Path(__file__).resolve().parents[3]
# Cell metadata written by running a notebook; stripped so the committed release diffs cleanly.
RUN_METADATA = ("collapsed", "scrolled", "execution", "ExecuteTime")


class NbgraderError(RuntimeError):
    """An nbgrader step (other than grading one student) failed."""


@dataclass
class StudentResult:
    """One student's autograde outcome as recorded in the gradebook."""

    student: str
    score: float
    max_score: float
    # "notebook/grade_id" of a part that scored 0 because its notebook did not run to the end
    # (time limit, dead kernel), mapped to why.
    reasons: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    findings: dict[str, int] = field(default_factory=dict)  # integrity.findings: what the grader saw
    sandboxed: bool = True


def run_nbgrader(root, *args, check=True, sandbox=True):
    """Run `nbgrader ARGS` under the reaper in `root`; return the CompletedProcess.

    The venv's bin goes first on PATH: nbgrader calls `alembic` by name to create the gradebook.
    `sandbox=False` is the instructor's explicit --no-sandbox.
    """
    env = dict(os.environ)
    env[NO_SANDBOX_VARIABLE] = "" if sandbox else "1"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    cmd = [sys.executable, "-m", "course.grading.reaper", sys.executable, "-m", "nbgrader", *args]
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
    found = (exceptions or specific or errors or lines or ["no output"])[-1]
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
    """Write feedback HTML for every autograded student; return the HTML paths.

    --force: manual grades change the gradebook, not the autograded files, so without it
    nbgrader would keep stale feedback.
    """
    run_nbgrader(root, "generate_feedback", ASSIGNMENT, "--force")
    return sorted(Path(root).glob(f"feedback/*/{ASSIGNMENT}/*.html"))


def export_grades(path="grades.csv", root=REPO_ROOT):
    """Export the gradebook to CSV at `path` (relative to the caller's directory)."""
    path = Path(path).resolve()
    run_nbgrader(root, "export", "--to", str(path))
    return path


def autograde(submitted_dir=None, force=False, root=REPO_ROOT, sandbox=True, report="grading-report.csv"):
    """Autograde every student in submitted/ (or `submitted_dir`), one at a time.

    Each student is graded from a scratch copy of their folder, learner code runs in that
    student's sandbox (course.grading.sandbox), and the gradebook must still match the release
    before anything is recorded. Returns a StudentResult per student, prints one report line per
    student and writes them to `report` (CSV, relative to `root`). `force` regrades submissions
    nbgrader has graded before. `sandbox=False` grades without isolation: every line says so.
    """
    root = Path(root).resolve()
    submitted = Path(submitted_dir).resolve() if submitted_dir else root / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{ASSIGNMENT}") if p.is_dir())
    if not students:
        raise NbgraderError(f"no submissions found: expected {submitted}/<student>/{ASSIGNMENT}/*.ipynb")
    if sandbox:
        ensure_available()
    _record_assignment(root)
    check_gradebook(root)
    results = []
    for student in students:
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="ch12-submitted-") as scratch:
            shutil.copytree(submitted / student, Path(scratch) / student, symlinks=False)
            options = [f"--CourseDirectory.submitted_directory={scratch}"]
            notebooks = sorted(p.stem for p in (Path(scratch) / student / ASSIGNMENT).glob("*.ipynb"))
            failures = _grade_student(root, student, notebooks, options, force, sandbox)
        result = _read_result(root, student, failures)
        result.findings = integrity.findings(root / "autograded" / student / ASSIGNMENT)
        result.sandboxed = sandbox
        result.seconds = round(time.monotonic() - start, 1)
        results.append(result)
    lines = integrity.report_lines(results)
    print("\n".join(lines))
    integrity.write_report(root / report, results)
    return results


def check_gradebook(root):
    """Refuse to grade (before any student) if the gradebook's assignment differs from the release."""
    from nbgrader.api import Gradebook

    from course.grading.protect import gradebook_problems

    release = root / "notebooks" / ASSIGNMENT
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        problems = [
            problem
            for path in sorted(release.glob("*.ipynb"))
            for problem in gradebook_problems(gb, ASSIGNMENT, path.stem, release, root / "solutions" / ASSIGNMENT)
        ]
    if problems:
        raise NbgraderError(
            f"the gradebook's copy of {ASSIGNMENT} does not match the release ({'; '.join(problems[:3])}), so no grade "
            f"was recorded. Re-create it with `nbgrader generate_assignment {ASSIGNMENT} --force` and grade again.")


def _record_assignment(root):
    """Make sure the gradebook holds the assignment's source cells and hidden tests.

    Autograde restores locked cells from the gradebook, which `generate_assignment` fills. On a
    fresh clone (gradebook.db is not committed) run it into a scratch folder, so the committed
    release in notebooks/ is left exactly as it is.
    """
    gradebook = root / "gradebook.db"
    if gradebook.exists():  # plain sqlite3: opening a Gradebook would create it in this process
        with closing(sqlite3.connect(gradebook)) as db:
            if db.execute("SELECT 1 FROM assignment WHERE name=?", (ASSIGNMENT,)).fetchone():
                return
    with tempfile.TemporaryDirectory(prefix="ch12-release-") as scratch:
        run_nbgrader(root, "generate_assignment", ASSIGNMENT, "--force", f"--CourseDirectory.release_directory={scratch}")


def _grade_student(root, student, notebooks, options, force, sandbox=True):
    """Autograde one student; return {notebook: why nbgrader could not grade it}.

    On a failure nbgrader deletes the student's whole autograded folder and skips the remaining
    notebooks, so grade notebook by notebook to keep the rest and pin the failure down.
    """
    args = ["autograde", ASSIGNMENT, "--student", student, *options]
    proc = run_nbgrader(root, *args, *(["--force"] if force else []), check=False, sandbox=sandbox)
    if proc.returncode == 0:
        return {}
    if len(notebooks) <= 1:  # nothing else to save: the failure is that notebook's (or all)
        return {name: _failure_reason(proc.stderr) for name in notebooks or ["*"]}
    failures = {}
    for notebook in notebooks:
        proc = run_nbgrader(root, *args, "--notebook", notebook, "--force", check=False, sandbox=sandbox)
        if proc.returncode:
            failures[notebook] = _failure_reason(proc.stderr)
    return failures


def _failure_reason(log):
    """Why nbgrader gave up, in words an instructor can pass on."""
    if "DeadKernelError" in log:
        return "the kernel died (killed or crashed) while running this notebook"
    if "CellTimeoutError" in log or "UnresponsiveKernelError" in log:
        return "a cell ran past the time limit and did not stop when interrupted"
    mismatch = [line for line in log.splitlines() if "GradebookMismatch" in line]
    if mismatch:
        return mismatch[-1].split("GradebookMismatch:", 1)[-1].strip()
    errors = [line for line in log.splitlines() if "| ERROR]" in line]
    return errors[0].split("]", 1)[1].strip() if errors else "nbgrader failed"


def _timeout_reason(path):
    """Why the kernel did not finish this notebook, as recorded in the autograded notebook, or None."""
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        label = cell.metadata.get("nbgrader", {}).get("grade_id", f"#{index + 1}")
        for output in cell.get("outputs", []):
            if output.get("ename") == "DeadKernelError":
                return f"the kernel died (killed or crashed) while running cell {label!r}"
            if output.get("ename") == "CellTimeoutError" or "past the time limit" in str(output.get("evalue", "")):
                return f"cell {label!r} ran past the time limit and was interrupted"
    return None


def _read_result(root, student, failures):
    """Score from the gradebook; zero (and explain) the parts of notebooks that did not finish."""
    from nbgrader.api import Gradebook, MissingEntry  # several seconds to import: only here

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        try:
            submission = gb.find_submission(ASSIGNMENT, student)
        except MissingEntry:
            max_score = gb.find_assignment(ASSIGNMENT).max_score
            return StudentResult(student, 0.0, max_score, {"*": failures.get("*", "not graded")})
        reasons = {}
        for notebook in submission.notebooks:
            autograded = root / "autograded" / student / ASSIGNMENT / f"{notebook.name}.ipynb"
            why = failures.get(notebook.name)
            if why is None and autograded.exists():
                why = _timeout_reason(autograded)
            if why is None:
                continue
            for grade in notebook.grades:
                if grade.cell_type != "code":
                    continue  # manually graded answers keep waiting for a grader
                if grade.auto_score is None:  # nbgrader stopped before scoring it
                    grade.auto_score, grade.needs_manual_grade = 0.0, False
                if grade.score == 0:
                    reasons[f"{notebook.name}/{grade.name}"] = why
        gb.db.commit()
        return StudentResult(student, submission.score, submission.max_score, reasons)
