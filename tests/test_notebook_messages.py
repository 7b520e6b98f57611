"""What the learner reads when a test or an observation meets their code.

Test cells are run the way the new grader runs them: each one in a namespace built only from the
notebook's `setup` cells and the learner's graded definitions (no observation cell, no other
test cell). On the blank release every failing test says "not implemented yet" in the
observation cells' words; with a wrong function, each message names the one cause the check
established; an observation that the learner's code contradicts says so.

`test_a_plausible_wrong_answer_is_told_by_its_visible_test` is the learner's side of the hidden
mutants: for each graded function and data answer of 02, 03, 04 and 07, a plausible wrong answer in a
real kernel, as Lab runs it. Its visible test fails and names the answer, or passes and says in
one line what is checked when the instructor grades; an observation that promised "the test below
explains" is followed by a test that does.

An observation waits for its prediction: until the learner sets it, the cell says so in one line
and runs no experiment; once set, it prints the prediction beside what happened and keeps both
(`.predictions.jsonl`, for 07's calibration). The runs below set every prediction first, as a
learner must before the observations run at all.
"""

from __future__ import annotations

import ast
import json
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from course.checks import STRICT, CheckFailed, WIDTH, expect

ROOT = Path(__file__).resolve().parents[1]
RELEASE = ROOT / "notebooks" / "ch12"
SOLUTIONS = ROOT / "solutions" / "ch12"

pytestmark = pytest.mark.slow


def meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def graded_tests(notebook) -> list:
    return [c for c in notebook.cells if c.cell_type == "code" and meta(c).get("grade") and not meta(c).get("solution")]


