"""A history checker for the crash matrix, in the manner of Jepsen's Elle: read what one trial
recorded, then check invariants over that record alone, never over what the workers said.

    from course.checkpoint import history
    result = run_matrix(soak_specs(200, seed=7), "reference", output_dir=folder)
    history.check_soak(result)                     # {"trials": 200, "violations": {...}, ...}
    history.check(history.load(result.folder / result[0].case))   # [] or [Violation, ...]

`load` returns plain JSON data, the shape an invariant is written over: the logs (events,
transcript, the ledger's lists) in commit order; work, orders and account as they stand at the end:

    {"database": "/…/agent.sqlite", "ledger": "/…/supplier.sqlite",
     "events":     [{"seq": 3, "kind": "assistant.work.claimed", "created_at": 1.7e9,
                     "payload": {"work": W, "generation": 1, "owner": "…", "expires": 1.7e9}}, …],
     "transcript": [{"seq": 1, "work": W, "generation": 1}, …],
     "work":       [{"id": W, "status": "DONE", "generation": 2, "owner": "…", "expires": None}],
     "orders":     [{"id": OP, "work": W, "status": "CONFIRMED", "digest": "…", "amount": 1500}],
     "account":    {"reserved_pence": 0, "spent_pence": 1500, "limit_pence": 2500},
     "supplier":   {"orders":   [{"operation": OP, "proposal": {…}, "receipt": {…}}],
                    "requests": [{"seq": 1, "method": "POST", "operation": OP, "status": 201, "at": 1.7e9}],
                    "tokens":   [{"seq": 1, "operation": OP, "work": W, "generation": 2, "admitted": 1, "at": 1.7e9}]}}

Events are the shop's append-only log: each is written inside the transaction of the decision it
describes, so `seq` order is commit order. "transcript" holds each row's position and generation,
not its message. "supplier" is the supplier's own ledger (its "tokens" are empty when no order
carried a fencing token). Both files are opened read-only (`mode=ro`) and left as they were.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sovereign_agent import records
from sovereign_agent.assistant_orders import UNCERTAIN
from sovereign_agent.assistant_work import TERMINAL_STATES  # statuses only a completion writes

SHOP_FILE, LEDGER_FILE = "agent.sqlite", "supplier.sqlite"  # a trial folder's files (cases.prepare)
CLAIMED, FINISHED, CANCELLED = "assistant.work.claimed", "assistant.work.finished", "assistant.work.cancelled"
APPROVED, ENQUEUED = "assistant.order.approved", "assistant.work.enqueued"
UNKNOWN, SETTLED = "assistant.order.unknown", "assistant.order.settled"
RELEASED = ("REJECTED", "REVOKED")  # an approved order's reservation went back to the account


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str  # one sentence naming the assignment, order or generation


# --- reading one trial ----------------------------------------------------------------------------

def load(folder_or_paths: str | os.PathLike[str] | tuple[Any, Any]) -> dict[str, Any]:
    """One trial's history: a trial folder (agent.sqlite, supplier.sqlite), or (database, ledger)."""
    database, ledger = _paths(folder_or_paths)
    try:
        with _read_only(database) as shop, _read_only(ledger) as supplier:
            return {"database": str(database), "ledger": str(ledger), **_shop(shop), "supplier": _ledger(supplier)}
    except sqlite3.DatabaseError as error:
        raise ValueError(f"cannot read a trial's history from {database} and {ledger}: {error}") from None


def _paths(folder_or_paths: Any) -> tuple[Path, Path]:
    if isinstance(folder_or_paths, (str, os.PathLike)):
        folder = Path(folder_or_paths)
        paths = folder / SHOP_FILE, folder / LEDGER_FILE
    else:
        folder, paths = None, tuple(Path(path) for path in folder_or_paths)
    for path in paths:
        if not path.is_file():
            where = f"the folder {folder} has no {path.name}" if folder else f"{path} is not a file"
            raise FileNotFoundError(f"no trial history to read: {where} (expected a crash-matrix trial's "
                                    f"folder, with {SHOP_FILE} and {LEDGER_FILE}, or a (database, ledger) pair)")
    return paths


