"""Two fences that are wrong on purpose, and the reference's writes guarded by one of them.

The schedule explorer (06) must catch both: a fence that trusts the owner label alone, and one
that checks the label, the state, the lease and the authority epoch but not the generation.
They read the row through `sovereign_agent.records`, like any code outside the runtime.
"""

from __future__ import annotations

import sqlite3
import time
import types
from typing import Any, Callable

from sovereign_agent import assistant_work
from sovereign_agent.ownership import Ownership
from sovereign_agent.records import authority_epoch, holding


def owner_only(connection: sqlite3.Connection, work: Any, now: float | None = None) -> None:
    """Wrong: the row names this owner. A cancelled or expired holding still does."""
    row = holding(connection, work.id)
    if row is None or row["owner"] != work.owner:
        raise PermissionError("not the owner")


def generation_blind(connection: sqlite3.Connection, work: Any, now: float | None = None) -> None:
    """Wrong: owner, RUNNING, a live lease and the epoch, but not the generation. A replacement
    under the same label (a restarted process) makes an old claim look current."""
    now = time.time() if now is None else now
    row = holding(connection, work.id)
    if (row is None or row["owner"] != work.owner or row["status"] != "RUNNING" or row["expires"] is None
            or row["expires"] <= now or authority_epoch(connection) != work.epoch):
        raise PermissionError("not the current holder")


def reference_with_fence(fence: Callable[..., None]) -> Ownership:
    """The reference's claim, observe and finish, with `fence` where they call `assert_current`.

    `observe` and `finish` look `assert_current` up by name in their module; each copy here looks
    it up in a namespace where that name is `fence`. The runtime itself is left untouched.
    """

    def fenced(function: Callable[..., Any]) -> Callable[..., Any]:
        names = {**function.__globals__, "assert_current": fence}
        copy = types.FunctionType(function.__code__, names, function.__name__, function.__defaults__)
        copy.__kwdefaults__ = function.__kwdefaults__
        return copy

    return Ownership(assert_current=fence, observe=fenced(assistant_work.observe), finish=fenced(assistant_work.finish))
