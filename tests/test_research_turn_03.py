"""03_leases's research-turn experiment (`observe_research_turn`), run with the solutions in a real kernel.

The chapter's narrower claim: a replacement must not rebuild an approved effect from the model, but
read-only research, with nothing recorded to continue from, may reason again. The cell shows that
second call is still bounded: research work needs a delegation (a deadline, an uncancelled parent)
before `assert_current` lets it reserve anything; generation 1 reserves one call and stops; at an
injected `now=` past its lease the replacement claims (generation 2) and reserves one call through
the runtime's loop; generation 1's stale reservation is refused. With `COURSE_STATED_FACTS=strict`
every fact the text states about that output must hold; without it, the cell waits for its prediction.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from course.checks import STRICT
from test_lost_lease_03 import SOLUTIONS, grade_id

pytestmark = pytest.mark.slow

UNSET = "Predict first: set `predicted_research` in the cell above, run it, then run this cell again."


def run_research_turn(tmp_path: Path, monkeypatch, *, strict: bool, prediction: object = None) -> tuple[str, Path]:
    """Run 03's setup cells, its research-turn prediction (or `prediction` in its place) and the
    research-turn observation in a real kernel; return the observation's printed text, after
    checking that no cell raised, and the folder it ran in."""
    if strict:
        monkeypatch.setenv(STRICT, "strict")  # the kernel inherits it
    else:
        monkeypatch.delenv(STRICT, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's fresh_shop folders stay under the test's folder
    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)
    notebook = nbformat.read(folder / "03_leases.ipynb", as_version=4)
    at = [grade_id(c) for c in notebook.cells].index("observe_research_turn")
    guess, observed = notebook.cells[at - 1], notebook.cells[at]
    assert "prediction" in guess.metadata.get("tags", []), "the observation's prediction cell is right above it"
    assert guess.source.startswith("predicted_research = None"), guess.source
    if prediction is not None:
        guess = nbformat.v4.new_code_cell(f"predicted_research = {prediction!r}")
    setup = [c for c in notebook.cells if "setup" in c.metadata.get("tags", [])]
    notebook.cells = [*setup, guess, observed]
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    outputs = [o for c in notebook.cells for o in c.get("outputs", [])]
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert errors == []
    return "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.output_type == "stream"), folder


def test_the_replacement_reasons_again_within_budget_and_fence_and_the_stale_holder_is_refused(tmp_path, monkeypatch):
    printed, folder = run_research_turn(tmp_path, monkeypatch, strict=True)  # as CI runs the solutions
    said = " ".join(printed.split())
    assert "Time is injected: the replacement claims at now = the first claim + 31 s" in said, printed
    assert ("Without a delegation row, generation 1's reservation: refused: delegation expired or parent cancelled"
            in said), printed
    assert ("Generation 1, 'researcher-1', a 30 s lease: reserved a call, then stopped (transcript rows: 0)"
            in said), printed
    assert "Generation 2, 'researcher-2', at +31 s: context rebuilt from the prompt" in said, printed
    assert "its loop ended DONE" in said, printed
    assert ("Model calls reserved by generation (assistant_model_calls): {1: 1, 2: 1}, 2 of the assignment's 8"
            in said), printed
    assert ("Generation 1 tries to reserve another call while generation 2 holds it (RUNNING): refused: worker claim "
            "expired or superseded") in said, printed
    assert "Research work: DONE," in said and "orders recorded: 0" in said, printed
    # Nobody predicts in the course's own run: the experiment ran, nothing was compared or kept.
    assert "You predicted" not in printed and "Note:" not in printed, printed
    assert not (folder / ".predictions.jsonl").exists()


def test_an_unset_prediction_stops_the_experiment_with_one_line(tmp_path, monkeypatch):
    printed, folder = run_research_turn(tmp_path, monkeypatch, strict=False)  # the release as a learner opens it
    assert printed.strip() == UNSET, printed
    assert not (folder / ".predictions.jsonl").exists()


def test_a_set_prediction_is_shown_beside_what_happened_and_kept(tmp_path, monkeypatch):
    printed, folder = run_research_turn(tmp_path, monkeypatch, strict=False, prediction=0)
    said = " ".join(printed.split())
    assert "{1: 1, 2: 1}" in said and "Note:" not in said, printed
    assert "You predicted 0; the run showed 1: not what you predicted." in said, printed
    (kept,) = [json.loads(line) for line in (folder / ".predictions.jsonl").read_text().splitlines()]
    assert (kept["notebook"], kept["name"], kept["predicted"], kept["happened"], kept["held"]) == (
        "03_leases", "predicted_research", 0, 1, False)
