"""Run All, as a learner with wrong answers presses it: each notebook of 01-07, saved with one plausible
mistake in every graded answer at once and every prediction set, runs in a real kernel the way
JupyterLab's Run All does (it stops at the first error of a cell not tagged `raises-exception`).

For each notebook: Run All reaches the last cell; the only errors are the course's own `CheckFailed`,
in test cells (no raw traceback from the runtime, no observation that stops the run); and each
answer's visible test fails naming it, or passes and says in one line what waits for grading.
A notebook's other variants of a mistake (a data answer in the wrong case, say) stay in
tests/test_notebook_messages.py, which runs only the cells they need.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from course.lessons.checks import PASSED, WIDTH
from test_capstone_workers import mutated
from test_checkpoint import APPROVED_ONLY
from test_exercises_01 import CHAPTER
from test_exercises_04 import CANCEL_AFTER_RELEASE
from test_notebook_messages import (KEY_4, OWNER_ONLY_FENCE, PREDICTED, RELEASE, SOLUTIONS, WORDS, filled, meta,
                                    predicted)
from test_recorded_histories import WRONG as WRONG_INVARIANTS

pytestmark = pytest.mark.slow

# Reads, then writes in a second transaction, and never looks at the session: the chapter's naive claim.
TWO_TRANSACTIONS = '''
def claim(db, owner, *, now=None, ttl=90, recovery_only=False, control_only=False, role="shop", identifier=""):
    """Wrong on purpose: read, let go, then write; no one-holder-per-session rule."""
    now = time.time() if now is None else now
    row = db.connection.execute(
        "SELECT * FROM assistant_work WHERE status='READY' OR (status='RUNNING' AND expires<=?) "
        "ORDER BY created, rowid LIMIT 1", (now,)).fetchone()
    if row is None:
        return None
    epoch = db.connection.execute("SELECT epoch FROM assistant_control WHERE id=1").fetchone()[0]
    with db.immediate() as connection:
        connection.execute("UPDATE assistant_work SET status='RUNNING', generation=?, owner=?, expires=? WHERE id=?",
                           (row["generation"] + 1, owner, now + ttl, row["id"]))
    return Claim(row["id"], row["session"], row["prompt"], row["generation"] + 1, owner, epoch,
                 row["subject"], row["role"])
'''
UNFENCED_OBSERVE = '''def observe(db, work, message):
    """Wrong on purpose: no current-holder check."""
    if not isinstance(message, dict):
        raise ValueError("a transcript message is a JSON object (a dict)")
    with db.immediate() as connection:
        connection.execute("INSERT INTO assistant_transcript(work_id, generation, message) VALUES (?, ?, ?)",
                           (work.id, work.generation, json.dumps(message, allow_nan=False)))
'''
FINISH_WITHOUT_NOW = '''def finish(db, work, status, result, *, now=None):
    """Wrong on purpose: the fence reads the real clock, whatever `now` the caller gave."""
    if status not in {"DONE", "BLOCKED", "CANCELLED"}:
        raise ValueError(status)
    now = time.time() if now is None else now
    delay = min(60, 2 ** min(work.generation, 6)) if status == "BLOCKED" else 0
    with db.immediate() as connection:
        assert_current(connection, work)
        connection.execute("UPDATE assistant_work SET status=?, result=?, expires=NULL, available_after=? WHERE id=?",
                           (status, result, now + delay, work.id))
        append_event(db, "assistant.work.finished", {"work": work.id, "status": status, "generation": work.generation})
'''
AT_LEAST = '''def order_may_leave(lease_left, supplier_timeout):
    return lease_left >= supplier_timeout
'''
STILL_FENCED = '''def observe_without_fence(db, work, message):
    """Wrong on purpose: the copy keeps the fence."""
    observe(db, work, message)
'''
IGNORES_WRITER = '''def release_stale_response(db, write):
    """Wrong on purpose: releases the stale response through observe, not the writer it is given."""
    work_id = enqueue(db, "phone:stale", "lucy", "Prepare the stock draft")
    old = reference.claim(db, "old-worker", ttl=30)
    expires = db.connection.execute("SELECT expires FROM assistant_work WHERE id=?", (work_id,)).fetchone()[0]
    new = reference.claim(db, "new-worker", now=expires, ttl=30)
    refused = {}
    for name, action in (
        ("stale_observation_refused", lambda: observe(db, old, {"role": "assistant", "content": "stale answer"})),
        ("stale_completion_refused", lambda: finish(db, old, "DONE", "stale result")),
    ):
        try:
            action()
            refused[name] = False
        except PermissionError:
            refused[name] = True
    observe(db, new, {"role": "assistant", "content": "current answer"})
    finish(db, new, "DONE", "current result")
    rows = db.connection.execute("SELECT generation, count(*) FROM assistant_transcript GROUP BY generation").fetchall()
    stored = db.connection.execute("SELECT result FROM assistant_work WHERE id=?", (work_id,)).fetchone()[0]
    return {"rows_by_generation": dict(rows), **refused, "stored_result": stored}
'''
UNCAUGHT_STALE_FINISH = '''def reuse_owner_label(db, owner, prompt="Prepare the stock draft"):
    """Wrong on purpose: the stale completion's refusal is not caught."""
    work_id = enqueue(db, "phone:reuse", "lucy", prompt)
    old = reference.claim(db, owner, ttl=30)
    expires = db.connection.execute("SELECT expires FROM assistant_work WHERE id=?", (work_id,)).fetchone()[0]
    new = reference.claim(db, owner, now=expires, ttl=30)
    finish(db, old, "DONE", "stale result")
    finish(db, new, "DONE", "current result")
    stored = db.connection.execute("SELECT result FROM assistant_work WHERE id=?", (work_id,)).fetchone()[0]
    return {"old_generation": old.generation, "new_generation": new.generation, "same_owner": True,
            "stale_refused": True, "stored_result": stored}
