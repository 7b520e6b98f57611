"""02's lost lease with a slow replacement: both holders carry the label `first-worker`, so the slowed
writes are chosen by generation. The replacement holds a lease the runtime sizes, so it still
finishes, and the first worker's late reply, which arrives while the replacement holds the row
(RUNNING, lease live, same label), is refused by the generation alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions" / "ch12"

pytestmark = pytest.mark.slow

# Every transcript write by generation 2 (the replacement) takes 0.3 s first: 1.5 s for its five rows.
SLOW_REPLACEMENT = '''
def observe(db, work, message, *, _fast=observe):
    if work.generation == 2:
        time.sleep(0.3)
    _fast(db, work, message)
'''


def grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def test_a_slow_replacement_under_the_same_label_still_finishes_and_the_late_reply_is_refused(tmp_path):
    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)
    notebook = nbformat.read(folder / "02_fencing.ipynb", as_version=4)
    wanted = {"assert_current", "observe", "finish", "lost_lease_helpers", "observe_lost_lease"}
    cells = [c for c in notebook.cells if "setup" in c.metadata.get("tags", []) or grade_id(c) in wanted]
    at = [grade_id(c) for c in cells].index("observe") + 1
    notebook.cells = cells[:at] + [nbformat.v4.new_code_cell(SLOW_REPLACEMENT)] + cells[at:]
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    outputs = [o for c in notebook.cells for o in c.get("outputs", [])]
    assert [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"] == []
    printed = "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.output_type == "stream")
    assert "First worker stopped by PermissionError" in printed, printed
    assert "the row said: {'generation': 2, 'status': 'RUNNING', 'owner': 'first-worker'" in printed, printed
    assert "Replacement: BLOCKED at generation 2" in printed, printed
    assert "Transcript rows by generation: {1: 2, 2: 5}" in printed, printed  # the late reply left none
