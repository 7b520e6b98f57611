"""`course autograde`: every student of a class graded, `jobs` at a time, and recorded.

Each student is one grading unit (course.grading.classes.unit) in a worker process or on a Dask
worker; the coordinator records each outcome as it arrives (course.grading.classes.coordinator).
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

from course.grading.classes import report as integrity
from course.grading.nbgrader.commands import ASSIGNMENT, NbgraderError, check_gradebook, record_assignment
from course.grading.nbgrader.gradebook import alembic_on_path, complete_creation, db_url, quiet_gradebook
from course.grading.sandbox import private
from course.grading.sandbox.bubblewrap import ensure_available


@dataclass
class StudentResult:
    """One student's autograde outcome as recorded in the gradebook."""

    student: str
    score: float
    max_score: float
    # "notebook/grade_id" of a part that scored 0 because its notebook did not run to the end
    # (time limit, a learner process that ended), mapped to why.
    reasons: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    findings: dict[str, int] = field(default_factory=dict)  # integrity.findings: what the grader saw
    sandboxed: bool = True
    by_hand: float = 0.0  # points of written answers still waiting for manual grading


def autograde(submitted_dir=None, force=False, root=".", sandbox=True, report="grading-report.csv", jobs=None,
              scheduler=None, progress=True):
    """Autograde every student in submitted/ (or `submitted_dir`), `jobs` at a time, and record them.

    Each student is one grading unit, run by a worker process (or a Dask worker, `scheduler`); this
    process alone records, one student at a time, each after checking the gradebook against the
    release. Without `force`, students the gradebook already holds are skipped, and said so. Prints
    the summary read back from the gradebook, merges it into `report` (every student ever graded,
    the latest line each), and returns a StudentResult per student graded now.
    """
    from course.grading.classes import coordinator

    root = Path(root).resolve()
    submitted = Path(submitted_dir).resolve() if submitted_dir else root / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{ASSIGNMENT}") if p.is_dir())
    if not students:
        raise NbgraderError(f"no submissions found: expected {submitted}/<student>/{ASSIGNMENT}/*.ipynb")
    if sandbox and not scheduler:  # a cluster's workers check their own sandbox
        ensure_available()
    alembic_on_path()
    quiet_gradebook()
    url = db_url(root)
    if complete_creation(url):
        print("The gradebook was left half-made by an earlier run (nbgrader could not find `alembic`): "
              "its schema version is now recorded.")
    record_assignment(root, url)
    # The workers start now: their start-up (importing nbgrader) overlaps the checks below.
    workers = coordinator.DaskWorkers(scheduler) if scheduler else coordinator.LocalWorkers(jobs or os.cpu_count() or 1)
    try:
        check_gradebook(root)
        skipped = [] if force else sorted(set(students) & _recorded(url))
        students = [s for s in students if s not in skipped]
        assignment = coordinator.definition(root, url, ASSIGNMENT)
        submissions = [coordinator.submission(submitted / s / ASSIGNMENT, s) for s in students]
        results = _grade_and_record(workers, assignment, submissions, sandbox, root, url, progress)
    finally:
        workers.close()
        private.close()  # what this process kept for grading (the assignment's scratch copy)
    results = _read_back(url, sorted(results, key=lambda r: r.student))
    print("\n".join(integrity.report_lines(results)))
    if skipped:
        print(f"{len(skipped)} student(s) already in the gradebook were not graded again "
              f"(`make autograde FORCE=1`, or --force, grades them again): {', '.join(skipped)}")
    integrity.write_report(root / report, results)
    return results


def _recorded(url) -> set[str]:
    """The students whose submission of the assignment the gradebook holds."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        return {s.student.id for s in gb.find_assignment(ASSIGNMENT).submissions}


def _grade_and_record(workers, assignment, submissions, sandbox, root, url, progress):
    """Each outcome recorded as it arrives, after the gradebook is checked again."""
    from tqdm import tqdm

    from course.grading.classes import coordinator

    results = []
    with tqdm(total=len(submissions), unit="student", desc="autograde", disable=not progress, dynamic_ncols=True) as bar:
        bar.set_postfix(failing=0, left=len(submissions))
        for student, outcome in workers.grade(assignment, submissions, sandbox):
            if isinstance(outcome, BaseException):
                result = StudentResult(student, 0.0, 0.0, {"*": f"not graded: {_one_line(outcome)}"}, sandboxed=sandbox)
            else:
                check_gradebook(root)  # before anything is recorded
                coordinator.record(url, outcome, root)
                result = StudentResult(student, outcome["score"], outcome["max_score"], outcome["reasons"],
                                       outcome["seconds"], outcome["findings"], outcome["sandboxed"])
            results.append(result)
            failing = sum(1 for r in results if r.reasons)  # not graded, or a notebook that did not finish
            bar.set_postfix(failing=failing, left=len(submissions) - len(results), refresh=False)
            bar.update(1)
    return results


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def _read_back(url, results):
    """Each student's score, maximum and points still to grade by hand, as the gradebook holds them."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(url) as gb:
        maximum = gb.find_assignment(ASSIGNMENT).max_score
        for result in results:
            try:
                submission = gb.find_submission(ASSIGNMENT, result.student)
            except MissingEntry:
                result.score, result.max_score = 0.0, maximum
                continue
            result.score, result.max_score = submission.score, submission.max_score
            result.by_hand = sum(g.max_score for nb in submission.notebooks for g in nb.grades
                                 if g.needs_manual_grade and g.manual_score is None)
    return results
