"""Durable assignments and who may act on them now.

An assignment (origin, session, prompt, subject, role) outlives any process. A *claim* is one
holding of it: an owner label, a lease that expires on the wall clock, and a generation that
grows with every acquisition or invalidation. Every controlled write checks the claim inside
the write's own transaction, so a holder that was replaced -- dead, paused or merely slow --
cannot commit anything new.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from sovereign_agent.database import Database, authority_marker
from sovereign_agent.events import append_event

TERMINAL_STATES = frozenset({"DONE", "BLOCKED", "CANCELLED"})
MAX_TTL_SECONDS = 3600
MODEL_CALLS_PER_WORK = 8
FIELD_LIMITS = {"origin": 200, "session": 200, "prompt": 4000, "subject": 200, "role": 50}


@dataclass(frozen=True)
class Claim:
    """What a worker must present with every controlled write. Frozen, but not a security
    boundary: trusted runtime code builds and checks it; the model never gets to make one."""

    id: str
    session: str
    prompt: str
    generation: int
    owner: str
    epoch: str
    subject: str = ""
    role: str = "shop"


class BudgetExhausted(RuntimeError):
    """The assignment has used all the model calls it is allowed."""


def enqueue(
    db: Database,
    origin: str,
    session: str,
    prompt: str,
    *,
    subject: str = "",
    role: str = "shop",
    now: float | None = None,
) -> str:
    """Queue an assignment once per origin; the same origin with the same content is a no-op."""
    fields = {"origin": origin, "session": session, "prompt": prompt, "subject": subject, "role": role}
    for name, value in fields.items():
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a string")
        if name != "subject" and not value.strip():
            raise ValueError(f"{name} must not be empty")
        if len(value) > FIELD_LIMITS[name]:
            raise ValueError(f"{name} is longer than {FIELD_LIMITS[name]} characters")
    created = _clock(now)
    with db.immediate() as connection:
        existing = connection.execute(
            "SELECT id, session, prompt, subject, role FROM assistant_work WHERE origin=?", (origin,)
        ).fetchone()
        if existing is not None:
            if tuple(existing)[1:] != (session, prompt, subject, role):
                raise ValueError(f"origin {origin!r} was already queued with different content")
            return existing["id"]
        identifier = uuid.uuid4().hex
        connection.execute(
            "INSERT INTO assistant_work(id, origin, session, prompt, subject, role, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (identifier, origin, session, prompt, subject, role, created),
        )
        append_event(db, "assistant.work.enqueued", {"work": identifier, "origin": origin})
        return identifier


# Ordinary eligibility: READY work, or RUNNING work whose lease has run out; never a session that
# already has a live holder. The literal `status IN ('READY','RUNNING')` lets SQLite walk the
# partial index `work_queue` in ORDER BY order instead of scanning and sorting finished work.
_ELIGIBLE = """
SELECT w.* FROM assistant_work AS w
 WHERE w.role = :role
   AND w.status IN ('READY', 'RUNNING')
   AND (w.status = 'READY' OR w.expires <= :now)
   AND w.available_after <= :now
   AND (:identifier = '' OR w.id = :identifier)
   AND (:control_only = 0 OR w.control = 1)
   AND NOT EXISTS (SELECT 1 FROM assistant_work AS other
                    WHERE other.session = w.session AND other.status = 'RUNNING'
                      AND other.expires > :now)
 ORDER BY w.control DESC, w.created, w.rowid
 LIMIT 1
"""

# Recovery-only eligibility: work with an order whose supplier outcome is uncertain, whatever
# its state (cancelled work included: its uncertain order still has to be discovered).
# `INDEXED BY`: without ANALYZE statistics SQLite prefers scanning the covering index of *every*
# order (orders_by_work), inside the write transaction, on every worker pass; the partial index
# holds only the uncertain few.
_RECOVERABLE = """
SELECT w.* FROM assistant_work AS w
 WHERE w.id IN (SELECT work_id FROM assistant_orders INDEXED BY orders_uncertain
                 WHERE status IN ('SENDING', 'UNKNOWN'))
   AND w.role = :role
   AND (:identifier = '' OR w.id = :identifier)
   AND (:control_only = 0 OR w.control = 1)
   AND w.available_after <= :now
   AND (w.status IN ('READY', 'BLOCKED', 'CANCELLED')
        OR (w.status = 'RUNNING' AND w.expires <= :now))
   AND NOT EXISTS (SELECT 1 FROM assistant_work AS other
                    WHERE other.session = w.session AND other.status = 'RUNNING'
                      AND other.expires > :now)
 ORDER BY w.control DESC, w.created, w.rowid
 LIMIT 1
