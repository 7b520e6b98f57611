"""The status report keeps health, progress, cancellation and external completion apart."""

from __future__ import annotations

import sqlite3
import time

import pytest

from conftest import FakeSupplier, approved_vanilla, held_work
from sovereign_agent.assistant_orders import execute
from sovereign_agent.assistant_work import cancel, claim, enqueue, finish
from sovereign_agent.database import AuthorityMismatch, Database
from sovereign_agent.status import format_report, status_report
from sovereign_agent.suppliers import OutcomeUnknown


def test_an_idle_healthy_runtime(db, supplier):
    report = status_report(db, supplier=supplier)
    health = report["health"]
    assert health["database"]["ok"] and health["quick_check"] == {"ok": True, "messages": ["ok"]}
    assert health["authority"]["ok"] and health["authority"]["epoch"] == health["authority"]["marker"]
    assert health["paused"] is False
    assert health["supplier"] == {"checked": True, "ok": True, "detail": {"status": "ok", "orders": 0}, "error": None}
    assert health["attention"] == []
    assert report["progress"]["counts"] == {"READY": 0, "RUNNING": 0, "DONE": 0, "BLOCKED": 0, "CANCELLED": 0}
    assert (
        report["progress"]["attention"] == report["cancellation"]["attention"] == report["external"]["attention"] == []
    )
    assert report["external"]["money"] == {
        "limit_pence": 2500,
        "reserved_pence": 0,
        "spent_pence": 0,
        "available_pence": 2500,
    }
    assert report["external"]["ledger_consistent"] is True


def test_healthy_but_stuck_behind_an_expired_holder(db, supplier):
    now = time.time()
    stuck = enqueue(db, "o1", "lucy", "first", now=now - 100)
    enqueue(db, "o2", "lucy", "second", now=now - 90)
    claim(db, "worker-gone", now=now - 80, ttl=30)  # its lease ran out 50 s ago; nobody replaced it
    live = enqueue(db, "o3", "tom", "third", now=now - 10)
    claim(db, "worker-live", now=now, ttl=60, identifier=live)

    report = status_report(db, supplier=supplier, now=now)
    assert report["health"]["attention"] == []  # the process side is fine...
    assert report["health"]["supplier"]["ok"] is True
    progress = report["progress"]  # ...and the work is not moving
    assert progress["counts"] == {"READY": 1, "RUNNING": 2, "DONE": 0, "BLOCKED": 0, "CANCELLED": 0}
    assert [
        (h["work"], h["owner"], h["generation"], h["expired_seconds_ago"]) for h in progress["expired_holders"]
    ] == [(stuck, "worker-gone", 1, pytest.approx(50))]
    assert [(h["work"], h["owner"], h["seconds_left"]) for h in progress["live_holders"]] == [
        (live, "worker-live", pytest.approx(60))
    ]
    assert progress["waiting"] == {"ready": 1, "oldest_age_seconds": pytest.approx(90)}
    assert len(progress["attention"]) == 1 and "expired holder" in progress["attention"][0]
    text = format_report(report)
    assert "EXPIRED" in text and "worker-gone" in text and "worker-live" in text


