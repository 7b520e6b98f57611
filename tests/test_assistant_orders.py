"""Supplier orders: deterministic operation ids, approval by digest, the ceiling, the supplier fence."""

from __future__ import annotations

import json
import time

import pytest

from conftest import (
    OPERATOR,
    FakeSupplier,
    approved_vanilla,
    count,
    died_while_sending,
    held_work,
    money,
    row,
    snapshot,
)
from reference_organizations.store.agent import SUPPLIER_IDENTITY
from sovereign_agent.assistant_orders import (
    OrderRefused,
    SpendingPolicy,
    approve,
    execute,
    order_to_continue,
    propose,
    revoke,
)
from sovereign_agent.assistant_work import cancel, claim, finish
from sovereign_agent.suppliers import OutcomeUnknown


def approve_order(db, order, *, policy, digest_of=None, actor=OPERATOR, expires=None):
    """The operator approves the recorded proposal of `digest_of` (default: the order itself)."""
    digest = row(db, "assistant_orders", digest_of or order)["digest"]
    approve(db, order, digest, actor=actor, policy=policy, expires=time.time() + 60 if expires is None else expires)

def test_propose_records_a_draft_priced_from_the_catalogue(db):
    work = held_work(db)
    order = propose(db, work, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    found = row(db, "assistant_orders", order)
    assert (found["work_id"], found["amount"], found["status"], found["target"]) == (
        work.id,
        1500,
        "DRAFT",
        SUPPLIER_IDENTITY,
    )
    assert json.loads(found["proposal"]) == {
        "sku": "SKU-VANILLA",
        "quantity": 6,
        "unit_pence": 250,
        "supplier": SUPPLIER_IDENTITY,
        "currency": "GBP",
    }
    assert money(db) == (0, 0)


def test_the_operation_id_is_deterministic(db):
    work = held_work(db)
    first = propose(db, work, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    replacement = claim(db, "replacement", now=time.time() + 61, ttl=120)  # after the first lease
    assert (replacement.id, replacement.generation) == (work.id, 2)
    again = propose(db, replacement, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    assert again == first
    assert count(db, "assistant_orders") == 1
    other_quantity = propose(db, replacement, "SKU-VANILLA", 5, target=SUPPLIER_IDENTITY)
    other_supplier = propose(db, replacement, "SKU-VANILLA", 6, target="another-wholesaler")
    assert len({first, other_quantity, other_supplier}) == 3
    assert count(db, "assistant_orders") == 3


def test_the_same_proposal_for_other_work_is_another_operation(db):
    first = held_work(db, origin="o1", session="s1")
    second = held_work(db, origin="o2", session="s2")
    assert propose(db, first, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY) != propose(
        db, second, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY
    )


@pytest.mark.parametrize(
    "sku, quantity, target",
    [
        ("SKU-VANILLA", 0, SUPPLIER_IDENTITY),
        ("SKU-VANILLA", 1001, SUPPLIER_IDENTITY),
        ("SKU-VANILLA", 2.0, SUPPLIER_IDENTITY),
        ("SKU-VANILLA", True, SUPPLIER_IDENTITY),
        ("SKU-NOPE", 1, SUPPLIER_IDENTITY),
        ("SKU-VANILLA", 1, ""),
    ],
)
def test_bad_proposals_are_refused_and_leave_no_row(db, sku, quantity, target):
    work = held_work(db)
    before = snapshot(db)
    with pytest.raises(ValueError):
        propose(db, work, sku, quantity, target=target)
    assert snapshot(db) == before


def test_a_stale_holder_cannot_propose(db):
    work = held_work(db)
    cancel(db, work.id)
    with pytest.raises(PermissionError):
        propose(db, work, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    assert count(db, "assistant_orders") == 0


# --- approval -----------------------------------------------------------------------------------


def test_approval_reserves_the_amount(db, policy):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    found = row(db, "assistant_orders", order)
    assert (found["status"], found["approved_by"]) == ("APPROVED", OPERATOR)
    assert money(db) == (1500, 0)


def test_approval_names_the_exact_proposal_by_digest(db, policy):
    work = held_work(db)
    order = propose(db, work, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    other = propose(db, work, "SKU-VANILLA", 5, target=SUPPLIER_IDENTITY)
    before = snapshot(db)
    with pytest.raises(OrderRefused, match="different proposal"):
        approve_order(db, order, digest_of=other, policy=policy)
    assert snapshot(db) == before
    assert row(db, "assistant_orders", order)["status"] == "DRAFT"
    assert money(db) == (0, 0)


@pytest.mark.parametrize("actor", ["model", "automatic", "", "LUCY"])
def test_only_operators_approve(db, policy, actor):
    work = held_work(db)
    order = propose(db, work, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    before = snapshot(db)
    with pytest.raises(OrderRefused):
        approve_order(db, order, actor=actor, policy=policy)
    assert snapshot(db) == before


def test_automatic_approval_only_below_its_threshold(db):
    policy = SpendingPolicy(frozenset({OPERATOR}), total_pence=2500, automatic_order_pence=500)
    work = held_work(db)
    small = propose(db, work, "SKU-VANILLA", 2, target=SUPPLIER_IDENTITY)  # 500
    large = propose(db, work, "SKU-VANILLA", 3, target=SUPPLIER_IDENTITY)  # 750
    approve_order(db, small, actor="automatic", policy=policy)
    with pytest.raises(OrderRefused):
        approve_order(db, large, actor="automatic", policy=policy)
    assert money(db) == (500, 0)


def test_the_ceiling_refuses_an_approval_and_reserves_nothing(db, policy):
    vanilla_work = held_work(db, origin="o1", session="s1")
    strawberry_work = held_work(db, origin="o2", session="s2")  # another session: may proceed
    approved_vanilla(db, policy, vanilla_work)  # 1500 of 2500
    strawberry = propose(db, strawberry_work, "SKU-STRAWBERRY", 4, target=SUPPLIER_IDENTITY)  # 1100
    before = snapshot(db)
    with pytest.raises(OrderRefused, match="ceiling"):
        approve_order(db, strawberry, policy=policy)
    assert snapshot(db) == before
    assert money(db) == (1500, 0)
    smaller = propose(db, strawberry_work, "SKU-STRAWBERRY", 3, target=SUPPLIER_IDENTITY)  # 825: 2325 fits
    approve_order(db, smaller, policy=policy)
    assert money(db) == (2325, 0)


def test_a_lower_policy_ceiling_wins(db):
    work = held_work(db)
    order = propose(db, work, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    with pytest.raises(OrderRefused):
        approve(
            db,
            order,
            row(db, "assistant_orders", order)["digest"],
            actor=OPERATOR,
            policy=SpendingPolicy(frozenset({OPERATOR}), total_pence=1000),
            expires=time.time() + 60,
        )
    assert money(db) == (0, 0)


@pytest.mark.parametrize("expires", [float("nan"), float("inf"), 0, -1])
def test_approval_needs_a_future_finite_expiry(db, policy, expires):
    work = held_work(db)
    order = propose(db, work, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    before = snapshot(db)
    with pytest.raises(ValueError):
        approve(db, order, row(db, "assistant_orders", order)["digest"], actor=OPERATOR, policy=policy, expires=expires)
    assert snapshot(db) == before


def test_approving_twice_reserves_once(db, policy):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    with pytest.raises(OrderRefused):
        approve_order(db, order, policy=policy)
    assert money(db) == (1500, 0)


def test_approval_makes_blocked_work_ready_again(db, policy):
    work = held_work(db)
    order = propose(db, work, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    finish(db, work, "BLOCKED", "awaiting approval")
    approve(
        db, order, row(db, "assistant_orders", order)["digest"], actor=OPERATOR, policy=policy, expires=time.time() + 60
    )
    found = row(db, "assistant_work", work.id)
    assert (found["status"], found["available_after"]) == ("READY", 0)


def test_revoke_releases_an_unsent_reservation_and_refuses_a_sent_order(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    with pytest.raises(OrderRefused):
        revoke(db, order, actor="model", policy=policy)
    revoke(db, order, actor=OPERATOR, policy=policy)
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("REVOKED", (0, 0))
    sent = approved_vanilla(db, policy, work, quantity=5)
    execute(db, work, sent, supplier, policy=policy)
    with pytest.raises(OrderRefused):
        revoke(db, sent, actor=OPERATOR, policy=policy)
    assert money(db) == (0, 1250)


# --- execute: the supplier fence ----------------------------------------------------------------


def test_a_confirmed_order_moves_the_reservation_to_spent(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    receipt = execute(db, work, order, supplier, policy=policy)
    assert receipt["status"] == "ACCEPTED"
    assert supplier.calls == [("order", order)]
    found = row(db, "assistant_orders", order)
    assert (found["status"], json.loads(found["receipt"])) == ("CONFIRMED", receipt)
    assert money(db) == (0, 1500)
    # Executing a settled order again only returns the stored receipt.
    assert execute(db, work, order, supplier, policy=policy) == receipt
    assert supplier.calls == [("order", order)]
    assert money(db) == (0, 1500)


def test_a_rejected_order_releases_the_reservation(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    supplier.reject = True
    execute(db, work, order, supplier, policy=policy)
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("REJECTED", (0, 0))


def test_a_stale_holder_is_refused_before_anything_is_sent(db, policy, supplier):
    work = held_work(db, now=time.time() - 100, ttl=10)  # its lease ran out long ago
    replacement = claim(db, "replacement", ttl=60)
    assert (replacement.id, replacement.generation) == (work.id, 2)
    order = approved_vanilla(db, policy, replacement)
    before = snapshot(db)
    with pytest.raises(PermissionError):
        execute(db, work, order, supplier, policy=policy)
    assert supplier.calls == []
    assert snapshot(db) == before


def test_a_cancelled_holder_is_refused_before_anything_is_sent(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    cancel(db, work.id)
    with pytest.raises(PermissionError):
        execute(db, work, order, supplier, policy=policy)
    assert supplier.calls == []
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("REVOKED", (0, 0))


@pytest.mark.parametrize("timeout, admitted", [(10.0, False), (30.0, False), (9.5, True)])
def test_a_request_must_fit_in_the_remaining_lease(db, policy, timeout, admitted):
    now = time.time()
    work = held_work(db, now=now, ttl=10)
    order = approved_vanilla(db, policy, work)
    supplier = FakeSupplier(timeout=timeout)
    if admitted:
        execute(db, work, order, supplier, policy=policy, now=now)
        assert supplier.calls == [("order", order)]
        return
    before = snapshot(db)
    with pytest.raises(OrderRefused, match="lease"):
        execute(db, work, order, supplier, policy=policy, now=now)
    assert supplier.calls == []
    assert snapshot(db) == before
    assert row(db, "assistant_orders", order)["status"] == "APPROVED"


@pytest.mark.parametrize("status", ["DRAFT", "REVOKED"])
def test_only_an_approved_order_is_sent(db, policy, supplier, status):
    work = held_work(db)
    order = propose(db, work, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    if status == "REVOKED":
        revoke(db, order, actor=OPERATOR, policy=policy)
    with pytest.raises(OrderRefused):
        execute(db, work, order, supplier, policy=policy)
    assert supplier.calls == []


def test_an_order_goes_only_to_the_supplier_it_names(db, policy):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    elsewhere = FakeSupplier(identity="another-wholesaler")
    with pytest.raises(OrderRefused):
        execute(db, work, order, elsewhere, policy=policy)
    assert elsewhere.calls == []


def test_an_expired_approval_is_not_sent(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    db.connection.execute("UPDATE assistant_orders SET approved_until=? WHERE id=?", (time.time() - 1, order))
    with pytest.raises(OrderRefused, match="expired"):
        execute(db, work, order, supplier, policy=policy)
    assert supplier.calls == []
    assert money(db) == (1500, 0)


def test_another_works_order_is_not_found(db, policy, supplier):
    work = held_work(db, origin="o1", session="s1")
    other = held_work(db, origin="o2", session="s2")
    order = approved_vanilla(db, policy, work)
    with pytest.raises(KeyError):
        execute(db, other, order, supplier, policy=policy)
    assert supplier.calls == []


def test_a_lost_response_leaves_the_order_unknown_with_its_reservation(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    supplier.lose_responses = 1
    with pytest.raises(OutcomeUnknown):
        execute(db, work, order, supplier, policy=policy)
    assert row(db, "assistant_orders", order)["status"] == "UNKNOWN"
    assert money(db) == (1500, 0)
    assert len(supplier.ledger) == 1  # the supplier did store it


def test_an_unknown_order_is_looked_up_before_anything_is_resent(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    supplier.lose_responses = 1
    with pytest.raises(OutcomeUnknown):
        execute(db, work, order, supplier, policy=policy)
    receipt = execute(db, work, order, supplier, policy=policy)
    assert supplier.calls == [("order", order), ("lookup", order)]  # discovered, not resent
    assert receipt["status"] == "ACCEPTED"
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("CONFIRMED", (0, 1500))


def test_an_order_the_supplier_never_saw_is_resent_with_the_same_operation(db, policy, supplier):
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    supplier.drop_requests = 1
    with pytest.raises(OutcomeUnknown):
        execute(db, work, order, supplier, policy=policy)
    assert supplier.ledger == {}
    execute(db, work, order, supplier, policy=policy)
    assert supplier.calls == [("order", order), ("lookup", order), ("order", order)]
    assert list(supplier.ledger) == [order]
    assert money(db) == (0, 1500)


def test_a_sending_order_left_by_a_dead_worker_is_looked_up_by_its_replacement(db, policy, supplier):
    work = held_work(db)
    order = died_while_sending(db, policy, supplier, work)
    assert row(db, "assistant_orders", order)["status"] == "SENDING"
    # Injected time selects the expired holding; the new lease is live on the real clock too.
    replacement = claim(db, "replacement", now=time.time() + 61, ttl=120)
    assert (replacement.id, replacement.generation) == (work.id, 2)
    execute(db, replacement, order, supplier, policy=policy)
    assert supplier.calls == [("order", order), ("lookup", order), ("order", order)]
    assert list(supplier.ledger) == [order]
    assert (row(db, "assistant_orders", order)["status"], money(db)) == ("CONFIRMED", (0, 1500))
    with pytest.raises(PermissionError):
        execute(db, work, order, supplier, policy=policy)
    assert len(supplier.calls) == 3


def test_a_receipt_for_a_stale_holder_is_not_recorded(db, policy, supplier):
    """The request left while authorised; the holding was replaced before the answer came back."""
    work = held_work(db)
    order = approved_vanilla(db, policy, work)

    class CancelledMidFlight(FakeSupplier):
        def order(self, operation, proposal):
            receipt = super().order(operation, proposal)
            cancel(db, work.id)  # the operator cancels while the request is in flight
            return receipt

    late = CancelledMidFlight()
    with pytest.raises(PermissionError):
        execute(db, work, order, late, policy=policy)
    assert row(db, "assistant_orders", order)["status"] == "SENDING"  # for reconciliation to discover
    assert money(db) == (1500, 0)
    assert list(late.ledger) == [order]


def test_a_lost_response_seen_by_a_replaced_holder_leaves_no_write(db, policy):
    """The answer is lost after the holding was replaced: the stale holder records nothing, not even
    the uncertainty (the order stays SENDING, which recovery looks up the same way as UNKNOWN)."""
    work = held_work(db)
    order = approved_vanilla(db, policy, work)

    class ReplacedMidFlight(FakeSupplier):
        def order(self, operation, proposal):
            cancel(db, work.id)  # the holding changes while the request is in flight
            return super().order(operation, proposal)

    late = ReplacedMidFlight()
    late.lose_responses = 1
    events = db.connection.execute("SELECT count(*) FROM events").fetchone()[0]
    with pytest.raises(OutcomeUnknown):
        execute(db, work, order, late, policy=policy)
    assert row(db, "assistant_orders", order)["status"] == "SENDING"
    kinds = [r[0] for r in db.connection.execute("SELECT kind FROM events WHERE seq>?", (events,))]
    assert "assistant.order.unknown" not in kinds and money(db) == (1500, 0)


def test_admission_refuses_in_words_an_assignment_that_holds_no_lease(db, policy, supplier):
    """Only a fence that lets a finished holding through gets here; the refusal names why."""
    work = held_work(db)
    order = approved_vanilla(db, policy, work)
    with db.immediate() as connection:
        connection.execute("UPDATE assistant_work SET status='DONE', expires=NULL WHERE id=?", (work.id,))
    with pytest.raises(OrderRefused, match="no live lease"):
        execute(db, work, order, supplier, policy=policy, fence=lambda *args: None)
    assert supplier.calls == [] and row(db, "assistant_orders", order)["status"] == "APPROVED"


def test_order_to_continue_finds_the_recorded_non_draft_order(db, policy):
    work = held_work(db)
    propose(db, work, "SKU-VANILLA", 5, target=SUPPLIER_IDENTITY)
    assert order_to_continue(db, work) is None
    order = approved_vanilla(db, policy, work)
    assert order_to_continue(db, work) == order


def test_order_to_continue_takes_what_needs_recovery_before_anything_newer(db, policy, supplier):
    """Uncertain first, then approved (oldest first), and a settled one only when nothing is pending."""
    work = held_work(db)
    supplier.reject = True
    rejected = approved_vanilla(db, policy, work, 1)
    execute(db, work, rejected, supplier, policy=policy)
    supplier.reject = False
    confirmed = approved_vanilla(db, policy, work, 2)
    execute(db, work, confirmed, supplier, policy=policy)
    pending = approved_vanilla(db, policy, work, 3)
    uncertain = approved_vanilla(db, policy, work, 1, sku="SKU-STRAWBERRY")
    supplier.lose_responses = 1
    with pytest.raises(OutcomeUnknown):
        execute(db, work, uncertain, supplier, policy=policy)
    draft = propose(db, work, "SKU-CHOCOLATE", 1, target=SUPPLIER_IDENTITY)
    recorded = [tuple(r) for r in db.connection.execute("SELECT id, status FROM assistant_orders ORDER BY created")]
    assert recorded == [
        (rejected, "REJECTED"), (confirmed, "CONFIRMED"), (pending, "APPROVED"), (uncertain, "UNKNOWN"),
        (draft, "DRAFT"),
    ]
    assert order_to_continue(db, work) == uncertain
    execute(db, work, uncertain, supplier, policy=policy)  # looked up and settled
    assert order_to_continue(db, work) == pending  # older than the settled ones beside it, still continued
    execute(db, work, pending, supplier, policy=policy)
    assert order_to_continue(db, work) == uncertain  # nothing pending: the newest settled order
    assert supplier.calls == [
        ("order", rejected), ("order", confirmed), ("order", uncertain), ("lookup", uncertain), ("order", pending),
    ]


def test_a_holder_that_times_out_after_its_replacement_settled_writes_nothing(db, policy):
    """The late 'unknown' note is unfenced on purpose; once the order is settled it must leave no
    row behind, or a stale generation would have written after the takeover (crash matrix:
    supplier-committed with SIGSTOP)."""
    work = held_work(db, ttl=60)
    order = approved_vanilla(db, policy, work)

    class AnswerNeverCame(FakeSupplier):
        def order(self, operation, proposal):
            super().order(operation, proposal)  # stored at the supplier
            later = row(db, "assistant_work", work.id)["expires"] + 1  # meanwhile the lease ran out
            replacement = claim(db, "replacement", now=later, recovery_only=True)
            execute(db, replacement, order, self, policy=policy, now=later)  # looked up and settled
            raise OutcomeUnknown("the old holder's answer never came")

    with pytest.raises(OutcomeUnknown):
        execute(db, work, order, AnswerNeverCame(), policy=policy)
    assert row(db, "assistant_orders", order)["status"] == "CONFIRMED"
    assert count(db, "events", "kind='assistant.order.unknown'") == 0
    assert money(db) == (0, 1500)
