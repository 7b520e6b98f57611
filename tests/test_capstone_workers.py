"""The capstone's worker pass, plugged into the checkpoint and the crash matrix in real processes.

The right worker is 05_checkpoint's solution as a learner saves it; each wrong one is the same
notebook with one plausible mistake in `continue_order` or `run_once` (test_capstone_grading grades
each through the judge; the crash matrix's 24 trials of the right one run in 05 itself, in the
papermill and Lab tests). Both workers of every case and trial (the
old one and its replacement) run the notebook's `run_once` in processes of their own, over the
runtime's fences, and the verdict is read from the shop database and the supplier's ledger. Each
wrong worker must fail a named case or trial whose sentence names the step of the learner's
worker to revisit.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

from conftest import assert_nothing_left
from course.checkpoint import history, run_checkpoint
from course.checkpoint.cases import ALL, ANSWER_LOST

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="real processes, /proc, PR_SET_PDEATHSIG"),
]

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "ch12" / "05_checkpoint.ipynb"


def answers() -> dict[str, str]:
    """The solution's two answer cells, {grade_id: source}."""
    cells = json.loads(SOLUTION.read_text())["cells"]
    return {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in cells
            if c["metadata"].get("nbgrader", {}).get("grade_id") in ("continue_order", "run_once")}


RECOVERY_FIRST = """    work = ownership.claim(db, owner, ttl=ttl, recovery_only=True)
    if work is not None:
        record_process(db, owner)
        return continue_order(db, work, ownership.order_to_continue(db, work), supplier, policy=policy,
                              ownership=ownership)
"""
# name -> (what it gets wrong, the cell it changes, [(old, new)]): one plausible mistake each.
WRONG = {
    "new_work_first": ("takes new work before reconciling an uncertain order", "run_once", [(RECOVERY_FIRST, "")]),
    "asks_the_model": ("re-proposes an approved order through the model", "run_once", [(
        "    order = ownership.order_to_continue(db, work)\n    if order is not None:\n",
        "    order = ownership.order_to_continue(db, work)\n    if False:\n")]),
    "done_when_unknown": ("finishes DONE after OutcomeUnknown", "continue_order", [(
        'ownership.finish(db, work, "BLOCKED", "supplier outcome unknown; reconcile later")\n'
        '            return outcome | {"status": "BLOCKED", "order": order}',
        'ownership.finish(db, work, "DONE", "supplier outcome unknown; reconcile later")\n'
        '            return outcome | {"status": "DONE", "order": order}')]),
    "releases_when_unknown": ("releases the reservation on an unknown outcome", "continue_order", [(
        "        except OutcomeUnknown:\n",
        "        except OutcomeUnknown:\n"
        "            with db.immediate() as connection:\n"
        "                connection.execute('UPDATE assistant_spending SET reserved_pence = reserved_pence - "
        "(SELECT amount FROM assistant_orders WHERE id=?) WHERE id=1', (order,))\n")]),
    "sends_after_refusal": ("goes on and sends the order itself after its fenced execution was refused",
                            "continue_order", [(
        "            receipt = execute(db, work, order, supplier, policy=policy, fence=ownership.assert_current)\n",
        "            try:\n"
        "                receipt = execute(db, work, order, supplier, policy=policy, fence=ownership.assert_current)\n"
        "            except PermissionError:\n"
        "                proposal = db.connection.execute('SELECT proposal FROM assistant_orders WHERE id=?', "
        "(order,)).fetchone()[0]\n"
        "                receipt = supplier.order(order, json.loads(proposal))\n")]),
    "completes_around_the_fence": ("writes its completion with plain SQL instead of `ownership.finish`",
                                   "continue_order", [(
        '    ownership.finish(db, work, status, json.dumps({"order": order, "receipt": receipt}, sort_keys=True))\n',
        "    with db.immediate() as connection:\n"
        "        connection.execute('UPDATE assistant_work SET status=?, result=? WHERE id=?', "
        '(status, json.dumps({"order": order, "receipt": receipt}, sort_keys=True), work.id))\n')]),
}


