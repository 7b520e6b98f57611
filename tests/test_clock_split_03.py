"""03_leases's clock-jump experiment (`observe_clock_jump`), run with the solutions in a real kernel.

The chapter's clock split: a lease is a wall-clock epoch time, the loop's budget is timed on
`time.monotonic()`. The cell injects a jump of the wall clock (a rival claims with `now=` five
minutes ahead; the real clock never moves): the rival takes the work over at generation 2, the loop's
budget has used a fraction of a second so its next turn begins, and there the runtime's
`assert_current` refuses the old holder by its generation. With `COURSE_STATED_FACTS=strict` every
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

from course.checks import STRICT
from test_lost_lease_03 import SOLUTIONS, grade_id

pytestmark = pytest.mark.slow

UNSET = "Predict first: set `predicted_clock_jump` in the cell above, run it, then run this cell again."


def run_clock_jump(tmp_path: Path, monkeypatch, *, strict: bool, prediction: str | None = None) -> tuple[str, Path]:
    """Run 03's setup cells, its clock-jump prediction (or `prediction` in its place) and the
    clock-jump observation in a real kernel; return the observation's printed text, after checking
    that no cell raised, and the folder it ran in."""
    if strict:
        monkeypatch.setenv(STRICT, "strict")  # the kernel inherits it
    else:
        monkeypatch.delenv(STRICT, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's fresh_shop folders stay under the test's folder
    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)
    notebook = nbformat.read(folder / "03_leases.ipynb", as_version=4)
    at = [grade_id(c) for c in notebook.cells].index("observe_clock_jump")
    guess, observed = notebook.cells[at - 1], notebook.cells[at]
    assert "prediction" in guess.metadata.get("tags", []), "the observation's prediction cell is right above it"
    assert guess.source.startswith("predicted_clock_jump = None"), guess.source
    if prediction is not None:
        guess = nbformat.v4.new_code_cell(f"predicted_clock_jump = {prediction!r}")
    setup = [c for c in notebook.cells if "setup" in c.metadata.get("tags", [])]
    notebook.cells = [*setup, guess, observed]
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    outputs = [o for c in notebook.cells for o in c.get("outputs", [])]
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert errors == []
    return "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.output_type == "stream"), folder


def test_the_injected_jump_moves_the_lease_not_the_budget_and_the_generation_refuses(tmp_path, monkeypatch):
    printed, folder = run_clock_jump(tmp_path, monkeypatch, strict=True)  # as CI runs the solutions: facts must hold
    assert "The jump is injected: the rival claimed with now=time.time() + 300" in printed, printed
    assert "Worker: generation 1, 'lucy-stock-worker', a 90 s lease" in printed, printed
    assert "Rival:  generation 2, 'lucy-stock-worker': it took the work over" in printed, printed
    used = re.search(r"The loop's budget, on time\.monotonic: ([\d.]+) s used of 60 s, so turn 2 began", printed)
    assert used and float(used[1]) < 1, printed
    assert "Turn 2's fence (assert_current): refused: worker claim expired or superseded" in printed, printed
    lease = re.search(r"the worker's lease had (\d+) s left; the rival's ends in (\d+) s", printed)
    assert lease and 85 < int(lease[1]) <= 90 and 385 < int(lease[2]) <= 390, printed
    # Nobody predicts in the course's own run: the experiment ran, nothing was compared or kept.
    assert "You predicted" not in printed and "Note:" not in printed, printed
    assert not (folder / ".predictions.jsonl").exists()


def test_an_unset_prediction_stops_the_experiment_with_one_line(tmp_path, monkeypatch):
    printed, folder = run_clock_jump(tmp_path, monkeypatch, strict=False)  # the release as a learner opens it
    assert printed.strip() == UNSET, printed
    assert not (folder / ".predictions.jsonl").exists()


def test_a_set_prediction_is_shown_beside_what_happened_and_kept(tmp_path, monkeypatch):
    printed, folder = run_clock_jump(tmp_path, monkeypatch, strict=False, prediction="both")
    said = " ".join(printed.split())
    assert "Rival: generation 2, 'lucy-stock-worker'" in said and "Note:" not in said, printed
    assert "You predicted 'both'; the run showed 'lease': not what you predicted." in said, printed
    (kept,) = [json.loads(line) for line in (folder / ".predictions.jsonl").read_text().splitlines()]
    assert (kept["notebook"], kept["name"], kept["predicted"], kept["happened"], kept["held"]) == (
        "03_leases", "predicted_clock_jump", "both", "lease", False)
