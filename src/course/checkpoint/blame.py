"""Which of the learner's code a failed case or trial sends them back to.

The sentences of verdict.py and invariants.py name the fence that decides each fact (`claim`,
`assert_current`, ...). When the fences are the runtime's and the worker pass is the learner's
(05's capstone), the same fact was decided by a step of that pass: the name is translated into
the step, with the invariant it keeps, so the message points at code the learner wrote.
"""

from __future__ import annotations

from typing import Any

RUN_ONCE, CONTINUE_ORDER = "`run_once` in 05_checkpoint", "`continue_order` in 05_checkpoint"
WORKER_STEP = {
    "claim": f"{RUN_ONCE}: recovery first (a `recovery_only` claim), then new work",
    "order_to_continue": f"{RUN_ONCE}: an approved order is continued from the records, never re-proposed by the model",
    "assert_current": f"{RUN_ONCE}: every controlled write goes through `ownership`, and a refusal ends the pass",
    "observe": f"{RUN_ONCE}: every controlled write goes through `ownership`, and a refusal ends the pass",
    "finish": f"{CONTINUE_ORDER}: DONE only with a receipt; an unknown outcome ends BLOCKED, its money reserved",
}


def learner_parts(evidence: Any) -> tuple[bool, bool]:
    """(the fences are the learner's, the worker pass is the learner's)."""
    return bool(getattr(evidence, "fences_learner", True)), bool(getattr(evidence, "worker_learner", False))


def steps(functions: tuple[str, ...], evidence: Any) -> tuple[str, ...] | None:
    """None: name `functions` as they are (the learner wrote the fences). Else the worker's steps
    that decided the same facts, each once, in order."""
    fences, worker = learner_parts(evidence)
    if fences or not worker:
        return None
    found: list[str] = []
    for function in functions:
        step = WORKER_STEP.get(function.split(" ", 1)[0])
        if step is not None and step not in found:
            found.append(step)
    return tuple(found)


def revisit_text(functions: tuple[str, ...], evidence: Any) -> str | None:
    """'run_once in 05_checkpoint: ..., then ...' for the capstone, None otherwise."""
    found = steps(functions, evidence)
    return None if found is None else ", then ".join(found) if found else None
