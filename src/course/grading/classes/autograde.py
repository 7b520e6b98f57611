"""`course autograde`: every student of a class graded, `jobs` at a time, and recorded.

Each student is one grading unit (course.grading.classes.unit) in a worker process or on a Dask
worker; the coordinator records each outcome as it arrives (course.grading.classes.coordinator).
"""

import os
from pathlib import Path

from course.grading.classes import report as integrity
from course.grading.classes.report import StudentResult
from course.grading.nbgrader.commands import (
    ASSIGNMENT, NbgraderError, check_gradebook, check_not_left_behind, record_assignment,
)
from course.grading.nbgrader.gradebook import alembic_on_path, complete_creation, db_url, quiet_gradebook
from course.grading.sandbox import private
from course.grading.sandbox.bubblewrap import ensure_available


def autograde(submitted_dir=None, force=False, root=".", sandbox=True, report="grading-report.csv", jobs=None,
              scheduler=None, progress=True, only=()):
    """Autograde every student in submitted/ (or `submitted_dir`; `only` those named), `jobs` at a
    time, and record them.

    Each student is one grading unit, run by a worker process (or a Dask worker, `scheduler`); this
    process alone records, one student at a time, each after checking the gradebook against the
    release. Without `force`, a submission the gradebook already holds is skipped, and said so,
    unless it is newer (nbgrader's rule: a later timestamp.txt, as `nbgrader collect --update` writes
    for a resubmission). Prints the summary read back from the gradebook (the roster's students who
    handed nothing in included), writes `report` again from the gradebook (course.grading.classes.report),
    and returns a StudentResult per student graded now.
    """
    from course.grading.classes import coordinator

    root = Path(root).resolve()
    submitted = Path(submitted_dir).resolve() if submitted_dir else root / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{ASSIGNMENT}") if p.is_dir())
    missing = sorted(set(only) - set(students))
    if missing:
        raise NbgraderError(f"no submission of {ASSIGNMENT} from {', '.join(missing)} in {submitted}")
    students = [s for s in students if not only or s in only]
    if not students:
        raise NbgraderError(f"no submissions found: expected {submitted}/<student>/{ASSIGNMENT}/*.ipynb")
    if sandbox and not scheduler:  # a cluster's workers check their own sandbox
        ensure_available()
    alembic_on_path()
    quiet_gradebook()
    url = db_url(root)
    check_not_left_behind(root, url)
    if complete_creation(url):
        print("The gradebook was left half-made by an earlier run (nbgrader could not find `alembic`): "
              "its schema version is now recorded.")
    record_assignment(root, url)
    # The workers start now: their start-up (importing nbgrader) overlaps the checks below.
    workers = coordinator.DaskWorkers(scheduler) if scheduler else coordinator.LocalWorkers(jobs or os.cpu_count() or 1)
    try:
        check_gradebook(root)
        skipped = [] if force else _up_to_date(url, submitted, students)
        students = [s for s in students if s not in skipped]
        assignment = coordinator.definition(root, url, ASSIGNMENT)
        submissions = [coordinator.submission(submitted / s / ASSIGNMENT, s) for s in students]
        results = _grade_and_record(workers, assignment, submissions, sandbox, root, url, progress)
    finally:
        workers.close()
        private.close()  # what this process kept for grading (the assignment's scratch copy)
    return _summarize(root, url, submitted, results, skipped, root / report, whole_class=not only)


def _summarize(root, url, submitted, results, skipped, report, whole_class):
    """Print the summary (the students graded now; with the whole class, the roster's who handed nothing
    in), write the report from the gradebook, and return the lines of the students graded now."""
    # The whole class as the gradebook holds it now, with what this run alone knows: its seconds, and why a
    # student could not be graded.
    rows = {row.student: row for row in integrity.read_class(root, url, submitted)}
    for result in results:
        row = rows.setdefault(result.student, result)
        row.seconds, row.reasons = result.seconds, {**row.reasons, **result.reasons}
    graded = {r.student for r in results}
    shown = [row for student, row in sorted(rows.items()) if student in graded or
             (whole_class and row.reasons.get("*") == integrity.NO_SUBMISSION)]
    print("\n".join(integrity.report_lines(shown)))
    if skipped:
        print(f"{len(skipped)} student(s) already in the gradebook, with no newer submission, were not graded "
              f"again (`make autograde FORCE=1`, or --force, grades them again): {', '.join(skipped)}")
    integrity.write_report(report, rows.values())
    return [rows[r.student] for r in sorted(results, key=lambda r: r.student)]


def _up_to_date(url, submitted: Path, students: list[str]) -> list[str]:
    """The students whose submission the gradebook holds, and holds as new as the one in `submitted`:
    a submission whose timestamp.txt is later than the gradebook's is a resubmission, graded again
    (nbgrader's own rule); without both timestamps, the gradebook's is taken as current."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        held = {s.student.id: s.timestamp for s in gb.find_assignment(ASSIGNMENT).submissions}
    current = []
    for student in students:
        if student not in held:
            continue
        newer = integrity.handed_in_at(submitted, student)
        if newer is not None and held[student] is not None and newer > held[student]:
            continue
        current.append(student)
    return current


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
