"""The `course` command's runtime jobs, end to end, against a real supplier process."""

from __future__ import annotations

import json
import sqlite3
import time

from click.testing import CliRunner

from course.cli import main
from reference_organizations.store.supplier import start_supplier
from sovereign_agent.assistant_orders import SpendingPolicy, approve
from sovereign_agent.database import Database


def invoke(*args: str):
    return CliRunner().invoke(main, [str(arg) for arg in args], catch_exceptions=False)


def test_enqueue_work_approve_and_status(tmp_path):
    shop = tmp_path / "shop" / "agent.sqlite"
    queued = invoke("enqueue", "--database", shop, "phone:1", "lucy", "Restock vanilla", "--subject", "SKU-VANILLA")
    assert queued.exit_code == 0, queued.output
    drafted = invoke("worker", "--database", shop)
    assert json.loads(drafted.output)["status"] == "BLOCKED"  # a draft waits for the operator

    with Database(shop) as db:
        order = db.connection.execute("SELECT id, digest FROM assistant_orders").fetchone()
        approve(db, order["id"], order["digest"], actor="lucy",
                policy=SpendingPolicy(frozenset({"lucy"}), 2500), expires=time.time() + 600)

    with start_supplier(tmp_path / "supplier.sqlite") as supplier:
        ready = supplier.ledger.with_suffix(".ready")
        sent = json.loads(invoke("worker", "--database", shop, "--supplier-ready", ready).output)
        assert (sent["status"], sent["generation"], sent["model_calls"]) == ("DONE", 2, 0)
        assert [row["operation"] for row in supplier.orders()] == [order["id"]]
        report = json.loads(invoke("status", "--database", shop, "--supplier-ready", ready, "--json").output)

    assert set(report) >= {"health", "progress", "cancellation", "external"}
    assert report["health"]["supplier"]["ok"] is True
    assert report["health"]["supplier"]["detail"] == {"identity": "lucy-wholesale", "orders": 1}
    assert report["external"]["money"]["spent_pence"] == 1500


def test_enqueue_refuses_an_empty_prompt_and_stores_nothing(tmp_path):
    shop = tmp_path / "agent.sqlite"
    refused = CliRunner().invoke(main, ["enqueue", "--database", str(shop), "phone:1", "lucy", ""])
    assert refused.exit_code == 2 and "prompt must not be empty" in refused.output
    assert sqlite3.connect(shop).execute("SELECT count(*) FROM assistant_work").fetchone()[0] == 0
