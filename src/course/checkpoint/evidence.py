"""Counted evidence: every number in a case's record is read from where it happened.

Exit status from Popen.returncode; generation, work state, transcript rows, model-call rows,
money and events from the shop's SQLite file; orders and requests from the supplier's own
ledger file, opened with plain sqlite3 (never the shop's opinion of what it sent); model calls
from the instrumented model; refused boundaries as the old worker reported them; times from
the wall clock. No literal stands in for a count.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from contextlib import closing
import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sovereign_agent.assistant_work import Claim


@dataclass
class CaseEvidence:
    case: str
    title: str
    implementation: str
    lease_seconds: float
    failures: list[str] = field(default_factory=list)

    # the old worker, as the operating system saw it
    worker_pid: int | None = None
    supplier_pid: int | None = None
    worker_owner: str | None = None
    worker_exit: int | None = None  # Popen.returncode: -9 means killed by SIGKILL
    worker_signal: str | None = None
    worker_state_when_paused: str | None = None  # /proc state letter after SIGSTOP ('T')

    # whose code ran: the fences (01, 02, 04) and the worker pass (05), the learner's or the runtime's
    fences_learner: bool = True
    worker_learner: bool = False

    # what the old worker held
    work_id: str | None = None
    old_generation: int | None = None
    operation: str | None = None  # the approved order's operation id, from the old worker
    order_amount: int | None = None
    competing_claim: dict[str, Any] | None = None  # None: refused, as it must be
    competing_claim_lease_left: float | None = None  # seconds of the live lease at that moment

    # the assignment after the replacement (shop database)
    generation: int | None = None
    owner: str | None = None
    work_status: str | None = None
    work_result: str | None = None
    order_status: str | None = None
    order_status_after_crash: str | None = None  # accepted_then_crash: local state right after the kill
    supplier_orders_at_crash: int | None = None  # ... and the supplier's count at that moment
    transcript_rows: dict[str, int] = field(default_factory=dict)  # generation -> rows
    reserved_pence: int | None = None
    spent_pence: int | None = None
    model_calls_recorded: int | None = None  # assistant_model_calls rows since the takeover

    # the supplier (its own ledger file)
    supplier_orders: int | None = None
    supplier_operations: list[str] = field(default_factory=list)
    supplier_posts: int | None = None
    # Orders whose fencing token was older than one the supplier had already admitted: admitted anyway
    # (an unfenced supplier), refused (a fenced one).
    supplier_stale_admitted: int | None = None
    supplier_stale_refused: int | None = None
    supplier_gets: int | None = None

    # the replacement
    replacement: dict[str, Any] | None = None
    model_calls: int | None = None  # counted by NoNewReasoning
    later_work: dict[str, Any] | None = None
    after_lost_answer: dict[str, Any] | None = None  # answer_lost: the records when the old pass ended

    # the old holder's writes after the takeover, as it reported them
    expired_probe: list[dict[str, Any]] = field(default_factory=list)
    stale_attempts: list[dict[str, Any]] = field(default_factory=list)
    refused_boundaries: list[str] = field(default_factory=list)

    # time (wall clock, seconds)
    prepare_seconds: float | None = None  # database, worker start, supplier start (may overlap the previous case)
    started_at: float | None = None  # the claim command: the case proper starts here
    wall_seconds: float | None = None  # from started_at until every process of the case was stopped
    lease_started_at: float | None = None  # the old worker, right after its claim returned
    lease_expires_at: float | None = None  # the row's `expires`
    expiry_observed_at: float | None = None  # when the parent's poll saw the lease had run out
    lease_waited_seconds: float | None = None  # lease_expires_at - lease_started_at

    # runs of this case: one more each time the experiment itself went wrong (verdict.experiment_failed)
    tries: int = 1

    # for the timeline
    events: list[dict[str, Any]] = field(default_factory=list)
    supplier_requests: list[dict[str, Any]] = field(default_factory=list)
    marks: list[dict[str, Any]] = field(default_factory=list)
    leases: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def mark(self, lane: str, what: str, at: float, **details: Any) -> None:
        self.marks.append({"lane": lane, "what": what, "at": at, **details})

    def facts(self) -> list[str]:
        """The counted facts of this case, in the order a reader checks them."""
        facts = []
        if self.worker_exit is not None:
            facts.append(f"old worker exit {self.worker_exit}" + (f" ({self.worker_signal})" if self.worker_signal else ""))
        if self.generation is not None:
            facts.append(f"generation {self.generation} {self.work_status}")
        if self.supplier_orders is not None:
            facts.append(f"supplier orders {self.supplier_orders}, POST {self.supplier_posts}, GET {self.supplier_gets}")
        if self.supplier_stale_admitted or self.supplier_stale_refused:
            facts.append(f"stale orders at the supplier: {self.supplier_stale_admitted} admitted, "
                         f"{self.supplier_stale_refused} refused by its fence")
        if self.model_calls is not None:
            facts.append(f"model calls {self.model_calls}")
        if self.stale_attempts:
            facts.append(f"stale writes refused {len(self.refused_boundaries)}/{len(self.stale_attempts)}")
        return facts

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, **asdict(self)}


def claim_fields(claim: Any) -> dict[str, Any]:
    """A claim as plain JSON data, field by field as `Claim` declares them (a learner's claim
    object may lack some: those read None)."""
    return {f.name: getattr(claim, f.name, None) for f in dataclasses.fields(Claim)}


def exit_signal(returncode: int | None) -> str | None:
    """-9 -> 'SIGKILL'; a normal exit -> None."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def count_supplier(ledger: Path) -> dict[str, Any]:
    """Orders and requests straight from the supplier's ledger file."""
    # Here, not at the top: each checkpoint worker imports this module, and most never call the supplier.
    from reference_organizations.store.supplier.process import ledger_tokens, stale_tokens

    with closing(sqlite3.connect(ledger, timeout=10)) as db:
        operations = [row[0] for row in db.execute("SELECT operation FROM orders ORDER BY rowid")]
        requests = [
            dict(zip(("seq", "method", "operation", "status", "at"), row, strict=True))
            for row in db.execute("SELECT seq, method, operation, status, at FROM requests ORDER BY seq")
        ]
    on_orders = [r for r in requests if r["operation"] is not None]  # not /health or malformed paths
    stale = stale_tokens(ledger_tokens(ledger))
    return {
        "stale_admitted": sum(1 for token in stale if token["admitted"]),
        "stale_refused": sum(1 for token in stale if not token["admitted"]),
        "orders": len(operations),
        "operations": operations,
        "posts": sum(r["method"] == "POST" for r in on_orders),
        "gets": sum(r["method"] == "GET" for r in on_orders),
        "requests": requests,
    }