def isolated_runs(path: Path, replace: dict[str, str] | None = None) -> dict[str, list]:
    """Each test cell of `path` in its own kernel-free namespace order: setup cells, the learner's
    definitions (with `replace`: grade_id -> source), then that test cell alone. Returns
    {test grade_id: its error outputs}."""
    notebook = nbformat.read(path, as_version=4)
    setup = [c for c in notebook.cells if "setup" in c.metadata.get("tags", [])]
    learner = [nbformat.v4.new_code_cell((replace or {}).get(meta(c)["grade_id"], c.source))
               for c in notebook.cells if c.cell_type == "code" and meta(c).get("solution")]
    found = {}
    for test in graded_tests(notebook):
        cells = [nbformat.v4.new_code_cell(c.source) for c in setup] + learner + [nbformat.v4.new_code_cell(test.source)]
        run = nbformat.v4.new_notebook(cells=cells, metadata=notebook.metadata)
        NotebookClient(run, timeout=120, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        found[meta(test)["grade_id"]] = [o for o in run.cells[-1].outputs if o.output_type == "error"]
    return found


@pytest.mark.parametrize("name", ["01_claims.ipynb", "02_fencing.ipynb", "03_leases.ipynb", "04_recovery.ipynb",
                                  "07_review.ipynb"])
def test_every_test_on_the_blank_release_says_not_implemented_yet(name):
    hidden_only = {meta(c)["grade_id"] for c in graded_tests(nbformat.read(RELEASE / name, as_version=4))
                   if all(line.strip().startswith("#") or not line.strip() for line in c.source.splitlines())}
    for grade_id, errors in isolated_runs(RELEASE / name).items():
        if grade_id in hidden_only:  # nothing visible to run: its checks are hidden until grading
            assert errors == [], (grade_id, errors)
            continue
        said = [f"{e.ename}: {e.evalue}" for e in errors]
        assert len(said) == 1 and said[0].startswith("CheckFailed: not implemented yet: write `"), (grade_id, said)
        assert said[0].endswith("in its cell above and run it"), (grade_id, said)


APPROVED_ONLY = '''
def order_to_continue(db, work):
    """Wrong on purpose: continues APPROVED orders only."""
    row = db.connection.execute(
        "SELECT id FROM assistant_orders WHERE work_id=? AND status='APPROVED'", (work.id,)).fetchone()
    return None if row is None else row[0]
'''


def test_the_visible_order_tests_catch_a_decision_that_accepts_only_approved():
    solutions = nbformat.read(SOLUTIONS / "04_recovery.ipynb", as_version=4)
    path = RELEASE / "04_recovery.ipynb"  # visible tests only, the learner's other answers from the solutions
    answers = {meta(c)["grade_id"]: c.source for c in solutions.cells if meta(c).get("solution") and c.cell_type == "code"}
    errors = isolated_runs_one(path, "test_order_to_continue", answers | {"order_to_continue": APPROVED_ONLY})
    assert [e.ename for e in errors] == ["CheckFailed"]
    assert errors[0].evalue.startswith("For an order in state SENDING, order_to_continue returned None")


def isolated_runs_one(path: Path, grade_id: str, replace: dict[str, str]) -> list:
    notebook = nbformat.read(path, as_version=4)
    keep = [c for c in notebook.cells if not (meta(c).get("grade") and not meta(c).get("solution")) or meta(c)["grade_id"] == grade_id]
    trimmed = tmp_notebook(path, keep)
    return isolated_runs(trimmed, replace)[grade_id]


def tmp_notebook(path: Path, cells: list) -> Path:
    import atexit

    folder = Path(tempfile.mkdtemp(prefix="ch12-messages-"))
    atexit.register(shutil.rmtree, folder, True)  # removed when the test run ends
    notebook = nbformat.read(path, as_version=4)
    notebook.cells = cells
    target = folder / path.name
    nbformat.write(notebook, target)
    return target


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


def test_a_two_transaction_claim_gets_one_cause_per_message_and_contradicted_observations_say_so(tmp_path):
    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)
    notebook = nbformat.read(folder / "01_claims.ipynb", as_version=4)
    for cell in notebook.cells:
        if meta(cell).get("grade_id") == "claim":
            cell.source = TWO_TRANSACTIONS
    NotebookClient(notebook, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    by_id = {meta(c).get("grade_id"): c for c in notebook.cells}
    text = lambda grade_id: "".join(o.get("text", "") for o in by_id[grade_id].outputs)  # noqa: E731
    error = lambda grade_id: next(o.evalue for o in by_id[grade_id].outputs if o.output_type == "error")  # noqa: E731

    assert "your `claim` let 2 workers win (A and B)" in text("observe_race_rematch")
    assert error("test_claim_race").startswith("Two workers raced for one assignment and both got a claim")
    # the replacement test blames the missing session rule, not the lease
    replaced = error("test_claim_replacement")
    assert "session already has a live holder" in replaced and "lease still runs" not in replaced
    for cell in graded_tests(notebook):
        for output in cell.outputs:
            if output.output_type == "error":
                assert all(len(line) <= WIDTH for line in output.evalue.splitlines()), output.evalue


def test_a_long_explanation_is_broken_into_lines_a_dialog_can_show():
    with pytest.raises(CheckFailed) as failed:
        expect(False, "observed " + "x" * 10 + " " + "word " * 60 + "expected: one line per idea.")
    lines = str(failed.value).splitlines()
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert " ".join(lines).split() == ("observed " + "x" * 10 + " " + "word " * 60 + "expected: one line per idea.").split()


def test_graded_test_cells_hold_no_harness():
    """The forced race and the check-and-write takeover live in course.checks: the test cells
    Validate shows first are short."""
    lengths = {meta(c)["grade_id"]: len(c.source.splitlines())
               for name in ("01_claims.ipynb", "02_fencing.ipynb") for c in graded_tests(nbformat.read(RELEASE / name, as_version=4))}
    assert lengths["test_claim_race"] <= 15 and lengths["test_fences_inside_the_transaction"] <= 40, lengths


def predicted(name: str) -> str:
    """Every prediction of `name` set, as a learner sets them before running the observations: the
    prediction cells' literals with each None replaced by "?" (a guess, whatever it says)."""
    lines = []
    for cell in nbformat.read(SOLUTIONS / name, as_version=4).cells:
        if "prediction" in cell.metadata.get("tags", []):
            for statement in ast.parse(cell.source).body:
                value = ast.literal_eval(statement.value)
                value = {key: "?" if item is None else item for key, item in value.items()} if isinstance(
                    value, dict) else "?" if value is None else value
                lines.append(f"{statement.targets[0].id} = {value!r}")
    return "\n".join(lines)


def execute_in(notebook, folder: Path | None = None, timeout: int = 120) -> None:
    """Run `notebook` in a real kernel whose working folder is `folder`, or a copy of the solutions'
    (what the cells write there, `.predictions.jsonl` among it, never lands in the repository)."""
    with tempfile.TemporaryDirectory(prefix="ch12-kernel-") as scratch:
        if folder is None:
            folder = Path(scratch) / "ch12"
            shutil.copytree(SOLUTIONS, folder)
        NotebookClient(notebook, timeout=timeout, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(folder)}}).execute()


