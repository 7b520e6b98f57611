"""One line per student that an instructor can act on, read from the autograded notebooks.

What grading observed, counted per student: time limits, a learner process that died, writes
the sandbox refused, the output, process, memory and disk bounds, answers that called the
course's own implementation (its tripwire), checks that met a grading error. Each is a finding
that course code decided from classes, errnos and the grader's own observations, stored in each
code cell's metadata (course.grading.findings); no text of an output is read. The same facts go
to the console and to a CSV.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import nbformat

from course.grading import findings as found
from course.grading.printable import printable

SAID = found.SAID
COLUMNS = ["student", "score", "max_score", "by_hand", "seconds", "sandboxed", *SAID, "reason"]


def findings(folder: Path) -> dict[str, int]:
    """How many cells of the student's autograded notebooks show each finding."""
    counts = Counter(dict.fromkeys(SAID, 0))
    for path in sorted(Path(folder).glob("*.ipynb")):
        counts.update(findings_in(path))
    return dict(counts)


def findings_in(path: Path) -> dict[str, int]:
    """How many cells of one autograded notebook show each finding."""
    counts = dict.fromkeys(SAID, 0)
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
    return printable(sentence[0].upper() + sentence[1:] + ".")


def report_lines(results) -> list[str]:
    width = max([len("student"), *(len(printable(r.student)) for r in results)])
    lines = [f"{'student':<{width}}  {'score':>9}  {'secs':>6}  what grading saw"]
    for r in results:
        waiting = f" {r.by_hand:g} points to grade by hand." if r.by_hand else ""
        student = printable(r.student)
        lines.append(f"{student:<{width}}  {r.score:>4g}/{r.max_score:<4g}  {r.seconds:>6}  {reason(r)}{waiting}")
    return lines


def write_report(path: Path, results, current=()) -> Path:
    """Merge `results` into the CSV at `path`: every student ever graded, the latest line each. A
    student in `current` (not graded now) keeps what their grading saw, with the score and the points
    to grade by hand as the gradebook holds them now (formgrader may have changed both since)."""
    rows = {}
    if Path(path).is_file():
        with open(path, newline="") as handle:
            rows = {row["student"]: row for row in csv.DictReader(handle) if row.get("student")}
    for r in results:
        student = printable(r.student)
        rows[student] = {"student": student, "score": r.score, "max_score": r.max_score, "by_hand": r.by_hand,
                         "seconds": r.seconds, "sandboxed": r.sandboxed, **r.findings, "reason": reason(r)}
    for r in current:
        student = printable(r.student)
        if student in rows:
            rows[student].update(score=r.score, max_score=r.max_score, by_hand=r.by_hand)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows[student] for student in sorted(rows))
    return path