def count_shop(database: Path, work_id: str, *, since_generation: int = 2) -> dict[str, Any]:
    """The assignment's state, its transcript by generation, model calls, money and events."""
    with closing(sqlite3.connect(database, timeout=10)) as db:
        db.row_factory = sqlite3.Row
        work = db.execute(
            "SELECT generation, owner, status, result FROM assistant_work WHERE id=?", (work_id,)
        ).fetchone()
        # Every generation the assignment has had, with its count (0 included), plus any other
        # generation a transcript row claims to come from.
        counted = dict(db.execute(
            "SELECT generation, count(*) FROM assistant_transcript WHERE work_id=? GROUP BY generation", (work_id,)
        ).fetchall())
        generations = set(range(1, (work["generation"] if work else 0) + 1)) | set(counted)
        transcript = {str(generation): counted.get(generation, 0) for generation in sorted(generations)}
        model_calls = db.execute(
            "SELECT count(*) FROM assistant_model_calls WHERE work_id=? AND generation>=?",
            (work_id, since_generation),
        ).fetchone()[0]
        money = db.execute("SELECT reserved_pence, spent_pence FROM assistant_spending WHERE id=1").fetchone()
        orders = [dict(row) for row in db.execute(
            "SELECT id, status, amount FROM assistant_orders WHERE work_id=? ORDER BY created, rowid", (work_id,)
        )]
        events = [
            {"seq": row["seq"], "kind": row["kind"], "payload": json.loads(row["payload"]),
             "created_at": row["created_at"]}
            for row in db.execute("SELECT seq, kind, payload, created_at FROM events ORDER BY seq")
        ]
    return {
        "generation": work["generation"] if work else None,
        "owner": work["owner"] if work else None,
        "status": work["status"] if work else None,
        "result": work["result"] if work else None,
        "transcript": transcript,
        "model_calls": model_calls,
        "reserved_pence": money["reserved_pence"] if money else None,
        "spent_pence": money["spent_pence"] if money else None,
        "orders": orders,
        "events": events,
    }


