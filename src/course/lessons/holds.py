"""A worker pass held at a named point, so that something else happens exactly there (04, exercise 2).

Like 01's forced race and 02's forced takeover, the interleaving is forced, not hoped for: no
sleep and no thread. `Hold(point, while_held)` wraps the seams a real pass (`run_once`,
`reconcile_once`) already goes through, its `Ownership` and its supplier client, and at `point`
stops the pass, runs `while_held()` (an operator's cancel, say) in the same thread, then releases
the pass to carry on as if nothing had happened. The points:

* "completion": just before the pass's completion (its `finish`) is written;
* "accepted": the supplier has committed the order and answered yes, and the pass has not yet
  recorded that receipt;
* "lost": the request never reached the supplier, and the pass waits for an answer that will not
  come (on release, the client gives up: `OutcomeUnknown`).

It fires once, at the first time the pass reaches its point. What the pass then does, and what
the records say, is the runtime's: the hold changes nothing but the moment.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from sovereign_agent.ownership import REFERENCE, Ownership
from sovereign_agent.suppliers import OutcomeUnknown

POINTS = ("completion", "accepted", "lost")


class Hold:
    """Stop a worker pass at `point` (one of POINTS), run `while_held()` there, then release it."""

    def __init__(self, point: str, while_held: Callable[[], Any]) -> None:
        if point not in POINTS:
            raise ValueError(f"a hold's point is one of {POINTS}, not {point!r}")
        self.point, self.while_held = point, while_held
        self.fired = False  # whether the pass reached the point (and `while_held` ran there)
        self.returned: Any = None  # what `while_held` returned

    def _fire(self) -> None:
        if not self.fired:
            self.fired = True
            self.returned = self.while_held()

    def ownership(self, base: Ownership = REFERENCE) -> Ownership:
        """`base` with its `finish` held at "completion" (unchanged for the other points)."""
        if self.point != "completion":
            return base

        def held_finish(db: Any, work: Any, status: str, result: str, **kwargs: Any) -> None:
            self._fire()  # the pass has its result; the operator acts before it is written
            return base.finish(db, work, status, result, **kwargs)

        return replace(base, finish=held_finish)

    def supplier(self, inner: Any) -> Any:
        """`inner` (a supplier client), held at "accepted" or "lost" (unchanged for "completion")."""
        return inner if self.point == "completion" else _HeldSupplier(inner, self)


class _HeldSupplier:
    """The supplier client a held pass sends through: lookups pass straight to the real one."""

    def __init__(self, inner: Any, hold: Hold) -> None:
        self._inner, self._hold = inner, hold
        self.identity, self.timeout = inner.identity, inner.timeout
        self.idempotent = getattr(inner, "idempotent", True)

    def lookup(self, operation: str) -> Any:
        return self._inner.lookup(operation)

    def order(self, operation: str, proposal: Any) -> Any:
        if self._hold.point == "lost" and not self._hold.fired:
            self._hold._fire()  # the request went nowhere; the operator acts while the pass waits
            raise OutcomeUnknown("no answer: the request never reached the supplier")
        receipt = self._inner.order(operation, proposal)  # the supplier has committed it and said yes
        self._hold._fire()
        return receipt


def held_completion(db: Any, work_id: str) -> dict[str, Any]:
    """The course's own experiment, which 04's prediction is compared with: a worker claims `work_id`
    and has its result; its completion is held while the operator cancels (`cancel`), then released.
    Returns what the records say afterwards (and the refusal the released completion met); the money
    is the caller's to read."""
    from sovereign_agent.assistant_work import cancel, claim
    from sovereign_agent.records import holding, orders_of

    held = claim(db, "slow-worker", identifier=work_id)
    if held is None:
        raise RuntimeError(f"set-up: {work_id} could not be claimed")
    hold = Hold("completion", lambda: cancel(db, work_id))
    try:
        hold.ownership().finish(db, held, "DONE", "Stock checked: six tubs drafted for approval.")
        completion, refusal = "accepted", ""
    except PermissionError as error:
        completion, refusal = "refused", str(error)
    after = holding(db.connection, work_id)
    return {"held_generation": held.generation, "cancelled_while_held": hold.fired, "completion": completion,
            "refusal": refusal, "status_after": after["status"], "generation_after": after["generation"],
            "orders_after": [o["status"] for o in orders_of(db.connection, work_id)]}
