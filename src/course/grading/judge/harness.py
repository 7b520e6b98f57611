"""The learner's names as the judge binds them, and the course's harnesses that need a process
other than the judge, as the judge runs them.

`bind`: a function to a `wire.Remote`, a dataclass to a mirror, a value to its plain data, an
answer that did not run to a placeholder saying why.

`race_claims`, `race_admissions`, `between_check_and_write`: forced at the learner process's lock calls
(judge.schedule), never at a statement trace it reports; the rival of the first two is the same name in a
second learner process. `rebound`: the name is
rebound in the learner process too, so the judge sees every call the learner's own code makes.
`run_checkpoint`, `run_matrix`: the fences, the runtime's or the five functions of a learner process that
ran 01, 02 and 04; the worker pass, the runtime's or 05's, run by workers in learner sandboxes; ledgers in
the judge's folder; stale writes made by the judge itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from pathlib import Path
from typing import Any

from course.lessons import checks
from course.grading import wire


class Unusable:
    """A learner name the check cannot use (a cell that did not run, an object that is no data):
    any use says why, in the course's words."""

    def __init__(self, why: str) -> None:
        self.course_unwritten = why

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise checks.CheckFailed(self.course_unwritten)

    __call__ = __getattr__ = __getitem__ = __iter__ = __len__ = __bool__ = __eq__ = __contains__ = _refuse
    __hash__ = None  # type: ignore[assignment]


def _stub(name: str) -> Any:
    """nbgrader's stub, here: `require_written` and the checks see it as they would in Lab."""
    namespace: dict[str, Any] = {}
    exec(compile(f"def {name}(*args, **kwargs):\n    raise NotImplementedError()\n", "<stub>", "exec"), namespace)
    return namespace[name]


def bind(wanted: set[str], described: dict[str, Any], peer: wire.Peer, unwritten: dict[str, str],
         kept_raise: dict[str, str] | None = None) -> dict[str, Any]:
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
        elif kind == "value" and name in (kept_raise or {}):
            bound[name] = Unusable(kept_raise[name])
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


def names(peer: wire.Peer, wanted: set[str], unwritten: dict[str, str] | None = None,
          kept_raise: dict[str, str] | None = None) -> dict[str, Any]:
    """`wanted`, asked of the learner process at `peer` (`__describe__`) and bound."""
    described = peer.call({"name": "__describe__"}, (sorted(wanted),))
    return bind(wanted, described if isinstance(described, dict) else {}, peer, unwritten or {}, kept_raise)


@contextlib.contextmanager
def definitions_of(peer: wire.Peer | None) -> Any:
    """While the setup cells run in the judge: a second part's setup (01b, 04b) binds the learner's
    saved definitions of its first part with `saved_definitions`. The learner process ran the same
    setup, so here they are its names, bound as any learner name is; no learner code loads here."""
    from course.lab import learner

    def asked(notebook: str, *wanted: str, folder: Any = ".") -> tuple[Any, ...]:
        found = names(peer, set(wanted)) if peer is not None else {}
        return tuple(found.get(name, Unusable(f"`{name}` (from your {notebook}) is not defined in the process "
                                              "running your notebook")) for name in wanted)

    original, learner.saved_definitions = learner.saved_definitions, asked
    try:
        yield
    finally:
        learner.saved_definitions = original


