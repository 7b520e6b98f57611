"""`course autograde`: every student of a class graded, `jobs` at a time, and recorded.

Each student is one grading unit (course.grading.classes.unit) in a worker process or on a Dask
worker; the coordinator records each outcome as it arrives (course.grading.classes.coordinator).
"""

import os
import stat
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
    by_hand: float = 0.0  # points formgrader flags as needing manual grading (new, or graded before a regrade)


def autograde(submitted_dir=None, force=False, root=".", sandbox=True, report="grading-report.csv", jobs=None,
              scheduler=None, progress=True, only=()):
    """Autograde every student in submitted/ (or `submitted_dir`; `only` those named), `jobs` at a
    time, and record them.

    Each student is one grading unit, run by a worker process (or a Dask worker, `scheduler`); this
    process alone records, one student at a time, each after checking the gradebook against the
    release. Without `force`, a submission the gradebook already holds is skipped, and said so,
    unless it is newer (nbgrader's rule: a later timestamp.txt, as `nbgrader collect --update` writes
    for a resubmission). Prints the summary read back from the gradebook, merges it into `report`
    (every student ever graded, the latest line each), and returns a StudentResult per student graded now.
    """
    from course.grading.classes import coordinator

    root = Path(root).resolve()
    submitted = Path(submitted_dir).resolve() if submitted_dir else root / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{ASSIGNMENT}") if p.is_dir())
    handed_in = set(students)
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
    results = _read_back(url, sorted(results, key=lambda r: r.student))
    # The roster's students who handed nothing in: listed with 0, as nbgrader's export lists them.
    absent = [] if only else _read_back(url, [StudentResult(student, 0.0, 0.0, {"*": NO_SUBMISSION})
                                              for student in _absent(url, handed_in)])
    print("\n".join(integrity.report_lines(sorted(results + absent, key=lambda r: r.student))))
    if skipped:
        print(f"{len(skipped)} student(s) already in the gradebook, with no newer submission, were not graded "
              f"again (`make autograde FORCE=1`, or --force, grades them again): {', '.join(skipped)}")
    current = _read_back(url, [StudentResult(student, 0.0, 0.0) for student in skipped])
    integrity.write_report(root / report, results + absent, current)
    return results


NO_SUBMISSION = "no submission"


def _absent(url, handed_in: set[str]) -> list[str]:
    """The students the gradebook holds (the roster: `nbgrader db student add` or `import`) with no
    submission of the assignment, neither recorded nor in submitted/."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gb:
        recorded = {s.student.id for s in gb.find_assignment(ASSIGNMENT).submissions}
        return sorted({student.id for student in gb.students} - recorded - handed_in)


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
        newer = _timestamp(submitted, student)
        if newer is not None and held[student] is not None and newer > held[student]:
            continue
        current.append(student)
    return current


def _timestamp(submitted: Path, student: str):
    """submitted/<student>/ch12/timestamp.txt (what nbgrader's collect writes), as nbgrader reads it.
    A submission could have named it: each step is opened without following a link, and only a
    regular file is read, 200 bytes at most. None when it is missing, anything else, or no time (the
    gradebook's is then taken as current)."""
    from nbgrader.utils import parse_utc

    opened = []
    try:
        where = os.open(submitted, os.O_RDONLY | os.O_DIRECTORY)
        opened.append(where)
        for step in (student, ASSIGNMENT):
            where = os.open(step, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=where)
            opened.append(where)
        stamp = os.open("timestamp.txt", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=where)
        opened.append(stamp)
        if not stat.S_ISREG(os.fstat(stamp).st_mode):
            return None
        text = os.read(stamp, 200).decode(errors="replace").strip()
    except OSError:
        return None
    finally:
        for descriptor in opened:
            os.close(descriptor)
    try:
        return parse_utc(text)
    except (ValueError, OverflowError, TypeError):
        return None


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
            # What formgrader flags: an answer never graded by hand, or one graded by hand before this
            # grading (nbgrader asks for it to be looked at again: the answer may have changed).
            result.by_hand = float(sum(g.max_score for nb in submission.notebooks for g in nb.grades
                                       if g.needs_manual_grade))
    return results