def _read_only(path: Path) -> closing[sqlite3.Connection]:
    """A read-only connection. With no write-ahead log beside the file (a finished trial), also
    `immutable`: a plain read-only open of a WAL database leaves new -wal and -shm files behind."""
    quiet = "" if Path(f"{path}-wal").exists() else "&immutable=1"
    return closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro{quiet}", uri=True))


def _shop(connection: sqlite3.Connection) -> dict[str, Any]:
    events = [{"seq": seq, "kind": kind, "payload": json.loads(payload), "created_at": at} for seq, kind, payload, at
              in connection.execute("SELECT seq, kind, payload, created_at FROM events ORDER BY seq")]
    assignments = [event["payload"]["work"] for event in events if event["kind"] == ENQUEUED]
    orders = [order for work in assignments for order in records.orders_of(connection, work)]
    reserved, spent = records.money(connection)
    return {
        "events": events,
        "transcript": _transcript(connection),
        "work": [{"id": work, **records.holding(connection, work)} for work in assignments],
        "orders": [{"id": o["id"], "work": o["work_id"], "status": o["status"], "digest": o["digest"],
                    "amount": o["amount"]} for o in orders],
        "account": {"reserved_pence": reserved, "spent_pence": spent,
                    "limit_pence": records.spending_ceiling(connection)},
    }


def _transcript(connection: sqlite3.Connection) -> list[dict[str, Any]]:
    """Each transcript row's place and generation (records has no named read of the transcript)."""
    rows = connection.execute("SELECT seq, work_id, generation FROM assistant_transcript ORDER BY seq")
    return [{"seq": seq, "work": work, "generation": generation} for seq, work, generation in rows]


def _ledger(connection: sqlite3.Connection) -> dict[str, Any]:
    """The supplier's own ledger (reference_organizations/store/supplier/server.py's SCHEMA)."""
    orders = [{"operation": operation, "proposal": json.loads(proposal), "receipt": json.loads(receipt)}
              for operation, proposal, receipt in connection.execute(
                  "SELECT operation, proposal, receipt FROM orders ORDER BY rowid")]
    requests = [dict(zip(("seq", "method", "operation", "status", "at"), row, strict=True)) for row in
                connection.execute("SELECT seq, method, operation, status, at FROM requests ORDER BY seq")]
    tokens = [dict(zip(("seq", "operation", "work", "generation", "admitted", "at"), row, strict=True))
              for row in connection.execute("SELECT seq, operation, work_id, generation, admitted, at FROM tokens "
                                            "ORDER BY seq")]
    return {"orders": orders, "requests": requests, "tokens": tokens}


# --- the invariants -------------------------------------------------------------------------------

def current_writer(history: dict[str, Any]) -> list[Violation]:
    """Every controlled write was made by the generation that held the assignment at its commit.

    Sees every event that carries a generation (proposal, admission `sending`, `unknown`, `lookup`,
    receipt `settled`, completion `finished`), against the claims, completions and cancellations
    committed before it: after a claim its generation holds the assignment; after a completion or
    a cancellation nobody does. Transcript rows carry a generation but no place among the events,
    so a row is seen only when it follows a newer generation's row or names a generation never
    claimed. Cannot see: a write after the lease ran out but before a new claim (nothing records an
    expiry), a stale transcript row before the new holder's first row, writes that leave no event
    (model-call rows, a proposal already recorded) or whose owner label is wrong.
    """
    found, holder = [], {}
    work_of = {order["id"]: order["work"] for order in history["orders"]}
    for event in history["events"]:
        kind, payload = event["kind"], event["payload"]
        work = payload.get("work") or work_of.get(payload.get("order"))
        if kind == CLAIMED:
            holder[work] = payload["generation"]
        elif "generation" in payload and payload["generation"] != holder.get(work):
            held = f"generation {holder[work]} held it" if holder.get(work) else "nobody held it"
            found.append(Violation("current_writer", f"event {event['seq']} ({kind}) on assignment {work} was "
                                   f"written by generation {payload['generation']} while {held}"))
        if kind in (FINISHED, CANCELLED):
            holder[work] = None
    return found + _stale_transcript(history)