def printed(cell) -> str:
    return "\n".join(o.get("text", "") or f"{o.get('ename')}: {o.get('evalue')}" for o in cell.outputs)


def run_in_a_kernel(name: str, answers: dict[str, str], last: str, skip: tuple[str, ...] = ()) -> str:
    """In a real kernel: the setup cells and the answer cells of solutions/`name` (`answers`
    replaces some: grade_id -> source; `skip` leaves some unrun, as after a restart), every
    prediction set, then the cell `last`. Returns what `last` printed, errors included."""
    notebook = nbformat.read(SOLUTIONS / name, as_version=4)
    chosen = [c for c in notebook.cells if c.cell_type == "code" and ("setup" in c.metadata.get("tags", []) or (
        meta(c).get("solution") and meta(c)["grade_id"] not in skip))]
    target = next(c for c in notebook.cells if meta(c).get("grade_id") == last)
    cells = [nbformat.v4.new_code_cell(answers.get(meta(c).get("grade_id"), c.source)) for c in chosen]
    cells += [nbformat.v4.new_code_cell(predicted(name)), nbformat.v4.new_code_cell(target.source)]
    run = nbformat.v4.new_notebook(cells=cells, metadata=notebook.metadata)
    execute_in(run)
    return printed(run.cells[-1])


def stub(signature: str) -> str:
    return f"{signature}\n    raise NotImplementedError()"


def test_an_observation_names_the_function_that_is_actually_missing():
    only_finish = run_in_a_kernel("02_fencing.ipynb", {"finish": stub("def finish(db, work, status, result):")},
                                  "observe_stale_writes")
    assert "write `finish` in its cell above" in only_finish and "`observe` and" not in only_finish, only_finish
    only_copy = run_in_a_kernel("03_leases.ipynb", {"exercise_unfenced_observe": stub(
        "def observe_without_fence(db, work, message):")}, "observe_exercise3")
    assert "write `observe_without_fence`" in only_copy and "release_stale_response" not in only_copy, only_copy


def test_a_refusal_that_follows_a_noted_difference_is_explained_not_a_traceback():
    unfenced_finish = '''def finish(db, work, status, result):
    with db.immediate() as connection:
        connection.execute("UPDATE assistant_work SET status=?, result=?, expires=NULL WHERE id=?",
                           (status, result, work.id))'''
    printed = run_in_a_kernel("02_fencing.ipynb", {"finish": unfenced_finish}, "observe_stale_writes")
    assert "completion accepted" in printed and "Note: your fence accepted the old holder's completion" in printed
    assert "Then your fence refused a later write" in printed and "PermissionError:" not in printed, printed


def test_a_test_after_a_kernel_restart_says_run_the_cell_not_write_it():
    printed = run_in_a_kernel("02_fencing.ipynb", {}, "test_finish", skip=("finish",))
    assert "`finish` is not defined in this kernel" in printed and "not implemented yet" not in printed, printed
    stubbed = run_in_a_kernel("02_fencing.ipynb", {"finish": stub("def finish(db, work, status, result):")}, "test_finish")
    assert "not implemented yet: write `finish`" in stubbed, stubbed


# Counts what an experiment starts, by the names its cell calls: a shop database, a supplier process.
COUNTING = '''
started = []


def counted(make, what):
    def counting(*args, **kwargs):
        started.append(what)
        return make(*args, **kwargs)
    return counting


fresh_shop, start_supplier = counted(fresh_shop, "database"), counted(start_supplier, "supplier")
'''
STALE_GUESS = {"observe": "refused", "finish": "accepted", "execute": "refused"}


