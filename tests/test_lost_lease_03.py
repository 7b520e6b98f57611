"""03_leases's lost-lease experiment on a slow machine: it reports what happened, and never crashes.

The cell runs Lucy's real worker with a one-second lease, on the wall clock. A slow disk stretches
every write; the experiment stays bounded and honest whichever holder the slowness hits:

- the replacement is slow: it holds the lease the runtime sizes for it, so it still finishes, and
  the first worker's late reply is refused by the generation;
- the first worker is slow: its one-second lease runs out during its first turn, so it is refused
  there, no replacement runs, and the cell says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "ch12"

pytestmark = pytest.mark.slow

# A learner observe on a slow disk: every transcript write by one holder takes `delay` seconds first.
# Both holders carry the same owner label, so the holder is told by its generation.
SLOW_OBSERVE = '''
def observe(db, work, message, *, _fast=observe):
    if work.generation == {generation!r}:
        time.sleep({delay})
    _fast(db, work, message)
'''


def grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def run_lost_lease(tmp_path: Path, generation: int, delay: float) -> str:
    """Run 03's setup and lost-lease cells, with `generation`'s writes slowed; return the
    lost-lease cell's printed text, after checking that no cell raised."""
    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)
    notebook = nbformat.read(folder / "03_leases.ipynb", as_version=4)
    wanted = {"lost_lease_helpers", "observe_lost_lease"}
    cells = [c for c in notebook.cells if "setup" in c.metadata.get("tags", []) or grade_id(c) in wanted]
    slowed = nbformat.v4.new_code_cell(SLOW_OBSERVE.format(generation=generation, delay=delay))
    at = [grade_id(c) for c in cells].index("setup") + 1  # the runtime's observe, slowed
    predicted = nbformat.v4.new_code_cell("predicted_calls = 2")  # the experiment waits for a prediction
    notebook.cells = cells[:at] + [slowed] + cells[at:-1] + [predicted, cells[-1]]
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    outputs = [o for c in notebook.cells for o in c.get("outputs", [])]
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert errors == []
    return "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.output_type == "stream")


def test_a_slow_replacement_still_finishes_and_the_first_worker_is_refused(tmp_path):
    # Five writes of 0.3 s: 1.5 s, more than the one-second lease the replacement used to get.
    printed = run_lost_lease(tmp_path, 2, 0.3)
    assert "First worker stopped by PermissionError" in printed, printed
    # The late reply arrived while the replacement held the row, under the same label: only the generation differed.
    assert "the row said: {'generation': 2, 'status': 'RUNNING', 'owner': 'first-worker'" in printed, printed
    assert "Replacement: BLOCKED at generation 2" in printed, printed
    assert "Transcript rows by generation: {1: 2, 2: 5}" in printed, printed  # the late reply left none


def test_a_slow_first_worker_is_refused_in_its_first_turn_and_the_cell_says_so(tmp_path):
    printed = run_lost_lease(tmp_path, 1, 1.2)
    assert "First worker stopped by PermissionError" in printed, printed
    assert "No replacement ran: the first worker's lease ran out before its second model call" in printed, printed
    assert "Model calls by generation:     {1: 1}" in printed, printed
