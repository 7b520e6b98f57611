"""Lucy's worker, `run_once` and `reconcile_once`, with an in-process supplier.

A recovery never asks the model again when the records already hold an approved operation:
`RaisingModel` fails the test if it is called. Where a retry delay stands between two passes,
the test moves `available_after` forward explicitly (as the chapter's service test does) rather
than sleeping; it says so where it happens.
"""

from __future__ import annotations

import json
import time

import pytest

from conftest import (
    OPERATOR,
    FakeSupplier,
    RaisingModel,
    approved_vanilla,
    count,
    died_while_sending,
    expire_lease,
    held_work,
    money,
    row,
)
from reference_organizations.store.agent import OfflineShopModel
from reference_organizations.store.assistant import lease_seconds, reconcile_once, run_once
from sovereign_agent.agent_loop import Limits
from sovereign_agent.assistant_orders import approve, execute
from sovereign_agent.assistant_work import cancel, claim, enqueue, finish, observe
from sovereign_agent.model import ModelTurn
from sovereign_agent.suppliers import OutcomeUnknown, SupplierRefused


def skip_retry_delay(db, work_id: str) -> None:
    """Accelerate the BLOCKED retry delay (a fixture change, not elapsed time)."""
    db.connection.execute("UPDATE assistant_work SET available_after=0 WHERE id=?", (work_id,))


def test_nothing_to_do_is_idle(db, policy, supplier):
    assert run_once(db, RaisingModel(), policy=policy, supplier=supplier) == {"status": "IDLE"}
    assert reconcile_once(db, supplier, policy=policy) == {"status": "IDLE"}
    assert supplier.calls == []


def test_the_model_drafts_an_order_and_the_work_waits_for_approval(db, policy, supplier):
    identifier = enqueue(db, "phone:vanilla", "lucy", "Reorder what is short", subject="SKU-VANILLA")
    model = OfflineShopModel()
    outcome = run_once(db, model, owner="worker-1", policy=policy, supplier=supplier)
    assert (outcome["status"], outcome["generation"], outcome["owner"]) == ("BLOCKED", 1, "worker-1")
    assert model.calls == 3
    assert count(db, "assistant_model_calls", "work_id=?", identifier) == 3
    assert [r[0] for r in db.connection.execute("SELECT generation FROM assistant_transcript")] == [1] * 5
    orders = [dict(r) for r in db.connection.execute("SELECT status, amount, proposal FROM assistant_orders")]
    assert [(o["status"], o["amount"], json.loads(o["proposal"])["quantity"]) for o in orders] == [("DRAFT", 1500, 6)]
    assert supplier.calls == [] and money(db) == (0, 0)
    assert row(db, "assistant_work", identifier)["status"] == "BLOCKED"


def test_after_approval_the_order_is_continued_without_the_model(db, policy, supplier):
    identifier = enqueue(db, "phone:vanilla", "lucy", "Reorder what is short", subject="SKU-VANILLA")
    run_once(db, OfflineShopModel(), policy=policy, supplier=supplier)
    order = db.connection.execute("SELECT id, digest FROM assistant_orders").fetchone()
    approve(db, order["id"], order["digest"], actor=OPERATOR, policy=policy, expires=time.time() + 600)
    transcript = count(db, "assistant_transcript")
    model = RaisingModel()
    outcome = run_once(db, model, owner="worker-2", policy=policy, supplier=supplier)
    assert (outcome["status"], outcome["generation"], outcome["model_calls"]) == ("DONE", 2, 0)
    assert model.calls == 0
    assert supplier.calls == [("order", order["id"])]
    assert list(supplier.ledger) == [order["id"]]
    assert money(db) == (0, 1500)
    assert count(db, "assistant_transcript") == transcript
    assert row(db, "assistant_work", identifier)["status"] == "DONE"
    assert run_once(db, model, policy=policy, supplier=supplier) == {"status": "IDLE"}


