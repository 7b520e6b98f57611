"""Recovery against the real supplier process: which order a replacement continues first, and a
success that names another supplier. The supplier's own ledger and request log are the evidence.
"""

from __future__ import annotations

import pytest

from conftest import RaisingModel, approved_vanilla, expire_lease, held_work, money, row
from reference_organizations.store.agent import SUPPLIER_IDENTITY
from reference_organizations.store.assistant import run_once
from reference_organizations.store.supplier import start_supplier
from sovereign_agent.assistant_orders import execute, order_to_continue
from sovereign_agent.suppliers import OutcomeUnknown


def requests(supplier) -> list[tuple[str, str, int | None]]:
    return [(r["method"], r["operation"], r["status"]) for r in supplier.requests()]


def test_the_uncertain_order_is_continued_first_even_when_a_newer_one_exists(db, policy, tmp_path):
    with start_supplier(tmp_path / "supplier.sqlite", drop_first_response=True) as supplier:
        work = held_work(db)
        older = approved_vanilla(db, policy, work)
        with pytest.raises(OutcomeUnknown):  # the supplier stored it; its answer was dropped
            execute(db, work, older, supplier.client(), policy=policy)
        newer = approved_vanilla(db, policy, work, 3, sku="SKU-STRAWBERRY")
        expire_lease(db, work.id)
        newest = db.connection.execute(
            "SELECT id FROM assistant_orders ORDER BY created DESC, rowid DESC LIMIT 1"
        ).fetchone()[0]
        assert (newest, row(db, "assistant_orders", older)["status"]) == (newer, "UNKNOWN")
        assert order_to_continue(db, work) == older  # not the newest: the one needing recovery

        outcome = run_once(db, RaisingModel(), owner="replacement", policy=policy, supplier=supplier.client())

        # Looked up before anything was sent, never resent; then the approved newer one, once.
        assert requests(supplier) == [("POST", older, None), ("GET", older, 200), ("POST", newer, 201)]
        assert [order["operation"] for order in supplier.orders()] == [older, newer]
        assert [row(db, "assistant_orders", o)["status"] for o in (older, newer)] == ["CONFIRMED", "CONFIRMED"]
        assert money(db) == (0, 1500 + 3 * 275)
        assert (outcome["status"], outcome["generation"], outcome["model_calls"]) == ("DONE", 2, 0)
        assert run_once(db, RaisingModel(), policy=policy, supplier=supplier.client()) == {"status": "IDLE"}


def test_a_success_naming_another_supplier_is_looked_up_not_refused(db, policy, tmp_path):
    with start_supplier(tmp_path / "supplier.sqlite", answer_first_as="acme-dairy") as supplier:
        work = held_work(db)
        order = approved_vanilla(db, policy, work)
        with pytest.raises(OutcomeUnknown, match="acme-dairy"):
            execute(db, work, order, supplier.client(), policy=policy)
        # Not a refusal: the order stays uncertain and keeps its reservation, as for a lost answer.
        assert (row(db, "assistant_orders", order)["status"], money(db)) == ("UNKNOWN", (1500, 0))
        assert [o["operation"] for o in supplier.orders()] == [order]  # it was accepted, after all
        expire_lease(db, work.id)

        outcome = run_once(db, RaisingModel(), owner="replacement", policy=policy, supplier=supplier.client())

        assert requests(supplier) == [("POST", order, 201), ("GET", order, 200)]  # looked up, not resent
        assert (row(db, "assistant_orders", order)["status"], money(db)) == ("CONFIRMED", (0, 1500))
        assert outcome["status"] == "DONE" and outcome["receipt"]["supplier"] == SUPPLIER_IDENTITY