'''
ALWAYS_RESEND = '''def recovery_action(order, work, receipt, *, now, supplier_timeout):
    """Wrong on purpose: an uncertain order is always sent again."""
    return "resend"
'''
ONE_AFTER_THE_OTHER = '''def race_two_sessions(db, policy, admit):
    """Wrong on purpose: the two approvals run one after the other, not through forced_approvals."""
    counter = enqueue(db, "phone:counter", "lucy-counter", "Restock vanilla", subject="SKU-VANILLA")
    van = enqueue(db, "phone:van", "lucy-van", "Restock strawberry", subject="SKU-STRAWBERRY")
    claims = [claim(db, "counter-worker", identifier=counter), claim(db, "van-worker", identifier=van)]
    orders = [propose(db, claims[0], "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY),
              propose(db, claims[1], "SKU-STRAWBERRY", 4, target=SUPPLIER_IDENTITY)]
    refused = {}
    for order_id in orders:
        digest = db.connection.execute("SELECT digest FROM assistant_orders WHERE id=?", (order_id,)).fetchone()[0]
        try:
            admit(db, order_id, digest, actor="lucy", policy=policy, expires=time.time() + 600)
        except Exception as error:
            refused[order_id] = f"{type(error).__name__}: {error}"
    for held, order_id in zip(claims, orders):
        finish(db, held, "DONE", "done")
    return {"claims": claims, "approved": [o for o in orders if o not in refused], "refused": refused}
'''
NOT_FROZEN = CHAPTER["claim_dataclass"].replace("@dataclass(frozen=True)", "@dataclass")  # the chapter's, unfrozen
assert NOT_FROZEN != CHAPTER["claim_dataclass"]
REFUSES_EQUAL = '''def admit_generation(ledger, work_id, generation):
    """Wrong on purpose: a resend by the same holder (an equal generation) is refused."""
    ledger.execute("BEGIN IMMEDIATE")
    row = ledger.execute("SELECT generation FROM fence WHERE work_id = ?", (work_id,)).fetchone()
    if row is not None and row["generation"] >= generation:
        ledger.execute("ROLLBACK")
        return False
    ledger.execute("INSERT INTO fence (work_id, generation) VALUES (?, ?) "
                   "ON CONFLICT (work_id) DO UPDATE SET generation = excluded.generation", (work_id, generation))
    ledger.execute("COMMIT")
    return True
'''

# notebook: {answer cell: its wrong source}, and {test cell: (the answer it names, words its message holds)};
# "graded" instead of words: the test passes and its line says what is checked when the instructor grades;
# None: either (what the visible part sees of that mistake depends on the other answers' mistakes).
RUN_ALL = {
    "01_claims.ipynb": ({"claim_dataclass": NOT_FROZEN, "claim": TWO_TRANSACTIONS},
                        {"test_claim_dataclass": ("Claim", "frozen=True"),
                         "test_claim_race": ("claim", "separate transactions"),  # one cause per message:
                         "test_claim_replacement": ("claim", "session already has a live holder")}),  # not the lease
    "02_fencing.ipynb": ({"assert_current": OWNER_ONLY_FENCE, "observe": UNFENCED_OBSERVE,
                          "finish": FINISH_WITHOUT_NOW},
                         {"test_assert_current": ("assert_current", "generation"),
                          "test_observe": ("observe", "replaced holder"),
                          "test_finish": ("finish", "pass `now` through")}),
    "03_leases.ipynb": ({"order_may_leave": AT_LEAST, "exercise_reuse_owner_label": UNCAUGHT_STALE_FINISH},
                        {"test_order_may_leave": ("order_may_leave", "exactly as much lease as wait does not fit"),
                         "test_exercise_reuse_owner_label": ("reuse_owner_label", "was refused, as it should be")}),
    "03b_unfenced.ipynb": ({"exercise_unfenced_observe": STILL_FENCED,
                            "exercise_stale_response_experiment": IGNORES_WRITER},
                           {"test_exercise_unfenced_observe": ("observe_without_fence", "no current-holder check")}),
    "04_recovery.ipynb": ({"order_to_continue": APPROVED_ONLY},
                          {"test_order_to_continue": ("order_to_continue", "state SENDING")}),
    "04b_cancel.ipynb": ({"recovery_action": ALWAYS_RESEND,
                          "delayed_prediction": filled("04b_cancel.ipynb", "delayed_prediction",
                                                       {**PREDICTED, "status_after": "DONE"}),
                          "cancel_while_held": CANCEL_AFTER_RELEASE},
                         {"test_recovery_action": ("recovery_action", "'record receipt'"),
                          "test_delayed_prediction": ("delayed_prediction", "graded"),
                          "test_cancel_while_held": ("cancel_while_held", "Cancel inside while_held")}),
    "05_checkpoint.ipynb": ({"continue_order": mutated("done_when_unknown")["continue_order"],
                             "run_once": mutated("new_work_first")["run_once"]},
                            {"test_continue_order": ("continue_order", "OutcomeUnknown"),
                             "test_run_once": ("run_once", None)}),  # its order of passes: hidden
    "06_explore.ipynb": ({"admit_generation": REFUSES_EQUAL,
                          "money_conserved": WRONG_INVARIANTS["ignores_released"][0]},
                         {"test_admit_generation": ("admit_generation", "an equal generation is the same holder"),
                          "test_money_conserved": ("money_conserved", "graded")}),
    "07_review.ipynb": ({"four_answers": filled("07_review.ipynb", "four_answers", dict(zip(KEY_4, "BDFH"))),
                         "second_answers": filled("07_review.ipynb", "second_answers", dict(zip(KEY_4, "ACEG"))),
                         "exercise_sessions_vs_spending": ONE_AFTER_THE_OTHER},
                        {"test_four_answers": ("four_answers", "graded"),
                         "test_second_answers": ("second_answers", "graded"),  # the first morning's letters
                         "test_exercise_sessions_vs_spending": ("race_two_sessions", "one after the other")}),
    "07b_recall.ipynb": ({"vocabulary": filled("07b_recall.ipynb", "vocabulary", {**WORDS, "fence": "a"})},
                         {"test_vocabulary_format": ("vocabulary", "capital")}),
}


# notebook: {observation cell: what it prints when the learner's function contradicts the text}
NOTED = {"01_claims.ipynb": {"observe_race_rematch": "your `claim` let 2 workers win (A and B)"}}


def run_all(name: str, wrong: dict[str, str], folder: Path) -> nbformat.NotebookNode:
    """The learner's `name` (the release, its answers the solutions' but for `wrong`, every prediction
    set), saved in `folder` beside the other solutions (05's checks run the saved notebooks), then run
    top to bottom as Lab's Run All runs it."""
    shutil.copytree(SOLUTIONS, folder)
    solved = {meta(c).get("grade_id"): c.source for c in nbformat.read(SOLUTIONS / name, as_version=4).cells}
    notebook = nbformat.read(RELEASE / name, as_version=4)
    guesses = iter([predicted(name)])
    for cell in notebook.cells:
        if meta(cell).get("solution"):
            cell.source = wrong.get(meta(cell)["grade_id"], solved[meta(cell)["grade_id"]])
        elif "prediction" in cell.metadata.get("tags", []):
            cell.source = next(guesses, "pass  # set above")  # the first sets them all
    nbformat.write(notebook, folder / name)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}})
    try:
        client.execute()  # not allow_errors: an error outside a `raises-exception` cell stops it, as in Lab
    except CellExecutionError as stopped:
        raise AssertionError(f"Run All of {name} stopped before its last cell: {str(stopped)[-1500:]}") from None
    return notebook


@pytest.mark.parametrize("name", sorted(RUN_ALL))
def test_run_all_with_a_wrong_answer_in_every_graded_cell_reaches_the_end_and_names_it(name, tmp_path):
    wrong, told = RUN_ALL[name]
    notebook = run_all(name, wrong, tmp_path / "ch12")
    skipped = [c.source[:60] for c in notebook.cells
               if c.cell_type == "code" and c.source.strip() and not c.execution_count]
    assert skipped == [], f"{name}: cells Run All did not reach: {skipped}"
    for cell in notebook.cells:
        grade_id = meta(cell).get("grade_id") or cell.source[:60]
        for output in cell.get("outputs", []):
            if output.output_type == "error":  # only a test's own sentence, never the runtime's traceback
                assert output.ename == "CheckFailed", (name, grade_id, output.ename, output.evalue)
                assert meta(cell).get("grade") and not meta(cell).get("solution"), (name, grade_id, output.evalue)
                assert all(len(line) <= WIDTH for line in output.evalue.splitlines()), output.evalue  # a dialog's width
    for observation, words in NOTED.get(name, {}).items():
        (cell,) = [c for c in notebook.cells if meta(c).get("grade_id") == observation]
        assert words in "".join(o.get("text", "") for o in cell.outputs), (observation, cell.outputs)
    tests = {meta(c)["grade_id"]: c for c in notebook.cells if meta(c).get("grade_id") in told}
    assert sorted(tests) == sorted(told), f"{name}: no such test cell: {sorted(set(told) - set(tests))}"
    for test, (answer, words) in told.items():
        errors = [" ".join(o.evalue.split()) for o in tests[test].outputs if o.output_type == "error"]
        text = " ".join("".join(o.get("text", "") for o in tests[test].outputs if o.output_type == "stream").split())
        if words == "graded" or (words is None and not errors):
            assert errors == [] and answer in text and "when your instructor grades" in text, (test, errors, text)
        elif words is None:
            assert len(errors) == 1 and answer in errors[0], (test, errors)
        else:
            assert len(errors) == 1 and answer in errors[0] and words in errors[0], (test, errors)
            assert "not implemented yet" not in errors[0] and PASSED not in text, (test, errors[0], text)
