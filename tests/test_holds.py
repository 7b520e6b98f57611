"""course.lessons.holds: a worker pass held at a named point, the hook run there once, in the same thread."""

from __future__ import annotations

import threading

import pytest

from course.lessons.checks import ScriptedSupplier, fresh_shop, order_in_state
from course.lessons.holds import POINTS, Hold, held_completion
from reference_organizations.store.agent import OfflineShopModel
from reference_organizations.store.assistant import run_once
from sovereign_agent.assistant_work import cancel, enqueue
from sovereign_agent.records import spending_policy
from sovereign_agent.suppliers import OutcomeUnknown


class Counting(ScriptedSupplier):
    def __init__(self, answer: str) -> None:
        super().__init__(answer)
        self.sent = 0

    def order(self, operation, proposal):
        self.sent += 1
        return super().order(operation, proposal)


def test_an_unknown_point_is_refused():
    with pytest.raises(ValueError, match="one of"):
        Hold("after lunch", lambda: None)
    assert POINTS == ("completion", "accepted", "lost")


def test_the_completion_is_held_in_the_same_thread_and_the_cancel_fences_it():
    db = fresh_shop()
    work_id = enqueue(db, "phone:hold", "lucy", "Check the vanilla stock", subject="SKU-VANILLA")
    seen = []
    hold = Hold("completion", lambda: (seen.append(threading.current_thread()), cancel(db, work_id))[1])
    with pytest.raises(PermissionError):
        run_once(db, OfflineShopModel(), owner="held", ownership=hold.ownership())
    assert hold.fired and hold.returned is True and seen == [threading.current_thread()]
    assert db.connection.execute("SELECT status, generation FROM assistant_work").fetchone()[:] == ("CANCELLED", 2)


def test_accepted_is_held_after_the_supplier_said_yes_and_lookups_pass_through():
    db, held, order_id = order_in_state("APPROVED")
    supplier = Counting("ACCEPTED")
    at_hold = []
    hold = Hold("accepted", lambda: at_hold.append(supplier.sent))
    wrapped = hold.supplier(supplier)
    assert (wrapped.identity, wrapped.timeout) == (supplier.identity, supplier.timeout)
    assert hold.ownership() is not None and wrapped.lookup(order_id) is None
    from sovereign_agent.assistant_orders import execute

    execute(db, held, order_id, wrapped, policy=spending_policy(db.connection, {"lucy"}))
    assert at_hold == [1] and hold.fired  # fired once, after the supplier had the order


def test_lost_never_reaches_the_supplier_and_fires_once():
    supplier = Counting("ACCEPTED")
    hold = Hold("lost", lambda: "cancelled")
    wrapped = hold.supplier(supplier)
    with pytest.raises(OutcomeUnknown):
        wrapped.order("x" * 32, {})
    assert supplier.sent == 0 and hold.returned == "cancelled"
    wrapped.order("x" * 32, {})  # released: later requests go through
    assert supplier.sent == 1


def test_the_completion_point_leaves_the_supplier_alone():
    supplier = Counting("ACCEPTED")
    assert Hold("completion", lambda: None).supplier(supplier) is supplier


def test_held_completion_measures_cancels_rules():
    db = fresh_shop()
    work_id = enqueue(db, "phone:hold", "lucy", "Check the vanilla stock", subject="SKU-VANILLA")
    measured = held_completion(db, work_id)
    assert measured["cancelled_while_held"] and measured["completion"] == "refused"
    assert (measured["held_generation"], measured["status_after"], measured["generation_after"]) == (1, "CANCELLED", 2)