def work_state(database: Path, work_id: str) -> dict[str, Any]:
    """One assignment's row and its orders' states, right now (used mid-case)."""
    with closing(sqlite3.connect(database, timeout=10)) as db:
        db.row_factory = sqlite3.Row
        row = db.execute(
            "SELECT status, generation, owner, expires, available_after FROM assistant_work WHERE id=?", (work_id,)
        ).fetchone()
        orders = [r["status"] for r in db.execute(
            "SELECT status FROM assistant_orders WHERE work_id=? ORDER BY created, rowid", (work_id,)
        )]
    return {**(dict(row) if row else {}), "orders": orders}


def transcript_rows(database: Path, work_id: str) -> int:
    with closing(sqlite3.connect(database, timeout=10)) as db:
        return db.execute("SELECT count(*) FROM assistant_transcript WHERE work_id=?", (work_id,)).fetchone()[0]


def last_rows(database: Path) -> dict[str, int]:
    """The last row of each log now: what a takeover snapshot compares later rows against."""
    with closing(sqlite3.connect(database, timeout=10)) as db:
        return {table: db.execute(f"SELECT coalesce(max(rowid), 0) FROM {table}").fetchone()[0]
                for table in ("assistant_transcript", "assistant_model_calls", "events")}


def first_claim(database: Path) -> sqlite3.Row | None:
    """The first claim event (payload, created_at): the old worker's generation and lease."""
    with closing(sqlite3.connect(database, timeout=10)) as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT payload, created_at FROM events WHERE kind='assistant.work.claimed' "
                          "ORDER BY seq LIMIT 1").fetchone()


def first_order(database: Path, work_id: str) -> sqlite3.Row | None:
    """The assignment's first order (id, amount)."""
    with closing(sqlite3.connect(database, timeout=10)) as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT id, amount FROM assistant_orders WHERE work_id=? ORDER BY created, rowid LIMIT 1",
                          (work_id,)).fetchone()


def stale_rows(database: Path, last: dict[str, int]) -> dict[str, int]:
    """Rows written after the takeover snapshot by a generation older than the newest claim."""
    with closing(sqlite3.connect(database, timeout=10)) as db:
        highest = db.execute("SELECT coalesce(max(generation), 0) FROM assistant_work").fetchone()[0]
        count = {
            "transcript rows": db.execute("SELECT count(*) FROM assistant_transcript WHERE rowid>? AND generation<?",
                                          (last["assistant_transcript"], highest)).fetchone()[0],
            "model-call rows": db.execute("SELECT count(*) FROM assistant_model_calls WHERE rowid>? AND generation<?",
                                          (last["assistant_model_calls"], highest)).fetchone()[0],
        }
        events = db.execute("SELECT kind, payload FROM events WHERE seq>?", (last["events"],)).fetchall()
    for kind, payload in events:
        generation = json.loads(payload).get("generation")
        if generation is None or generation >= highest:
            continue
        what = {"assistant.work.finished": "finished events", "assistant.work.claimed": "claim events"}.get(
            kind, "order events" if kind.startswith("assistant.order.") else "other events")
        count[what] = count.get(what, 0) + 1
    return count


def lease_union(evidence: list[CaseEvidence]) -> float:
    """Real lease time waited across cases: the UNION of each case's [claim, row's expires].

    Cases run one after another, so the intervals do not overlap and the union is their sum; if
    they ever ran concurrently, overlapping waits would be counted once, never twice.
    """
    intervals = sorted(
        (e.lease_started_at, e.lease_expires_at)
        for e in evidence
        if e.lease_started_at is not None and e.lease_expires_at is not None
    )
    total, current_start, current_end = 0.0, None, None
    for start, end in intervals:
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total
