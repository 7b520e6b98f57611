"""One line per student that an instructor can act on, rebuilt from the gradebook and the autograded
notebooks, so it belongs to the gradebook it was read from and no grading path can leave it behind.

From the gradebook: the score, what waits for a hand grade (what formgrader flags), how late the
submission came and its penalty (nbgrader's duedate and LateSubmissionPlugin), the checks that did
not earn their points, and the roster's students who handed nothing in. From each student's
autograded notebooks, what grading observed, counted per student: time limits, a learner process
that died, writes the sandbox refused, the output, process, memory and disk bounds, answers that
called the course's own implementation (its tripwire), checks that met a grading error. Each is a
finding that course code decided from classes, errnos and the grader's own observations, stored in
each code cell's metadata (course.grading.findings); no text of an output is read. The same facts
go to the console and to grading-report.csv, which `course autograde`, plain `nbgrader autograde`
(nbgrader's post_convert_hook, see course.grading.nbgrader.config) and `course grades` write.
"""

from __future__ import annotations

import csv
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course.grading import findings as found
from course.grading.nbgrader.commands import ASSIGNMENT, export_grades
from course.grading.printable import printable

SAID = found.SAID
COLUMNS = ["student", "score", "max_score", "by_hand", "late", "penalty", "sandboxed", *SAID, "failed", "reason"]
COUNTED = (*found.NAMES, found.UNSANDBOXED)
REPORT = "grading-report.csv"
NO_SUBMISSION = "no submission"
NOT_GRADED = "handed in, not graded yet"
NEWER = "a newer submission is not graded yet"


@dataclass
class StudentResult:
    """One student's line: as the gradebook holds it, and what grading saw."""

    student: str
    score: float
    max_score: float
    # why a part (or "*": the whole submission) scored 0 for a reason other than the answer: "notebook/grade_id"
    # of a part whose notebook did not run to the end (time limit, a learner process that ended), mapped to why
    reasons: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0  # how long this grading took (this run's summary only)
    findings: dict[str, int] = field(default_factory=dict)  # what the grader saw (`findings`)
    sandboxed: bool = True
    by_hand: float = 0.0  # points formgrader flags as needing manual grading (new, or graded before a regrade)
    late: float = 0.0  # seconds after the due date (nbgrader's total_seconds_late)
    penalty: float = 0.0  # points taken for it (nbgrader's LateSubmissionPlugin)
    failed: list[str] = field(default_factory=list)  # "notebook/grade_id" of each check short of its points


def findings(folder: Path) -> dict[str, int]:
    """How many cells of the student's autograded notebooks show each finding (nbgrader writes there
    the release's notebooks only: one a submission adds is not carried)."""
    counts = Counter(dict.fromkeys(COUNTED, 0))
    for path in sorted(Path(folder).glob("*.ipynb")):
        counts.update(findings_in(path))
    return dict(counts)


def findings_in(path: Path) -> dict[str, int]:
    """How many cells of one autograded notebook show each finding."""
    counts = dict.fromkeys(COUNTED, 0)
    for cell in nbformat.read(path, as_version=4).cells:
        for name in found.of_cell(cell):
            counts[name] += 1
    return counts


UNFINISHED = {"timeouts": "a cell ran past the time limit and was interrupted",
              "learner_lost": "the process running the notebook ended before its cells had all run"}


def unfinished(path: Path) -> str | None:
    """Why the learner's notebook did not run to its end at grading, as its autograded notebook shows, or None."""
    counts = findings_in(path)
    return next((why for name, why in UNFINISHED.items() if counts[name]), None)


def reason(result) -> str:
    """The student's situation in one sentence (printable: a reason may quote what nbgrader met)."""
    said = [f"{SAID[name]} ({count} cell{'s' if count != 1 else ''})"
            for name, count in result.findings.items() if count and name in SAID]
    said += sorted({why for why in result.reasons.values() if why not in UNFINISHED.values()})  # those: counted above
    sentence = "; ".join(said) if said else "graded normally"
    if not result.sandboxed:
        sentence = "UNSANDBOXED (graded without isolation, by instructor decision): " + sentence
    sentence = sentence[0].upper() + sentence[1:] + "."
    if result.late > 0:
        sentence += f" Late by {_duration(result.late)}" + (f", {result.penalty:g} points taken." if result.penalty
                                                             else " (no penalty).")
    return printable(sentence)


