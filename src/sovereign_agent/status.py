"""An operational status report: four separate answers, never one green light.

* ``health``: are the parts up? The database opens and passes ``quick_check``, its authority
  marker agrees with it, the runtime is or is not paused, (if a supplier client is given) the
  supplier answers, and each holder's process, as its worker recorded it, is or is not running
  (sovereign_agent.processes: same host, same boot, same pid and start time).
* ``progress``: is the work moving? Counts by status, live holders with their lease left and the
  transcript rows their generation has written (a live holder alone is not progress),
  expired holders still awaiting a replacement, blocked work and when it may retry.
* ``cancellation``: what operators stopped, and which of those assignments still have a
  supplier order whose outcome nobody knows.
* ``external``: what happened outside: orders by status, money reserved / spent / limit, and
  uncertain orders awaiting reconciliation.

These disagree in exactly the cases that matter: a holder whose process is gone while its lease
still runs (nobody may take the work over yet); a running process whose lease ran out (alive,
but no longer allowed to write); DONE work whose order is UNKNOWN at the supplier. Each section therefore carries
its own ``attention`` list, and nothing folds them into a single status.

The report only reads. Given a path, it opens the file read-only, so it can describe a database
that `Database` would refuse to open (a mismatched authority marker, say) without migrating or
repairing anything. Every database figure comes from one read transaction (one snapshot).

Supplier reachability: pass any object with a ``health()`` method that returns a dict (shown as
the detail) or raises (shown as unreachable). The call is made outside the read transaction and
must be bounded by the client's own timeout (``SupplierClient.health()`` asks the supplier's
``GET /health``). A client without ``health()`` is reported as
"not checked"; the report never sends an order or looks one up just to probe the supplier,
because those requests would show up in the supplier's own records.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sovereign_agent.database import BUSY_TIMEOUT_SECONDS, Database, authority_marker
from sovereign_agent.processes import is_running

WORK_STATES = ("READY", "RUNNING", "DONE", "BLOCKED", "CANCELLED")
ORDER_STATES = ("DRAFT", "APPROVED", "SENDING", "UNKNOWN", "CONFIRMED", "REJECTED", "REVOKED")
LIST_LIMIT = 100  # rows per list; the counts are always complete


def status_report(
    db: Database | str | os.PathLike[str], *, supplier: Any = None, now: float | None = None
) -> dict[str, Any]:
    """Read the runtime's state into four sections; see the module docstring."""
    now = time.time() if now is None else float(now)
    report: dict[str, Any] = {
        "generated_at": now,
        "health": {},
        "progress": None,
        "cancellation": None,
        "external": None,
    }
    connection, owned, database = _connect(db)
    health = report["health"]
    health["database"] = database
    if connection is not None:
        try:
            began = not connection.in_transaction
            if began:
                connection.execute("BEGIN")  # one snapshot for every figure below
            try:
                health.update(_health(connection))
                health["processes"] = _processes(connection, now)
                report["progress"] = _progress(connection, now, paused=health["paused"])
                report["cancellation"] = _cancellation(connection)
                report["external"] = _external(connection, now)
            finally:
                if began:
                    connection.execute("COMMIT")
        except sqlite3.Error as error:
            database.update(ok=False, error=f"{type(error).__name__}: {error}")
        finally:
            if owned:
                connection.close()
    health["supplier"] = _supplier(supplier)
    health["attention"] = _health_attention(health)
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as plain text for a terminal: four blocks of one shape, a title, the facts,
    then what needs attention."""
    lines: list[str] = []
    for title, key, facts in (
        ("HEALTH", "health", _health_lines),
        ("PROGRESS", "progress", _progress_lines),
        ("CANCELLATION", "cancellation", _cancellation_lines),
        ("EXTERNAL", "external", _external_lines),
    ):
        section = report[key]
        lines.append(title)
        if section is None:
            lines.append("  unknown (database unavailable)")
            continue
        lines.extend(facts(section))
        lines.extend(f"  ! {item}" for item in section["attention"])
    return "\n".join(lines)


def _health_lines(health: dict[str, Any]) -> list[str]:
    database = health["database"]
    lines = [
        f"  database      {'ok' if database['ok'] else 'NOT OK'}  {database['path']}"
        + (f"  (schema {health.get('schema_version')})" if database["ok"] else f"  {database['error']}")
    ]
    if "quick_check" in health:
        check, authority = health["quick_check"], health["authority"]
        lines += [
            f"  quick_check   {'ok' if check['ok'] else 'FAILED: ' + '; '.join(check['messages'])}",
            f"  authority     {'consistent' if authority['ok'] else 'INCONSISTENT: ' + authority['problem']}",
            f"  runtime       {'PAUSED' if health['paused'] else 'accepting work'}",
        ]
    lines += [
        f"  process       {held['owner']}  pid {held['pid'] or '-'}  "
        + {True: "running", False: "NOT RUNNING", None: "cannot tell here"}[held["running"]]
        + f"  holds {held['work']} (generation {held['generation']})"
        for held in health.get("processes", [])
    ]
    supplier = health["supplier"]
    if not supplier["checked"]:
        lines.append(f"  supplier      not checked ({supplier['error'] or 'no supplier client given'})")
    else:
        lines.append(f"  supplier      {'reachable' if supplier['ok'] else 'UNREACHABLE: ' + supplier['error']}")
    return lines


def _progress_lines(progress: dict[str, Any]) -> list[str]:
    lines = ["  work          " + "  ".join(f"{state} {progress['counts'][state]}" for state in WORK_STATES)]
    lines += [
        f"  live holder   {holder['work']}  session {holder['session']}  owner {holder['owner']}"
        f"  generation {holder['generation']}  {holder['seconds_left']:.1f} s left"
        f"  {holder['transcript_rows']} transcript row(s) written"
        for holder in progress["live_holders"]
    ]
    lines += [
        f"  EXPIRED       {holder['work']}  session {holder['session']}  owner {holder['owner']}"
        f"  generation {holder['generation']}  expired {holder['expired_seconds_ago']:.1f} s ago"
        for holder in progress["expired_holders"]
    ]
    lines += [
        f"  blocked       {item['work']}  generation {item['generation']}"
        f"  retry {_when(item['seconds_until_retry'])}  {item['result'] or ''}".rstrip()
        for item in progress["blocked"]
    ]
    waiting = progress["waiting"]
    if waiting["ready"]:
        lines.append(f"  waiting       {waiting['ready']} READY, oldest {waiting['oldest_age_seconds']:.1f} s")
    return lines


def _cancellation_lines(cancellation: dict[str, Any]) -> list[str]:
    lines = [f"  cancelled     {cancellation['total']} assignment(s)"]
    lines += [f"  cancelled     {item['work']}  session {item['session']}  now {item['status']}"
              for item in cancellation["cancelled"]]
    lines += [
        f"  UNCERTAIN     {item['work']}  order {item['order']} {item['order_status']}"
        f"  {item['amount_pence']} pence still reserved"
        for item in cancellation["uncertain"]
    ]
    return lines


def _external_lines(external: dict[str, Any]) -> list[str]:
    lines = ["  orders        " + "  ".join(f"{state} {external['orders'][state]}" for state in ORDER_STATES)]
    money = external["money"]
    if money is None:
        lines.append("  money         no spending account")
    else:
        lines.append(
            f"  money         reserved {money['reserved_pence']}  spent {money['spent_pence']}"
            f"  limit {money['limit_pence']}  available {money['available_pence']} (pence)"
            + ("" if external["ledger_consistent"] else "  LEDGER DISAGREES WITH ORDERS")
        )
    lines += [
        f"  {item['status']:<13} order {item['order']}  {item['amount_pence']} pence"
        f"  work {item['work']} ({item['work_status']})  "
        + ("no recovery pass takes DONE work: reconcile it by hand" if item["work_status"] == "DONE"
           else "awaiting reconciliation")
        for item in external["uncertain"]
    ]
    return lines


# --- sections -----------------------------------------------------------------------------------


def _connect(db: Any) -> tuple[sqlite3.Connection | None, bool, dict[str, Any]]:
    if isinstance(db, Database):
        return db.connection, False, {"ok": True, "path": str(db.path), "error": None}
    path = Path(db)
    database = {"ok": False, "path": str(path), "error": None}
    if not path.is_file():
        database["error"] = "no database file"
        return None, False, database
    try:
        connection = sqlite3.connect(
            path.resolve().as_uri() + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None
        )
        connection.row_factory = sqlite3.Row
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as error:
        database["error"] = f"{type(error).__name__}: {error}"
        return None, False, database
    database["ok"] = True
    return connection, True, database


def _health(connection: sqlite3.Connection) -> dict[str, Any]:
    messages = [r[0] for r in connection.execute("PRAGMA quick_check")]
    control = connection.execute("SELECT epoch, paused FROM assistant_control WHERE id=1").fetchone()
    database_file = connection.execute("PRAGMA database_list").fetchone()[2]
    marker = authority_marker(database_file)
    try:
        marker_epoch: str | None = marker.read_text()
    except OSError:
        marker_epoch = None
    epoch = control["epoch"] if control else None
    if epoch is None:
        problem = "no epoch recorded in the database"
    elif marker_epoch is None:
        problem = f"authority marker {marker} is missing"
    elif marker_epoch != epoch:
        problem = f"authority marker {marker} does not match the database's epoch"
    else:
        problem = None
    return {
        "schema_version": connection.execute("PRAGMA user_version").fetchone()[0],
        "quick_check": {"ok": messages == ["ok"], "messages": messages},
        "authority": {"ok": problem is None, "epoch": epoch, "marker": marker_epoch, "problem": problem},
        "paused": bool(control["paused"]) if control else None,
    }


def _processes(connection: sqlite3.Connection, now: float) -> list[dict[str, Any]]:
    """Each RUNNING holder's process as its worker recorded it, checked against the OS now."""
    if not connection.execute("SELECT 1 FROM sqlite_master WHERE name='assistant_processes'").fetchone():
        return []  # a database from before processes were recorded
    rows = connection.execute(
        "SELECT w.id, w.owner, w.generation, w.expires, p.host, p.boot, p.pid, p.started "
        "FROM assistant_work w LEFT JOIN assistant_processes p ON p.owner = w.owner "
        "WHERE w.status='RUNNING' ORDER BY w.expires LIMIT ?",
        (LIST_LIMIT,),
    )
    found = []
    for r in rows:
        record = None if r["pid"] is None else {k: r[k] for k in ("host", "boot", "pid", "started")}
        found.append({"work": r["id"], "owner": r["owner"], "generation": r["generation"],
                      "pid": r["pid"], "host": r["host"], "running": is_running(record),
                      "lease_seconds_left": r["expires"] - now})
    return found


