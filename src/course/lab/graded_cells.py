"""Which cells of the learner's notebooks define the functions a checkpoint worker runs.

Two parts, loaded apart: the fences (01, 02, 04: what a worker calls to take, check and give up a
claim) and the worker pass (05: what puts them together). The checkpoint grades the pass with
the runtime's fences, so a fence's mistake costs points where the fence was built, not twice.
Read by course.lab.learner (to load them) and course.lab.kernel_runs (to note which version of each a
learner's kernel ran).
"""

from __future__ import annotations

from pathlib import Path

# notebook -> graded cells (grade_id) in the order they are executed, and the name each defines.
GRADED_CELLS: dict[str, tuple[tuple[str, str], ...]] = {
    "01_claims.ipynb": (("claim_dataclass", "Claim"), ("claim", "claim")),
    "02_fencing.ipynb": (("assert_current", "assert_current"), ("observe", "observe"), ("finish", "finish")),
    "04_recovery.ipynb": (("order_to_continue", "order_to_continue"),),
    "05_checkpoint.ipynb": (("continue_order", "continue_order"), ("run_once", "run_once")),
}
FUNCTIONS = ("claim", "assert_current", "observe", "finish", "order_to_continue")  # the fences
WORKER = "05_checkpoint.ipynb"  # the worker pass: `continue_order` and `run_once`
FENCES = tuple(notebook for notebook in GRADED_CELLS if notebook != WORKER)
NOTEBOOK_OF = {name: Path(notebook).stem for notebook, cells in GRADED_CELLS.items() for _, name in cells}