def _duration(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    days, hours, minutes = minutes // 1440, minutes // 60 % 24, minutes % 60
    parts = [f"{days} d"] * bool(days) + [f"{hours} h"] * bool(hours) + [f"{minutes} min"] * bool(minutes)
    return " ".join(parts)


def report_lines(results) -> list[str]:
    width = max([len("student"), *(len(printable(r.student)) for r in results)])
    lines = [f"{'student':<{width}}  {'score':>9}  {'secs':>6}  what grading saw"]
    for r in results:
        failed = f" {len(r.failed)} check{'s' if len(r.failed) != 1 else ''} short of full points." if r.failed else ""
        waiting = f" {r.by_hand:g} points to grade by hand." if r.by_hand else ""
        student = printable(r.student)
        score = f"{r.score:>4g}/{r.max_score:<4g}"
        lines.append(f"{student:<{width}}  {score}  {r.seconds:>6}  {reason(r)}{failed}{waiting}")
    return lines


def read_class(root: Path, url: str, submitted: Path | None = None, carried: dict | None = None) -> list[StudentResult]:
    """Every student the gradebook holds (the roster's included), and everyone handed in to `submitted`,
    as the gradebook holds them now; what grading saw from their autograded notebooks, or from
    `carried` ({student: findings}) for students whose notebooks were not graded since it was read."""
    from nbgrader.api import Gradebook

    root = Path(root)
    submitted = submitted or root / "submitted"
    handed_in = {p.parent.name for p in submitted.glob(f"*/{ASSIGNMENT}") if p.is_dir()}
    rows = []
    with Gradebook(url) as gb:
        assignment = gb.find_assignment(ASSIGNMENT)
        held = {s.student.id: s for s in assignment.submissions}
        for student in sorted(held.keys() | {s.id for s in gb.students} | handed_in):
            submission = held.get(student)
            row = StudentResult(student, 0.0, assignment.max_score)
            if submission is None:
                row.reasons["*"] = NOT_GRADED if student in handed_in else NO_SUBMISSION
                rows.append(row)
                continue
            row.score, row.max_score = submission.score, submission.max_score
            row.late, row.penalty = submission.total_seconds_late, submission.late_submission_penalty
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    # What formgrader flags: an answer never graded by hand, or one graded by hand before
                    # this grading (nbgrader asks for it to be looked at again: the answer may have changed).
                    row.by_hand += grade.max_score if grade.needs_manual_grade else 0.0
                    if grade.cell_type == "code" and grade.auto_score is not None and grade.score < grade.max_score:
                        row.failed.append(f"{notebook.name}/{grade.name}")
            autograded = root / "autograded" / student / ASSIGNMENT
            known = (carried or {}).get(student)
            row.findings = known if known is not None else findings(autograded)
            row.sandboxed = not row.findings.get(found.UNSANDBOXED)
            newer = handed_in_at(submitted, student)
            if newer is not None and submission.timestamp is not None and newer > submission.timestamp:
                row.reasons["*"] = NEWER
            rows.append(row)
    return rows


def handed_in_at(submitted: Path, student: str):
    """submitted/<student>/ch12/timestamp.txt (what nbgrader's collect writes), as nbgrader reads it.
    A submission could have named it: each step is opened without following a link, and only a
    regular file is read, 200 bytes at most. None when it is missing, anything else, or no time."""
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


def failed_checks(row: StudentResult) -> str:
    """The checks short of their points, as one CSV field."""
    return " ".join(printable(part) for part in row.failed)


def export(path, root: Path) -> Path:
    """`course grades`: nbgrader's export (its timestamp, duedate and late penalty included), with each
    student's points still to grade by hand and checks short of their points; grading-report.csv is
    written again from the same gradebook (hand grades given in formgrader since change both)."""
    path = export_grades(path, root=root)
    lines = {row.student: row for row in refresh(Path(root))}
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        fields, rows = reader.fieldnames or [], list(reader)
    for row in rows:
        line = lines.get(row.get("student_id", ""))
        row["by_hand"] = line.by_hand if line else 0.0
        row["failed"] = failed_checks(line) if line else ""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*fields, "by_hand", "failed"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_report(path: Path, rows) -> Path:
    """The CSV at `path`, one line per student in `rows` (the whole class, as `read_class` gives it)."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for r in sorted(rows, key=lambda r: r.student):
            writer.writerow({"student": printable(r.student), "score": r.score, "max_score": r.max_score,
                             "by_hand": r.by_hand, "late": round(r.late), "penalty": r.penalty,
                             "sandboxed": r.sandboxed, **{name: r.findings.get(name, 0) for name in SAID},
                             "failed": failed_checks(r), "reason": reason(r)})
    return path


def refresh(root: Path, only: list[str] | None = None) -> list[StudentResult]:
    """Write grading-report.csv in the course folder again from the gradebook in use. `only`: the
    students just graded, whose autograded notebooks are read again (the others' findings are carried
    from the report, whose notebooks have not changed): nbgrader's hook calls it after each student."""
    from course.grading.nbgrader.gradebook import db_url

    root = Path(root)
    carried = None
    if only is not None and (root / REPORT).is_file():
        with open(root / REPORT, newline="") as handle:
            carried = {row["student"]: {name: int(row.get(name) or 0) for name in SAID}
                       | {found.UNSANDBOXED: int(row.get("sandboxed") == "False")}
                       for row in csv.DictReader(handle) if row.get("student") and row["student"] not in only}
    rows = read_class(root, db_url(root), carried=carried)
    write_report(root / REPORT, rows)
    return rows
