"""The capstone's worker pass, plugged into the checkpoint and the crash matrix in real processes.

The right worker is the runtime's own pass written out as a learner's 05_checkpoint; each wrong
one is the same source with one plausible mistake. Both workers of every case and trial (the
old one and its replacement) run the notebook's `run_once` in processes of their own, over the
runtime's fences, and the verdict is read from the shop database and the supplier's ledger. Each
wrong worker must fail a named case or trial whose sentence names the step of the learner's
worker to revisit.
"""

from __future__ import annotations

import inspect
import json
import sys
import uuid
from pathlib import Path

import pytest

from conftest import assert_nothing_left
from course.checkpoint import run_checkpoint
from course.checkpoint.cases import ALL, ANSWER_LOST
from course.checkpoint.matrix import matrix_specs, run_matrix
from course.checkpoint.trial import SIGSTOP
from reference_organizations.store import assistant

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="real processes, /proc, PR_SET_PDEATHSIG"),
]

SOURCE = inspect.getsource(assistant).split('"""', 2)[2].lstrip()  # the module without its docstring
RECONCILE_FIRST = '''    if supplier is not None:
        recovered = reconcile_once(db, supplier, owner=owner, policy=policy, limits=limits, ownership=ownership)
        if recovered["status"] != "IDLE":
            return recovered
'''
# name -> (what it gets wrong, [(old, new)]): one plausible mistake each.
WRONG = {
    "new_work_first": ("takes new work before reconciling an uncertain order", [(RECONCILE_FIRST, "")]),
    "asks_the_model": ("re-proposes an approved order through the model",
                       [("if order is not None and supplier is not None:", "if False:")]),
    "done_when_unknown": ("finishes DONE after OutcomeUnknown", [(
        'status, result = _stopped(db, order, cancelled), "supplier outcome unknown; reconcile later"',
        'status, result = "DONE", "supplier outcome unknown; reconcile later"')]),
    "releases_when_unknown": ("releases the reservation on an unknown outcome", [(
        '        except OutcomeUnknown:\n',
        '        except OutcomeUnknown:\n'
        '            with db.immediate() as connection:\n'
        '                connection.execute("UPDATE assistant_spending SET reserved_pence = reserved_pence - '
        '(SELECT amount FROM assistant_orders WHERE id=?) WHERE id=1", (order,))\n')]),
    "sends_after_refusal": ("goes on and sends the order itself after its fenced execution was refused", [(
        '            receipts[order] = execute(db, work, order, supplier, policy=policy, fence=ownership.assert_current)\n',
        '            try:\n'
        '                receipts[order] = execute(db, work, order, supplier, policy=policy, '
        'fence=ownership.assert_current)\n'
        '            except PermissionError:\n'
        '                proposal = db.connection.execute("SELECT proposal FROM assistant_orders WHERE id=?", '
        '(order,)).fetchone()[0]\n'
        '                receipts[order] = supplier.order(order, json.loads(proposal))\n')]),
    "completes_around_the_fence": ("writes its completion with plain SQL instead of `ownership.finish`", [(
        '    ownership.finish(db, work, status, json.dumps({"order": order, "receipt": receipt}, sort_keys=True))\n',
        '    with db.immediate() as connection:\n'
        '        connection.execute("UPDATE assistant_work SET status=?, result=? WHERE id=?", '
        '(status, json.dumps({"order": order, "receipt": receipt}, sort_keys=True), work.id))\n')]),
}


def mutated(name: str) -> str:
    source = SOURCE
    for old, new in WRONG[name][1]:
        assert source.count(old) == 1, f"the mutation {name} no longer matches the runtime's source"
        source = source.replace(old, new)
    return source