def mutated(name: str) -> dict[str, str]:
    """The solution's answers with the one mistake `name` makes."""
    _, cell, changes = WRONG[name]
    found = answers()
    for old, new in changes:
        assert found[cell].count(old) == 1, f"the mutation {name} no longer matches the solution's `{cell}`"
        found[cell] = found[cell].replace(old, new)
    return found


def write_worker(folder: Path, graded: dict[str, str]) -> Path:
    """The solution's 05_checkpoint with these answer cells, saved in `folder` (nbformat 4 JSON)."""
    folder.mkdir(parents=True, exist_ok=True)
    notebook = json.loads(SOLUTION.read_text())
    for cell in notebook["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in graded:
            cell["source"] = graded[grade_id]
    (folder / "05_checkpoint.ipynb").write_text(json.dumps(notebook))
    return folder


@pytest.fixture
def right_worker(tmp_path):
    return write_worker(tmp_path / f"right-{uuid.uuid4().hex[:6]}", answers())


def test_the_right_worker_passes_every_case_in_real_processes(right_worker, tmp_path):
    cases = run_checkpoint("reference", worker=right_worker, cases=[*ALL, ANSWER_LOST], output_dir=tmp_path / "cases")
    assert [(case.case, case.failures) for case in cases] == [(name, []) for name in (*ALL, ANSWER_LOST)]
    assert all(case.worker_learner and not case.fences_learner for case in cases)
    lost = next(case for case in cases if case.case == ANSWER_LOST)
    assert (lost.after_lost_answer["status"], lost.after_lost_answer["order_status"]) == ("BLOCKED", "UNKNOWN")
    assert lost.after_lost_answer["reserved_pence"] == lost.order_amount == lost.spent_pence
    assert (lost.supplier_posts, lost.supplier_gets, lost.model_calls) == (1, 1, 0)
    assert_nothing_left(tmp_path, [pid for case in cases for pid in (case.worker_pid, case.supplier_pid) if pid])


# The history checker's invariants, over what a wrong worker's lost-answer case recorded: the four
# mistakes that leave a trace in the records are flagged. Re-asking the model leaves none (the case's
# model refuses before anything is written; the checkpoint counts its calls), and neither does a
# send after a refusal here (no refusal happens in this case; the frozen cases grade it).
RECORDED = {"done_when_unknown": {"done_means_settled"}, "releases_when_unknown": {"money_conserved"},
            "new_work_first": {"reconciled_first"}, "completes_around_the_fence": {"finished_with_event"}}


@pytest.mark.parametrize("name", [None, *RECORDED])
def test_the_history_checker_flags_what_a_wrong_worker_leaves_in_the_records(name, tmp_path):
    folder = write_worker(tmp_path / str(name), answers() if name is None else mutated(name))
    (case,) = run_checkpoint("reference", worker=folder, cases=[ANSWER_LOST], output_dir=tmp_path / "out")
    (run,) = (tmp_path / "out").iterdir()
    found = {violation.invariant for violation in history.check(history.load(run / ANSWER_LOST))}
    assert found == (RECORDED[name] if name else set()), (found, case.failures)


def test_a_worker_sandbox_tripwires_exactly_what_its_process_loads_from_the_submission():
    from course.grading.learner.tripwires import IMPLEMENTATION, WORKER_PASS, of_worker

    def argv(fences, worker):
        return ["python", "-P", "-m", "course.checkpoint.worker", "--database", "reference", "--implementation",
                fences, "--worker", worker, "--owner", "old-worker"]

    assert of_worker(argv(".", "reference")) == IMPLEMENTATION
    assert of_worker(argv("reference", ".")) == WORKER_PASS == {"continue_order", "run_once"}
    assert of_worker(argv(".", ".")) == IMPLEMENTATION | WORKER_PASS
    assert of_worker(argv("reference", "reference")) == frozenset()
