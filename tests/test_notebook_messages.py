"""What the learner reads when a test or an observation meets their code.

On the blank release every failing test says "not implemented yet" in the observation cells'
words; a test run after a kernel restart, or before the setup cell, says which cell to run; an
observation names the function that is actually missing, and one that the learner's code
contradicts says so; an observation that runs only the course's code never blames the learner.

`test_a_plausible_wrong_answer_is_told_by_its_visible_test` runs, in a real kernel as Lab does, the
mistakes that tests/test_run_all_with_wrong_answers.py (one per answer, all at once, Run All) does
not: a second test of one answer, and data answers in the wrong case. Its visible test fails and
names the answer, or passes and says what is checked when the instructor grades.

An observation waits for its prediction: until the learner sets it, the cell says so in one line
and runs no experiment; once set, it prints the prediction beside what happened and keeps both
(`.predictions.jsonl`, for 07's calibration). The runs below set every prediction first, as a
learner must before the observations run at all.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from course.lessons.checks import STRICT, CheckFailed, WIDTH, expect

ROOT = Path(__file__).resolve().parents[1]
RELEASE = ROOT / "notebooks" / "ch12"
SOLUTIONS = ROOT / "solutions" / "ch12"

pytestmark = pytest.mark.slow


def meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def graded_tests(notebook) -> list:
    return [c for c in notebook.cells if c.cell_type == "code" and meta(c).get("grade") and not meta(c).get("solution")]


def blank_runs(path: Path) -> dict[str, list]:
    """The blank release `path` in one real kernel: its setup cells, its answer cells (stubs), then each
    test cell. Returns {test grade_id: its error outputs}. The judge gives each test a namespace of the
    setup cells and the answers alone; here every test stops at its first statement (`require_written`),
    so none leaves a name behind for the next."""
    notebook = nbformat.read(path, as_version=4)
    setup = [c for c in notebook.cells if "setup" in c.metadata.get("tags", [])]
    answers = [c for c in notebook.cells if c.cell_type == "code" and meta(c).get("solution")]
    tests = graded_tests(notebook)
    cells = [nbformat.v4.new_code_cell(c.source) for c in setup + answers + tests]
    run = nbformat.v4.new_notebook(cells=cells, metadata=notebook.metadata)
    NotebookClient(run, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return {meta(test)["grade_id"]: [o for o in cell.outputs if o.output_type == "error"]
            for test, cell in zip(tests, run.cells[len(setup) + len(answers):])}


@pytest.mark.parametrize("name", ["01_claims.ipynb", "02_fencing.ipynb", "03_leases.ipynb", "04_recovery.ipynb",
                                  "07_review.ipynb"])
def test_every_test_on_the_blank_release_says_not_implemented_yet(name):
    hidden_only = {meta(c)["grade_id"] for c in graded_tests(nbformat.read(RELEASE / name, as_version=4))
                   if all(line.strip().startswith("#") or not line.strip() for line in c.source.splitlines())}
    for grade_id, errors in blank_runs(RELEASE / name).items():
        if grade_id in hidden_only:  # nothing visible to run: its checks are hidden until grading
            assert errors == [], (grade_id, errors)
            continue
        said = [f"{e.ename}: {e.evalue}" for e in errors]
        assert len(said) == 1 and said[0].startswith("CheckFailed: not implemented yet: write `"), (grade_id, said)
        assert said[0].endswith("in its cell above and run it"), (grade_id, said)


def test_a_long_explanation_is_broken_into_lines_a_dialog_can_show():
    with pytest.raises(CheckFailed) as failed:
        expect(False, "observed " + "x" * 10 + " " + "word " * 60 + "expected: one line per idea.")
    lines = str(failed.value).splitlines()
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert " ".join(lines).split() == ("observed " + "x" * 10 + " " + "word " * 60 + "expected: one line per idea.").split()


OBSERVED = re.compile(r"with observation\((?P<args>[^)]*)\)")


def test_an_observation_blames_the_learner_only_for_code_the_learner_wrote():
    """`observation("f")` says "It runs your `f`" when its experiment stops: f must be an answer of this
    notebook (or, in 05b and 06, of the notebooks whose saved answers their workers run, and in a second part,
    of the first part whose saved answers its setup loads); a cell that runs only the course's code says
    `course=True`, and then calls none of this notebook's answers."""
    from course.grading.judge.checks import loaded_by_setup
    from course.lab.graded_cells import NOTEBOOK_OF

    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        own = set().union(*(answer_names(c.source) for c in notebook.cells if meta(c).get("solution")
                            and c.cell_type == "code"))
        loaded = set(NOTEBOOK_OF) if path.name in ("05b_crashes.ipynb", "06_explore.ipynb") else set(
            loaded_by_setup([{"source": c.source} for c in notebook.cells if "setup" in c.metadata.get("tags", [])]))
        for cell in notebook.cells:
            found = OBSERVED.search(cell.source) if cell.cell_type == "code" else None
            if found is None:
                continue
            where, args = f"{path.name}/{meta(cell).get('grade_id')}", found["args"]
            named = set(re.findall(r"\w+", args.split(",")[0] if "course=True" in args else args)) - {"and"}
            if "course=True" in args:
                calls = {n.func.id for n in ast.walk(ast.parse(cell.source)) if isinstance(n, ast.Call)
                         and isinstance(n.func, ast.Name)}
                assert not calls & own, f"{where} says it runs only the course's code, yet calls {calls & own}"
            else:
                assert named & (own | loaded), f"{where} names {named}, none of them the learner's: say course=True"


