"""What grading saw, as data: each finding decided by course code from an exception's class and
errno and from the grader's own observations, never from text a learner can write (a message,
printed output, or the name of a class: a learner names its classes as it likes).

Made where it is seen: in the learner process for the learner's own cells (`of_error`, and
`watch_writes` for a refused write the cell caught), by the judge for a check
(course.grading.judge.findings), by the grader for a check it stopped or that lost its judge
(`of_grader`). DecideByJudge stores them in each code cell's metadata (`KEY`); the report counts
them there. A learner process could forge its own cells' findings: that labels itself only.
"""

from __future__ import annotations

import builtins
import errno
import functools
import io
import os
import sys
from typing import Any

# finding -> how the report says it
SAID = {
    "timeouts": "ran past the time limit",
    "learner_lost": "ended the process running its notebook",
    "sandbox_denials": "tried to write outside its scratch folder",
    "output_limit": "printed without end (output cut off)",
    "process_limit": "hit the process limit",
    "memory_limit": "hit the memory limit",
    "disk_limit": "filled its scratch folder",
    "course_answer": "called the course's own answer",
    # A check's experiment that did not come out as described after its retries: the course's fault, so regrade.
    "grading_error": "met a grading error, not a mistake of theirs (grade it again)",
}
NAMES = tuple(SAID)
# Not a finding of the student's: the grader's own note on a check it decided without the sandbox (by instructor
# decision), which makes the report mark the whole student UNSANDBOXED from the autograded notebooks alone.
UNSANDBOXED = "unsandboxed"
KEY = "course_findings"  # a cell's metadata: the findings DecideByJudge stored, a sorted list of NAMES

ERRNOS = {errno.EROFS: "sandbox_denials", errno.EACCES: "sandbox_denials", errno.EPERM: "sandbox_denials",
          errno.EAGAIN: "process_limit", errno.ENOMEM: "memory_limit", errno.ENOSPC: "disk_limit",
          errno.EFBIG: "disk_limit", errno.EDQUOT: "disk_limit"}
# The exception names the grader's own code gives a check it decided itself (course.grading.judge.checks,
# course.grading.sandbox.learners): no learner code runs in the grader, so it alone names these.
GRADER = {"CheckTimeout": "timeouts", "GraderError": "grading_error", "LearnerFailed": "learner_lost"}
TRIPWIRES = "course.grading.learner.tripwires"


def of_error(error: BaseException) -> set[str]:
    """What an exception shows by its class and errno. The tripwire's class is the course's own
    (in the judge, the wire rebuilds a class by its module path): a learner's class of that name is not it."""
    found = set()
    if isinstance(error, MemoryError):
        found.add("memory_limit")
    code = getattr(error, "errno", None) if isinstance(error, OSError) else None
    if type(code) is int and code in ERRNOS:
        found.add(ERRNOS[code])
    tripwires = sys.modules.get(TRIPWIRES)  # loaded wherever a tripwire can be: the learner's sandbox, the judge
    if tripwires is not None and isinstance(error, tripwires.CourseAnswerUsed):
        found.add("course_answer")
    return found


def of_grader(ename: str) -> set[str]:
    """What a failure the grader (or the judge's own failure) named shows."""
    return {GRADER[ename]} if ename in GRADER else set()


def known(data: Any) -> list[str]:
    """The findings in `data` that are findings, sorted: anything else is dropped."""
    return sorted({name for name in data if name in NAMES}) if isinstance(data, (list, tuple, set)) else []


def mark(cell: Any, found: Any, unsandboxed: bool = False) -> None:
    """Store `found` in the cell's metadata (nothing when there is none), replacing what was there:
    a submitted notebook may hold anything, this key included. `unsandboxed`: the grader's note, which
    `found` (from a learner process, say) cannot carry."""
    names = known(found) + ([UNSANDBOXED] if unsandboxed else [])
    cell.setdefault("metadata", {}).pop(KEY, None)
    if names:
        cell["metadata"][KEY] = names


def of_cell(cell: Any) -> list[str]:
    """The findings DecideByJudge stored in a cell of an autograded notebook (its UNSANDBOXED note included)."""
    stored = cell.get("metadata", {}).get(KEY)
    return known(stored) + ([UNSANDBOXED] if isinstance(stored, list) and UNSANDBOXED in stored else [])


# --- writes the system refused, while a learner's cell ran ---------------------------------------

_seen: set[str] = set()
WRITING = frozenset("wax+")  # the modes of `open` that write
WRITING_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def watch_writes() -> None:
    """In a learner process: `open` and `os.open` note what a refused write shows (its errno), so a
    cell that catches the error still shows it (`seen`)."""
    writes = lambda mode: isinstance(mode, str) and not WRITING.isdisjoint(mode)  # noqa: E731
    builtins.open = io.open = _noting(io.open, "mode", "r", writes)
    os.open = _noting(os.open, "flags", 0, lambda flags: isinstance(flags, int) and bool(flags & WRITING_FLAGS))


def _noting(function: Any, name: str, default: Any, writes: Any) -> Any:
    """`function`, noting the findings of an OSError it raises when its second argument, `name`,
    asked to write."""
    @functools.wraps(function)
    def noted(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except OSError as error:
            if writes(kwargs.get(name, args[1] if len(args) > 1 else default)):
                _seen.update(of_error(error))
            raise
    return noted


def seen() -> set[str]:
    """What refused writes showed since the last call (which forgets them)."""
    found = set(_seen)
    _seen.clear()
    return found
