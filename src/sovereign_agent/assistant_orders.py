"""Supplier orders: proposed under a claim, approved by an operator, sent through a fence.

The operation id is derived from the work and the exact proposal, so a replacement that
re-proposes the same purchase gets the same id, and the supplier can recognise a retransmission.
The network request never happens inside a write transaction: admission is one fenced
transaction, the request follows, and the receipt is recorded in another fenced transaction.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import sqlite3
import time
import uuid
from dataclasses import dataclass
from typing import Any

from sovereign_agent.assistant_work import Claim, Fence, assert_current
from sovereign_agent.database import Database
from sovereign_agent.events import append_event
from sovereign_agent.suppliers import OutcomeUnknown, Supplier, SupplierRefused

OPERATIONS = uuid.UUID("5d1c8a52-6c9e-4c57-9f43-0a3e2f7b8c11")
UNSENT = ("DRAFT", "APPROVED")
UNCERTAIN = ("SENDING", "UNKNOWN")
SETTLED = ("CONFIRMED", "REJECTED")



@dataclass(frozen=True)
class SpendingPolicy:
    """Who may approve, the most the account may commit in total, and the size of order the
    runtime may approve on its own (0: every order needs an operator)."""

    operators: frozenset[str]
    total_pence: int
    automatic_order_pence: int = 0


class OrderRefused(PermissionError):
    """The order may not go ahead as things stand (ceiling, approval, cancellation, lease)."""


def open_account(connection: sqlite3.Connection, limit_pence: int) -> None:
    """Open the spending account with its ceiling, once; later calls change nothing."""
    connection.execute("INSERT OR IGNORE INTO assistant_spending(id, limit_pence) VALUES (1, ?)", (limit_pence,))


def propose(db: Database, work: Claim, sku: str, quantity: int, *, target: str, fence: Fence = assert_current) -> str:
    """Record a DRAFT order for the current holder; the same proposal always gets the same id."""
    if not isinstance(quantity, int) or isinstance(quantity, bool) or not 1 <= quantity <= 1000:
        raise ValueError("quantity must be a whole number from 1 to 1000")
    if not isinstance(target, str) or not target:
        raise ValueError("a supplier identity (target) is required")
    with db.immediate() as connection:
        fence(connection, work)
        item = connection.execute("SELECT unit_pence FROM shop_items WHERE sku=?", (sku,)).fetchone()
        if item is None:
            raise ValueError(f"unknown sku {sku!r}")
        proposal = {
            "sku": sku,
            "quantity": quantity,
            "unit_pence": item["unit_pence"],
            "supplier": target,
            "currency": "GBP",
        }
        canonical = json.dumps(proposal, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(f"{target}\n{canonical}".encode()).hexdigest()
        operation = uuid.uuid5(OPERATIONS, f"{work.id}:{digest}").hex
        inserted = connection.execute(
            "INSERT OR IGNORE INTO assistant_orders(id, work_id, proposal, digest, amount, target, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (operation, work.id, canonical, digest, quantity * item["unit_pence"], target, time.time()),
        ).rowcount
        if inserted:
            append_event(
                db, "assistant.order.proposed",
                {"order": operation, "work": work.id, "generation": work.generation, "amount": quantity * item["unit_pence"]},
            )
        return operation


def approve(
    db: Database, order_id: str, digest: str, *, actor: str, policy: SpendingPolicy, expires: float
) -> None:
    """An operator approves exactly this proposal (by digest) and reserves its amount."""
    if not isinstance(expires, (int, float)) or not math.isfinite(expires) or expires <= time.time():
        raise ValueError("an approval needs a finite expiry in the future")
    with db.immediate() as connection:
        order = _order(connection, order_id)
        if order["status"] != "DRAFT":
            raise OrderRefused(f"order is {order['status']}, only a DRAFT can be approved")
        if order["digest"] != digest:
            raise OrderRefused("the approval names a different proposal than the one recorded")
        automatic = actor == "automatic" and order["amount"] <= policy.automatic_order_pence
        if actor not in policy.operators and not automatic:
            raise OrderRefused(f"{actor!r} may not approve orders of {order['amount']} pence")
        work = connection.execute(
            "SELECT cancelled FROM assistant_work WHERE id=?", (order["work_id"],)
        ).fetchone()
        if work["cancelled"]:
            raise OrderRefused("the assignment was cancelled")
        _reserve(connection, order["amount"], policy)
        connection.execute(
            "UPDATE assistant_orders SET status='APPROVED', approved_by=?, approved_until=? WHERE id=?",
            (actor, float(expires), order_id),
        )
        # An approval is what the blocked assignment was waiting for: make it eligible again.
        connection.execute(
            "UPDATE assistant_work SET status='READY', available_after=0 WHERE id=? AND status='BLOCKED'",
            (order["work_id"],),
        )
        append_event(
            db, "assistant.order.approved", {"order": order_id, "actor": actor, "amount": order["amount"]}
        )


def revoke(db: Database, order_id: str, *, actor: str, policy: SpendingPolicy) -> None:
    """Withdraw an unsent order and release its reservation. A sent order cannot be recalled."""
    if actor not in policy.operators:
        raise OrderRefused(f"{actor!r} may not revoke orders")
    with db.immediate() as connection:
        order = _order(connection, order_id)
        if order["status"] not in UNSENT:
            raise OrderRefused(f"order is {order['status']}: it may already be at the supplier")
        if order["status"] == "APPROVED":
            connection.execute(
                "UPDATE assistant_spending SET reserved_pence = reserved_pence - ? WHERE id=1",
                (order["amount"],),
            )
        connection.execute("UPDATE assistant_orders SET status='REVOKED', revoked=1 WHERE id=?", (order_id,))
        append_event(db, "assistant.order.revoked", {"order": order_id, "actor": actor})


def execute(
    db: Database,
    work: Claim,
    order_id: str,
    supplier: Supplier,
    *,
    policy: SpendingPolicy,
    now: float | None = None,
    fence: Fence = assert_current,
) -> dict[str, Any]:
    """Send an approved order, or discover what became of one already sent, under the fence.

    Returns the supplier's receipt. Raises PermissionError for a stale holder (before anything
    is looked up or sent), OrderRefused when admission fails, and OutcomeUnknown when the
    request's fate is unknown: the order then stays UNKNOWN with its reservation kept. A
    supplier that answers with a refusal (SupplierRefused) did not take the order: that is a
    settled outcome, recorded as REJECTED with the reservation released.
    """
    with db.immediate() as connection:
        fence(connection, work, now)
        order = _order(connection, order_id, work)
    if order["status"] in SETTLED:
        return json.loads(order["receipt"])
    if order["status"] in UNCERTAIN:
        # Discovery first: the supplier may already hold this operation. Finding it is not
        # authority to order again; not finding it lets the same operation id be resent.
        receipt = supplier.lookup(order_id)
        _record(db, work, order_id, "lookup", fence)
        if receipt is not None:
            return _settle(db, work, order, receipt, fence)
    elif order["status"] != "APPROVED":
        raise OrderRefused(f"order is {order['status']}: nothing may be sent")
    _admit(db, work, order_id, supplier, policy, now, fence)
    # A supplier that takes a fencing token gets this holding's (work id, generation): a fenced one
    # refuses an order from a holder older than one it has already served.
    sender = supplier.fenced(work.id, work.generation) if callable(getattr(supplier, "fenced", None)) else supplier
    try:
        receipt = sender.order(order_id, json.loads(order["proposal"]))
    except OutcomeUnknown:
        # Fenced like every write: a holder replaced while it waited leaves the order SENDING, which
        # recovery treats as UNKNOWN (looked up before anything is resent). Only SENDING is downgraded.
        with contextlib.suppress(PermissionError), db.immediate() as connection:
            fence(connection, work)
            marked = connection.execute(
                "UPDATE assistant_orders SET status='UNKNOWN' WHERE id=? AND status='SENDING'", (order_id,)
            ).rowcount
            if marked:
                append_event(db, "assistant.order.unknown", {"order": order_id, "generation": work.generation})
        raise
    except SupplierRefused as refusal:
        # An answer, not a silence: left SENDING, the order would keep its reservation and be
        # looked up and resent by every later pass, each refused the same way.
        receipt = {"operation": order_id, "status": "REFUSED", "reason": str(refusal)}
    return _settle(db, work, order, receipt, fence)


def order_to_continue(db: Database, work: Claim) -> str | None:
    """The recovery decision: which of the assignment's recorded orders a replacement continues.

    When this returns an id, the worker continues that operation from the records (execute,
    then finish) and does not ask a model to reconstruct the purchase. With several orders:

    1. an uncertain one (SENDING, UNKNOWN), oldest first: it may already be at the supplier and
       holds a reservation, so it is looked up before anything else is sent;
    2. then an APPROVED one, oldest first: an operator's standing decision (until revoked), whose
       reservation would otherwise be held for ever;
    3. only when nothing is pending, the newest settled one (CONFIRMED, REJECTED): its receipt is
       what the work finishes with.

    DRAFT (never approved) and REVOKED (withdrawn) orders are never continued. Not "the newest
    non-draft order": a newer order must not strand an older one that still needs recovery.
    """
    row = db.connection.execute(
        "SELECT id FROM assistant_orders WHERE work_id=? AND status NOT IN ('DRAFT', 'REVOKED') "
        "ORDER BY CASE WHEN status IN ('SENDING', 'UNKNOWN') THEN 0 WHEN status = 'APPROVED' THEN 1 ELSE 2 END, "
        "CASE WHEN status IN ('CONFIRMED', 'REJECTED') THEN -created ELSE created END, rowid LIMIT 1",
        (work.id,),
    ).fetchone()
    return None if row is None else row["id"]


def _admit(
    db: Database, work: Claim, order_id: str, supplier: Supplier, policy: SpendingPolicy,
    now: float | None, fence: Fence,
) -> None:
    """One transaction decides that this request may leave: ownership, approval, ceiling, lease."""
    with db.immediate() as connection:
        now = time.time() if now is None else now
        fence(connection, work, now)
        order = _order(connection, order_id, work)
        state = connection.execute(
            "SELECT cancelled, expires FROM assistant_work WHERE id=?", (work.id,)
        ).fetchone()
        if state["cancelled"]:
            raise OrderRefused("the assignment was cancelled")
        if order["status"] not in ("APPROVED", *UNCERTAIN):
            raise OrderRefused(f"order is {order['status']}")
        if order["approved_until"] is None or order["approved_until"] <= now:
            raise OrderRefused("the approval has expired")
        if order["target"] != supplier.identity:
            raise OrderRefused(f"order is for {order['target']!r}, not {supplier.identity!r}")
        spending = connection.execute("SELECT * FROM assistant_spending WHERE id=1").fetchone()
        if spending["reserved_pence"] + spending["spent_pence"] > min(spending["limit_pence"], policy.total_pence):
            raise OrderRefused("the account ceiling would be exceeded")
        if state["expires"] is None:  # finished or released: no holder (only a broken fence lets one get here)
            raise OrderRefused("the assignment has no live lease")
        if state["expires"] - now <= supplier.timeout:
            raise OrderRefused(
                f"the lease has {state['expires'] - now:.1f} s left, less than the supplier's "
                f"{supplier.timeout:.1f} s timeout"
            )
        connection.execute("UPDATE assistant_orders SET status='SENDING' WHERE id=?", (order_id,))
        append_event(db, "assistant.order.sending", {"order": order_id, "generation": work.generation})


def _settle(
    db: Database, work: Claim, order: sqlite3.Row, receipt: dict[str, Any], fence: Fence
) -> dict[str, Any]:
    """Record the supplier's receipt under the fence and move the money from reserved to spent."""
    status = "CONFIRMED" if receipt.get("status") == "ACCEPTED" else "REJECTED"
    with db.immediate() as connection:
        fence(connection, work)
        settled = connection.execute(
            "UPDATE assistant_orders SET status=?, receipt=? WHERE id=? AND status IN ('SENDING', 'UNKNOWN')",
            (status, json.dumps(receipt, sort_keys=True), order["id"]),
        ).rowcount
        if settled:
            spent = order["amount"] if status == "CONFIRMED" else 0
            connection.execute(
                "UPDATE assistant_spending SET reserved_pence = reserved_pence - ?, "
                "spent_pence = spent_pence + ? WHERE id=1",
                (order["amount"], spent),
            )
            append_event(
                db, "assistant.order.settled",
                {"order": order["id"], "status": status, "generation": work.generation},
            )
    return receipt


