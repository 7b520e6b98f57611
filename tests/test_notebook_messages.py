"""What the learner reads when a test or an observation meets their code.

Test cells are run the way the new grader runs them: each one in a namespace built only from the
notebook's `setup` cells and the learner's graded definitions (no observation cell, no other
test cell). On the blank release every failing test says "not implemented yet" in the
observation cells' words; with a wrong function, each message names the one cause the check
established; an observation that the learner's code contradicts says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from course.checks import CheckFailed, WIDTH, expect

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


@pytest.mark.parametrize("name", ["01_claims.ipynb", "02_fencing.ipynb", "03_recovery.ipynb"])
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
    solutions = nbformat.read(SOLUTIONS / "03_recovery.ipynb", as_version=4)
    path = RELEASE / "03_recovery.ipynb"  # visible tests only, the learner's other answers from the solutions
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
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="ch12-messages-"))
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


def test_the_paused_check_shows_its_specific_hint_before_the_general_verdict(tmp_path):
    """04's checks go from specific to general: an owner-label-only fence gets the sentence that
    names it, not "the paused holder case failed"."""
    from test_checkpoint import OWNER_ONLY

    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)
    shutil.copy(RELEASE / "04_checkpoint.ipynb", folder)  # the visible checks
    fencing = nbformat.read(folder / "02_fencing.ipynb", as_version=4)
    for cell in fencing.cells:
        if meta(cell).get("grade_id") == "assert_current":
            cell.source = OWNER_ONLY
    nbformat.write(fencing, folder / "02_fencing.ipynb")
    keep = [c for c in nbformat.read(folder / "04_checkpoint.ipynb", as_version=4).cells
            if "setup" in c.metadata.get("tags", []) or meta(c).get("grade_id") == "test_checkpoint_paused"]
    notebook = nbformat.read(folder / "04_checkpoint.ipynb", as_version=4)
    notebook.cells = keep
    NotebookClient(notebook, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    (error,) = [o for o in notebook.cells[-1].outputs if o.output_type == "error"]
    said = " ".join(error.evalue.split())  # the message is wrapped into lines
    assert error.ename == "CheckFailed" and said.startswith("After SIGCONT the old worker's refused writes were []")
    assert "a fence that compares owner labels only would accept them" in said, said
    assert "(revisit `assert_current` in 02_fencing" in said


def run_in_a_kernel(name: str, answers: dict[str, str], last: str, skip: tuple[str, ...] = ()) -> str:
    """In a real kernel: the setup cells and the answer cells of solutions/`name` (`answers`
    replaces some: grade_id -> source; `skip` leaves some unrun, as after a restart), then the
    cell `last`. Returns what `last` printed, errors included."""
    notebook = nbformat.read(SOLUTIONS / name, as_version=4)
    chosen = [c for c in notebook.cells if c.cell_type == "code" and ("setup" in c.metadata.get("tags", []) or (
        meta(c).get("solution") and meta(c)["grade_id"] not in skip))]
    target = next(c for c in notebook.cells if meta(c).get("grade_id") == last)
    cells = [nbformat.v4.new_code_cell(answers.get(meta(c).get("grade_id"), c.source)) for c in chosen + [target]]
    run = nbformat.v4.new_notebook(cells=cells, metadata=notebook.metadata)
    NotebookClient(run, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(SOLUTIONS)}}).execute()
    return "\n".join(o.get("text", "") or f"{o.get('ename')}: {o.get('evalue')}" for o in run.cells[-1].outputs)


def stub(signature: str) -> str:
    return f"{signature}\n    raise NotImplementedError()"


def test_an_observation_names_the_function_that_is_actually_missing():
    only_finish = run_in_a_kernel("02_fencing.ipynb", {"finish": stub("def finish(db, work, status, result):")},
                                  "observe_stale_writes")
    assert "write `finish` in its cell above" in only_finish and "`observe` and" not in only_finish, only_finish
    only_copy = run_in_a_kernel("02_fencing.ipynb", {"exercise_unfenced_observe": stub(
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
