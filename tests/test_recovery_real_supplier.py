"""Recovery against the real supplier process: a success that names another supplier.
The supplier's own ledger and request log are the evidence.
"""

from __future__ import annotations

import pytest

from conftest import RaisingModel, approved_vanilla, expire_lease, held_work, money, row
from reference_organizations.store.agent import SUPPLIER_IDENTITY
from reference_organizations.store.assistant import run_once
from reference_organizations.store.supplier import start_supplier
from sovereign_agent.assistant_orders import execute
from sovereign_agent.suppliers import OutcomeUnknown


def requests(supplier) -> list[tuple[str, str, int | None]]:
    return [(r["method"], r["operation"], r["status"]) for r in supplier.requests()]


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
