"""Named reads of the runtime's records, for code outside the runtime.

Workers, the shop and the course ask questions of the records ("when does this lease end?",
"is this order still uncertain?", "what may Lucy spend?"); the answers live here, so the
runtime's tables stay the runtime's business and a schema change is made in one package.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Iterable

from sovereign_agent.assistant_orders import UNCERTAIN, SpendingPolicy


def holding(connection: sqlite3.Connection, work_id: str) -> dict[str, Any] | None:
    """Who holds the assignment now, and until when: status, generation, owner, expires."""
    row = connection.execute(
        "SELECT status, generation, owner, expires FROM assistant_work WHERE id=?", (work_id,)
    ).fetchone()
    return None if row is None else dict(zip(("status", "generation", "owner", "expires"), row, strict=True))


def lease_expiry(connection: sqlite3.Connection, work_id: str) -> float | None:
    """When the current holder's lease ends (None: nobody holds it)."""
    held = holding(connection, work_id)
    return None if held is None else held["expires"]


def authority_epoch(connection: sqlite3.Connection) -> str:
    """The runtime's current authority epoch (every claim carries it)."""
    return connection.execute("SELECT epoch FROM assistant_control WHERE id=1").fetchone()[0]


def is_cancelled(connection: sqlite3.Connection, work_id: str) -> bool:
    row = connection.execute("SELECT cancelled FROM assistant_work WHERE id=?", (work_id,)).fetchone()
    return bool(row and row[0])


def order(connection: sqlite3.Connection, order_id: str) -> dict[str, Any] | None:
    """One order as recorded: id, work_id, status, digest, amount."""
    row = connection.execute(
        "SELECT id, work_id, status, digest, amount FROM assistant_orders WHERE id=?", (order_id,)
    ).fetchone()
    return None if row is None else dict(zip(("id", "work_id", "status", "digest", "amount"), row, strict=True))


def orders_of(connection: sqlite3.Connection, work_id: str, statuses: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The assignment's orders, oldest first, optionally only those in `statuses`."""
    rows = connection.execute(
        "SELECT id FROM assistant_orders WHERE work_id=? ORDER BY created, rowid", (work_id,)
    ).fetchall()
    found = [order(connection, row[0]) for row in rows]
    return [o for o in found if statuses is None or o["status"] in set(statuses)]


def is_uncertain(connection: sqlite3.Connection, order_id: str) -> bool:
    """Sent, or being sent, with no known outcome: look it up before anything else."""
    recorded = order(connection, order_id)
    return recorded is not None and recorded["status"] in UNCERTAIN


def model_calls_by_generation(connection: sqlite3.Connection, work_id: str) -> dict[int, int]:
    """Model calls reserved for the assignment, counted per generation that reserved them."""
    return dict(connection.execute(
        "SELECT generation, count(*) FROM assistant_model_calls WHERE work_id=? GROUP BY generation", (work_id,)
    ).fetchall())


def spending_ceiling(connection: sqlite3.Connection) -> int:
    """The most the account may commit in total, as recorded when it was opened."""
    row = connection.execute("SELECT limit_pence FROM assistant_spending WHERE id=1").fetchone()
    if row is None:
        raise LookupError("the spending account was never opened (assistant_orders.open_account)")
    return row[0]


def spending_policy(connection: sqlite3.Connection, operators: Iterable[str]) -> SpendingPolicy:
    """`operators` may approve up to the recorded ceiling."""
    return SpendingPolicy(frozenset(operators), total_pence=spending_ceiling(connection))


def money(connection: sqlite3.Connection) -> tuple[int, int]:
    """(reserved, spent) on the shop's one spending account, in pence."""
    row = connection.execute("SELECT reserved_pence, spent_pence FROM assistant_spending WHERE id=1").fetchone()
    if row is None:
        raise LookupError("the spending account was never opened (assistant_orders.open_account)")
    return row[0], row[1]
