"""The chapter's smaller experiments, each an observation cell run alone in a real kernel.

Each runs after its notebook's setup cells (and the learner's answers it reads, the solutions'):
01's operator command claimed ahead of older work, 03's injected clock jump and resumed research
turn, 04's delayed reply carrying its old writer's claim. With the solutions and
`COURSE_STATED_FACTS=strict`, every fact the text states must hold (a false one raises) and the
printed data is checked here; with the prediction unset, the cell says so in one line and runs
nothing; a set prediction is printed beside what happened and kept for 07's calibration.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from course.lessons.checks import STRICT, PredictionUnset
from test_lost_lease_03 import SOLUTIONS, grade_id

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Observed:
    """One observation cell: its notebook, its prediction, the learner's answers it runs, where it stands
    (after one cell, before another), and a prediction the run does not bear out, beside what happens."""

    notebook: str
    cell: str
    prediction: str
    answers: tuple[str, ...]
    between: tuple[str, str]
    guess: object
    happened: object
    saved_in: str | None = None  # a second part: the first part whose saved answers its setup loads


CELLS = {
    "control_first": Observed("01b_expiry.ipynb", "observe_control_first", "predicted_control_first",
                              ("claim_dataclass", "claim"), ("recall_expiry_is_not_death", "summary"), "ordinary",
                              "control", saved_in="01_claims.ipynb"),
    "clock_jump": Observed("03_leases.ipynb", "observe_clock_jump", "predicted_clock_jump", (),
                           ("lost_lease_explained", "exercise1_intro"), "both", "lease"),
    "research_turn": Observed("03_leases.ipynb", "observe_research_turn", "predicted_research", (),
                              ("clock_jump_explained", "exercise1_intro"), 0, 1),
    "delayed_delivery": Observed("04_recovery.ipynb", "observe_delayed_delivery", "predicted_delivery", (),
                                 ("writer_authority", "what_proven"), "delivered", "refused"),
}


def run_alone(case: Observed, tmp_path: Path, monkeypatch, *, strict: bool, prediction: object = None,
              rewrite: Callable[[str], str] | None = None, raises: str = "") -> tuple[str, Path]:
    """Run `case`'s notebook's setup cells, the answers it reads (the last one rewritten by `rewrite`), its
    prediction (or `prediction` in its place) and the observation in a real kernel. Return the
    observation's printed text (or, with `raises`, its one error of that name) and the folder it ran in."""
    if strict:
        monkeypatch.setenv(STRICT, "strict")  # the kernel inherits it
    else:
        monkeypatch.delenv(STRICT, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's fresh_shop folders stay under the test's folder
    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)
    notebook = nbformat.read(folder / case.notebook, as_version=4)
    ids = [grade_id(c) for c in notebook.cells]
    at = ids.index(case.cell)
    assert ids.index(case.between[0]) < at < ids.index(case.between[1]), f"{case.cell} stands between {case.between}"
    guess, observed = notebook.cells[at - 1], notebook.cells[at]
    assert "prediction" in guess.metadata.get("tags", []) and "nbgrader" not in guess.metadata
    assert guess.source.startswith(f"{case.prediction} = None"), guess.source
    if prediction is not None:
        guess = nbformat.v4.new_code_cell(f"{case.prediction} = {prediction!r}")
    home = nbformat.read(folder / case.saved_in, as_version=4) if case.saved_in else notebook
    answers = [next(c for c in home.cells if grade_id(c) == name) for name in case.answers]
    if rewrite is not None:
        answers[-1].source = rewrite(answers[-1].source)
    if case.saved_in:  # the setup runs them from the saved first part, as in Lab
        nbformat.write(home, folder / case.saved_in)
        answers = []
    else:
        answers = [nbformat.v4.new_code_cell(answer.source) for answer in answers]
    setup = [c for c in notebook.cells if "setup" in c.metadata.get("tags", [])]
    notebook.cells = [*setup, *answers, guess, observed]
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    outputs = [o for c in notebook.cells for o in c.get("outputs", [])]
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert [error.split(":")[0] for error in errors] == ([raises] if raises else []), errors
    if raises:
        return errors[0], folder
    return "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.output_type == "stream"), folder


def solutions_run(name: str, tmp_path: Path, monkeypatch) -> str:
    """The cell as CI runs the solutions: every stated fact must hold; nobody predicts, nothing is kept."""
    printed, folder = run_alone(CELLS[name], tmp_path, monkeypatch, strict=True)
    assert "You predicted" not in printed and "Note:" not in printed, printed
    assert not (folder / ".predictions.jsonl").exists()
    return printed


@pytest.mark.parametrize("name", sorted(CELLS))
def test_an_unset_prediction_stops_the_experiment_with_one_line(name, tmp_path, monkeypatch):
    case = CELLS[name]
    printed, folder = run_alone(case, tmp_path, monkeypatch, strict=False)  # the release as a learner opens it
    assert printed.strip() == str(PredictionUnset(case.prediction)), printed
    assert not (folder / ".predictions.jsonl").exists()


@pytest.mark.parametrize("name", sorted(CELLS))
def test_a_set_prediction_is_shown_beside_what_happened_and_kept(name, tmp_path, monkeypatch):
    case = CELLS[name]
    printed, folder = run_alone(case, tmp_path, monkeypatch, strict=False, prediction=case.guess)
    said = " ".join(printed.split())
    assert f"You predicted {case.guess!r}; the run showed {case.happened!r}: not what you predicted." in said, printed
    assert "Note:" not in said, printed
    (kept,) = [json.loads(line) for line in (folder / ".predictions.jsonl").read_text().splitlines()]
    assert (kept["notebook"], kept["name"], kept["predicted"], kept["happened"], kept["held"]) == (
        case.notebook.removesuffix(".ipynb"), case.prediction, case.guess, case.happened, False)


