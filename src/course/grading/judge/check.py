"""One graded cell, decided by the judge: the course's check, hidden part included, run against
proxies of the learner's names.

The namespace is the course's `setup` cells, with the judge's harnesses in place of those that
need another process. Each other name the check reads is asked of the learner process
(`__describe__`) and bound to what it is (judge.harness.bind).
"""

from __future__ import annotations

import builtins
import os
import tempfile
import types
from typing import Any

from course.grading.judge import findings, harness, messages
from course.grading.judge.broker import Broker, Refused


def free_names(code: types.CodeType) -> set[str]:
    """Every global name the check's code (and the functions it defines) may read."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= free_names(constant)
    return names


ENTER_HIDDEN = "__course_hidden_part__"


def marked(source: str, hidden_from: int | None) -> str:
    """The check with nbgrader's hidden-region marker (a comment line) replaced by a call that
    enters the hidden phase (course.grading.judge.phases), indented like the code after it; the
    line numbers stay."""
    if hidden_from is None:
        return source
    lines = source.split("\n")
    after = next((line for line in lines[hidden_from:] if line.strip() and not line.lstrip().startswith("#")), "")
    lines[hidden_from - 1] = after[: len(after) - len(after.lstrip())] + f"{ENTER_HIDDEN}()"
    return "\n".join(lines)


def enter_hidden(job: dict[str, Any], broker: Any) -> None:
    """Wait until the grader lets hidden parts run (no learner code that may still author shown
    text runs anywhere); from then on every failure of this check is told in the course's words."""
    if not job.get("entered_hidden"):
        broker.request({"op": "hidden"})
        job["entered_hidden"] = True


def run(job: dict[str, Any], broker: Any) -> dict[str, Any]:
    """The verdict for one graded cell: {"passed", "ename", "message"}."""
    try:  # a notebook with answers of its own: a learner process runs it (05 asks for its own)
        peer, report = broker.learner(job["what"]) if job["answers"] else (None, [])
    except Refused as refused:
        return {"passed": False, "ename": refused.ename, "message": str(refused),
                "findings": findings.of_check(refused, job)}
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for cell in job["setup"]:
        exec(compile(cell["source"], f"<course cell {cell['label']}>", "exec"), namespace)
    harness.substitute(namespace, harness.Context(job, peer, broker))
    namespace[ENTER_HIDDEN] = lambda: enter_hidden(job, broker)
    try:
        code = compile(marked(job["check"], job["hidden_from"]), messages.FILENAME, "exec")
    except SyntaxError:  # a marker the call cannot stand in for: the whole check runs as a hidden part
        code = compile(job["check"], messages.FILENAME, "exec")
        enter_hidden(job, broker)
    unwritten, kept_raise = messages.unwritten(job["answers"], report)
    wanted = (free_names(code) - set(namespace) - set(dir(builtins))) | set(job["answers"])
    try:
        if peer is not None:
            bound = harness.names(peer, wanted, unwritten, kept_raise)
            job["words"] = messages.atoms(list(bound.values()))  # authored before any hidden input existed
            namespace.update(bound)
        exec(code, namespace)
    except BaseException as error:  # the check's failure, or anything the learner's code raised
        return {**messages.verdict(error, job), "findings": findings.of_check(error, job)}
    return {"passed": True, "ename": "", "message": ""}


def main() -> None:
    """In a forked judge: the broker (the grader, who sends the job and takes the verdict) on fd 3.
    Ends the process."""
    import socket

    broker = Broker(socket.socket(fileno=3))
    job = broker.job
    job["private"] = os.environ.get("COURSE_PRIVATE") or tempfile.mkdtemp(prefix="judge-")
    os.environ["TMPDIR"] = tempfile.tempdir = job["scratch"]  # the check's databases: where the learner's reach
    try:
        verdict = run(job, broker)
    except BaseException as error:  # the judge itself failed: say so, never hang
        verdict = {"passed": False, "ename": "GraderError",
                   "message": f"the judge could not run this check: {type(error).__name__}: {str(error)[:300]}",
                   "findings": ["grading_error"]}
    broker.verdict(verdict)
    os._exit(0)