def _holders(connection: sqlite3.Connection, now: float, *, live: bool) -> list[dict[str, Any]]:
    """RUNNING holders whose lease still runs (live) or has run out, the soonest expiry first."""
    rows = connection.execute(
        "SELECT id, session, owner, generation, expires FROM assistant_work "
        f"WHERE status='RUNNING' AND expires{'>' if live else '<='}? ORDER BY expires LIMIT ?",
        (now, LIST_LIMIT),
    )
    return [
        {"work": r["id"], "session": r["session"], "owner": r["owner"], "generation": r["generation"],
         **({"seconds_left": r["expires"] - now} if live else {"expired_seconds_ago": now - r["expires"]}),
         "transcript_rows": _rows_written(connection, r["id"], r["generation"])}
        for r in rows.fetchall()
    ]


def _rows_written(connection: sqlite3.Connection, work_id: str, generation: int) -> int:
    """Transcript rows this holding (its generation) has written: evidence of progress, from records."""
    return connection.execute(
        "SELECT count(*) FROM assistant_transcript WHERE work_id=? AND generation=?", (work_id, generation)
    ).fetchone()[0]


def _progress(connection: sqlite3.Connection, now: float, *, paused: bool | None) -> dict[str, Any]:
    counts = dict.fromkeys(WORK_STATES, 0)
    counts.update(
        {r[0]: r[1] for r in connection.execute("SELECT status, count(*) FROM assistant_work GROUP BY status")}
    )
    live, expired = _holders(connection, now, live=True), _holders(connection, now, live=False)
    expired_total = connection.execute(
        "SELECT count(*) FROM assistant_work WHERE status='RUNNING' AND expires<=?", (now,)
    ).fetchone()[0]
    blocked = [
        {
            "work": r["id"],
            "session": r["session"],
            "generation": r["generation"],
            "retry_at": r["available_after"],
            "seconds_until_retry": max(0.0, r["available_after"] - now),
            "result": r["result"],
            "cancelled": bool(r["cancelled"]),
        }
        for r in connection.execute(
            "SELECT id, session, generation, available_after, result, cancelled FROM assistant_work "
            "WHERE status='BLOCKED' ORDER BY available_after LIMIT ?",
            (LIST_LIMIT,),
        )
    ]
    oldest = connection.execute("SELECT min(created) FROM assistant_work WHERE status='READY'").fetchone()[0]
    attention = []
    if expired_total:
        attention.append(
            f"{expired_total} expired holder(s) awaiting replacement: their leases ran out and no worker has taken over"
        )
    if paused and (counts["READY"] or expired_total):
        attention.append("runtime is paused: no work will be claimed")
    return {
        "counts": counts,
        "live_holders": live,
        "expired_holders": expired,
        "blocked": blocked,
        "waiting": {"ready": counts["READY"], "oldest_age_seconds": None if oldest is None else now - oldest},
        "attention": attention,
    }