def test_a_replacement_continues_a_dead_holders_approved_order(db, policy, supplier):
    work = held_work(db, session="lucy")
    order = approved_vanilla(db, policy, work)
    expire_lease(db, work.id)  # the holder "died" with its approved order unsent
    outcome = run_once(db, RaisingModel(), owner="replacement", policy=policy, supplier=supplier)
    assert (outcome["status"], outcome["generation"], outcome["owner"], outcome["order"]) == (
        "DONE",
        2,
        "replacement",
        order,
    )
    assert supplier.sent() == [order]
    assert money(db) == (0, 1500)
    # The old holder is still alive and tries its three controlled writes: all refused.
    for write in (
        lambda: observe(db, work, {"role": "assistant", "content": "old"}),
        lambda: finish(db, work, "DONE", "old"),
        lambda: execute(db, work, order, supplier, policy=policy),
    ):
        with pytest.raises(PermissionError):
            write()
    assert supplier.sent() == [order] and count(db, "assistant_transcript") == 0


def test_a_lost_response_is_discovered_not_resent(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    finish(db, work, "BLOCKED", "waiting for a worker with a supplier")
    skip_retry_delay(db, work.id)
    db.connection.execute("UPDATE assistant_work SET status='READY' WHERE id=?", (work.id,))  # as approve() would
    supplier.lose_responses = 1
    first = run_once(db, RaisingModel(), policy=policy, supplier=supplier)
    assert (first["status"], first["result"]) == ("BLOCKED", "supplier outcome unknown; reconcile later")
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("UNKNOWN", (1500, 0))
    assert reconcile_once(db, supplier, policy=policy) == {"status": "IDLE"}  # still within its retry delay
    skip_retry_delay(db, work.id)
    second = run_once(db, RaisingModel(), policy=policy, supplier=supplier)
    assert (second["status"], second["work"], second["receipt"]["status"]) == ("DONE", work.id, "ACCEPTED")
    assert supplier.calls == [("order", order), ("lookup", order)]
    assert len(supplier.ledger) == 1
    assert money(db) == (0, 1500)


def test_uncertain_orders_are_reconciled_before_ordinary_work(db, policy, supplier):
    work = held_work(db, origin="o1", session="s1")
    order = died_while_sending(db, policy, supplier, work)
    expire_lease(db, work.id)
    ordinary = enqueue(db, "o2", "s2", "Explain the draft")
    first = run_once(db, RaisingModel(), policy=policy, supplier=supplier)
    assert (first["work"], first["status"]) == (work.id, "DONE")
    assert supplier.calls[1:] == [("lookup", order), ("order", order)]
    assert row(db, "assistant_work", ordinary)["status"] == "READY"
    second = run_once(db, OfflineShopModel(), policy=policy, supplier=supplier)
    assert second["work"] == ordinary


def test_cancellation_discovers_an_accepted_order_without_ordering_again(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    supplier.lose_responses = 1
    with pytest.raises(OutcomeUnknown):
        execute(db, work, order, supplier, policy=policy)
    assert cancel(db, work.id) is True
    assert money(db) == (1500, 0)  # cancellation cannot recall a transmitted order
    outcome = reconcile_once(db, supplier, policy=policy)
    assert (outcome["status"], outcome["receipt"]["status"]) == ("CANCELLED", "ACCEPTED")
    assert supplier.calls == [("order", order), ("lookup", order)]
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("CONFIRMED", (0, 1500))
    assert reconcile_once(db, supplier, policy=policy) == {"status": "IDLE"}


def test_a_cancelled_order_the_supplier_never_saw_is_not_sent_and_does_not_starve_other_work(db, policy, supplier):
    work = held_work(db, origin="o1", session="s1")
    order = died_while_sending(db, policy, supplier, work)
    cancel(db, work.id)
    ordinary = enqueue(db, "o2", "s2", "Explain the draft")
    first = run_once(db, OfflineShopModel(), policy=policy, supplier=supplier)
    assert first["work"] == work.id
    assert supplier.sent() == [order]  # only the original attempt: cancellation is no permission to send
    found = row(db, "assistant_work", work.id)
    assert (found["cancelled"], found["status"]) == (1, "BLOCKED")  # waits its retry delay
    assert found["available_after"] > time.time()
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("SENDING", (1500, 0))
    second = run_once(db, OfflineShopModel(), policy=policy, supplier=supplier)
    assert second["work"] == ordinary  # the next pass does other work
    # If the request turns up at the supplier after all, the next recovery settles it.
    supplier.ledger[order] = ({}, {"operation": order, "status": "ACCEPTED", "amount_pence": 1500})
    skip_retry_delay(db, work.id)
    third = reconcile_once(db, supplier, policy=policy)
    assert (third["work"], third["status"]) == (work.id, "CANCELLED")
    assert money(db) == (0, 1500)
    assert supplier.sent() == [order]


def test_an_order_approved_while_the_loop_runs_is_sent_not_stranded(db, policy, supplier):
    identifier = enqueue(db, "phone:vanilla", "lucy", "Reorder what is short", subject="SKU-VANILLA")

    class ApprovedMeanwhile(OfflineShopModel):
        """The operator approves the draft while the model writes its summary."""

        def complete(self, messages, tools, **limits):
            for draft in db.connection.execute(
                "SELECT id, digest FROM assistant_orders WHERE status='DRAFT'"
            ).fetchall():
                approve(db, draft["id"], draft["digest"], actor=OPERATOR, policy=policy, expires=time.time() + 600)
            return super().complete(messages, tools, **limits)

    outcome = run_once(db, ApprovedMeanwhile(), policy=policy, supplier=supplier)
    assert outcome["status"] == "DONE"
    (order,) = [r["id"] for r in db.connection.execute("SELECT id FROM assistant_orders")]
    assert supplier.sent() == [order]
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("CONFIRMED", (0, 1500))
    assert row(db, "assistant_work", identifier)["status"] == "DONE"


def test_a_supplier_refusal_is_a_settled_outcome(db, policy):
    class Refusing(FakeSupplier):
        def order(self, operation, proposal):
            self.calls.append(("order", operation))
            raise SupplierRefused("HTTP 400: malformed proposal")

    supplier = Refusing()
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    expire_lease(db, work.id)
    outcome = run_once(db, RaisingModel(), policy=policy, supplier=supplier)
    assert outcome["status"] == "DONE" and outcome["receipt"]["status"] == "REFUSED"
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("REJECTED", (0, 0))
    assert run_once(db, RaisingModel(), policy=policy, supplier=supplier) == {"status": "IDLE"}
    assert supplier.sent() == [order]


def test_without_a_policy_nothing_is_sent(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    expire_lease(db, work.id)
    outcome = run_once(db, RaisingModel(), supplier=supplier)
    assert outcome["status"] == "BLOCKED" and "ceiling" in outcome["result"]
    assert supplier.calls == []
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("APPROVED", (1500, 0))


def test_a_holder_cancelled_during_reasoning_writes_nothing_more(db, policy, supplier):
    identifier = enqueue(db, "phone:vanilla", "lucy", "Reorder what is short", subject="SKU-VANILLA")

    class CancelledWhileThinking:
        calls = 0

        def complete(self, messages, tools, *, timeout, max_output_tokens):
            self.calls += 1
            if self.calls == 2:
                cancel(db, identifier)
            return OfflineShopModel().complete(messages, tools, timeout=timeout, max_output_tokens=max_output_tokens)

    with pytest.raises(PermissionError):
        run_once(db, CancelledWhileThinking(), policy=policy, supplier=supplier)
    assert count(db, "assistant_transcript") == 2  # the first turn and its tool result only
    assert count(db, "assistant_orders") == 0
    assert row(db, "assistant_work", identifier)["status"] == "CANCELLED"


def test_a_model_that_never_finishes_is_bounded(db, policy, supplier):
    enqueue(db, "o", "lucy", "p")

    class Chatty:
        def complete(self, messages, tools, *, timeout, max_output_tokens):
            from sovereign_agent.model import ToolCall

            return ModelTurn(calls=(ToolCall("c", "stock_report", {}),))

    outcome = run_once(db, Chatty(), policy=policy, supplier=supplier, limits=Limits(max_turns=3))
    assert (outcome["status"], outcome["result"]) == ("BLOCKED", "loop ended: TURNS_EXHAUSTED")
    assert count(db, "assistant_model_calls") == 3


def test_the_lease_covers_the_whole_pass():
    limits = Limits(max_seconds=20)
    assert lease_seconds(limits, FakeSupplier(timeout=3)) == 20 + 3 + 5
    assert lease_seconds(limits, None) == 25


def test_a_claim_from_run_once_is_live_long_enough_to_send(db, policy):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    expire_lease(db, work.id)
    slow = FakeSupplier(timeout=50)
    outcome = run_once(db, RaisingModel(), policy=policy, supplier=slow, limits=Limits(max_seconds=1))
    assert outcome["status"] == "DONE"  # lease = 1 + 50 + 5 s: more than the supplier's timeout
    assert slow.sent() == [order]
    assert claim(db, "x") is None
