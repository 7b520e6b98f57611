"""Instructor commands: release, autograde, feedback, export grades.

Release, feedback and export run `nbgrader` as a subprocess in the course root (where
nbgrader_config.py lives), under course.grading.reaper so nothing a submission starts survives.
Autograde hands each student to a grading unit (course.grading.unit) in a worker process and
records the outcomes itself (course.grading.coordinator).
"""

import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing, contextmanager
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
    env["PATH"] = venv_path(env.get("PATH", ""))
    cmd = [sys.executable, "-m", "course.grading.reaper", sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.run(cmd, check=False, cwd=root, env=env, capture_output=True, text=True)
    if check and proc.returncode:
        raise NbgraderError(f"nbgrader {args[0]} failed: {cause(proc.stderr)}")
    return proc


def venv_path(path: str) -> str:
    """PATH with this environment's bin first: nbgrader runs `alembic` by name when it creates a gradebook."""
    return os.pathsep.join([str(Path(sys.executable).parent), path])


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


def autograde(submitted_dir=None, force=False, root=REPO_ROOT, sandbox=True, report="grading-report.csv", jobs=None,
              scheduler=None, progress=True):
    """Autograde every student in submitted/ (or `submitted_dir`), `jobs` at a time.

    Each student is one grading unit (course.grading.unit): graded from a copy of their folder,
    learner code in that student's sandbox, by a worker process that imported nbgrader once (or by
    a Dask cluster's workers, `scheduler`). This process alone records the results, one student at
    a time as they arrive, each after checking that the gradebook still matches the release. A
    progress bar counts the students done, failing and left. Returns a StudentResult per student,
    prints the summary read back from the gradebook and writes it to `report` (CSV, relative to
    `root`). Without `force`, students with an autograded folder are skipped. `sandbox=False`
    grades without isolation: every line says so.
    """
    from course.grading import coordinator

    root = Path(root).resolve()
    submitted = Path(submitted_dir).resolve() if submitted_dir else root / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{ASSIGNMENT}") if p.is_dir())
    if not students:
        raise NbgraderError(f"no submissions found: expected {submitted}/<student>/{ASSIGNMENT}/*.ipynb")
    if sandbox and not scheduler:  # a cluster's workers check their own sandbox
        ensure_available()
    url = coordinator.db_url(root)
    _record_assignment(root, url)
    # The workers start now: their start-up (importing nbgrader) overlaps the checks below.
    workers = coordinator.DaskWorkers(scheduler) if scheduler else coordinator.LocalWorkers(jobs or os.cpu_count() or 1)
    try:
        check_gradebook(root)
        if not force:
            students = [s for s in students if not (root / "autograded" / s / ASSIGNMENT).exists()]
        assignment = coordinator.definition(root, url, ASSIGNMENT)
        submissions = [coordinator.submission(submitted / s / ASSIGNMENT, s) for s in students]
        results = _grade_and_record(workers, assignment, submissions, sandbox, root, url, progress)
    finally:
        workers.close()
    results = _read_back(url, sorted(results, key=lambda r: r.student))
    lines = integrity.report_lines(results)
    print("\n".join(lines))
    integrity.write_report(root / report, results)
    return results


def _grade_and_record(workers, assignment, submissions, sandbox, root, url, progress):
    """Each outcome recorded as it arrives, after the gradebook is checked again."""
    from course.grading import coordinator

    results = []
    with _progress(len(submissions), progress) as bar:
        for student, outcome in workers.grade(assignment, submissions, sandbox):
            if isinstance(outcome, BaseException):
                result = StudentResult(student, 0.0, 0.0, {"*": f"not graded: {_one_line(outcome)}"}, sandboxed=sandbox)
            else:
                check_gradebook(root)  # before anything is recorded
                coordinator.record(url, outcome, root)
                result = StudentResult(student, outcome["score"], outcome["max_score"], outcome["reasons"],
                                       outcome["seconds"], outcome["findings"], outcome["sandboxed"])
            results.append(result)
            bar.update(1)
            failing = sum(1 for r in results if r.reasons)  # not graded, or a notebook that did not finish
            bar.set_postfix(failing=failing, left=len(submissions) - len(results), refresh=False)
    return results


@contextmanager
def _progress(total, shown):
    """Students done, failing and left, with an ETA (tqdm, on stderr)."""
    from tqdm import tqdm

    with tqdm(total=total, unit="student", desc="autograde", disable=not shown, dynamic_ncols=True) as bar:
        bar.set_postfix(failing=0, left=total)
        yield bar


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def _read_back(url, results):
    """Each student's score and maximum as the gradebook now holds them."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(url) as gb:
        maximum = gb.find_assignment(ASSIGNMENT).max_score
        for result in results:
            try:
                submission = gb.find_submission(ASSIGNMENT, result.student)
                result.score, result.max_score = submission.score, submission.max_score
            except MissingEntry:
                result.score, result.max_score = 0.0, maximum
    return results


def check_gradebook(root):
    """Refuse to grade (before any student) if the gradebook's assignment differs from the release."""
    from nbgrader.api import Gradebook

    from course.grading.protect import gradebook_problems

    from course.grading.coordinator import db_url

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


def _record_assignment(root, url):
    """Make sure the gradebook holds the assignment's source cells and hidden tests.

    Autograde restores locked cells from the gradebook, which `generate_assignment` fills. On a
    fresh clone (gradebook.db is not committed) or a new database, run it into a scratch folder,
    so the committed release in notebooks/ is left exactly as it is.
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


def failure_reason(log):
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


def timeout_reason(path):
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
