"""A stale holder's three controlled writes (transcript, completion, supplier), and how each ended.

The old worker tries them with the claim it still holds (the chapter's experiment); when grading,
the parent tries them too, through the learner's functions, with the old claim rebuilt from what
it knows itself, and only its own attempts count (the worker runs learner code: what it reports
of itself is not evidence).
"""

from __future__ import annotations

import time
from typing import Any, Callable


def attempt(boundary: str, action: Callable[[], Any]) -> dict[str, Any]:
    """Try one controlled write and say how it ended: refused, accepted, or why neither."""
    from course.lab.learner import NotImplementedYet
    from sovereign_agent.assistant_orders import OrderRefused

    at = time.time()
    try:
        action()
    except NotImplementedYet as error:
        return {"boundary": boundary, "outcome": "not implemented", "error": str(error), "at": at}
    except OrderRefused as error:  # a PermissionError, but from the order rules, not the fence
        return {"boundary": boundary, "outcome": "refused by order rules", "error": explain(error), "at": at}
    except PermissionError as error:
        return {"boundary": boundary, "outcome": "refused", "error": explain(error), "at": at}
    except Exception as error:
        return {"boundary": boundary, "outcome": "error", "error": explain(error), "at": at}
    return {"boundary": boundary, "outcome": "accepted", "at": at}


def transcript(db: Any, ownership: Any, work: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": f"stale answer from generation {work.generation}"}
    return attempt("transcript", lambda: ownership.observe(db, work, message))


def writes(db: Any, ownership: Any, work: Any, order: str, client: Any, policy: Any) -> list[dict[str, Any]]:
    """The three stale writes, in the chapter's order."""
    from sovereign_agent.assistant_orders import execute

    return [
        transcript(db, ownership, work),
        attempt("completion", lambda: ownership.finish(db, work, "DONE", f"stale result from generation {work.generation}")),
        attempt("supplier", lambda: execute(db, work, order, client, policy=policy, fence=ownership.assert_current)),
    ]


def explain(error: BaseException) -> str:
    from course.lab.learner import NotImplementedYet

    if isinstance(error, NotImplementedYet):
        return str(error)
    return f"{type(error).__name__}: {error}"