def test_an_observation_waits_for_its_prediction_then_prints_it_beside_what_happened(tmp_path, monkeypatch):
    """04's live stale holder, in a real kernel, as a learner runs it (not the course's own strict
    run): with the prediction as released (None), the cell says so in one line and starts neither a
    database nor the supplier; with it set, the cell prints the prediction beside what happened and
    keeps both in `.predictions.jsonl`, in the notebook's folder."""
    monkeypatch.delenv(STRICT, raising=False)  # the kernel inherits the environment
    name = "04_recovery.ipynb"
    notebook = nbformat.read(SOLUTIONS / name, as_version=4)
    first = [c for c in notebook.cells if c.cell_type == "code" and (
        "setup" in c.metadata.get("tags", []) or meta(c).get("solution"))]
    observation = next(c for c in notebook.cells if meta(c).get("grade_id") == "observe_live_stale_holder")
    prediction = notebook.cells[notebook.cells.index(observation) - 1]
    assert "prediction" in prediction.metadata.get("tags", []) and "predicted_stale = {" in prediction.source
    steps = [COUNTING, prediction.source, observation.source, "print(started)",
             f"predicted_stale = {STALE_GUESS!r}", observation.source, "print(started)"]
    run = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c.source) for c in first]
                                   + [nbformat.v4.new_code_cell(step) for step in steps], metadata=notebook.metadata)
    execute_in(run, tmp_path)
    said = [printed(cell) for cell in run.cells[len(first):]]
    assert not any(o.output_type == "error" for c in run.cells for o in c.outputs), said
    unset, nothing_started, _, kept, after = said[2], said[3], said[4], said[5], said[6]

    assert unset.strip() == ("Predict first: set `predicted_stale` in the cell above, run it, then run this cell "
                             "again."), unset
    assert nothing_started.strip() == "[]", nothing_started  # no database, no supplier process
    assert after.strip() == "['database', 'supplier']", after

    text = " ".join(kept.split())
    for write in ("observe", "finish", "execute"):
        assert f"Stale {write}: refused (" in text, text  # what happened
    assert ("You predicted {'observe': 'refused', 'finish': 'accepted', 'execute': 'refused'}; the run showed "
            "{'observe': 'refused', 'finish': 'refused', 'execute': 'refused'}: not what you predicted (for "
            "'finish').") in text, text
    (record,) = [json.loads(line) for line in (tmp_path / ".predictions.jsonl").read_text().splitlines()]
    assert record["notebook"] == "04_recovery" and record["name"] == "predicted_stale" and record["when"]
    assert (record["predicted"], record["happened"], record["held"]) == (
        STALE_GUESS, {"observe": "refused", "finish": "refused", "execute": "refused"}, False), record


# --- The learner's side of the hidden mutants: one plausible wrong answer per graded function and
# data answer of 02, 03, 04 and 07 (01's `claim` is above), run in a real kernel as Lab runs it: the setup
# and answer cells (the solutions', one replaced), the observations that call it, then the visible
# test as released. 01's `Claim`/`claim`: test_a_two_transaction_claim_gets_one_cause_per_message...


def run_as_in_lab(name: str, answers: dict[str, str], targets: tuple[str, ...], *,
                  setup: bool = True) -> dict[str, dict]:
    """In one real kernel: the setup cells (unless `setup` is false, as after a restart) and the
    answer cells of solutions/`name` in notebook order, `answers` (grade_id -> source) replacing
    some, every prediction set; then `targets` (grade_ids) as the release has them. Returns
    {target: {"text": what it printed, "errors": ["ename: evalue", ...]}}."""
    solved = nbformat.read(SOLUTIONS / name, as_version=4)
    released = {meta(c).get("grade_id"): c for c in nbformat.read(RELEASE / name, as_version=4).cells}
    first = [c for c in solved.cells if c.cell_type == "code" and (
        (setup and "setup" in c.metadata.get("tags", [])) or meta(c).get("solution"))]
    cells = [nbformat.v4.new_code_cell(answers.get(meta(c).get("grade_id"), c.source)) for c in first]
    cells += [nbformat.v4.new_code_cell(predicted(name))]
    cells += [nbformat.v4.new_code_cell(released[target].source) for target in targets]
    run = nbformat.v4.new_notebook(cells=cells, metadata=solved.metadata)
    execute_in(run, timeout=180)
    found = {}
    for target, cell in zip(targets, run.cells[len(first) + 1:]):
        found[target] = {"text": "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream"),
                         "errors": [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]}
    return found


