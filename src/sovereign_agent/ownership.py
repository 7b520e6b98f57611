"""The seam between a worker and the ownership rules it relies on.

A worker (`run_once`, `reconcile_once`) calls these five functions and nothing else to take,
check, write under and give up a claim, and to decide whether to continue a recorded order.
The reference implementation is the default; the course checkpoint passes a learner's own
functions instead, so the same real worker processes test the learner's code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from sovereign_agent import assistant_orders, assistant_work


@dataclass(frozen=True)
class Ownership:
    claim: Callable[..., Any] = assistant_work.claim
    assert_current: Callable[..., None] = assistant_work.assert_current
    observe: Callable[..., None] = assistant_work.observe
    finish: Callable[..., None] = assistant_work.finish
    order_to_continue: Callable[..., str | None] = assistant_orders.order_to_continue


REFERENCE = Ownership()