def _cancellation(connection: sqlite3.Connection) -> dict[str, Any]:
    total = connection.execute("SELECT count(*) FROM assistant_work WHERE cancelled=1").fetchone()[0]
    cancelled = [
        {
            "work": r["id"],
            "session": r["session"],
            "status": r["status"],
            "generation": r["generation"],
            "result": r["result"],
        }
        for r in connection.execute(
            "SELECT id, session, status, generation, result FROM assistant_work WHERE cancelled=1 "
            "ORDER BY created, rowid LIMIT ?",
            (LIST_LIMIT,),
        )
    ]
    uncertain = [
        {
            "work": r["work_id"],
            "order": r["id"],
            "order_status": r["status"],
            "amount_pence": r["amount"],
            "work_status": r["work_status"],
        }
        for r in connection.execute(
            "SELECT o.work_id, o.id, o.status, o.amount, w.status AS work_status FROM assistant_orders o "
            "JOIN assistant_work w ON w.id = o.work_id "
            "WHERE w.cancelled=1 AND o.status IN ('SENDING', 'UNKNOWN') ORDER BY o.created, o.rowid LIMIT ?",
            (LIST_LIMIT,),
        )
    ]
    attention = [
        f"cancelled work {item['work']} still has order {item['order']} {item['order_status']}: "
        "cancellation cannot recall it; its outcome must be reconciled"
        for item in uncertain
    ]
    return {"total": total, "cancelled": cancelled, "uncertain": uncertain, "attention": attention}


