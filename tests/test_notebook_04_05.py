"""Notebooks 04 and 05 beyond the exercises: the checkpoint loads what a learner's answer needs.

A learner may write a helper in a cell of its own and call it from a graded function. The
notebook's tests see it (the checker loads the definitions of the learner's cells); the
checkpoint must see it too, or say plainly why a name is missing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import assert_nothing_left
from course.checkpoint import run_checkpoint
from test_checkpoint import RIGHT, write_learner

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="real processes, /proc, PR_SET_PDEATHSIG"),
]

# order_to_continue written as a learner might: the query lives in a helper of its own cell.
HELPER = '''
RECOVERY_ORDER = ("SENDING", "UNKNOWN", "APPROVED")


def continuable_orders(db, work_id):
    """This assignment's orders a replacement may continue, as (status, created, id) rows."""
    return db.connection.execute(
        "SELECT status, created, rowid, id FROM assistant_orders WHERE work_id = ? "
        "AND status NOT IN ('DRAFT', 'REVOKED')", (work_id,)).fetchall()


scratch = continuable_orders  # a statement: the checkpoint does not run it
'''
USES_HELPER = '''
def order_to_continue(db, work):
    """Pending orders first (uncertain, then approved, oldest first), else the newest settled one."""
    rows = continuable_orders(db, work.id)
    pending = sorted((RECOVERY_ORDER.index(r["status"]) // 2, r["created"], r["rowid"], r["id"])
                     for r in rows if r["status"] in RECOVERY_ORDER)
    if pending:
        return pending[0][3]
    settled = sorted(((r["created"], r["rowid"], r["id"]) for r in rows), reverse=True)
    return settled[0][2] if settled else None
'''
# The same helper, bound by a statement instead of a definition: the checkpoint cannot have it.
BOUND_BY_STATEMENT = HELPER.replace("def continuable_orders", "def _make").replace(
    "scratch = continuable_orders  # a statement: the checkpoint does not run it", "continuable_orders = _make")


def add_learner_cell(notebook: Path, source: str) -> None:
    """A cell the learner added just above the graded order_to_continue cell (no nbgrader metadata)."""
    document = json.loads(notebook.read_text())
    cells = document["cells"]
    at = next(i for i, c in enumerate(cells)
              if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "order_to_continue")
    cells.insert(at, {"cell_type": "code", "execution_count": None, "id": "learnerhelper", "metadata": {},
                      "outputs": [], "source": source})
    notebook.write_text(json.dumps(document, indent=1))


def test_a_helper_in_another_learner_cell_is_loaded_by_the_checkpoint(tmp_path):
    folder = write_learner(tmp_path / "helper", RIGHT | {"order_to_continue": USES_HELPER})
    add_learner_cell(folder / "04_recovery.ipynb", HELPER)
    (killed, crashed) = run_checkpoint(folder, cases=["killed", "accepted_then_crash"], output_dir=tmp_path / "out")
    for case in (killed, crashed):
        assert case.passed, case.failures
    assert killed.model_calls == 0 and killed.supplier_operations == [killed.operation]
    assert_nothing_left(tmp_path, {pid for c in (killed, crashed) for pid in (c.worker_pid, c.supplier_pid)})


def test_a_helper_bound_by_a_statement_in_another_cell_is_there_as_in_the_kernel(tmp_path):
    """The checkpoint runs the learner's cells as written (as their kernel did): a helper that only
    a statement binds (`x = f()`) in a cell of their own is defined when the graded function runs."""
    folder = write_learner(tmp_path / "statement", RIGHT | {"order_to_continue": USES_HELPER})
    add_learner_cell(folder / "04_recovery.ipynb", BOUND_BY_STATEMENT)
    (case,) = run_checkpoint(folder, cases=["killed"], output_dir=tmp_path / "out")
    assert case.passed, case.failures
    assert_nothing_left(tmp_path, {case.worker_pid, case.supplier_pid})


def test_the_status_sections_killed_holder_is_really_killed_and_leaves_nothing_behind():
    from course.lessons.checks import fresh_shop, killed_holder
    from sovereign_agent.assistant_work import enqueue
    from sovereign_agent.status import status_report

    db = fresh_shop()
    work_id = enqueue(db, "phone:vanilla", "lucy", "Restock vanilla", subject="SKU-VANILLA")
    assert killed_holder(db, work_id, ttl=1.0) == -9
    holders = status_report(db)["progress"]["live_holders"]
    assert [(h["work"], h["owner"], h["generation"]) for h in holders] == [(work_id, "killed-worker", 1)]
    assert_nothing_left(db.path.parent)
