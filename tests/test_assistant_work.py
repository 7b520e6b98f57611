"""Durable assignments: enqueue, claim, the current-holder fence, finish, cancel, model budget.

Tests inject `now` where the rule under test is about time (expiry exactly at `now`, retry
delays): they check the rules, not the passage of real time. The race between two real processes
at the end uses the real clock.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import select
import subprocess
import sys
import time
import uuid

import pytest

from conftest import Crash, FakeSupplier, approved_vanilla, count, money, row, snapshot
from reference_organizations.store.agent import SUPPLIER_IDENTITY, seed_lucy
from sovereign_agent.assistant_orders import execute, propose
from sovereign_agent.assistant_work import (
    _ELIGIBLE,
    _RECOVERABLE,
    MODEL_CALLS_PER_WORK,
    BudgetExhausted,
    assert_current,
    cancel,
    claim,
    enqueue,
    finish,
    observe,
    reserve_model_call,
)
from sovereign_agent.database import Database
from sovereign_agent.suppliers import OutcomeUnknown

T0 = 1_700_000_000.0


# --- enqueue ------------------------------------------------------------------------------------


def test_enqueue_creates_ready_work(db):
    identifier = enqueue(db, "phone:first", "lucy", "Prepare the stock draft", subject="SKU-VANILLA", now=T0)
    found = row(db, "assistant_work", identifier)
    assert re.fullmatch(r"[0-9a-f]{32}", identifier)
    assert {
        k: found[k]
        for k in (
            "origin",
            "session",
            "prompt",
            "subject",
            "role",
            "status",
            "generation",
            "owner",
            "expires",
            "created",
            "cancelled",
        )
    } == {
        "origin": "phone:first",
        "session": "lucy",
        "prompt": "Prepare the stock draft",
        "subject": "SKU-VANILLA",
        "role": "shop",
        "status": "READY",
        "generation": 0,
        "owner": None,
        "expires": None,
        "created": T0,
        "cancelled": 0,
    }


def test_the_same_origin_with_the_same_content_is_one_row(db):
    first = enqueue(db, "phone:first", "lucy", "Prepare the stock draft")
    events = count(db, "events")
    again = enqueue(db, "phone:first", "lucy", "Prepare the stock draft")
    assert again == first
    assert count(db, "assistant_work", "origin='phone:first'") == 1
    assert count(db, "events") == events


@pytest.mark.parametrize(
    "change",
    [{"session": "other"}, {"prompt": "Something else"}, {"subject": "SKU-VANILLA"}, {"role": "research"}],
    ids=lambda change: next(iter(change)),
)
def test_the_same_origin_with_different_content_is_refused(db, change):
    first = enqueue(db, "phone:first", "lucy", "Prepare the stock draft")
    before = snapshot(db)
    fields = {"session": "lucy", "prompt": "Prepare the stock draft", "subject": "", "role": "shop"} | change
    with pytest.raises(ValueError, match="different content"):
        enqueue(db, "phone:first", fields.pop("session"), fields.pop("prompt"), **fields)
    assert snapshot(db) == before
    assert row(db, "assistant_work", first)["prompt"] == "Prepare the stock draft"


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(("", "lucy", "p"), id="empty-origin"),
        pytest.param(("o", "", "p"), id="empty-session"),
        pytest.param(("o", "lucy", ""), id="empty-prompt"),
        pytest.param(("o", "lucy", "   "), id="blank-prompt"),
        pytest.param(("o" * 201, "lucy", "p"), id="long-origin"),
        pytest.param(("o", "s" * 201, "p"), id="long-session"),
        pytest.param(("o", "lucy", "p" * 4001), id="long-prompt"),
        pytest.param((7, "lucy", "p"), id="int-origin"),
        pytest.param(("o", None, "p"), id="none-session"),
        pytest.param(("o", "lucy", b"p"), id="bytes-prompt"),
        pytest.param(("o", "lucy", ["p"]), id="list-prompt"),
    ],
)
def test_bad_enqueue_input_is_refused_and_leaves_no_row(db, arguments):
    before = snapshot(db)
    with pytest.raises(ValueError):
        enqueue(db, *arguments)
    assert snapshot(db) == before


@pytest.mark.parametrize("keyword", [{"subject": 3}, {"subject": "x" * 201}, {"role": ""}, {"now": math.nan}])
def test_bad_enqueue_keywords_are_refused_and_leave_no_row(db, keyword):
    before = snapshot(db)
    with pytest.raises(ValueError):
        enqueue(db, "o", "lucy", "p", **keyword)
    assert snapshot(db) == before


def test_fields_at_their_limits_are_accepted(db):
    identifier = enqueue(db, "o" * 200, "s" * 200, "p" * 4000, subject="x" * 200)
    assert row(db, "assistant_work", identifier)["prompt"] == "p" * 4000


# --- claim: input -------------------------------------------------------------------------------


@pytest.mark.parametrize("ttl", [math.nan, math.inf, -math.inf, 0, -1, 3600.0001, "30", None])
def test_claim_refuses_an_unbounded_or_bad_lifetime_and_changes_nothing(db, ttl):
    enqueue(db, "o", "lucy", "p")
    before = snapshot(db)
    with pytest.raises(ValueError):
        claim(db, "worker", ttl=ttl)
    assert snapshot(db) == before


@pytest.mark.parametrize("owner", ["", "   ", None, 5])
def test_claim_requires_an_owner_label(db, owner):
    enqueue(db, "o", "lucy", "p")
    before = snapshot(db)
    with pytest.raises(ValueError):
        claim(db, owner)
    assert snapshot(db) == before


@pytest.mark.parametrize("now", [math.nan, math.inf, True])
def test_claim_requires_a_finite_now(db, now):
    enqueue(db, "o", "lucy", "p")
    before = snapshot(db)
    with pytest.raises(ValueError):
        claim(db, "worker", now=now)
    assert snapshot(db) == before


def test_the_longest_lease_is_accepted(db):
    enqueue(db, "o", "lucy", "p")
    work = claim(db, "worker", ttl=3600, now=T0)
    assert row(db, "assistant_work", work.id)["expires"] == T0 + 3600


def test_claim_on_an_empty_queue_is_none(db):
    before = snapshot(db)
    assert claim(db, "worker") is None
    assert snapshot(db) == before


# --- claim: semantics ---------------------------------------------------------------------------


def test_a_claim_records_owner_generation_lease_and_an_event(db):
    identifier = enqueue(db, "o", "lucy", "p", subject="SKU-VANILLA")
    work = claim(db, "worker-a", now=T0, ttl=30)
    epoch = db.connection.execute("SELECT epoch FROM assistant_control").fetchone()[0]
    assert work == type(work)(identifier, "lucy", "p", 1, "worker-a", epoch, "SKU-VANILLA", "shop")
    found = row(db, "assistant_work", identifier)
    assert (found["status"], found["owner"], found["generation"], found["expires"]) == (
        "RUNNING",
        "worker-a",
        1,
        T0 + 30,
    )
    claimed = db.connection.execute(
        "SELECT payload FROM events WHERE kind='assistant.work.claimed' ORDER BY seq DESC"
    ).fetchone()[0]
    assert json.loads(claimed)["generation"] == 1


def test_a_competing_claim_gets_nothing_while_the_lease_is_live(db, tmp_path):
    enqueue(db, "phone:first", "lucy", "Prepare the stock draft")
    first = claim(db, "old-owner", ttl=30)
    with Database(tmp_path / "agent.sqlite") as other:
        before = snapshot(db)
        assert claim(other, "new-owner") is None
        assert snapshot(db) == before
    assert row(db, "assistant_work", first.id)["owner"] == "old-owner"


def test_expiry_exactly_at_now_makes_work_replaceable(db):
    identifier = enqueue(db, "o", "lucy", "p")
    first = claim(db, "old-owner", now=T0, ttl=30)
    expires = T0 + 30
    assert claim(db, "new-owner", now=expires - 0.001) is None
    with db.immediate() as connection:
        assert_current(connection, first, now=expires - 0.001)
        with pytest.raises(PermissionError):
            assert_current(connection, first, now=expires)
    replacement = claim(db, "new-owner", now=expires, ttl=30)
    assert (replacement.id, replacement.generation, replacement.owner) == (identifier, 2, "new-owner")
    with db.immediate() as connection:
        assert_current(connection, replacement, now=expires)
        with pytest.raises(PermissionError):
            assert_current(connection, first, now=expires - 1)  # superseded, whatever the clock says


def test_reusing_the_owner_label_still_fences_the_old_holding(db):
    identifier = enqueue(db, "o", "lucy", "p")
    old = claim(db, "lucy-stock-worker", now=time.time() - 100, ttl=10)  # already expired
    new = claim(db, "lucy-stock-worker", ttl=60)
    assert (old.owner, new.owner) == ("lucy-stock-worker", "lucy-stock-worker")
    assert new.generation == old.generation + 1 == 2
    before = snapshot(db)
    with pytest.raises(PermissionError):
        observe(db, old, {"role": "assistant", "content": "old answer"})
    with pytest.raises(PermissionError):
        finish(db, old, "DONE", "old result")
    assert snapshot(db) == before
    observe(db, new, {"role": "assistant", "content": "current"})
    finish(db, new, "DONE", "current result")
    assert row(db, "assistant_work", identifier)["result"] == "current result"
    assert [tuple(r) for r in db.connection.execute("SELECT generation FROM assistant_transcript")] == [(2,)]


def test_a_live_holder_blocks_its_session_but_not_another(db):
    first = enqueue(db, "o1", "lucy", "first", now=T0)
    second = enqueue(db, "o2", "lucy", "second", now=T0 + 1)
    elsewhere = enqueue(db, "o3", "tom", "third", now=T0 + 2)
    held = claim(db, "a", now=T0 + 10, ttl=30)
    assert held.id == first
    other = claim(db, "b", now=T0 + 10, ttl=30)
    assert other.id == elsewhere  # the older same-session item is skipped, not waited for
    assert claim(db, "c", now=T0 + 10, ttl=30) is None
    assert row(db, "assistant_work", second)["status"] == "READY"
    finish(db, held, "DONE", "ok", now=T0 + 11)
    assert claim(db, "c", now=T0 + 12, ttl=30).id == second


def test_an_expired_holder_no_longer_blocks_its_session(db):
    first = enqueue(db, "o1", "lucy", "first", now=T0)
    enqueue(db, "o2", "lucy", "second", now=T0 + 1)
    claim(db, "a", now=T0, ttl=30)
    taken = claim(db, "b", now=T0 + 30, ttl=30)
    assert taken.id == first and taken.generation == 2  # the expired item is older: it comes first


def test_a_paused_runtime_hands_out_nothing_and_refuses_writes(db):
    enqueue(db, "o1", "lucy", "first")
    enqueue(db, "o2", "tom", "second")
    held = claim(db, "a")
    db.connection.execute("UPDATE assistant_control SET paused=1")
    before = snapshot(db)
    assert claim(db, "b") is None
    with pytest.raises(PermissionError):
        observe(db, held, {"content": "x"})
    with pytest.raises(PermissionError):
        finish(db, held, "DONE", "x")
    assert snapshot(db) == before
    db.connection.execute("UPDATE assistant_control SET paused=0")
    assert claim(db, "b").session == "tom"
    finish(db, held, "DONE", "x")


@pytest.mark.parametrize(
    "change",
    [
        {"subject": "SKU-STRAWBERRY"},
        {"prompt": "another prompt"},
        {"session": "tom"},
        {"role": "research"},
        {"id": "0" * 32},
        {"owner": "someone-else"},
        {"generation": 2},
        {"epoch": "f" * 32},
    ],
    ids=lambda change: next(iter(change)),
)
def test_a_claim_that_differs_from_the_row_is_refused(db, change):
    enqueue(db, "o", "lucy", "p", subject="SKU-VANILLA")
    held = claim(db, "worker")
    forged = dataclasses.replace(held, **change)
    before = snapshot(db)
    with pytest.raises(PermissionError):
        observe(db, forged, {"content": "x"})
    with pytest.raises(PermissionError):
        finish(db, forged, "DONE", "x")
    assert snapshot(db) == before
    observe(db, held, {"content": "x"})


@pytest.mark.parametrize("tamper", ["different", "missing"])
def test_a_changed_authority_marker_refuses_the_holder(db, tamper):
    enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker")
    marker = db.path.with_suffix(".authority")
    if tamper == "missing":
        marker.unlink()
    else:
        marker.write_text("0" * 32)
    before = snapshot(db)
    with pytest.raises(PermissionError):
        observe(db, held, {"content": "x"})
    with pytest.raises(PermissionError):
        finish(db, held, "DONE", "x")
    assert snapshot(db) == before


# --- the fenced writes --------------------------------------------------------------------------


def test_observe_records_the_generation_that_produced_the_message(db):
    enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker")
    observe(db, held, {"role": "assistant", "content": "hello", "n": 1})
    stored = db.connection.execute("SELECT work_id, generation, message FROM assistant_transcript").fetchall()
    assert [(r[0], r[1], json.loads(r[2])) for r in stored] == [
        (held.id, 1, {"role": "assistant", "content": "hello", "n": 1})
    ]


@pytest.mark.parametrize(
    "message",
    [
        {"content": math.nan},
        {"content": "x", "scores": [1.0, math.inf]},
        {"nested": {"deep": -math.inf}},
        "not a dict",
        ["list"],
        {"content": object()},
    ],
    ids=["nan", "inf-in-list", "nested-neg-inf", "string", "list", "object"],
)
def test_observe_refuses_unencodable_messages_and_leaves_no_row(db, message):
    enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker")
    before = snapshot(db)
    with pytest.raises((ValueError, TypeError)):
        observe(db, held, message)
    assert count(db, "assistant_transcript") == 0
    assert snapshot(db) == before


@pytest.mark.parametrize("status", ["RUNNING", "READY", "done", "", None, "FAILED"])
def test_finish_refuses_a_state_that_is_not_terminal(db, status):
    identifier = enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker")
    before = snapshot(db)
    with pytest.raises(ValueError, match="terminal"):
        finish(db, held, status, "x")
    assert snapshot(db) == before
    assert row(db, "assistant_work", identifier)["status"] == "RUNNING"


def test_finish_refuses_a_result_that_is_not_text(db):
    enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker")
    before = snapshot(db)
    with pytest.raises(ValueError):
        finish(db, held, "DONE", {"not": "text"})
    assert snapshot(db) == before


@pytest.mark.parametrize("status", ["DONE", "CANCELLED"])
def test_finish_records_the_outcome_without_a_delay(db, status):
    identifier = enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker", now=T0, ttl=60)
    finish(db, held, status, "result", now=T0 + 5)
    found = row(db, "assistant_work", identifier)
    assert (found["status"], found["result"], found["expires"], found["available_after"]) == (
        status,
        "result",
        None,
        T0 + 5,
    )
    with pytest.raises(PermissionError):  # finishing is the end of this holding
        finish(db, held, "DONE", "again", now=T0 + 6)


@pytest.mark.parametrize("generation, delay", [(1, 2), (2, 4), (3, 8), (5, 32), (6, 60), (7, 60), (9, 60)])
def test_blocked_work_waits_a_bounded_growing_delay(db, generation, delay):
    identifier = enqueue(db, "o", "lucy", "p")
    now = T0
    for _ in range(generation):  # each lease runs out, and the next acquisition raises the generation
        held = claim(db, "worker", now=now, ttl=10)
        now += 10
    assert held.generation == generation
    now -= 5
    finish(db, held, "BLOCKED", "waiting", now=now)
    found = row(db, "assistant_work", identifier)
    assert (found["status"], found["available_after"]) == ("BLOCKED", now + delay)
    assert delay == min(60, 2 ** min(generation, 6))
    assert claim(db, "other", now=now + 3600) is None  # blocked is not ordinary queued work


# --- cancel -------------------------------------------------------------------------------------


def test_cancel_fences_out_the_running_holder(db):
    identifier = enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker")
    assert cancel(db, identifier) is True
    found = row(db, "assistant_work", identifier)
    assert (found["status"], found["cancelled"], found["generation"], found["expires"]) == ("CANCELLED", 1, 2, None)
    before = snapshot(db)
    with pytest.raises(PermissionError):
        observe(db, held, {"content": "late"})
    with pytest.raises(PermissionError):
        finish(db, held, "DONE", "late result")
    assert snapshot(db) == before
    assert claim(db, "another") is None


@pytest.mark.parametrize("status", ["READY", "BLOCKED"])
def test_cancel_waiting_work(db, status):
    identifier = enqueue(db, "o", "lucy", "p")
    if status == "BLOCKED":
        finish(db, claim(db, "w"), "BLOCKED", "waiting")
    generation = row(db, "assistant_work", identifier)["generation"]
    assert cancel(db, identifier) is True
    found = row(db, "assistant_work", identifier)
    assert (found["status"], found["cancelled"], found["generation"]) == ("CANCELLED", 1, generation + 1)


def test_cancel_of_finished_work_changes_nothing(db):
    identifier = enqueue(db, "o", "lucy", "p")
    finish(db, claim(db, "w"), "DONE", "ok")
    before = snapshot(db)
    assert cancel(db, identifier) is False
    assert cancel(db, identifier) is False
    assert snapshot(db) == before
    with pytest.raises(KeyError):
        cancel(db, "no-such-work")


def test_cancel_revokes_unsent_orders_and_keeps_uncertain_ones(db, policy):
    identifier = enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker")
    draft = propose(db, held, "SKU-VANILLA", 4, target=SUPPLIER_IDENTITY)  # 1000, never approved
    approved = approved_vanilla(db, policy, held, quantity=1)  # 250 reserved, unsent
    sending = approved_vanilla(db, policy, held, quantity=2)  # 500: admitted, then the worker dies
    crashing = FakeSupplier()
    crashing.crash_on_order = True
    with pytest.raises(Crash):
        execute(db, held, sending, crashing, policy=policy)
    unknown = approved_vanilla(db, policy, held, quantity=3)  # 750: the request is lost
    dropping = FakeSupplier()
    dropping.drop_requests = 1
    with pytest.raises(OutcomeUnknown):
        execute(db, held, unknown, dropping, policy=policy)
    assert money(db) == (250 + 500 + 750, 0)

    assert cancel(db, identifier) is True
    statuses = {order: row(db, "assistant_orders", order)["status"] for order in (draft, approved, sending, unknown)}
    assert statuses == {draft: "REVOKED", approved: "REVOKED", sending: "SENDING", unknown: "UNKNOWN"}
    assert money(db) == (500 + 750, 0)  # only the unsent approval was released
    with pytest.raises(PermissionError):
        execute(db, held, unknown, FakeSupplier(), policy=policy)


# --- model-call budget --------------------------------------------------------------------------


def test_reserve_model_call_counts_and_stops_at_the_limit(db):
    identifier = enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker")
    assert [reserve_model_call(db, held, 100) for _ in range(MODEL_CALLS_PER_WORK)] == list(
        range(1, MODEL_CALLS_PER_WORK + 1)
    )
    before = snapshot(db)
    with pytest.raises(BudgetExhausted):
        reserve_model_call(db, held, 100)
    assert snapshot(db) == before
    assert count(db, "assistant_model_calls", "work_id=? AND generation=1", identifier) == MODEL_CALLS_PER_WORK


@pytest.mark.parametrize("estimate", [0, -1, 1.5, True, "10", 1_000_001])
def test_reserve_model_call_refuses_a_bad_estimate(db, estimate):
    enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker")
    before = snapshot(db)
    with pytest.raises(ValueError):
        reserve_model_call(db, held, estimate)
    assert snapshot(db) == before


def test_reserve_model_call_is_fenced(db):
    identifier = enqueue(db, "o", "lucy", "p")
    held = claim(db, "worker")
    cancel(db, identifier)
    with pytest.raises(PermissionError):
        reserve_model_call(db, held, 100)
    assert count(db, "assistant_model_calls") == 0


# --- recovery-only claims -----------------------------------------------------------------------


def test_recovery_only_selects_work_with_uncertain_orders(db, policy):
    now = time.time()
    # W1: its request was lost (UNKNOWN), the work is BLOCKED.
    w1 = enqueue(db, "o1", "s1", "p", now=now - 50)
    held1 = claim(db, "a", ttl=60)
    order1 = approved_vanilla(db, policy, held1, quantity=1)
    dropping = FakeSupplier()
    dropping.drop_requests = 1
    with pytest.raises(OutcomeUnknown):
        execute(db, held1, order1, dropping, policy=policy)
    finish(db, held1, "BLOCKED", "outcome unknown")
    # W2: ordinary READY work, no orders.
    w2 = enqueue(db, "o2", "s2", "p", now=now - 40)
    # W3: admitted (SENDING) and then cancelled by the operator.
    w3 = enqueue(db, "o3", "s3", "p", now=now - 30)
    held3 = claim(db, "c", ttl=60, identifier=w3)
    order3 = approved_vanilla(db, policy, held3, quantity=2)
    crashing = FakeSupplier()
    crashing.crash_on_order = True
    with pytest.raises(Crash):
        execute(db, held3, order3, crashing, policy=policy)
    cancel(db, w3)
    # W4: settled order, DONE.
    w4 = enqueue(db, "o4", "s4", "p", now=now - 20)
    held4 = claim(db, "d", ttl=60, identifier=w4)
    order4 = approved_vanilla(db, policy, held4, quantity=1)
    execute(db, held4, order4, FakeSupplier(), policy=policy)
    finish(db, held4, "DONE", "ok")

    later = now + 120  # past W1's retry delay
    first = claim(db, "recovery", now=later, recovery_only=True)
    second = claim(db, "recovery", now=later, recovery_only=True)
    assert (first.id, second.id) == (w1, w3)
    assert claim(db, "recovery", now=later, recovery_only=True) is None
    assert row(db, "assistant_work", w2)["status"] == "READY"
    assert row(db, "assistant_work", w3)["cancelled"] == 1
    # Ordinary claims never pick BLOCKED or CANCELLED work, whatever its orders.
    assert claim(db, "ordinary", now=later).id == w2


# --- two real processes race for one session ----------------------------------------------------

RACER = r"""
import json, sys, time
from sovereign_agent.database import Database
from sovereign_agent.assistant_work import claim
db = None
for line in sys.stdin:
    command = json.loads(line)
    if command["op"] == "open":
        db = Database(command["path"])
        print(json.dumps({"ready": True}), flush=True)
    elif command["op"] == "go":
        started = time.time()
        try:
            held = claim(db, command["owner"], ttl=60)
            answer = {"claim": None if held is None else [held.id, held.session, held.generation]}
        except Exception as error:
            answer = {"error": repr(error)}
        answer.update(started=started, ended=time.time())
        db.close()
        print(json.dumps(answer), flush=True)
