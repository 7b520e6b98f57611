"""Named crash points in one worker pass, and the hook that stops the course's worker there.

The pass is the shop's real `run_once`: claim, a three-turn model loop (five transcript
observations, one proposal), the operator's approval, the fenced supplier execution, finish.
Nothing in the runtime is changed to find the points. The hook wraps what the runtime already
accepts from outside, the `Ownership` seam and the `Supplier`, and calls `stop(point)` the
first time the pass reaches the chosen point (right after the durable step commits):

    claimed             ownership.claim returned a claim
    observed-N          ownership.observe returned (the N-th transcript row of this pass)
    proposed            the model's propose_order tool result is about to be observed: the
                        DRAFT order has committed, nothing has been written since
    approval-seen       ownership.order_to_continue returned the approved order
    sending             supplier.order is called: the fenced admission (SENDING) committed,
                        the request has not left
    receipt-recorded    ownership.finish is called: the receipt is recorded, finish is not
    finished            ownership.finish returned

`supplier-committed` is the one point inside another process: the supplier commits the order,
writes its `committed_file` and holds its answer; the parent watches for that file.

The operator (Lucy) is part of the scenario, for the old worker and the replacement alike: she
approves a DRAFT proposal as soon as the worker reports it, so one pass can go all the way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from course.checkpoint.scenario import APPROVAL_SECONDS, OPERATOR
from sovereign_agent.ownership import Ownership

POINTS: dict[str, str] = {
    "claimed": "after the claim commits",
    "observed-1": "after transcript observation 1 (the model asks for the stock report)",
    "observed-2": "after transcript observation 2 (the stock report)",
    "observed-3": "after transcript observation 3 (the model proposes the order)",
    "proposed": "after the order is proposed (DRAFT committed)",
    "observed-4": "after transcript observation 4 (the proposal, approved by Lucy)",
    "observed-5": "after transcript observation 5 (the model's summary)",
    "approval-seen": "after the worker saw the approval (order_to_continue)",
    "sending": "after the fenced admission (SENDING), before the request leaves",
    "supplier-committed": "after the supplier committed, before its response arrives",
    "receipt-recorded": "after the receipt is recorded, before finish",
    "finished": "after finish",
}
SUPPLIER_POINT = "supplier-committed"

Stop = Callable[[str], None]


class CrashHook:
    """Calls `stop(point)` once, the first time the pass reaches `point`."""

    def __init__(self, point: str | None, stop: Stop | None) -> None:
        if point is not None and point not in POINTS:
            raise ValueError(f"unknown crash point {point!r}; choose from {list(POINTS)}")
        self.point, self.stop, self.reached = point, stop, False

    def at(self, name: str) -> None:
        if name == self.point and not self.reached and self.stop is not None:
            self.reached = True
            self.stop(name)


def instrument(ownership: Ownership, *, hook: CrashHook | None = None, lease: float | None = None) -> Ownership:
    """The same five functions, reporting the crash points; Lucy approves reported proposals.

    `lease` replaces the pass's own (long) claim ttl: the old worker claims with a short real
    lease, so that a replacement can take over within seconds.
    """
    hook = hook or CrashHook(None, None)
    observed = 0

    def claim(db: Any, owner: str, **options: Any) -> Any:
        if lease is not None:
            options["ttl"] = lease
        work = ownership.claim(db, owner, **options)
        if work is not None:
            hook.at("claimed")
        return work

    def observe(db: Any, work: Any, message: dict[str, Any]) -> None:
        nonlocal observed
        if message.get("role") == "tool" and message.get("name") == "propose_order":
            hook.at("proposed")
            approve_draft(db, json.loads(message["content"]).get("order"))
        ownership.observe(db, work, message)
        observed += 1
        hook.at(f"observed-{observed}")

    def order_to_continue(db: Any, work: Any) -> str | None:
        found = ownership.order_to_continue(db, work)
        if found is not None:
            hook.at("approval-seen")
        return found

    def finish(db: Any, work: Any, status: str, result: str, **options: Any) -> None:
        hook.at("receipt-recorded")
        ownership.finish(db, work, status, result, **options)
        hook.at("finished")

    return Ownership(claim=claim, assert_current=ownership.assert_current, observe=observe,
                     finish=finish, order_to_continue=order_to_continue)


class HookedSupplier:
    """The real supplier client; `order` first reports the `sending` point."""

    def __init__(self, client: Any, hook: CrashHook) -> None:
        self.client, self.hook = client, hook
        self.identity, self.timeout, self.idempotent = client.identity, client.timeout, client.idempotent

    def lookup(self, operation: str) -> dict[str, Any] | None:
        return self.client.lookup(operation)

    def order(self, operation: str, proposal: dict[str, Any]) -> dict[str, Any]:
        self.hook.at("sending")
        return self.client.order(operation, proposal)

    def fenced(self, work_id: str, generation: int) -> HookedSupplier:
        """The same, sending the holder's fencing token (the runtime's `execute` asks for it)."""
        return HookedSupplier(self.client.fenced(work_id, generation), self.hook)


def policy_for(db: Any) -> Any:
    """Lucy may approve up to the shop's spending ceiling."""
    from sovereign_agent.records import spending_policy

    return spending_policy(db.connection, {OPERATOR})


def approve_draft(db: Any, order: str | None) -> None:
    """Lucy approves exactly the recorded proposal, if it is still a DRAFT (else nothing)."""
    from sovereign_agent.assistant_orders import approve
    from sovereign_agent.records import order as recorded_order

    row = None if order is None else recorded_order(db.connection, order)
    if row is not None and row["status"] == "DRAFT":
        approve(db, order, row["digest"], actor=OPERATOR, policy=policy_for(db), expires=time.time() + APPROVAL_SECONDS)


def old_worker_pass(db: Any, ownership: Ownership, command: dict[str, Any], *, owner: str, lease: float,
                    stop: Stop) -> dict[str, Any]:
    """The old worker's pass (run in the worker process), stopping at `command["point"]`.

    Returns how the pass ended, as the worker saw it (for the picture only: the parent judges
    from the databases). After a pause the pass goes on writing; a refusal ends it.
    """
    from reference_organizations.store.agent import OfflineShopModel
    from reference_organizations.store.assistant import run_once
    from reference_organizations.store.supplier import SupplierClient

    hook = CrashHook(command["point"], stop)
    client = SupplierClient(command["endpoint"], identity=command["identity"], timeout=float(command["timeout"]))
    try:
        outcome = run_once(db, OfflineShopModel(), owner=owner, policy=policy_for(db),
                           supplier=HookedSupplier(client, hook),
                           ownership=instrument(ownership, hook=hook, lease=lease))
    except Exception as error:  # a refusal (PermissionError) is the expected end after a takeover
        return {"do": "pass", "point": command["point"], "reached": hook.reached,
                "error": f"{type(error).__name__}: {error}", "ended_at": time.time()}
    return {"do": "pass", "point": command["point"], "reached": hook.reached,
            "status": outcome.get("status"), "ended_at": time.time()}
