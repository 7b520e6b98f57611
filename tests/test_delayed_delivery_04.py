"""04_recovery's delayed-delivery experiment (`observe_delayed_delivery`), run with the solutions in a real kernel.

The chapter's "useful experiment": a reply carries the identity of the writer that produced it (its
`Claim`); before it is delivered, the writer's one-second lease really runs out and a rival with the
same owner label claims the work. Delivered through the fenced `observe`, the reply is refused by its
generation; the same text under the rival's claim is accepted. With `COURSE_STATED_FACTS=strict` every
fact the text states about that output must hold; without it, the cell waits for its prediction.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from course.checks import STRICT, PredictionUnset
from test_lost_lease_03 import SOLUTIONS, grade_id

pytestmark = pytest.mark.slow


def run_delayed_delivery(tmp_path: Path, monkeypatch, *, strict: bool, prediction: str | None = None) -> tuple[str, Path]:
    """Run 04's setup cells, the delayed-delivery prediction (or `prediction` in its place) and its
    observation in a real kernel; return the observation's printed text, after checking that no cell
    raised, and the folder it ran in."""
    if strict:
        monkeypatch.setenv(STRICT, "strict")  # the kernel inherits it
    else:
        monkeypatch.delenv(STRICT, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's fresh_shop folders stay under the test's folder
    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)
    notebook = nbformat.read(folder / "04_recovery.ipynb", as_version=4)
    ids = [grade_id(c) for c in notebook.cells]
    at = ids.index("observe_delayed_delivery")
    assert ids.index("writer_authority") < at < ids.index("what_proven"), "the experiment is in section 4"
    guess, observed = notebook.cells[at - 1], notebook.cells[at]
    assert "prediction" in guess.metadata.get("tags", []) and "nbgrader" not in guess.metadata
    assert guess.source.startswith("predicted_delivery = None"), guess.source
    if prediction is not None:
        guess = nbformat.v4.new_code_cell(f"predicted_delivery = {prediction!r}")
    setup = [c for c in notebook.cells if "setup" in c.metadata.get("tags", [])]
    assert [grade_id(c) for c in setup][:2] == ["setup_imports", "setup_helpers"]
    notebook.cells = [*setup, guess, observed]
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    outputs = [o for c in notebook.cells for o in c.get("outputs", [])]
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert errors == []
    return "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.output_type == "stream"), folder


def test_the_delayed_reply_is_refused_by_its_generation_and_the_current_writer_delivers(tmp_path, monkeypatch):
    printed, folder = run_delayed_delivery(tmp_path, monkeypatch, strict=True)  # as CI runs the solutions
    waited = re.search(r"Waited ([\d.]+) s of wall-clock time \(nothing injected\)", printed)
    assert waited and 0.5 <= float(waited[1]) <= 1.5, printed  # the real lease, really waited out
    assert ("The reply carries: 'reply-writer', generation 1; the current writer: 'reply-writer', generation 2"
            in printed), printed  # one label: only the generation tells the two writers apart
    assert "Delayed reply, old writer's claim: refused (worker claim expired or superseded)" in printed, printed
    assert "Same text, current writer's claim: delivered" in printed, printed
    rows = printed[printed.index("Transcript rows by generation:"):].splitlines()[1:]
    assert [row.strip() for row in rows] == ["generation 1: Checking the vanilla stock.",
                                             "generation 2: Six vanilla tubs are in stock."], printed
    # Nobody predicts in the course's own run: the experiment ran, nothing was compared or kept.
    assert "You predicted" not in printed and "Note:" not in printed, printed
    assert not (folder / ".predictions.jsonl").exists()


def test_an_unset_prediction_stops_the_experiment_with_one_line(tmp_path, monkeypatch):
    printed, folder = run_delayed_delivery(tmp_path, monkeypatch, strict=False)  # the release as a learner opens it
    assert printed.strip() == str(PredictionUnset("predicted_delivery")), printed
    assert "Waited" not in printed  # `bound` stopped the cell before anything ran
    assert not (folder / ".predictions.jsonl").exists()


def test_a_set_prediction_is_shown_beside_what_happened_and_kept(tmp_path, monkeypatch):
    printed, folder = run_delayed_delivery(tmp_path, monkeypatch, strict=False, prediction="delivered")
    said = " ".join(printed.split())
    assert "Delayed reply, old writer's claim: refused" in said and "Note:" not in said, printed
    assert "You predicted 'delivered'; the run showed 'refused': not what you predicted." in said, printed
    (kept,) = [json.loads(line) for line in (folder / ".predictions.jsonl").read_text().splitlines()]
    assert (kept["notebook"], kept["name"], kept["predicted"], kept["happened"], kept["held"]) == (
        "04_recovery", "predicted_delivery", "delivered", "refused", False)