def test_done_work_with_an_unknown_order(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    supplier.lose_responses = 1
    with pytest.raises(OutcomeUnknown):
        execute(db, work, order, supplier, policy=policy)
    finish(db, work, "DONE", "sent the order")  # a worker that took "sent" for "done"

    report = status_report(db, supplier=supplier)
    assert report["health"]["attention"] == []
    assert report["progress"]["counts"]["DONE"] == 1
    assert report["progress"]["attention"] == []  # as far as work progress goes, all is finished
    external = report["external"]
    assert external["orders"]["UNKNOWN"] == 1
    assert [(u["order"], u["status"], u["work_status"], u["amount_pence"]) for u in external["uncertain"]] == [
        (order, "UNKNOWN", "DONE", 1500)
    ]
    assert external["money"]["reserved_pence"] == 1500 and external["money"]["spent_pence"] == 0
    assert external["ledger_consistent"] is True
    assert len(external["attention"]) == 1 and "DONE but its order" in external["attention"][0]
    assert report["cancellation"] == {"total": 0, "cancelled": [], "uncertain": [], "attention": []}
    assert order in format_report(report)


def test_cancelled_work_whose_order_is_still_uncertain(db, policy, supplier):
    work = held_work(db, origin="o1", session="s1")
    order = approved_vanilla(db, policy, work)
    supplier.drop_requests = 1
    with pytest.raises(OutcomeUnknown):
        execute(db, work, order, supplier, policy=policy)
    cancel(db, work.id)
    plain = enqueue(db, "o2", "s2", "p")
    cancel(db, plain)

    report = status_report(db)
    cancellation = report["cancellation"]
    assert cancellation["total"] == 2
    assert {c["work"] for c in cancellation["cancelled"]} == {work.id, plain}
    assert cancellation["uncertain"] == [
        {"work": work.id, "order": order, "order_status": "UNKNOWN", "amount_pence": 1500, "work_status": "CANCELLED"}
    ]
    assert len(cancellation["attention"]) == 1
    assert report["external"]["uncertain"][0]["work_cancelled"] is True
    assert report["progress"]["counts"]["CANCELLED"] == 2


def test_blocked_work_shows_when_it_may_retry(db):
    now = time.time()
    identifier = enqueue(db, "o", "lucy", "p")
    held = claim(db, "w", now=now, ttl=60)
    finish(db, held, "BLOCKED", "awaiting operator approval", now=now)
    (blocked,) = status_report(db, now=now + 0.5)["progress"]["blocked"]
    assert (blocked["work"], blocked["retry_at"], blocked["seconds_until_retry"], blocked["result"]) == (
        identifier,
        now + 2,
        pytest.approx(1.5),
        "awaiting operator approval",
    )


def test_an_unreachable_supplier_is_a_health_matter_only(db):
    down = FakeSupplier()
    down.healthy = False
    report = status_report(db, supplier=down)
    assert report["health"]["supplier"]["ok"] is False
    assert "unreachable" in report["health"]["supplier"]["error"]
    assert report["health"]["attention"] == ["supplier unreachable: ConnectionError: supplier unreachable"]
    assert report["progress"]["attention"] == [] and report["external"]["attention"] == []


def test_a_supplier_client_without_health_is_not_checked(db):
    class NoHealth:
        identity, timeout, idempotent = "x", 1.0, True

    report = status_report(db, supplier=NoHealth())
    assert report["health"]["supplier"]["checked"] is False
    assert report["health"]["attention"] == []
    assert "not checked" in format_report(report)


def test_a_paused_runtime(db):
    enqueue(db, "o", "lucy", "p")
    db.connection.execute("UPDATE assistant_control SET paused=1")
    report = status_report(db)
    assert report["health"]["paused"] is True
    assert "runtime is paused" in report["health"]["attention"]
    assert any("paused" in item for item in report["progress"]["attention"])


def test_a_path_is_read_without_opening_a_runtime(tmp_path, db):
    enqueue(db, "o", "lucy", "p")
    marker = db.path.with_suffix(".authority")
    marker.write_text("0" * 32)  # Database() would now refuse this file; the report describes it
    report = status_report(db.path)
    assert report["health"]["database"]["ok"] is True
    assert report["health"]["authority"]["ok"] is False
    assert "does not match" in report["health"]["authority"]["problem"]
    assert report["progress"]["counts"]["READY"] == 1
    with pytest.raises(AuthorityMismatch):
        Database(db.path)


def test_a_missing_or_broken_database(tmp_path):
    missing = status_report(tmp_path / "nowhere.sqlite")
    assert missing["health"]["database"] == {
        "ok": False,
        "path": str(tmp_path / "nowhere.sqlite"),
        "error": "no database file",
    }
    assert missing["progress"] is missing["cancellation"] is missing["external"] is None
    assert not (tmp_path / "nowhere.sqlite").exists()  # the report created nothing
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    broken = status_report(junk)
    assert broken["health"]["database"]["ok"] is False
    assert "database unavailable" in broken["health"]["attention"][0]
    assert "unknown (database unavailable)" in format_report(broken)


def test_the_report_reads_only(db, policy, supplier):
    work = held_work(db)
    approved_vanilla(db, policy, work)
    tables = ["assistant_work", "assistant_orders", "assistant_spending", "events"]

    def dump():
        return {t: [tuple(r) for r in db.connection.execute(f"SELECT * FROM {t}")] for t in tables}

    before = dump()
    status_report(db, supplier=supplier)
    status_report(db.path)
    assert dump() == before
    assert not db.connection.in_transaction
    assert supplier.calls == []  # never a lookup or an order to probe the supplier


def test_a_ledger_that_disagrees_with_the_orders_is_flagged(db):
    raw = sqlite3.connect(db.path)
    raw.execute("UPDATE assistant_spending SET reserved_pence=100")
    raw.commit()
    raw.close()
    external = status_report(db)["external"]
    assert external["ledger_consistent"] is False
    assert "disagrees" in external["attention"][0]


def test_format_report_has_four_sections(db):
    text = format_report(status_report(db))
    assert [line for line in text.splitlines() if not line.startswith(" ")] == [
        "HEALTH",
        "PROGRESS",
        "CANCELLATION",
        "EXTERNAL",
    ]


# --- process evidence: liveness beside the lease, from the operating system ---------------------

HOLDER = """
import sys, time
from sovereign_agent.assistant_work import claim
from sovereign_agent.database import Database
from sovereign_agent.processes import record_process
db = Database(sys.argv[1])
work = claim(db, "lucy-stock-worker", ttl=float(sys.argv[2]))
record_process(db, "lucy-stock-worker")
print(work.id, flush=True)
time.sleep(60)
"""


def start_holder(tmp_path, db, ttl):
    """A real process that claims the only READY assignment, records itself and stays."""
    import subprocess
    import sys

    from reference_organizations.children import spawn

    enqueue(db, "phone:holder", "lucy", "Reorder what is short", subject="SKU-VANILLA")
    holder = spawn([sys.executable, "-c", HOLDER, str(db.path), str(ttl)], cwd=tmp_path, stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip(), "the holder did not claim"
    return holder


def held_process(db):
    (held,) = status_report(db)["health"]["processes"]
    return held


def test_a_killed_holder_shows_as_not_running_while_its_lease_still_runs(db, tmp_path):
    from reference_organizations.children import stop

    holder = start_holder(tmp_path, db, ttl=30)
    try:
        live = held_process(db)
        assert live["running"] is True and live["pid"] == holder.pid and live["lease_seconds_left"] > 20
        assert status_report(db)["health"]["attention"] == []
        holder.kill()
        assert holder.wait(10) == -9
        dead = held_process(db)
        report = status_report(db)
        assert dead["running"] is False and dead["lease_seconds_left"] > 20
        assert any("is not running, yet its lease runs" in item for item in report["health"]["attention"])
        assert report["progress"]["attention"] == []  # the lease is live: nothing to replace yet
        assert "NOT RUNNING" in format_report(report)
    finally:
        stop(holder)


def test_a_live_holder_whose_lease_ran_out_is_running_and_no_longer_allowed(db, tmp_path):
    from reference_organizations.children import stop

    holder = start_holder(tmp_path, db, ttl=1)
    try:
        deadline = time.monotonic() + 10
        while held_process(db)["lease_seconds_left"] > 0:  # the real lease, on the wall clock
            assert time.monotonic() < deadline, "the lease did not run out"
            time.sleep(0.05)
        report = status_report(db)
        assert held_process(db)["running"] is True
        assert any("is running, but its lease ran out" in item for item in report["health"]["attention"])
        assert any("expired holder(s) awaiting replacement" in item for item in report["progress"]["attention"])
    finally:
        stop(holder)


def test_a_reused_pid_is_not_the_recorded_process(db):
    from sovereign_agent.processes import identity, is_running

    me = identity()
    assert is_running(me) is True
    assert is_running(me | {"started": "0"}) is False  # the same pid, started at another time
    assert is_running(me | {"boot": "another-boot"}) is False and is_running(me | {"host": "elsewhere"}) is None
    assert is_running(None) is None