def _external(connection: sqlite3.Connection, now: float) -> dict[str, Any]:
    orders = dict.fromkeys(ORDER_STATES, 0)
    orders.update(
        {r[0]: r[1] for r in connection.execute("SELECT status, count(*) FROM assistant_orders GROUP BY status")}
    )
    account = connection.execute(
        "SELECT limit_pence, reserved_pence, spent_pence FROM assistant_spending WHERE id=1"
    ).fetchone()
    sums = connection.execute(
        "SELECT coalesce(sum(CASE WHEN status IN ('APPROVED', 'SENDING', 'UNKNOWN') THEN amount END), 0), "
        "coalesce(sum(CASE WHEN status='CONFIRMED' THEN amount END), 0) FROM assistant_orders"
    ).fetchone()
    money = None
    if account is not None:
        money = {
            "limit_pence": account["limit_pence"],
            "reserved_pence": account["reserved_pence"],
            "spent_pence": account["spent_pence"],
            "available_pence": account["limit_pence"] - account["reserved_pence"] - account["spent_pence"],
        }
    consistent = money is not None and (money["reserved_pence"], money["spent_pence"]) == (sums[0], sums[1])
    uncertain = [
        {
            "order": r["id"],
            "work": r["work_id"],
            "status": r["status"],
            "amount_pence": r["amount"],
            "work_status": r["work_status"],
            "work_cancelled": bool(r["cancelled"]),
            "age_seconds": now - r["created"],
        }
        for r in connection.execute(
            "SELECT o.id, o.work_id, o.status, o.amount, o.created, w.status AS work_status, w.cancelled "
            "FROM assistant_orders o JOIN assistant_work w ON w.id = o.work_id "
            "WHERE o.status IN ('SENDING', 'UNKNOWN') ORDER BY o.created, o.rowid LIMIT ?",
            (LIST_LIMIT,),
        )
    ]
    attention = []
    for item in uncertain:
        if item["work_status"] == "DONE":
            attention.append(
                f"work {item['work']} is DONE but its order {item['order']} is {item['status']}: "
                "the supplier's side is not known"
            )
        else:
            attention.append(f"order {item['order']} is {item['status']}: awaiting reconciliation")
    if money is not None and not consistent:
        attention.append(
            f"money ledger (reserved {money['reserved_pence']}, spent {money['spent_pence']}) disagrees with the "
            f"orders (reserved {sums[0]}, spent {sums[1]})"
        )
    return {
        "orders": orders,
        "money": money,
        "ledger_consistent": consistent,
        "uncertain": uncertain,
        "attention": attention,
    }


