"""What the learner's kernels ran: the evidence that a checkpoint judges saved code only.

The checkpoint (`05_checkpoint`) reads the *saved* notebooks. A learner who edits
`assert_current`, runs the cell and forgets to save has two versions: the one the kernel runs
and the one on disk. `watch()` (called by the setup cell of 01, 02 and 04) records, after every cell
that defines a graded function or class in a JupyterLab kernel, a fingerprint of the cell's
source and the time it ran. The ledger is a small JSON file per notebook in `.kernel-runs/`
beside it. `load_implementation` compares it with the saved cells and refuses to judge a
function whose last run is newer than the save and different from it.

Only kernels started by a Jupyter server are watched (the server tells the kernel its
notebook's path in `JPY_SESSION_NAME`); papermill, nbclient and the grader write nothing.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

FOLDER = ".kernel-runs"
_watching: set[str] = set()


def fingerprint(source: str) -> str:
    """The same for a cell as run and as saved (trailing whitespace aside)."""
    return hashlib.sha256(source.rstrip().encode("utf-8")).hexdigest()


def ledger_path(notebook: Path) -> Path:
    return notebook.parent / FOLDER / f"{notebook.stem}.json"


def read(notebook: Path) -> dict[str, dict[str, Any]]:
    """{name: {"fingerprint", "ran_at"}} for the notebook's graded definitions; {} if none."""
    try:
        data = json.loads(ledger_path(notebook).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record(notebook: Path, source: str, names: set[str], at: float | None = None) -> list[str]:
    """Record that `source` (one cell) ran and (re)defined any of `names`; return those defined."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    defined = [node.name for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names]
    if not defined:
        return []
    runs = read(notebook)
    for name in defined:
        runs[name] = {"fingerprint": fingerprint(source), "ran_at": time.time() if at is None else at}
    path = ledger_path(notebook)
    path.parent.mkdir(exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(runs, indent=1, sort_keys=True), encoding="utf-8")
    temporary.replace(path)
    return defined


def watch(names: set[str] | None = None) -> None:
    """In a JupyterLab kernel, record every successful cell that defines one of `names`
    (default: the graded names of this notebook). Elsewhere, and when already watching, nothing."""
    session = os.environ.get("JPY_SESSION_NAME")
    if not session or session in _watching:  # not a JupyterLab kernel (a checker, papermill, a script)
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    notebook = Path(session)
    if names is None:
        from course.lab.graded_cells import GRADED_CELLS

        names = {name for _, name in GRADED_CELLS.get(notebook.name, ())}
    if not names:
        return

    def after_cell(result: Any) -> None:
        if result.success and result.info is not None:
            try:
                record(notebook, result.info.raw_cell or "", names)
            except OSError:
                pass  # a read-only folder: the checkpoint then cannot warn, nothing else breaks

    shell.events.register("post_run_cell", after_cell)
    _watching.add(session)
