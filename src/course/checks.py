"""What the notebooks' test and observation cells share.

`expect` turns a failed check into one or two sentences for the learner (what was observed,
what was expected, why it matters) instead of a bare AssertionError. `observation` lets an
observation cell in the untouched release explain that a function is not written yet, instead
of failing. `fresh_shop` gives every cell its own seeded database, so cells do not depend on
each other's leftovers.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from reference_organizations.store.agent import seed_lucy
from sovereign_agent.database import Database


class CheckFailed(AssertionError):
    """A learner-facing check: its message is the whole explanation."""

    def __str__(self) -> str:
        return self.args[0] if self.args else "check failed"


def expect(condition: object, message: str) -> None:
    """Fail with `message` (observed, expected, why it matters) unless `condition` holds."""
    if not condition:
        raise CheckFailed(message)


@contextmanager
def observation(name: str) -> Iterator[None]:
    """Run an observation; if the learner's function is still a stub, say so and carry on."""
    try:
        yield
    except NotImplementedError:
        print(f"Not implemented yet: `{name}` still raises NotImplementedError. Write it, run its cell, then run this cell again.")


_shops: list[tempfile.TemporaryDirectory] = []


def fresh_shop(prefix: str = "lucy-ch12-") -> Database:
    """A new, seeded shop database in its own temporary folder (removed when Python exits)."""
    folder = tempfile.TemporaryDirectory(prefix=prefix)
    _shops.append(folder)
    db = Database(Path(folder.name) / "agent.sqlite")
    seed_lucy(db)
    return db