def _supplier(supplier: Any) -> dict[str, Any]:
    if supplier is None:
        return {"checked": False, "ok": None, "detail": None, "error": None}
    probe = getattr(supplier, "health", None)
    if not callable(probe):
        return {
            "checked": False,
            "ok": None,
            "detail": None,
            "error": f"{type(supplier).__name__} has no health() method",
        }
    try:
        detail = probe()
    except Exception as error:  # noqa: BLE001 -- any failure to answer is "unreachable", reason shown
        return {"checked": True, "ok": False, "detail": None, "error": f"{type(error).__name__}: {error}"}
    if not isinstance(detail, dict):
        return {
            "checked": True,
            "ok": False,
            "detail": None,
            "error": f"health() returned {type(detail).__name__}, not a dict",
        }
    return {"checked": True, "ok": True, "detail": detail, "error": None}


def _health_attention(health: dict[str, Any]) -> list[str]:
    attention = []
    database = health["database"]
    if not database["ok"]:
        attention.append(f"database unavailable: {database['error']}")
        return attention + (
            [f"supplier unreachable: {health['supplier']['error']}"] if health["supplier"]["ok"] is False else []
        )
    if not health["quick_check"]["ok"]:
        attention.append("quick_check failed: " + "; ".join(health["quick_check"]["messages"]))
    if not health["authority"]["ok"]:
        attention.append(f"authority: {health['authority']['problem']}")
    if health["paused"]:
        attention.append("runtime is paused")
    if health["supplier"]["ok"] is False:
        attention.append(f"supplier unreachable: {health['supplier']['error']}")
    for held in health["processes"]:
        who = f"work {held['work']}'s holder {held['owner']} (pid {held['pid']})"
        if held["running"] is False and held["lease_seconds_left"] > 0:
            attention.append(f"{who} is not running, yet its lease runs {held['lease_seconds_left']:.1f} s more: "
                             "no replacement may take the work until it runs out")
        elif held["running"] and held["lease_seconds_left"] <= 0:
            attention.append(f"{who} is running, but its lease ran out {-held['lease_seconds_left']:.1f} s ago: "
                             "alive, and no longer allowed to write")
    return attention


def _when(seconds: float) -> str:
    return "now" if seconds <= 0 else f"in {seconds:.1f} s"
