"""The chapter-12 recovery checkpoint: real worker and supplier processes, counted evidence.

    from course.checkpoint import run_checkpoint, draw_timeline
    evidence = run_checkpoint("reference")          # or the folder with your notebooks
    draw_timeline(evidence, "timeline.png")

Modules, one job each: `worker` (the old worker process), `processes` (the parent's handle on
it), `cases` (the four experiments), `evidence` (counting), `verdict` (explanations),
`model` (NoNewReasoning), `timeline` (the figure), `report` (summary lines), `run`.
The crash matrix builds on them: `crashpoints` (the points and the hook in the worker's pass),
`trial` (one point x nemesis), `invariants` (the sentences), `matrix` (many trials, the soak),
`explorer` (the widgets of 06_explore).

Names are imported on first use: the worker process (`python -m course.checkpoint.worker`)
imports this package too, and must not pay for the parent's modules (or matplotlib).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ALL": "course.checkpoint.cases",
    "TITLES": "course.checkpoint.cases",
    "CaseEvidence": "course.checkpoint.evidence",
    "NewReasoningRequested": "course.checkpoint.model",
    "NoNewReasoning": "course.checkpoint.model",
    "summary_lines": "course.checkpoint.report",
    "markdown_table": "course.checkpoint.report",
    "evidence_rows": "course.checkpoint.report",
    "evidence_json": "course.checkpoint.report",
    "Checkpoint": "course.checkpoint.run",
    "run_checkpoint": "course.checkpoint.run",
    "draw_timeline": "course.checkpoint.timeline",
}
__all__ = [
    "ALL", "TITLES", "CaseEvidence", "Checkpoint", "NewReasoningRequested", "NoNewReasoning",
    "draw_timeline", "evidence_json", "evidence_rows", "markdown_table", "run_checkpoint", "summary_lines",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