def answer_names(source: str) -> set[str]:
    tree = ast.parse(source)
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))} | {
        target.id for node in tree.body for target in getattr(node, "targets", []) if isinstance(target, ast.Name)}


def test_graded_test_cells_hold_no_harness():
    """The forced race and the check-and-write takeover live in course.lessons.checks: the test cells
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
    only_copy = run_in_a_kernel("03b_unfenced.ipynb", {"exercise_unfenced_observe": stub(
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
KEY_4 = {"health": "A", "progress": "C", "cancellation": "E", "external": "G"}
PREDICTED = {"held_generation": 2, "completion": "refused", "status_after": "CANCELLED", "generation_after": 3,
             "order_after": "REVOKED", "reserved_after": 0}
WORDS = {"claim": "E", "lease": "C", "generation": "H", "fence": "A", "liveness": "G", "progress": "D",
         "recovery": "B", "reconciliation": "F"}

# (notebook, answer cell, wrong source, observation cells that call it, the visible test, what the
# test must say: "fails" (a CheckFailed naming the answer) or "graded" (passes, and says in one
# line that the rest is checked when the instructor grades), words the message must hold)
WRONG_ANSWERS = [  # one mistake per answer, all at once, in tests/test_run_all_with_wrong_answers.py; here, the rest
    ("02_fencing.ipynb", "assert_current", OWNER_ONLY_FENCE, ("observe_reservation",),
     "test_stale_holder_spends_no_model_call", "fails", "compare the generation"),
    ("04b_cancel.ipynb", "delayed_prediction", {**PREDICTED, "completion": "Refused"}, (), "test_delayed_prediction",
     "fails", "exactly"),
    ("07_review.ipynb", "four_answers", {**KEY_4, "health": "a"}, (), "test_four_answers", "fails", "capital"),
    ("07b_recall.ipynb", "vocabulary", {**WORDS, "liveness": "D", "progress": "G"}, (), "test_vocabulary_format",
     "graded", "Hidden"),
]


@pytest.mark.parametrize("name, answer, wrong, observations, test, told, words", WRONG_ANSWERS,
                         ids=[f"{case[1]}-{case[5]}-{number}" for number, case in enumerate(WRONG_ANSWERS)])
def test_a_plausible_wrong_answer_is_told_by_its_visible_test(name, answer, wrong, observations, test, told, words):
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
        assert answer in message and words in message, message
        assert "not implemented yet" not in message, message
    else:  # the key's two points: their cells say in one line that they are hidden
        assert said["errors"] == [], said
        for hidden in ("test_vocabulary_most", "test_vocabulary_all"):
            cell = release_cell(name, hidden)
            assert cell.source.startswith(f"# {words}: compares your letters with the key"), cell.source


def test_a_filled_in_answer_that_still_raises_is_told_to_delete_the_line():
    kept = filled("07b_recall.ipynb", "vocabulary", WORDS, keep_raise=True)
    seen = run_as_in_lab("07b_recall.ipynb", {"vocabulary": kept}, ("test_vocabulary_format",))
    (error,) = seen["test_vocabulary_format"]["errors"]
    said = " ".join(error.split())
    assert said.startswith(
        "CheckFailed: Your cell that sets `vocabulary` still ends in `raise NotImplementedError()`"), said
    assert "Delete that line and run the cell again" in said, said


def test_a_test_run_before_the_setup_cell_says_to_run_it():
    seen = run_as_in_lab("02_fencing.ipynb", {}, ("test_finish",), setup=False)
    (error,) = seen["test_finish"]["errors"]
    assert error.startswith("CheckFailed: The setup cell at the top of this notebook has not run in this kernel"), error