def write_worker(folder: Path, source: str) -> Path:
    """A learner's 05_checkpoint holding `source` in its graded cells (nbformat 4 JSON, as saved)."""
    folder.mkdir(parents=True, exist_ok=True)
    graded = {"grade": False, "locked": False, "schema_version": 3, "solution": True, "task": False}
    cells = [{"cell_type": "markdown", "id": "intro", "metadata": {}, "source": "Write the worker pass."},
             {"cell_type": "code", "id": "cont", "metadata": {"nbgrader": {**graded, "grade_id": "continue_order"}},
              "source": source, "outputs": [], "execution_count": None},
             {"cell_type": "code", "id": "pass", "metadata": {"nbgrader": {**graded, "grade_id": "run_once"}},
              "source": "# run_once is defined in the cell above, beside its helpers", "outputs": [],
              "execution_count": None}]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (folder / "05_checkpoint.ipynb").write_text(json.dumps(notebook))
    return folder


@pytest.fixture
def right_worker(tmp_path):
    return write_worker(tmp_path / f"right-{uuid.uuid4().hex[:6]}", SOURCE)


def test_the_right_worker_passes_every_case_and_all_24_trials_in_real_processes(right_worker, tmp_path):
    cases = run_checkpoint("reference", worker=right_worker, cases=[*ALL, ANSWER_LOST], output_dir=tmp_path / "cases")
    assert [(case.case, case.failures) for case in cases] == [(name, []) for name in (*ALL, ANSWER_LOST)]
    assert all(case.worker_learner and not case.fences_learner for case in cases)
    lost = next(case for case in cases if case.case == ANSWER_LOST)
    assert (lost.after_lost_answer["status"], lost.after_lost_answer["order_status"]) == ("BLOCKED", "UNKNOWN")
    assert lost.after_lost_answer["reserved_pence"] == lost.order_amount == lost.spent_pence
    assert (lost.supplier_posts, lost.supplier_gets, lost.model_calls) == (1, 1, 0)
    trials = run_matrix(matrix_specs(), "reference", worker=right_worker, output_dir=tmp_path / "trials")
    assert (len(trials), trials.violations) == (24, 0), [t.failures for t in trials if not t.passed]
    assert_nothing_left([pid for trial in trials for pid in (trial.worker_pid, trial.supplier_pid) if pid])


# wrong worker -> what must catch it: checkpoint cases, and crash trials (point, nemesis)
CAUGHT_BY = {
    "new_work_first": ([ANSWER_LOST], []),
    "asks_the_model": (["killed"], []),
    "done_when_unknown": ([ANSWER_LOST], []),
    "releases_when_unknown": ([ANSWER_LOST], []),
    "sends_after_refusal": ([], [("approval-seen", SIGSTOP), ("observed-5", SIGSTOP)]),
    "completes_around_the_fence": ([], [("receipt-recorded", SIGSTOP)]),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_plausible_wrong_worker_fails_a_named_case_or_trial_that_sends_it_to_its_step(name, tmp_path):
    folder = write_worker(tmp_path / name, mutated(name))
    cases, points = CAUGHT_BY[name]
    failures = []
    if cases:
        failures += [f for case in run_checkpoint("reference", worker=folder, cases=cases) for f in case.failures]
    if points:
        specs = [spec for spec in matrix_specs() if (spec.point, spec.nemesis) in points]
        failures += [f for trial in run_matrix(specs, "reference", worker=folder) for f in trial.failures]
    assert failures, f"the wrong worker that {WRONG[name][0]} passed {cases or points}"
    assert any("05_checkpoint" in failure for failure in failures), failures


def test_a_worker_sandbox_tripwires_exactly_what_its_process_loads_from_the_submission():
    from course.grading.learner.tripwires import IMPLEMENTATION, WORKER_PASS, of_worker

    def argv(fences, worker):
        return ["python", "-P", "-m", "course.checkpoint.worker", "--database", "reference", "--implementation",
                fences, "--worker", worker, "--owner", "old-worker"]

    assert of_worker(argv(".", "reference")) == IMPLEMENTATION
    assert of_worker(argv("reference", ".")) == WORKER_PASS == {"continue_order", "run_once"}
    assert of_worker(argv(".", ".")) == IMPLEMENTATION | WORKER_PASS
    assert of_worker(argv("reference", "reference")) == frozenset()
