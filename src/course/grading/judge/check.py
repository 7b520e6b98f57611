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


def run(job: dict[str, Any], broker: Any) -> dict[str, Any]:
    """The verdict for one graded cell: {"passed", "ename", "message", "findings"}, and for a failure
    whether its visible part should tell it again ("retell", messages.verdict)."""
    try:  # a notebook with answers of its own: a learner process runs it (05 asks for its own)
        peer, report = broker.learner(job["what"]) if job["answers"] else (None, [])
    except Refused as refused:
        return {"passed": False, "ename": refused.ename, "message": str(refused),
                "findings": findings.of_check(refused, job)}
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    with harness.definitions_of(peer):  # a learner's definition a setup cell binds is the learner process's
        for cell in job["setup"]:
            exec(compile(cell["source"], f"<course cell {cell['label']}>", "exec"), namespace)
    harness.substitute(namespace, harness.Context(job, peer, broker))
    code = compile(job["check"], messages.FILENAME, "exec")
    unwritten, kept_raise = messages.unwritten(job["answers"], report)
    wanted = (free_names(code) - set(namespace) - set(dir(builtins))) | set(job["answers"])
    try:
        if peer is not None:
            namespace.update(harness.names(peer, wanted, unwritten, kept_raise))
        broker.request({"op": "start"})  # the check's phase begins here, before its first statement
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