def _stale_transcript(history: dict[str, Any]) -> list[Violation]:
    """Transcript rows, ordered among themselves only: a generation never claimed, or one older than a row before."""
    claimed = {(e["payload"]["work"], e["payload"]["generation"]) for e in history["events"] if e["kind"] == CLAIMED}
    found, newest = [], {}
    for row in history["transcript"]:
        work, generation = row["work"], row["generation"]
        if (work, generation) not in claimed or generation < newest.get(work, 0):
            why = "never claimed" if (work, generation) not in claimed else f"after generation {newest[work]}'s rows"
            found.append(Violation("current_writer", f"transcript row {row['seq']} of assignment {work} was written "
                                   f"by generation {generation}, {why}"))
        newest[work] = max(newest.get(work, 0), generation)
    return found


def one_order_per_operation(history: dict[str, Any]) -> list[Violation]:
    """The supplier's ledger holds at most one order per operation id (counted there, not in the shop).
    This supplier keys its ledger by operation, so only a supplier without that key can break it."""
    work_of = {order["id"]: order["work"] for order in history["orders"]}
    counted = Counter(order["operation"] for order in history["supplier"]["orders"])
    return [Violation("one_order_per_operation", f"the supplier's ledger holds {count} orders for operation "
                      f"{operation} (assignment {work_of.get(operation)})")
            for operation, count in counted.items() if count > 1]


def money_conserved(history: dict[str, Any]) -> list[Violation]:
    """reserved + spent + released = approved, where approved sums the approval events' amounts and
    released sums the amounts of approved orders now REJECTED or REVOKED. Blind to money moved
    between reserved and spent: the sum is the same."""
    approved = {e["payload"]["order"]: e["payload"]["amount"] for e in history["events"] if e["kind"] == APPROVED}
    released = sum(o["amount"] for o in history["orders"] if o["id"] in approved and o["status"] in RELEASED)
    reserved, spent = history["account"]["reserved_pence"], history["account"]["spent_pence"]
    if reserved + spent + released == sum(approved.values()):
        return []
    return [Violation("money_conserved", f"reserved {reserved} + spent {spent} + released {released} pence is not "
                      f"the {sum(approved.values())} pence approved for orders {sorted(approved)}")]


def done_means_settled(history: dict[str, Any]) -> list[Violation]:
    """No assignment is DONE while one of its orders may still be at the supplier, unsettled."""
    done = {work["id"] for work in history["work"] if work["status"] == "DONE"}
    return [Violation("done_means_settled", f"assignment {order['work']} is DONE while its order {order['id']} "
                      f"is {order['status']}")
            for order in history["orders"] if order["work"] in done and order["status"] in UNCERTAIN]