@dataclasses.dataclass
class Context:
    job: dict[str, Any]
    peer: wire.Peer
    broker: Any

    def again(self, function: Any) -> Any:
        """`function` (a learner function of this check's process) in a second learner process."""
        if not isinstance(function, wire.Remote):
            return None
        name = function.__name__
        found = names(self.broker.learner(self.job["what"])[0], {name}).get(name)
        if not isinstance(found, wire.Remote):
            raise checks.CheckFailed(f"`{name}` is not defined in a second process running your notebook")
        return found

    def forcing(self, function: Any = None) -> Any:
        """How a forced race runs when worker A is `function` (or the code of this check's learner
        process): at that process's lock calls; the course's own code, in the judge, as in Lab."""
        from course.grading.judge import schedule

        peer = function.peer if isinstance(function, wire.Remote) else self.peer if function is None else None
        if peer is None:
            return checks.interleave
        if getattr(peer, "locks", None) is None:  # never a trace instead: the race is not run at all
            raise RuntimeError("the learner process's lock calls did not reach the judge: the race cannot be forced")
        return schedule.forcing(peer.locks)

    @functools.cached_property
    def implementation(self) -> Any:
        """The checkpoint's fences: 01, 02 and 04 run as written in a learner process of their own."""
        from course.checkpoint.run import Elsewhere
        from course.lab.graded_cells import FUNCTIONS
        from sovereign_agent.ownership import Ownership

        bound = names(self.broker.learner("implementation")[0], {*FUNCTIONS, "Claim"})
        missing = [name for name in FUNCTIONS if not isinstance(bound.get(name), wire.Remote)]
        if missing:
            raise checks.CheckFailed(f"the checkpoint could not load your notebooks: {', '.join(missing)} missing")
        functions = {name: bound[name] for name in FUNCTIONS}
        claim_class = bound.get("Claim") if isinstance(bound.get("Claim"), type) else None
        return Elsewhere(Ownership(**functions), claim_class, self.broker.worker, self.private)

    @property
    def private(self) -> Path:
        """The judge's folder for the ledgers, which no learner sandbox reaches."""
        private = Path(self.job["private"])
        private.mkdir(parents=True, exist_ok=True)
        return private

    def elsewhere(self, fences: Any, worker: Any) -> Any:
        """Where a checkpoint or matrix runs while grading: the learner's fences (`fences` names a
        folder) from a learner process, or the runtime's; the learner's pass (`worker` names a folder)
        in every worker process, or the runtime's. Workers always run in learner sandboxes."""
        from course.checkpoint.run import Elsewhere
        from course.lab.learner import REFERENCE_NAME
        from sovereign_agent.ownership import REFERENCE

        def learners(source: Any) -> bool:
            return source is not None and str(source) != REFERENCE_NAME

        base = self.implementation if learners(fences) else Elsewhere(REFERENCE, None, self.broker.worker, self.private,
                                                                        fences=REFERENCE_NAME)
        return dataclasses.replace(base, worker="." if learners(worker) else REFERENCE_NAME)


def substitute(namespace: dict[str, Any], context: Context) -> None:
    """Replace, by identity, each course harness the setup cells bound with the judge's version."""
    from course.lessons import fence_checks
    from course.checkpoint import matrix, run

    def race_claims(location: Any, claim: Any, *, now: float | None = None, rival: Any = None) -> dict[str, Any]:
        return checks.race_claims(location, claim, now=now, rival=rival or context.again(claim),
                                  force=context.forcing(claim))

    def race_admissions(rule: Any, **options: Any) -> dict[str, Any]:
        return fence_checks.race_admissions(rule, rival=context.again(rule), force=context.forcing(rule), **options)

    def between_check_and_write(db: Any, write: Any, takeover: Any, **options: Any) -> dict[str, Any]:
        return checks.between_check_and_write(db, write, takeover, force=context.forcing(), **options)

    def run_checkpoint(implementation: Any = None, *args: Any, worker: Any = None, **kwargs: Any) -> Any:
        kwargs.pop("require_saved", None)  # the judge judges what was submitted
        return run.run_checkpoint(context.elsewhere(implementation, worker), *args, **kwargs)

    def run_matrix(specs: Any, implementation: Any = None, *args: Any, worker: Any = None, **kwargs: Any) -> Any:
        kwargs.pop("output_dir", None)  # the judge keeps nothing of a run
        return matrix.run_matrix(specs, context.elsewhere(implementation, worker), *args, **kwargs)

    @contextlib.contextmanager
    def rebound(space: dict[str, Any], name: str, wrap: Any) -> Any:
        original = checks.looked_up(space, name)
        wrapped = wrap(original)
        checks.assign(space, name, wrapped)
        # The learner's code looks the name up in the learner process: rebind it there too, whether the
        # learner wrote it or a setup cell bound it there (03_leases: the runtime's `finish`, and
        # `reference.finish`, an attribute of a module there), then put back what was there.
        there = original if isinstance(original, wire.Remote) and original.peer is context.peer else \
            names(context.peer, {name}).get(name)
        if isinstance(there, wire.Remote):
            context.peer.call({"name": "__rebind__"}, (name, wrapped))
        try:
            yield
        finally:
            checks.assign(space, name, original)
            if isinstance(there, wire.Remote):
                context.peer.call({"name": "__rebind__"}, (name, there))

    swaps = {id(checks.race_claims): race_claims, id(fence_checks.race_admissions): race_admissions,
             id(checks.between_check_and_write): between_check_and_write,
             id(run.run_checkpoint): run_checkpoint, id(matrix.run_matrix): run_matrix, id(checks.rebound): rebound}
    for name, value in list(namespace.items()):
        if id(value) in swaps:
            namespace[name] = swaps[id(value)]
