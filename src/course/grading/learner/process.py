"""The learner process: run a learner's notebook as written, then serve the judge's calls.

    python -P -m course.grading.learner.process NOTEBOOK   (in a learner sandbox; wire on fd $COURSE_WIRE_FD)

NOTEBOOK is a notebook (the release's setup cells, then the learner's cells) or `implementation`
(the checkpoint's five functions from 01, 02 and 04). It first reports how each cell ended, then answers
calls by name (`__describe__`: what names are; `__rebind__`: a name bound to a judge's callback)
until the wire closes. For a check that forces a race, before all that it hands the listener of its
lock calls (course.grading.lockcalls) to the grader, who answers them until the judge takes it.
Nothing it says is believed: the judge decides from data.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import socket
import sys
from typing import Any

from course.lab import learner
from course.lessons.checks import assign, is_stub, looked_up
from course.grading import findings, lockcalls, wire
from course.grading.sandbox import reaper

DESCRIBE, REBIND = "__describe__", "__rebind__"
REPORT = wire.LIMIT // 2  # bytes of the cells' report, which crosses in one message


def describe(namespace: dict[str, Any], peer: wire.Peer, names: list[str]) -> dict[str, Any]:
    """What each name is, as the judge needs to know it: a function (by handle), nbgrader's stub,
    a dataclass (its declaration), a value (by value), something else, or nothing."""
    found = {}
    for name in names:
        try:
            value = looked_up(namespace, name)  # `module.attribute` too: what `rebound` may rebind
        except Exception:  # noqa: BLE001 (missing, or an attribute look-up the learner's object refused)
            found[name] = {"kind": "missing"}
            continue
        if is_stub(value):
            found[name] = {"kind": "stub"}
        elif isinstance(value, type) and dataclasses.is_dataclass(value):
            found[name] = {"kind": "dataclass", "cls": wire.class_ref(value), "schema": wire.schema(value)}
        elif isinstance(value, type):
            course = str(getattr(value, "__module__", "")).split(".")[0] in wire.COURSE_MODULES
            found[name] = {"kind": "other", "type": f"the course's own `{value.__name__}` (a tripwire while you are "
                           "graded), not yours" if course else "a class that is not a dataclass"}
        elif callable(value):
            found[name] = {"kind": "function", "fn": peer.export(value)}
        else:
            try:
                found[name] = {"kind": "value", "value": wire.encode(value)}
            except (wire.NotPlainData, RecursionError):
                found[name] = {"kind": "other", "type": type(value).__name__[:80]}
    return found


def load(what: str) -> tuple[dict[str, Any], list[learner.CellRun]]:
    """The names to serve and how each cell ended."""
    seconds = float(os.environ.get("COURSE_CELL_SECONDS", learner.CELL_SECONDS))
    if what == "implementation":
        try:
            loaded = learner.load_implementation(".", seconds=seconds)
        except learner.LearnerCodeError as error:
            return {}, [learner.CellRun("implementation", None, ename="LearnerCodeError", evalue=str(error))]
        served = {name: getattr(loaded.ownership, name) for name in learner.FUNCTIONS}
        claims = loaded.modules[0].__dict__.get("Claim")  # 01_claims: the judge rebuilds the old holder's claim
        return {**served, **({"Claim": claims} if claims is not None else {})}, loaded.runs
    notebook = what if what.endswith(".ipynb") else f"{what}.ipynb"
    module = learner.fresh_module(notebook)
    try:
        cells = learner.notebook_cells(".", notebook)
    except learner.LearnerCodeError as error:
        return {}, [learner.CellRun("notebook", None, ename="LearnerCodeError", evalue=str(error))]
    return module.__dict__, learner.run_cells(cells, module, seconds)


def fitted(report: list[dict[str, Any]], size: int = REPORT) -> list[dict[str, Any]]:
    """The cells' report within `size` bytes of JSON: when it is longer (many cells, each printing up
    to its limit), each cell's output, message and traceback are cut to an equal share. A report
    too long to send would leave the notebook unreported, and every check failed."""
    if len(json.dumps(report)) <= size:
        return report
    share = size // (3 * 12 * max(1, len(report)))  # characters; JSON may spend 12 bytes on one (an escaped pair)
    return [{**run, "output": run["output"][:share], "evalue": run["evalue"][:share],
             "traceback": ["".join(run["traceback"])[-share:]]} for run in report]


class _Discard(io.TextIOBase):
    def write(self, text: str) -> int:
        return len(text)


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(os.environ["COURSE_WIRE_FD"]))
    if os.environ.get(lockcalls.VARIABLE):  # a check that forces a race: before any learner code, its
        listener = lockcalls.install()  # lock calls are answered outside it
        socket.send_fds(sock, [lockcalls.LISTENER], [listener])
        os.close(listener)
    reaper.become_subreaper()  # what the cells start re-parents here
    findings.watch_writes()  # a write the system refused shows in its cell's report, even when caught
    namespace, runs = load(argv[0])
    reaper.kill_all_descendants()  # before serving: what the cells left running serves no check
    sys.stdout = sys.stderr = _Discard()  # prints while serving reach nobody
    served: dict[str, Any] = {}
    peer = wire.Peer(sock, resolve_name=lambda name: served[name] if name in served else namespace[name],
                     sends_tracers=True)
    served[DESCRIBE] = lambda wanted: describe(namespace, peer, list(wanted))
    served[REBIND] = lambda name, value: assign(namespace, str(name), value)  # the judge's `rebound`
    peer.send({"ready": fitted([run.to_json() for run in runs]), "pid": os.getpid()})
    peer.gone.wait()
    os._exit(0)  # no learner atexit handler runs; the sandbox ends with us


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
