"""The runtime's named reads answer from the records, as the runtime itself wrote them."""

from __future__ import annotations

import pytest

from conftest import OPERATOR, approved_vanilla, died_while_sending, held_work, row
from reference_organizations.store.agent import SPENDING_CEILING_PENCE
from sovereign_agent.assistant_work import cancel
from sovereign_agent.database import Database
from sovereign_agent.records import (
    holding, is_cancelled, is_uncertain, lease_expiry, model_calls_by_generation, order, orders_of, spending_ceiling,
    spending_policy,
)


def test_holding_and_lease_expiry_read_the_current_row(db):
    work = held_work(db, ttl=45, now=1000.0)
    assert holding(db.connection, work.id) == {"status": "RUNNING", "generation": 1, "owner": "first-owner",
                                                "expires": 1045.0}
    assert lease_expiry(db.connection, work.id) == 1045.0
    assert holding(db.connection, "no-such-work") is None and lease_expiry(db.connection, "no-such-work") is None


def test_cancellation_is_read_from_the_row(db):
    work = held_work(db)
    assert is_cancelled(db.connection, work.id) is False
    assert cancel(db, work.id)
    assert is_cancelled(db.connection, work.id) is True


def test_orders_are_read_as_recorded_oldest_first(db, policy, supplier):
    work = held_work(db)
    first = approved_vanilla(db, policy, work, quantity=2)
    second = approved_vanilla(db, policy, work, quantity=3, sku="SKU-STRAWBERRY")
    recorded = row(db, "assistant_orders", first)
    assert order(db.connection, first) == {key: recorded[key] for key in ("id", "work_id", "status", "digest", "amount")}
    assert [o["id"] for o in orders_of(db.connection, work.id)] == [first, second]
    assert orders_of(db.connection, work.id, ["CONFIRMED"]) == []
    assert order(db.connection, "no-such-order") is None and not is_uncertain(db.connection, "no-such-order")
    assert not is_uncertain(db.connection, first)


def test_an_order_whose_worker_died_while_sending_is_uncertain(db, policy, supplier):
    work = held_work(db)
    sending = died_while_sending(db, policy, supplier, work)
    assert order(db.connection, sending)["status"] == "SENDING"
    assert is_uncertain(db.connection, sending)


def test_the_spending_policy_comes_from_the_recorded_ceiling(db, tmp_path):
    assert spending_ceiling(db.connection) == SPENDING_CEILING_PENCE
    policy = spending_policy(db.connection, [OPERATOR])
    assert (policy.operators, policy.total_pence) == (frozenset({OPERATOR}), SPENDING_CEILING_PENCE)
    with Database(tmp_path / "unopened.sqlite") as bare, pytest.raises(LookupError, match="never opened"):
        spending_ceiling(bare.connection)


def test_model_calls_are_counted_per_generation_that_reserved_them(db):
    from sovereign_agent.assistant_work import claim, reserve_model_call

    work = held_work(db, ttl=30, now=1000.0)
    reserve_model_call(db, work, 100, now=1001.0)
    reserve_model_call(db, work, 100, now=1002.0)
    replacement = claim(db, "second-owner", now=1030.0, ttl=30)
    reserve_model_call(db, replacement, 100, now=1031.0)
    assert model_calls_by_generation(db.connection, work.id) == {1: 2, 2: 1}
    assert model_calls_by_generation(db.connection, "no-such-work") == {}
