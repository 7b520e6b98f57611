"""The course's harnesses that need a process other than the judge, as the judge runs them.

`race_claims`: worker B is the same name in a second learner process. `rebound`: the name is
rebound in the learner process too, so the judge sees every call the learner's own code makes.
`run_checkpoint`: the five functions of a learner process that ran 01-03, workers in learner
sandboxes, ledgers in the judge's folder, stale writes made by the judge itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from pathlib import Path
from typing import Any

from course import checks
from course.grading import wire


@dataclasses.dataclass
class Context:
    job: dict[str, Any]
    peer: wire.Peer
    broker: Any

    def again(self, function: Any) -> Any:
        """`function` (a learner function of this check's process) in a second learner process."""
        if not isinstance(function, wire.Remote):
            return None
        peer, _ = self.broker.learner(self.job["what"])
        described = peer.call({"name": "__describe__"}, ([function.__name__],))[function.__name__]
        if described.get("kind") != "function":
            raise checks.CheckFailed(f"`{function.__name__}` is not defined in a second process running your notebook")
        return peer.resolve(described["fn"])

    @functools.cached_property
    def implementation(self) -> Any:
        """The checkpoint's implementation: 01-03 run as written in a learner process of their own."""
        from course.checkpoint.run import Elsewhere
        from course.graded_cells import FUNCTIONS
        from sovereign_agent.ownership import Ownership

        peer, _ = self.broker.learner("implementation")
        described = peer.call({"name": "__describe__"}, ([*FUNCTIONS, "Claim"],))
        functions = {name: peer.resolve(described[name]["fn"]) for name in FUNCTIONS
                     if described.get(name, {}).get("kind") == "function"}
        missing = [name for name in FUNCTIONS if name not in functions]
        if missing:
            raise checks.CheckFailed(f"the checkpoint could not load your notebooks: {', '.join(missing)} missing")
        claim = described.get("Claim", {})
        claim_class = wire.mirror(claim["cls"], claim["schema"]) if claim.get("kind") == "dataclass" else None
        private = Path(self.job["private"])
        private.mkdir(parents=True, exist_ok=True)
        return Elsewhere(Ownership(**functions), claim_class, self.broker.worker, private)


def substitute(namespace: dict[str, Any], context: Context) -> None:
    """Replace, by identity, each course harness the setup cells bound with the judge's version."""
    from course.checkpoint import run

    def race_claims(location: Any, claim: Any, *, now: float | None = None, rival: Any = None) -> dict[str, Any]:
        return checks.race_claims(location, claim, now=now, rival=rival or context.again(claim))

    def run_checkpoint(implementation: Any = None, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("require_saved", None)  # the judge judges what was submitted
        return run.run_checkpoint(context.implementation, *args, **kwargs)

    @contextlib.contextmanager
    def rebound(space: dict[str, Any], name: str, wrap: Any) -> Any:
        original = space[name]
        wrapped = wrap(original)
        space[name] = wrapped
        mine = isinstance(original, wire.Remote) and original.peer is context.peer
        if mine:  # the learner's own code looks the name up in the learner process: rebind it there too
            context.peer.call({"name": "__rebind__"}, (name, wrapped))
        try:
            yield
        finally:
            space[name] = original
            if mine:
                context.peer.call({"name": "__rebind__"}, (name, original))

    swaps = {id(checks.race_claims): race_claims, id(run.run_checkpoint): run_checkpoint, id(checks.rebound): rebound}
    for name, value in list(namespace.items()):
        if id(value) in swaps:
            namespace[name] = swaps[id(value)]