def reconciled_first(history: dict[str, Any]) -> list[Violation]:
    """No other assignment is claimed while one waits, BLOCKED, on an order whose answer was lost:
    an order in doubt is looked up before new work (a later claim of that same assignment, the
    recovery, is fine). Sees only what finished BLOCKED; a holder that died mid-send leaves its
    assignment RUNNING, and the next claim of anything is its recovery or the lease's business."""
    found, in_doubt, work_of = [], {}, {order["id"]: order["work"] for order in history["orders"]}
    unknown = set()  # orders whose last admission event was `unknown`, not yet settled
    for event in history["events"]:
        kind, payload = event["kind"], event["payload"]
        if kind == UNKNOWN:
            unknown.add(payload["order"])
        elif kind == SETTLED:
            unknown.discard(payload["order"])
            in_doubt.pop(work_of.get(payload["order"]), None)
        elif kind == FINISHED and payload.get("status") == "BLOCKED":
            doubtful = sorted(order for order in unknown if work_of.get(order) == payload["work"])
            if doubtful:
                in_doubt[payload["work"]] = doubtful[0]
        elif kind == CLAIMED:
            for work, order in in_doubt.items():
                if work != payload["work"]:
                    found.append(Violation("reconciled_first", f"event {event['seq']} claimed assignment "
                                           f"{payload['work']} while assignment {work} waited BLOCKED on order "
                                           f"{order}, whose answer was lost"))
    return found


def finished_with_event(history: dict[str, Any]) -> list[Violation]:
    """An assignment's final status is the one its last completion event recorded: a completion
    that left no event (written around the fences) shows as a status nothing in the log explains."""
    last = {e["payload"]["work"]: e["payload"].get("status", "CANCELLED") for e in history["events"]
            if e["kind"] in (FINISHED, CANCELLED)}
    return [Violation("finished_with_event", f"assignment {work['id']} ended {work['status']}, but its last "
                      f"completion event recorded {last.get(work['id']) or 'none'}")
            for work in history["work"] if work["status"] in TERMINAL_STATES and last.get(work["id"]) != work["status"]]


INVARIANTS: dict[str, Callable[[dict[str, Any]], list[Violation]]] = {
    invariant.__name__: invariant
    for invariant in (current_writer, one_order_per_operation, money_conserved, done_means_settled,
                      reconciled_first, finished_with_event)
}


def check(history: dict[str, Any]) -> list[Violation]:
    """Every invariant over one history, in INVARIANTS order."""
    return [violation for invariant in INVARIANTS.values() for violation in invariant(history)]


# --- a whole soak ---------------------------------------------------------------------------------

def check_soak(result_or_folder: Any) -> dict[str, Any]:
    """Check every trial of a run kept on disk: a MatrixResult run with `output_dir`, or its folder."""
    folder, trials = _soak(result_or_folder)
    summary: dict[str, Any] = {"trials": len(trials), "checked": 0, "violations": dict.fromkeys(INVARIANTS, 0),
                               "first": dict.fromkeys(INVARIANTS), "unreadable": []}
    for trial in trials:  # in spec order: the first violation found is the first trial's
        where = {"index": trial["index"], "point": trial["point"], "nemesis": trial["nemesis"]}
        try:
            found = check(load(folder / trial["case"]))
        except (OSError, ValueError) as error:  # a trial that stopped before its files existed
            summary["unreadable"].append({**where, "error": str(error)})
            continue
        summary["checked"] += 1
        for violation in found:
            summary["violations"][violation.invariant] += 1
            if summary["first"][violation.invariant] is None:
                summary["first"][violation.invariant] = {**where, "detail": violation.detail}
    return summary


def _soak(result_or_folder: Any) -> tuple[Path, list[dict[str, Any]]]:
    """The run's folder and its trials (case, index, point, nemesis), from the result or evidence.json."""
    if isinstance(result_or_folder, (str, os.PathLike)):
        folder = Path(result_or_folder)
        if not (folder / "evidence.json").is_file():
            raise FileNotFoundError(f"{folder} has no evidence.json: expected the folder of one matrix run "
                                    "(run_matrix(..., output_dir=...) creates it, as result.folder)")
        return folder, json.loads((folder / "evidence.json").read_text())
    if result_or_folder.folder is None:
        raise ValueError("this run kept no files: run the soak with run_matrix(..., output_dir=...)")
    return result_or_folder.folder, [{"case": trial.case, "index": trial.index, "point": trial.point,
                                      "nemesis": trial.nemesis} for trial in result_or_folder]
