"""What a check's failure shows (course.grading.findings), decided in the judge, where no learner
code runs: from the class and errno of what stopped the check (as the wire rebuilt it), from the
grader's refusals, and, for a grading error, from the course's own check.

A grading error is the course's own fault: its experiment did not come out as described (after
its retries), so the check stopped at an `expect` whose message its source begins with "GRADING
ERROR" (04, 07), or at one about a checkpoint case whose experiment itself went wrong (05,
course.checkpoint.verdict.experiment_failed); or the check could not run as written
(messages.course_made: a name grading does not define, an argument that cannot cross). What the
learner's code raised never counts as one, whatever its name or message.
"""

from __future__ import annotations

import ast
import types
from typing import Any

from course.checkpoint.evidence import CaseEvidence
from course.checkpoint.verdict import experiment_failed
from course.lessons.checks import CheckFailed, expect
from course.grading import wire
from course.grading.findings import GRADER, of_error
from course.grading.judge import messages
from course.grading.judge.broker import Refused

GRADING_ERROR = "GRADING ERROR"  # how a check's source begins the message of an experiment that went wrong


def of_check(error: BaseException, job: dict[str, Any]) -> list[str]:
    """The findings of a check that stopped with `error`."""
    found = of_error(error)
    if isinstance(error, wire.PeerGone):
        found.add("learner_lost")
    if isinstance(error, Refused):  # the grader could not do what the judge asked
        found.add(GRADER.get(error.ename, "grading_error"))
    if _course_experiment_failed(error, job["check"]) or messages.course_made(error, set(job.get("answers", {}))):
        found.add("grading_error")
    return sorted(found)


def _course_experiment_failed(error: BaseException, source: str) -> bool:
    if not isinstance(error, CheckFailed) or getattr(error, "remote", False):
        return False
    frames = messages._check_frames(error)
    if not frames or frames[-1].tb_next is None or frames[-1].tb_next.tb_frame.f_code is not expect.__code__:
        return False  # not an `expect` of the check's own that failed
    call = messages._call_at(source, messages._position(frames[-1]))
    return call is not None and bool(call.args) and (
        _begins_with(call.args[-1], GRADING_ERROR) or any(_failed_case(frames[-1], node) for node in ast.walk(call)))


def _begins_with(message: ast.expr, words: str) -> bool:
    """Whether the check's source writes `message` beginning with `words` (a literal, or an f-string's first part)."""
    first = message.values[0] if isinstance(message, ast.JoinedStr) and message.values else message
    return isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith(words)


def _failed_case(trace: types.TracebackType, node: ast.AST) -> bool:
    """Whether `node` names, where the check failed, a checkpoint case whose experiment went wrong."""
    if not isinstance(node, ast.Name):
        return False
    frame = trace.tb_frame
    value = frame.f_locals.get(node.id, frame.f_globals.get(node.id))
    return isinstance(value, CaseEvidence) and experiment_failed(value)
