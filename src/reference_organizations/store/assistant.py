"""Lucy's assistant worker: one pass takes one assignment and carries it as far as it may go.

Order of business in a pass: first any assignment whose supplier order is uncertain (discover
it before anything else happens), then ordinary work. A claimed assignment that already has a
recorded, approved order is continued from the records, without asking the model again; with
several, every pending one is continued in the pass (`order_to_continue` says in which order).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

from reference_organizations.store.agent import SUPPLIER_IDENTITY, ShopTools
from sovereign_agent.agent_loop import Limits, LoopResult, run_loop
from sovereign_agent.assistant_orders import UNSENT, OrderRefused, SpendingPolicy, execute
from sovereign_agent.assistant_work import BudgetExhausted, Claim, reserve_model_call
from sovereign_agent.database import Database
from sovereign_agent.model import Model
from sovereign_agent.ownership import REFERENCE, Ownership
from sovereign_agent.processes import record_process
from sovereign_agent.records import is_cancelled, is_uncertain, orders_of
from sovereign_agent.suppliers import OutcomeUnknown, Supplier

LEASE_MARGIN_SECONDS = 5.0


def run_once(
    db: Database,
    model: Model,
    *,
    owner: str | None = None,
    policy: SpendingPolicy | None = None,
    supplier: Supplier | None = None,
    limits: Limits = Limits(),
    ownership: Ownership = REFERENCE,
) -> dict[str, Any]:
    """One worker pass. Returns {"status": "IDLE"} when nothing is eligible."""
    owner = owner or fresh_owner()
    if supplier is not None:
        recovered = reconcile_once(db, supplier, owner=owner, policy=policy, limits=limits, ownership=ownership)
        if recovered["status"] != "IDLE":
            return recovered
    work = ownership.claim(db, owner, ttl=lease_seconds(limits, supplier))
    if work is None:
        return {"status": "IDLE"}
    record_process(db, owner)
    order = ownership.order_to_continue(db, work)
    if order is not None and supplier is not None:
        return continue_order(db, work, order, supplier, policy=policy, ownership=ownership)
    return _reason(db, work, model, limits, supplier, policy, ownership)


def reconcile_once(
    db: Database,
    supplier: Supplier,
    *,
    owner: str | None = None,
    policy: SpendingPolicy | None = None,
    limits: Limits = Limits(),
    ownership: Ownership = REFERENCE,
) -> dict[str, Any]:
    """A recovery-only pass: take an assignment with an uncertain order and discover its fate."""
    work = ownership.claim(db, owner or fresh_owner(), ttl=lease_seconds(limits, supplier), recovery_only=True)
    if work is None:
        return {"status": "IDLE"}
    record_process(db, work.owner)
    order = ownership.order_to_continue(db, work)
    return continue_order(db, work, order, supplier, policy=policy, ownership=ownership)


def lease_seconds(limits: Limits, supplier: Supplier | None) -> float:
    """The loop's time budget, one supplier wait and a margin. The loop checks its budget only
    before a turn, so a last model call that starts near the budget's end, or a process frozen
    after admission, can still outlive the lease: what this bounds is admission, which refuses a
    request whose declared wait would exceed the remaining lease."""
    return limits.max_seconds + (supplier.timeout if supplier else 0) + LEASE_MARGIN_SECONDS


def continue_order(
    db: Database, work: Claim, order: str, supplier: Supplier, *, policy: SpendingPolicy | None = None,
    ownership: Ownership = REFERENCE,
) -> dict[str, Any]:
    """Carry a recorded, approved order (and any other pending one of the same assignment) to its
    end, without the model. An unknown outcome ends the pass BLOCKED, its money still reserved:
    the order stays SENDING/UNKNOWN, so a later recovery pass takes the assignment and looks the
    operation up. Finishing DONE there would strand the order, since no pass takes DONE work."""
    policy = policy or SpendingPolicy(frozenset(), total_pence=0)
    outcome = {"work": work.id, "generation": work.generation, "owner": work.owner, "order": order, "model_calls": 0}
    cancelled = is_cancelled(db.connection, work.id)
    receipts: dict[str, dict[str, Any]] = {}
    while order not in receipts:  # each execute settles its order or ends the pass: bounded
        outcome["order"] = order
        try:
            receipts[order] = execute(db, work, order, supplier, policy=policy, fence=ownership.assert_current)
        except OutcomeUnknown:
            status, result = _stopped(db, order, cancelled), "supplier outcome unknown; reconcile later"
            ownership.finish(db, work, status, result)
            return outcome | {"status": status, "result": result}
        except OrderRefused as refusal:
            status = _stopped(db, order, cancelled)
            ownership.finish(db, work, status, str(refusal))
            return outcome | {"status": status, "result": str(refusal)}
        # The assignment's next pending order, if any, in the same pass: finished work is never
        # claimed again, so stopping after the first would strand the others and their reservations.
        order = ownership.order_to_continue(db, work) or order
    outcome["order"], receipt = order, receipts[order]
    status = "CANCELLED" if cancelled else "DONE"
    ownership.finish(db, work, status, json.dumps({"order": order, "receipt": receipt}, sort_keys=True))
    return outcome | {"status": status, "receipt": receipt}


def _stopped(db: Database, order: str, cancelled: bool) -> str:
    """How a pass that could not settle its order ends. Cancelled work whose order is still
    uncertain is BLOCKED, not CANCELLED: only BLOCKED waits a retry delay, and without one the
    recovery pass would take the same assignment again at once, on every pass, starving all other
    work. Its `cancelled` flag stays set, so nothing can be sent for it."""
    return "CANCELLED" if cancelled and not is_uncertain(db.connection, order) else "BLOCKED"


def think(
    db: Database, work: Claim, model: Model, *, supplier: Supplier | None, limits: Limits, ownership: Ownership
) -> LoopResult:
    """The owned model loop for one claim: the shop's tools, every model call reserved and every
    transcript row and tool call made under `ownership`'s fence. It writes nothing else and decides
    nothing: what the work becomes afterwards is the pass's to say. A spent model budget comes back
    as the status BUDGET_EXHAUSTED; a stale claim raises PermissionError."""
    tools = ShopTools(
        db, work, target=supplier.identity if supplier else SUPPLIER_IDENTITY, fence=ownership.assert_current
    )
    messages = [{"role": "user", "content": work.prompt, "subject": work.subject}]
    try:
        return run_loop(
            model,
            tools,
            messages,
            limits=limits,
            observe=lambda message: ownership.observe(db, work, message),
            check_current=lambda: ownership.assert_current(db.connection, work),
            reserve_call=lambda: reserve_model_call(
                db, work, limits.max_output_tokens, fence=ownership.assert_current
            ),
        )
    except BudgetExhausted as exhausted:
        return LoopResult("BUDGET_EXHAUSTED", str(exhausted))


def _reason(
    db: Database,
    work: Claim,
    model: Model,
    limits: Limits,
    supplier: Supplier | None,
    policy: SpendingPolicy | None,
    ownership: Ownership,
) -> dict[str, Any]:
    outcome = {"work": work.id, "generation": work.generation, "owner": work.owner}
    loop = think(db, work, model, supplier=supplier, limits=limits, ownership=ownership)
    if loop.status == "BUDGET_EXHAUSTED":
        ownership.finish(db, work, "BLOCKED", loop.content)
        return outcome | {"status": "BLOCKED", "result": loop.content}
    approved = ownership.order_to_continue(db, work)
    if loop.status == "DONE" and approved is not None and supplier is not None:
        # Approved while this loop was still running: approve() wakes only BLOCKED work, so
        # finishing now (DONE or BLOCKED) would strand the order and its reservation.
        continued = continue_order(db, work, approved, supplier, policy=policy, ownership=ownership)
        return {key: value for key, value in continued.items() if key != "model_calls"} | {"turns": loop.turns}
    drafts = orders_of(db.connection, work.id, UNSENT)
    if loop.status != "DONE":
        status, result = "BLOCKED", f"loop ended: {loop.status}"
    elif drafts:
        status, result = "BLOCKED", "awaiting operator approval: " + loop.content
    else:
        status, result = "DONE", loop.content
    ownership.finish(db, work, status, result)
    return outcome | {"status": status, "result": result, "turns": loop.turns}


def fresh_owner() -> str:
    """A label no other process uses: the pid, for the status report's health check, and a nonce."""
    return f"worker-{os.getpid()}-{uuid.uuid4().hex[:6]}"