"""


def _ask(process: subprocess.Popen, timeout: float = 15.0) -> dict:
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "racer did not answer in time"
    line = process.stdout.readline()
    assert line, f"racer exited: {process.poll()}"
    return json.loads(line)


@pytest.mark.slow
def test_two_processes_racing_for_one_session_never_both_hold_it(tmp_path):
    racers = [
        subprocess.Popen([sys.executable, "-c", RACER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    overlapping = 0
    try:
        rounds = [("same", n) for n in range(20)] + [("different", n) for n in range(4)]
        for kind, n in rounds:
            path = tmp_path / f"{kind}-{n}" / "agent.sqlite"
            with Database(path) as db:
                seed_lucy(db)
                enqueue(db, f"o{n}-1", "lucy", "first")
                enqueue(db, f"o{n}-2", "lucy" if kind == "same" else "tom", "second")
            for racer in racers:
                racer.stdin.write(json.dumps({"op": "open", "path": str(path)}) + "\n")
                racer.stdin.flush()
            assert [_ask(racer) for racer in racers] == [{"ready": True}] * 2
            for index, racer in enumerate(racers):  # back to back: both are already waiting
                racer.stdin.write(json.dumps({"op": "go", "owner": f"racer-{index}"}) + "\n")
                racer.stdin.flush()
            answers = [_ask(racer) for racer in racers]
            assert all("error" not in answer for answer in answers), answers
            won = [answer["claim"] for answer in answers if answer["claim"] is not None]
            a, b = answers
            overlapping += a["started"] < b["ended"] and b["started"] < a["ended"]
            with Database(path) as db:
                now = time.time()
                live = db.connection.execute(
                    "SELECT session, count(*) FROM assistant_work WHERE status='RUNNING' AND expires>? "
                    "GROUP BY session ORDER BY session",
                    (now,),
                ).fetchall()
                generations = [
                    r[0] for r in db.connection.execute("SELECT generation FROM assistant_work ORDER BY created, rowid")
                ]
            if kind == "same":
                assert len(won) == 1, answers
                assert [tuple(r) for r in live] == [("lucy", 1)]
                assert generations == [1, 0]
            else:  # the positive control: different sessions may both proceed
                assert len(won) == 2 and {w[1] for w in won} == {"lucy", "tom"}
                assert [tuple(r) for r in live] == [("lucy", 1), ("tom", 1)]
                assert generations == [1, 1]
    finally:
        for racer in racers:
            racer.stdin.close()
        for racer in racers:
            try:
                racer.wait(timeout=10)
            except subprocess.TimeoutExpired:
                racer.kill()
                racer.wait(timeout=10)
            racer.stdout.close()
    assert [racer.returncode for racer in racers] == [0, 0]
    # Evidence that the claims really raced (ran at the same time) in at least some rounds.
    assert overlapping >= 1, "the two claims never overlapped: the test did not race"


# --- the claim query's plan ---------------------------------------------------------------------


def build_queue(db: Database, rows: int, *, all_ready: bool = False, analyze: bool = True) -> float:
    """Many rows, 90% DONE (unless all_ready), some RUNNING (live and expired) and BLOCKED; every
    DONE row has a CONFIRMED order and one row in 500 an UNKNOWN order (its work BLOCKED)."""
    now = time.time()

    def status_of(i):
        if all_ready or i % 10 == 0:
            return "READY", None, None
        if i % 500 == 1:
            return "BLOCKED", "w", None
        if i % 97 == 0:
            return "RUNNING", "w", now + (60 if i % 2 else -60)
        if i % 89 == 0:
            return "BLOCKED", "w", None
        return "DONE", "w", None

    def works():
        for i in range(rows):
            status, owner, expires = status_of(i)
            yield (
                f"{i:032x}",
                f"origin-{i}",
                f"session-{i % 3000}",
                "p",
                status,
                owner,
                expires,
                0 if status == "READY" else 1,
                now - rows + i,
            )

    def orders():
        for i in range(rows):
            if all_ready or status_of(i)[0] not in ("DONE", "BLOCKED"):
                continue
            yield (
                uuid.uuid4().hex,
                f"{i:032x}",
                "{}",
                "digest",
                250,
                "UNKNOWN" if i % 500 == 1 else "CONFIRMED",
                SUPPLIER_IDENTITY,
                now - rows + i,
            )

    with db.immediate() as connection:
        connection.executemany(
            "INSERT INTO assistant_work(id, origin, session, prompt, status, owner, expires, generation, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            works(),
        )
        connection.executemany(
            "INSERT INTO assistant_orders(id, work_id, proposal, digest, amount, status, target, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            orders(),
        )
    if analyze:
        db.connection.execute("ANALYZE")
    return now


def plan_problems(plan: list[str], *, sorted_candidates_allowed: bool = False) -> list[str]:
    """Plan lines that make a claim's cost grow with the tables: a scan of the work table (a
    `SCAN` without an index, or an automatic index built per query), a scan of all orders, or
    a sort (only the recovery query may sort its few uncertain candidates)."""
    problems = []
    for line in plan:
        if re.match(r"SCAN (assistant_work|w|other)\b", line) and "USING" not in line:
            problems.append(line)
        # The orders subquery may only walk the partial index that holds uncertain orders.
        if re.match(r"SCAN assistant_orders\b", line) and "orders_uncertain" not in line:
            problems.append(line)
        if "AUTOMATIC" in line or ("USE TEMP B-TREE" in line and not sorted_candidates_allowed):
            problems.append(line)
    return problems


STATISTICS = {
    "analyzed-mostly-done": {"all_ready": False, "analyze": True},
    "analyzed-while-all-ready": {"all_ready": True, "analyze": True},
    "no-statistics": {"all_ready": False, "analyze": False},
}


@pytest.fixture(scope="module", params=list(STATISTICS), ids=list(STATISTICS))
def big_queue(request, tmp_path_factory):
    with Database(tmp_path_factory.mktemp("plan") / "plan.sqlite", synchronous="NORMAL") as db:
        yield db, build_queue(db, 10_000, **STATISTICS[request.param]), request.param


@pytest.mark.parametrize(
    "identifier, control_only", [("", 0), ("", 1), (f"{20:032x}", 0)], ids=["ordinary", "control-only", "one-work"]
)
def test_the_claim_query_is_an_index_probe_not_a_scan(big_queue, identifier, control_only):
    db, now, _ = big_queue
    parameters = {"role": "shop", "now": now, "identifier": identifier, "control_only": control_only}
    plan = [r["detail"] for r in db.connection.execute("EXPLAIN QUERY PLAN " + _ELIGIBLE, parameters)]
    assert plan, "no plan"
    assert plan_problems(plan) == [], "\n".join(plan)
    # And the query still answers: ordinary work exists, the named READY row is found, there are
    # no control rows.
    found = db.connection.execute(_ELIGIBLE, parameters).fetchone()
    assert (found is not None) == (not control_only)
    if found is not None:
        assert found["status"] == "READY" or found["expires"] <= now
        assert identifier in ("", found["id"])


def test_the_recovery_query_reads_only_uncertain_orders(big_queue):
    """Every worker pass starts with a recovery claim: it must not walk every order ever placed."""
    db, now, statistics = big_queue
    parameters = {"role": "shop", "now": now + 3600, "identifier": "", "control_only": 0}
    plan = [r["detail"] for r in db.connection.execute("EXPLAIN QUERY PLAN " + _RECOVERABLE, parameters)]
    assert plan_problems(plan, sorted_candidates_allowed=True) == [], "\n".join(plan)
    found = db.connection.execute(_RECOVERABLE, parameters).fetchone()
    if statistics == "analyzed-while-all-ready":
        assert found is None  # no orders at all
    else:
        assert found["status"] == "BLOCKED"
        assert (
            db.connection.execute("SELECT status FROM assistant_orders WHERE work_id=?", (found["id"],)).fetchone()[0]
            == "UNKNOWN"
        )