"""


def check_ttl(ttl: object) -> None:
    """A lease must be bounded: a finite number of seconds in (0, MAX_TTL_SECONDS]."""
    if not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or not 0 < ttl <= MAX_TTL_SECONDS:
        raise ValueError(f"bounded claim lifetime required: 0 < ttl <= {MAX_TTL_SECONDS} seconds")


def claim(
    db: Database,
    owner: str,
    *,
    now: float | None = None,
    ttl: float = 90,
    recovery_only: bool = False,
    control_only: bool = False,
    role: str = "shop",
    identifier: str = "",
) -> Claim | None:
    """Select and take one eligible assignment in a single write transaction, or return None."""
    now = _clock(now)
    if not isinstance(owner, str) or not owner.strip():
        raise ValueError("an owner label is required")
    check_ttl(ttl)
    with db.immediate() as connection:
        control = connection.execute("SELECT epoch, paused FROM assistant_control WHERE id=1").fetchone()
        if control["paused"]:
            return None
        row = connection.execute(
            _RECOVERABLE if recovery_only else _ELIGIBLE,
            {
                "role": role,
                "now": now,
                "identifier": identifier,
                "control_only": int(control_only),
            },
        ).fetchone()
        if row is None:
            return None
        generation = row["generation"] + 1
        connection.execute(
            "UPDATE assistant_work SET status='RUNNING', generation=?, owner=?, expires=? WHERE id=?",
            (generation, owner, now + ttl, row["id"]),
        )
        append_event(
            db,
            "assistant.work.claimed",
            {"work": row["id"], "generation": generation, "owner": owner, "expires": now + ttl},
        )
        return Claim(
            row["id"], row["session"], row["prompt"], generation, owner, control["epoch"],
            row["subject"], row["role"],
        )


def assert_current(connection: sqlite3.Connection, work: Claim, now: float | None = None) -> None:
    """Raise PermissionError unless `work` is the live holding of its assignment right now.

    Call it inside the transaction of the write it guards; a check in a separate transaction
    leaves a gap in which another holder can take over.
    """
    now = _clock(now)
    control = connection.execute("SELECT epoch, paused FROM assistant_control WHERE id=1").fetchone()
    database_file = connection.execute("PRAGMA database_list").fetchone()[2]
    try:
        marker_epoch = authority_marker(database_file).read_text()
    except OSError:
        raise PermissionError("authority marker is unavailable") from None
    if control is None or control["paused"] or not (work.epoch == control["epoch"] == marker_epoch):
        raise PermissionError("runtime paused or replaced by restore")
    held = connection.execute(
        "SELECT 1 FROM assistant_work WHERE id=? AND owner=? AND generation=? AND status='RUNNING' "
        "AND expires>? AND session=? AND prompt=? AND subject=? AND role=?",
        (work.id, work.owner, work.generation, now, work.session, work.prompt, work.subject, work.role),
    ).fetchone()
    if held is None:
        raise PermissionError("worker claim expired or superseded")
    if work.role == "research":
        contract = connection.execute(
            "SELECT d.deadline, parent.cancelled FROM assistant_delegations AS d "
            "JOIN assistant_work AS parent ON parent.id = d.parent_id WHERE d.work_id=?",
            (work.id,),
        ).fetchone()
        if contract is None or contract["deadline"] <= now or contract["cancelled"]:
            raise PermissionError("delegation expired or parent cancelled")


# A fence: raises PermissionError unless `work` is still current, inside the caller's transaction.
Fence = Callable[[sqlite3.Connection, Claim, "float | None"], None]


def observe(db: Database, work: Claim, message: dict[str, Any], *, now: float | None = None) -> None:
    """Append one transcript message, attributed to the generation that produced it."""
    if not isinstance(message, dict):
        raise ValueError("a transcript message is a JSON object")
    encoded = json.dumps(message, allow_nan=False, sort_keys=True)
    with db.immediate() as connection:
        assert_current(connection, work, now)
        connection.execute(
            "INSERT INTO assistant_transcript(work_id, generation, message) VALUES (?, ?, ?)",
            (work.id, work.generation, encoded),
        )


def finish(db: Database, work: Claim, status: str, result: str, *, now: float | None = None) -> None:
    """Record the outcome of the current holding; BLOCKED work waits a bounded, growing delay."""
    if status not in TERMINAL_STATES:
        raise ValueError(f"invalid terminal work state {status!r}: expected one of {sorted(TERMINAL_STATES)}")
    if not isinstance(result, str):
        raise ValueError("a work result is a string")
    now = _clock(now)
    retry_delay = min(60, 2 ** min(work.generation, 6)) if status == "BLOCKED" else 0
    with db.immediate() as connection:
        assert_current(connection, work, now)
        connection.execute(
            "UPDATE assistant_work SET status=?, result=?, expires=NULL, available_after=? WHERE id=?",
            (status, result, now + retry_delay, work.id),
        )
        append_event(
            db, "assistant.work.finished", {"work": work.id, "status": status, "generation": work.generation}
        )


def cancel(db: Database, identifier: str) -> bool:
    """The operator's path: stop an assignment and fence out whoever holds it.

    Unsent orders are revoked and their reservations released. Orders already SENDING or
    UNKNOWN keep their reservation: cancellation cannot recall a transmitted order, so their
    outcome must still be discovered. Returns False when the work had already finished.
    """
    with db.immediate() as connection:
        row = connection.execute("SELECT status FROM assistant_work WHERE id=?", (identifier,)).fetchone()
        if row is None:
            raise KeyError(f"no assignment {identifier!r}")
        if row["status"] in {"DONE", "CANCELLED"}:
            return False
        connection.execute(
            "UPDATE assistant_work SET status='CANCELLED', cancelled=1, generation=generation+1, "
            "expires=NULL, result='cancelled by operator' WHERE id=?",
            (identifier,),
        )
        released = connection.execute(
            "SELECT coalesce(sum(amount), 0) FROM assistant_orders WHERE work_id=? AND status='APPROVED'",
            (identifier,),
        ).fetchone()[0]
        connection.execute(
            "UPDATE assistant_orders SET status='REVOKED', revoked=1 "
            "WHERE work_id=? AND status IN ('DRAFT', 'APPROVED')",
            (identifier,),
        )
        connection.execute(
            "UPDATE assistant_spending SET reserved_pence = reserved_pence - ? WHERE id=1", (released,)
        )
        append_event(db, "assistant.work.cancelled", {"work": identifier, "released_pence": released})
        return True


def reserve_model_call(
    db: Database, work: Claim, estimate: int, *, now: float | None = None, fence: Fence = assert_current
) -> int:
    """Count one more model call against the assignment's budget, under the fence."""
    if isinstance(estimate, bool) or not isinstance(estimate, int) or not 0 < estimate <= 1_000_000:
        raise ValueError("a model call estimate is a positive whole number of tokens")
    now = _clock(now)
    with db.immediate() as connection:
        fence(connection, work, now)
        used = connection.execute(
            "SELECT count(*) FROM assistant_model_calls WHERE work_id=?", (work.id,)
        ).fetchone()[0]
        if used >= MODEL_CALLS_PER_WORK:
            raise BudgetExhausted(f"assignment {work.id} used all {MODEL_CALLS_PER_WORK} model calls")
        connection.execute(
            "INSERT INTO assistant_model_calls(work_id, generation, estimate, created) VALUES (?, ?, ?, ?)",
            (work.id, work.generation, estimate, now),
        )
        return used + 1


def _clock(now: float | None) -> float:
    now = time.time() if now is None else now
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ValueError("now must be a finite wall-clock time in seconds")
    return float(now)
