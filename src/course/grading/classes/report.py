"""One line per student that an instructor can act on, read from the autograded notebooks.

What grading observed, counted per student: time limits, a learner process that died, writes
the sandbox refused, the output, process, memory and disk bounds, and answers that called the
course's own implementation (its tripwire). The same facts go to the console and to a CSV.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import nbformat

# finding -> (what in an output shows it, how the report says it)
SIGNS = {
    "timeouts": (("CellTimeoutError", "CheckTimeout", "past the time limit"), "ran past the time limit"),
    "learner_lost": (("LearnerFailed", "LearnerProcessEnded"), "ended the process running its notebook"),
    "sandbox_denials": (("Read-only file system", "Permission denied"), "tried to write outside its scratch folder"),
    "output_limit": (("[output limit reached",), "printed without end (output cut off)"),
    "process_limit": (("Resource temporarily unavailable", "can't start new thread", "BlockingIOError"),
                      "hit the process limit"),
    "memory_limit": (("MemoryError", "Cannot allocate memory"), "hit the memory limit"),
    "disk_limit": (("No space left on device", "File too large"), "filled its scratch folder"),
    "course_answer": (("CourseAnswerUsed", "the course's own `"), "called the course's own answer"),
    # A check's experiment that did not come out as described after its retries: the course's fault, so regrade.
    "grading_error": (("GRADING ERROR", "not your code: the experiment itself went wrong"),
                      "met a grading error, not a mistake of theirs (grade it again)"),
}
COLUMNS = ["student", "score", "max_score", "by_hand", "seconds", "sandboxed", *SIGNS, "reason"]


def findings(folder: Path) -> dict[str, int]:
    """How many cells of the student's autograded notebooks show each sign."""
    counts = Counter(dict.fromkeys(SIGNS, 0))
    for path in sorted(Path(folder).glob("*.ipynb")):
        counts.update(signs_in(path))
    return dict(counts)


def signs_in(path: Path) -> dict[str, int]:
    """How many cells of one autograded notebook show each sign."""
    counts = dict.fromkeys(SIGNS, 0)
    for cell in nbformat.read(path, as_version=4).cells:
        text = " ".join(_output_text(o) for o in cell.get("outputs", []))
        for name, (signs, _) in SIGNS.items():
            counts[name] += any(sign in text for sign in signs)
    return counts


UNFINISHED = {"timeouts": "a cell ran past the time limit and was interrupted",
              "learner_lost": "the process running the notebook ended before its cells had all run"}


def unfinished(path: Path) -> str | None:
    """Why the learner's notebook did not run to its end at grading, as its autograded notebook shows, or None."""
    found = signs_in(path)
    return next((why for name, why in UNFINISHED.items() if found[name]), None)


def _output_text(output) -> str:
    if output.get("output_type") == "error":
        return f"{output.get('ename', '')}: {output.get('evalue', '')}"
    if output.get("output_type") == "stream":
        return str(output.get("text", ""))[-2000:]
    return ""


def reason(result) -> str:
    """The student's situation in one sentence."""
    said = [f"{SIGNS[name][1]} ({count} cell{'s' if count != 1 else ''})"
            for name, count in result.findings.items() if count]
    said += sorted({why for why in result.reasons.values() if "time limit" not in why and "process running" not in why})
    sentence = "; ".join(said) if said else "graded normally"
    if not result.sandboxed:
        sentence = "UNSANDBOXED (graded without isolation, by instructor decision): " + sentence
    return sentence[0].upper() + sentence[1:] + "."


def report_lines(results) -> list[str]:
    width = max([len("student"), *(len(r.student) for r in results)])
    lines = [f"{'student':<{width}}  {'score':>9}  {'secs':>6}  what grading saw"]
    for r in results:
        waiting = f" {r.by_hand:g} points to grade by hand." if r.by_hand else ""
        lines.append(f"{r.student:<{width}}  {r.score:>4g}/{r.max_score:<4g}  {r.seconds:>6}  {reason(r)}{waiting}")
    return lines


def write_report(path: Path, results) -> Path:
    """Merge `results` into the CSV at `path`: every student ever graded, the latest line each."""
    rows = {}
    if Path(path).is_file():
        with open(path, newline="") as handle:
            rows = {row["student"]: row for row in csv.DictReader(handle) if row.get("student")}
    for r in results:
        rows[r.student] = {"student": r.student, "score": r.score, "max_score": r.max_score, "by_hand": r.by_hand,
                           "seconds": r.seconds, "sandboxed": r.sandboxed, **r.findings, "reason": reason(r)}
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows[student] for student in sorted(rows))
    return path
