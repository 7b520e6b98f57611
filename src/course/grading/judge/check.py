"""One graded cell, decided by the judge: the course's check, hidden part included, run against
proxies of the learner's names.

The namespace is the course's `setup` cells, with the judge's harnesses in place of those that
need another process (judge.harness). Each other name the check reads is asked of the learner
process (`__describe__`) and bound to what it is: a function to a `wire.Remote`, a dataclass to
a mirror, a value to its plain data, an answer that did not run to a placeholder saying why.
"""

from __future__ import annotations

import builtins
import json
import os
import tempfile
import types
from typing import Any

from course import checks
from course.grading import wire
from course.grading.judge import harness, messages


class Unusable:
    """A learner name the check cannot use (a cell that did not run, an object that is no data):
    any use says why, in the course's words."""

    def __init__(self, why: str) -> None:
        self.course_unwritten = why

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise checks.CheckFailed(self.course_unwritten)

    __call__ = __getattr__ = __getitem__ = __iter__ = __len__ = __bool__ = __eq__ = __contains__ = _refuse
    __hash__ = None  # type: ignore[assignment]


def free_names(code: types.CodeType) -> set[str]:
    """Every global name the check's code (and the functions it defines) may read."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= free_names(constant)
    return names


def _stub(name: str) -> Any:
    """nbgrader's stub, here: `require_written` and the checks see it as they would in Lab."""
    namespace: dict[str, Any] = {}
    exec(compile(f"def {name}(*args, **kwargs):\n    raise NotImplementedError()\n", "<stub>", "exec"), namespace)
    return namespace[name]


def bind(wanted: set[str], described: dict[str, Any], peer: wire.Peer, unwritten: dict[str, str]) -> dict[str, Any]:
    """What to bind for each learner name the judge asked about, from the learner process's
    description of it. Only those: a description is the learner's word, and a name the judge did
    not ask for (`expect`, say) would take the course's place."""
    bound: dict[str, Any] = {}
    for name, what in described.items():
        if name not in wanted or not isinstance(what, dict):
            continue
        kind = what.get("kind")
        if name in unwritten and kind in ("missing", "stub", None):
            bound[name] = Unusable(unwritten[name])
        elif kind == "function":
            bound[name] = peer.resolve(what["fn"])
            bound[name].__name__ = name
        elif kind == "stub":
            bound[name] = _stub(name)
        elif kind == "dataclass":
            bound[name] = wire.mirror(what["cls"], what["schema"])
        elif kind == "value":
            bound[name] = wire.decode(what["value"])
        elif kind == "other":
            bound[name] = Unusable(f"`{name}` is {str(what.get('type'))[:120]}: the check takes plain data (str, int, "
                                   "float, bool, None, lists, tuples, dicts, sets), a dataclass or a function")
    return bound


def run(job: dict[str, Any], peer: wire.Peer, broker: Any) -> dict[str, Any]:
    """The verdict for one graded cell: {"passed", "ename", "message"}."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for cell in job["setup"]:
        exec(compile(cell["source"], f"<course cell {cell['label']}>", "exec"), namespace)
    harness.substitute(namespace, harness.Context(job, peer, broker))
    code = compile(job["check"], messages.FILENAME, "exec")
    unwritten = messages.unwritten(job["answers"], job["report"])
    wanted = (free_names(code) - set(namespace) - set(dir(builtins))) | set(job["answers"])
    try:
        if job["answers"]:  # a notebook with answers of its own: its learner process has them
            described = peer.call({"name": "__describe__"}, (sorted(wanted),))
            namespace.update(bind(wanted, dict(described) if isinstance(described, dict) else {}, peer, unwritten))
        exec(code, namespace)
    except BaseException as error:  # the check's failure, or anything the learner's code raised
        return messages.verdict(error, job)
    return {"passed": True, "ename": "", "message": ""}


def main() -> None:
    """In a forked judge: the job on fd 0, the verdict to write on fd 1, the learner's wire on fd 3,
    the broker (the grader) on fd 4. Ends the process."""
    verdict_fd = os.dup(1)
    job = json.loads(os.fdopen(0, "rb").read())
    job["private"] = os.environ.get("COURSE_PRIVATE") or tempfile.mkdtemp(prefix="judge-")
    os.environ["TMPDIR"] = tempfile.tempdir = job["scratch"]  # the check's databases: where the learner's reach
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        import socket

        from course.grading.judge.broker import Broker

        peer = wire.Peer(socket.socket(fileno=3))
        verdict = run(job, peer, Broker(socket.socket(fileno=4), job))
    except BaseException as error:  # the judge itself failed: say so, never hang
        verdict = {"passed": False, "ename": "GraderError",
                   "message": f"the judge could not run this check: {type(error).__name__}: {str(error)[:300]}"}
    with open(verdict_fd, "w") as out:
        out.write(json.dumps(verdict))
    os._exit(0)
