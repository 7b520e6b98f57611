"""Which cells of the learner's notebooks define the functions a checkpoint worker runs.

Read by course.learner (to load them) and course.kernel_runs (to note which version of each a
learner's kernel ran).
"""

from __future__ import annotations

from pathlib import Path

# notebook -> graded cells (grade_id) in the order they are executed, and the name each defines.
GRADED_CELLS: dict[str, tuple[tuple[str, str], ...]] = {
    "01_claims.ipynb": (("claim_dataclass", "Claim"), ("claim", "claim")),
    "02_fencing.ipynb": (("assert_current", "assert_current"), ("observe", "observe"), ("finish", "finish")),
    "04_recovery.ipynb": (("order_to_continue", "order_to_continue"),),
}
FUNCTIONS = ("claim", "assert_current", "observe", "finish", "order_to_continue")
NOTEBOOK_OF = {name: Path(notebook).stem for notebook, cells in GRADED_CELLS.items() for _, name in cells}