def release_cell(name: str, grade_id: str):
    return next(c for c in nbformat.read(RELEASE / name, as_version=4).cells if meta(c).get("grade_id") == grade_id)


def filled(name: str, grade_id: str, values: dict[str, object], keep_raise: bool = False) -> str:
    """A data answer as a learner fills in the released cell (optionally keeping nbgrader's raise)."""
    source = release_cell(name, grade_id).source
    body = "{\n" + "".join(f"    {key!r}: {value!r},\n" for key, value in values.items()) + "}"
    head = source.split("= {", 1)[0]
    return head + "= " + body + ("\nraise NotImplementedError()" if keep_raise else "")


OWNER_ONLY_FENCE = '''def assert_current(connection, work, now=None):
    """Wrong on purpose: the owner label, status and lease only; no generation, no epoch."""
    now = time.time() if now is None else now
    row = connection.execute("SELECT owner, status, expires FROM assistant_work WHERE id=?", (work.id,)).fetchone()
    if row is None or row["owner"] != work.owner or row["status"] != "RUNNING" or row["expires"] <= now:
        raise PermissionError("not the holder")
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
KEY_4 = {"health": "A", "progress": "C", "cancellation": "E", "external": "G"}
PREDICTED = {"held_generation": 2, "completion": "refused", "status_after": "CANCELLED", "generation_after": 3,
             "order_after": "REVOKED", "reserved_after": 0}
WORDS = {"claim": "E", "lease": "C", "generation": "H", "fence": "A", "liveness": "G", "progress": "D",
         "recovery": "B", "reconciliation": "F"}

# (notebook, answer cell, wrong source, observation cells that call it, the visible test, what the
# test must say: "fails" (a CheckFailed naming the answer) or "graded" (passes, and says in one
# line that the rest is checked when the instructor grades), words the message must hold)
WRONG_ANSWERS = [
    ("02_fencing.ipynb", "assert_current", OWNER_ONLY_FENCE, ("observe_old_and_new", "observe_refusal_reasons"),
     "test_assert_current", "fails", "generation"),
    ("02_fencing.ipynb", "assert_current", OWNER_ONLY_FENCE, ("observe_reservation",),
     "test_stale_holder_spends_no_model_call", "fails", "compare the generation"),
    ("02_fencing.ipynb", "observe", UNFENCED_OBSERVE, ("observe_stale_writes",), "test_observe", "fails",
     "replaced holder"),
    ("02_fencing.ipynb", "finish", FINISH_WITHOUT_NOW, ("observe_stale_writes", "observe_next_turn"), "test_finish",
     "fails", "pass `now` through"),
    ("03_leases.ipynb", "order_may_leave", AT_LEAST, ("observe_order_may_leave",), "test_order_may_leave", "fails",
     "exactly as much lease as wait does not fit"),
    ("03_leases.ipynb", "exercise_unfenced_observe", STILL_FENCED, ("observe_exercise3",),
     "test_exercise_unfenced_observe", "fails", "no current-holder check"),
    ("03_leases.ipynb", "exercise_stale_response_experiment", IGNORES_WRITER, ("observe_exercise3",),
     "test_exercise_stale_response_experiment", "fails", "the unfenced copy"),
    ("03_leases.ipynb", "exercise_reuse_owner_label", UNCAUGHT_STALE_FINISH, ("observe_exercise1",),
     "test_exercise_reuse_owner_label", "fails", "was refused, as it should be"),
    ("04_recovery.ipynb", "order_to_continue", APPROVED_ONLY, ("observe_recovery_from_records",),
     "test_order_to_continue", "fails", "state SENDING"),
    ("07_review.ipynb", "four_answers", None, (), "test_four_answers", "graded", "the key is not shown"),
    ("07_review.ipynb", "four_answers", {**KEY_4, "health": "a"}, (), "test_four_answers", "fails", "capital"),
    ("04_recovery.ipynb", "delayed_prediction", {**PREDICTED, "status_after": "DONE"}, ("observe_cancel_delayed",),
     "test_delayed_prediction", "graded", "2 of the 6 values"),
    ("04_recovery.ipynb", "delayed_prediction", {**PREDICTED, "completion": "Refused"}, (), "test_delayed_prediction",
     "fails", "exactly"),
    ("04_recovery.ipynb", "recovery_action", ALWAYS_RESEND, ("observe_recovery_action",), "test_recovery_action",
     "fails", "'record receipt'"),
    ("07_review.ipynb", "exercise_sessions_vs_spending", ONE_AFTER_THE_OTHER, ("observe_sessions_vs_spending",),
     "test_exercise_sessions_vs_spending", "fails", "one after the other"),
    ("07_review.ipynb", "vocabulary", {**WORDS, "fence": "a"}, (), "test_vocabulary_format", "fails", "capital"),
    ("07_review.ipynb", "vocabulary", {**WORDS, "liveness": "D", "progress": "G"}, (), "test_vocabulary_format",
     "graded", "Hidden"),
]
NAMES = {"exercise_unfenced_observe": "observe_without_fence",
         "exercise_stale_response_experiment": "release_stale_response",
         "exercise_reuse_owner_label": "reuse_owner_label", "exercise_sessions_vs_spending": "race_two_sessions"}


@pytest.mark.parametrize("name, answer, wrong, observations, test, told, words", WRONG_ANSWERS,
                         ids=[f"{case[1]}-{case[5]}-{number}" for number, case in enumerate(WRONG_ANSWERS)])
def test_a_plausible_wrong_answer_is_told_by_its_visible_test(name, answer, wrong, observations, test, told, words):
    function = NAMES.get(answer, answer)
    if wrong is None:  # a data answer in the right form with wrong letters: the key stays hidden
        wrong = {key: "BDFH"[index] for index, key in enumerate(KEY_4)}
    source = filled(name, answer, wrong) if isinstance(wrong, dict) else wrong
    seen = run_as_in_lab(name, {answer: source}, (*observations, test))
    said = seen[test]
    for observation in observations:  # an observation may note a difference, never end in a traceback
        assert seen[observation]["errors"] == [], (observation, seen[observation])
        if "below explain" in seen[observation]["text"]:  # it promised: the test must explain
            assert said["errors"], (observation, seen[observation]["text"], said)
    if told == "fails":
        assert len(said["errors"]) == 1 and said["errors"][0].startswith("CheckFailed: "), said
        message = " ".join(said["errors"][0].split())
        assert function in message and words in message, message
        assert "not implemented yet" not in message, message
    elif answer == "vocabulary":  # the key's two points: their cells say in one line that they are hidden
        assert said["errors"] == [], said
        for hidden in ("test_vocabulary_most", "test_vocabulary_all"):
            cell = release_cell(name, hidden)
            assert cell.source.startswith("# Hidden: compares your letters with the key"), cell.source
    else:
        assert said["errors"] == [], said
        lines = [line for line in said["text"].splitlines() if line.strip()]
        text = " ".join(lines)
        assert function in text and words in text and "when your instructor grades" in text, text
        assert len(" ".join(text.split())) <= 2 * 88, text  # one or two lines


def test_a_filled_in_answer_that_still_raises_is_told_to_delete_the_line():
    kept = filled("07_review.ipynb", "vocabulary", WORDS, keep_raise=True)
    seen = run_as_in_lab("07_review.ipynb", {"vocabulary": kept}, ("test_vocabulary_format",))
    (error,) = seen["test_vocabulary_format"]["errors"]
    said = " ".join(error.split())
    assert said.startswith(
        "CheckFailed: Your cell that sets `vocabulary` still ends in `raise NotImplementedError()`"), said
    assert "Delete that line and run the cell again" in said, said


def test_a_test_run_before_the_setup_cell_says_to_run_it():
    seen = run_as_in_lab("02_fencing.ipynb", {}, ("test_finish",), setup=False)
    (error,) = seen["test_finish"]["errors"]
    assert error.startswith("CheckFailed: The setup cell at the top of this notebook has not run in this kernel"), error