# --- 01: an operator's command goes first ------------------------------------------------------------


def by_age_alone(source: str) -> str:
    """A plausible mistake: the learner's claim orders by age alone, forgetting `control DESC`."""
    assert "ORDER BY w.control DESC, w.created, w.rowid" in source
    return source.replace("ORDER BY w.control DESC, w.created, w.rowid", "ORDER BY w.created, w.rowid")


def test_the_operator_s_command_is_taken_before_older_ordinary_work(tmp_path, monkeypatch):
    assert solutions_run("control_first", tmp_path, monkeypatch).splitlines() == [
        "Queued: Lucy's restock (control 0), then a second later the operator's command (control 1)",
        "claim took: the control item 'Report what is running', role 'shop', control 1",
        "Lucy's restock: READY",
        "Then claim(control_only=True) took: nothing",
    ]


def test_a_claim_that_orders_by_age_alone_is_told_so_in_a_note_not_a_traceback(tmp_path, monkeypatch):
    printed, _ = run_alone(CELLS["control_first"], tmp_path, monkeypatch, strict=False, prediction="control",
                           rewrite=by_age_alone)
    said = " ".join(printed.split())
    assert "claim took: the ordinary item 'Restock vanilla', role 'shop', control 0" in said, printed
    assert ("Note: your `claim` took ordinary, where the text says the operator's command goes first; your ORDER BY "
            "must put `control DESC` before `created`") in said, printed
    assert said.count("Note:") == 1, printed  # the rest follows from that one difference, and is not blamed twice
    assert "Then claim(control_only=True) took: control" in said, printed
    assert "You predicted 'control'; the run showed 'ordinary'" in said, printed
    assert "stopped" not in said and "Traceback" not in said, printed


def test_with_the_course_s_answers_a_false_stated_fact_fails_the_run(tmp_path, monkeypatch):
    """Where the course's own answers run, a claim that broke the rule is the course's error, not a note."""
    raised, _ = run_alone(CELLS["control_first"], tmp_path, monkeypatch, strict=True, rewrite=by_age_alone,
                          raises="StatedFactFailed")
    assert "your `claim` took ordinary, where the text says the operator's command goes first" in " ".join(
        raised.split()), raised


# --- 03: a clock jump, and a research turn resumed ---------------------------------------------------


def test_the_injected_jump_moves_the_lease_not_the_budget_and_the_generation_refuses(tmp_path, monkeypatch):
    printed = solutions_run("clock_jump", tmp_path, monkeypatch)
    assert "The jump is injected: the rival claimed with now=time.time() + 300" in printed, printed
    assert "Worker: generation 1, 'lucy-stock-worker', a 90 s lease" in printed, printed
    assert "Rival:  generation 2, 'lucy-stock-worker': it took the work over" in printed, printed
    used = re.search(r"The loop's budget, on time\.monotonic: ([\d.]+) s used of 60 s, so turn 2 began", printed)
    assert used and float(used[1]) < 1, printed
    assert "Turn 2's fence (assert_current): refused: worker claim expired or superseded" in printed, printed
    lease = re.search(r"the worker's lease had (\d+) s left; the rival's ends in (\d+) s", printed)
    assert lease and 85 < int(lease[1]) <= 90 and 385 < int(lease[2]) <= 390, printed


def test_the_replacement_reasons_again_within_budget_and_fence_and_the_stale_holder_is_refused(tmp_path, monkeypatch):
    said = " ".join(solutions_run("research_turn", tmp_path, monkeypatch).split())
    assert "Time is injected: the replacement claims at now = the first claim + 31 s" in said, said
    assert ("Without a delegation row, generation 1's reservation: refused: delegation expired or parent cancelled"
            in said), said
    assert ("Generation 1, 'researcher-1', a 30 s lease: reserved a call, then stopped (transcript rows: 0)"
            in said), said
    assert "Generation 2, 'researcher-2', at +31 s: context rebuilt from the prompt" in said, said
    assert "its loop ended DONE" in said, said
    assert ("Model calls reserved by generation (assistant_model_calls): {1: 1, 2: 1}, 2 of the assignment's 8"
            in said), said
    assert ("Generation 1 tries to reserve another call while generation 2 holds it (RUNNING): refused: worker claim "
            "expired or superseded") in said, said
    assert "Research work: DONE," in said and "orders recorded: 0" in said, said


# --- 04: a delayed reply carrying its old writer's claim ---------------------------------------------


def test_the_delayed_reply_is_refused_by_its_generation_and_the_current_writer_delivers(tmp_path, monkeypatch):
    printed = solutions_run("delayed_delivery", tmp_path, monkeypatch)
    waited = re.search(r"Waited ([\d.]+) s of wall-clock time \(nothing injected\)", printed)
    assert waited and 0.5 <= float(waited[1]) <= 1.5, printed  # the real lease, really waited out
    assert ("The reply carries: 'reply-writer', generation 1; the current writer: 'reply-writer', generation 2"
            in printed), printed  # one label: only the generation tells the two writers apart
    assert "Delayed reply, old writer's claim: refused (worker claim expired or superseded)" in printed, printed
    assert "Same text, current writer's claim: delivered" in printed, printed
    rows = printed[printed.index("Transcript rows by generation:"):].splitlines()[1:]
    assert [row.strip() for row in rows] == ["generation 1: Checking the vanilla stock.",
                                             "generation 2: Six vanilla tubs are in stock."], printed
