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

import dataclasses
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


def worker_pass(db: Any, implementation: Any, command: dict[str, Any], *, owner: str, lease: float | None,
                stop: Stop) -> dict[str, Any]:
    """One pass of the implementation's worker (run in a worker process), stopping at `command["point"]`.

    The old worker passes its short `lease`; the replacement passes None (its pass's own) and
    `"model": "none"`, a model that fails if asked. Returns how the pass ended, as the worker saw
    it (for the picture and the message only: the parent judges from the databases and the
    supplier's ledger). After a pause the pass goes on writing; a refusal ends it.
    """
    from course.checkpoint.model import CountingModel, NewReasoningRequested, NoNewReasoning
    from reference_organizations.store.agent import OfflineShopModel
    from reference_organizations.store.supplier import SupplierClient

    hook = CrashHook(command.get("point"), stop)
    client = SupplierClient(command["endpoint"], identity=command["identity"], timeout=float(command["timeout"]))
    model = NoNewReasoning() if command.get("model") == "none" else CountingModel(OfflineShopModel())
    ownership, decisions = _deciding(instrument(implementation.ownership, hook=hook, lease=lease))
    ended: dict[str, Any] = {"do": "pass", "point": command.get("point"), "owner": owner}
    try:
        outcome = implementation.run_once(db, model, owner=owner, policy=policy_for(db),
                                          supplier=HookedSupplier(client, hook), ownership=ownership)
    except NewReasoningRequested as asked:
        ended["error"] = str(asked)
    except Exception as error:  # a refusal (PermissionError) is the expected end after a takeover
        ended["error"] = _pass_error(db, error, decisions)
        ended["ename"] = type(error).__name__
    else:
        ended["outcome"] = _plain(outcome)
        ended["status"] = ended["outcome"].get("status")
    return ended | {"reached": hook.reached, "model_calls": model.calls, "ended_at": time.time()}


def _deciding(ownership: Ownership) -> tuple[Ownership, list[tuple[str, Any]]]:
    """The same fences, keeping what `order_to_continue` decided (work id, order) for the blame."""
    decisions: list[tuple[str, Any]] = []

    def order_to_continue(db: Any, work: Any) -> Any:
        decision = ownership.order_to_continue(db, work)
        decisions.append((work.id, decision))
        return decision

    return dataclasses.replace(ownership, order_to_continue=order_to_continue), decisions


def _pass_error(db: Any, error: Exception, decisions: list[tuple[str, Any]]) -> str:
    """The pass's failure, blamed on the `order_to_continue` decision when that decision is why."""
    from sovereign_agent.records import orders_of

    if decisions:
        work_id, decision = decisions[-1]
        orders = [o["id"] for o in orders_of(db.connection, work_id) if o["status"] not in ("DRAFT", "REVOKED")]
        if decision not in orders and orders:
            return (f"your `order_to_continue` returned {decision!r} for an assignment whose recorded order "
                    f"{orders[-1]!r} is past the draft stage, so there was no order to continue "
                    f"({type(error).__name__}: {error}); expected that order's id (revisit `order_to_continue` "
                    "in 04_recovery)")
    return f"{type(error).__name__}: {error}"[:2000]


def _plain(outcome: Any) -> dict[str, Any]:
    """A pass's returned dict as JSON-able data (anything else is described, not trusted)."""
    if not isinstance(outcome, dict):
        return {"returned": repr(outcome)[:200]}
    return {str(key)[:100]: value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)[:200]
            for key, value in list(outcome.items())[:20]}