def _record(db: Database, work: Claim, order_id: str, what: str, fence: Fence) -> None:
    with db.immediate() as connection:
        fence(connection, work)
        append_event(db, f"assistant.order.{what}", {"order": order_id, "generation": work.generation})


def _reserve(connection: sqlite3.Connection, amount: int, policy: SpendingPolicy) -> None:
    spending = connection.execute("SELECT * FROM assistant_spending WHERE id=1").fetchone()
    if spending is None:
        raise OrderRefused("no spending account is configured")
    ceiling = min(spending["limit_pence"], policy.total_pence)
    committed = spending["reserved_pence"] + spending["spent_pence"]
    if committed + amount > ceiling:
        raise OrderRefused(
            f"reserving {amount} pence would exceed the account ceiling "
            f"({committed} of {ceiling} pence already reserved or spent)"
        )
    connection.execute("UPDATE assistant_spending SET reserved_pence = reserved_pence + ? WHERE id=1", (amount,))


def _order(connection: sqlite3.Connection, order_id: str, work: Claim | None = None) -> sqlite3.Row:
    order = connection.execute("SELECT * FROM assistant_orders WHERE id=?", (order_id,)).fetchone()
    if order is None or (work is not None and order["work_id"] != work.id):
        raise KeyError(f"no order {order_id!r}" + ("" if work is None else " for this assignment"))
    return order
