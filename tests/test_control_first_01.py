"""01_claims's control-first experiment (`observe_control_first`), run in a real kernel.

Lucy's ordinary restock is queued first, an operator's command (a row with control = 1, in a
session of its own) a second later; one call of the learner's `claim` takes the command, the
restock stays READY, and `claim(control_only=True)` then finds nothing. With the solutions and
`COURSE_STATED_FACTS=strict` every fact the text states must hold; without it the cell waits for
its prediction, and a learner's claim that orders by age alone is told so in a note, not a traceback.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import nbformat
import pytest
from nbclient import NotebookClient

from course.checks import STRICT
from test_lost_lease_03 import SOLUTIONS, grade_id

pytestmark = pytest.mark.slow

NAME = "01_claims.ipynb"
UNSET = "Predict first: set `predicted_control_first` in the cell above, run it, then run this cell again."


def run_control_first(tmp_path: Path, monkeypatch, *, strict: bool, prediction: str | None = None,
                      claim_source: Callable[[str], str] | None = None, raises: str = "") -> tuple[str, Path]:
    """Run 01's setup cells, its `Claim` and `claim` answers (`claim_source` rewrites the latter),
    the control-first prediction (or `prediction` in its place) and the observation in a real kernel;
    return the observation's printed text, after checking that no cell raised (or only the
    observation, with `raises`), and the folder it ran in."""
    if strict:
        monkeypatch.setenv(STRICT, "strict")  # the kernel inherits it
    else:
        monkeypatch.delenv(STRICT, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's fresh_shop folders stay under the test's folder
    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)
    notebook = nbformat.read(folder / NAME, as_version=4)
    ids = [grade_id(c) for c in notebook.cells]
    at = ids.index("observe_control_first")
    guess, observed = notebook.cells[at - 1], notebook.cells[at]
    assert "prediction" in guess.metadata.get("tags", []), "the observation's prediction cell is right above it"
    assert guess.source.startswith("predicted_control_first = None"), guess.source
    assert ids.index("test_claim_race") < at < ids.index("summary"), "after claim is built and tested, before the summary"
    if prediction is not None:
        guess = nbformat.v4.new_code_cell(f"predicted_control_first = {prediction!r}")
    answers = [notebook.cells[ids.index(name)] for name in ("claim_dataclass", "claim")]
    if claim_source is not None:
        answers[1] = nbformat.v4.new_code_cell(claim_source(answers[1].source))
    setup = [c for c in notebook.cells if "setup" in c.metadata.get("tags", [])]
    notebook.cells = [*setup, *answers, guess, observed]
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    outputs = [o for c in notebook.cells for o in c.get("outputs", [])]
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert [error.split(":")[0] for error in errors] == ([raises] if raises else []), errors
    if raises:
        assert [o.output_type for o in notebook.cells[-1].outputs].count("error") == 1, errors
        return errors[0], folder
    return "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.output_type == "stream"), folder


def by_age_alone(source: str) -> str:
    """A plausible mistake: the learner's claim orders by age alone, forgetting `control DESC`."""
    assert "ORDER BY w.control DESC, w.created, w.rowid" in source
    return source.replace("ORDER BY w.control DESC, w.created, w.rowid", "ORDER BY w.created, w.rowid")


def test_the_operator_s_command_is_taken_before_older_ordinary_work(tmp_path, monkeypatch):
    printed, folder = run_control_first(tmp_path, monkeypatch, strict=True)  # as CI runs the solutions
    lines = printed.splitlines()
    assert lines == [
        "Queued: Lucy's restock (control 0), then a second later the operator's command (control 1)",
        "claim took: the control item 'Report what is running', role 'shop', control 1",
        "Lucy's restock: READY",
        "Then claim(control_only=True) took: nothing",
    ], printed
    # Nobody predicts in the course's own run: the experiment ran, nothing was compared or kept.
    assert "You predicted" not in printed and "Note:" not in printed, printed
    assert not (folder / ".predictions.jsonl").exists()


def test_an_unset_prediction_stops_the_experiment_with_one_line(tmp_path, monkeypatch):
    printed, folder = run_control_first(tmp_path, monkeypatch, strict=False)  # the release as a learner opens it
    assert printed.strip() == UNSET, printed
    assert not (folder / ".predictions.jsonl").exists()


def test_a_set_prediction_is_shown_beside_what_happened_and_kept(tmp_path, monkeypatch):
    printed, folder = run_control_first(tmp_path, monkeypatch, strict=False, prediction="ordinary")
    said = " ".join(printed.split())
    assert "claim took: the control item" in said and "Note:" not in said, printed
    assert "You predicted 'ordinary'; the run showed 'control': not what you predicted." in said, printed
    (kept,) = [json.loads(line) for line in (folder / ".predictions.jsonl").read_text().splitlines()]
    assert (kept["notebook"], kept["name"], kept["predicted"], kept["happened"], kept["held"]) == (
        "01_claims", "predicted_control_first", "ordinary", "control", False)


def test_a_claim_that_orders_by_age_alone_is_told_so_in_a_note_not_a_traceback(tmp_path, monkeypatch):
    printed, _ = run_control_first(tmp_path, monkeypatch, strict=False, prediction="control", claim_source=by_age_alone)
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
    raised, _ = run_control_first(tmp_path, monkeypatch, strict=True, claim_source=by_age_alone,
                                  raises="StatedFactFailed")
    assert "your `claim` took ordinary, where the text says the operator's command goes first" in " ".join(
        raised.split()), raised
