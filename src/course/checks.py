"""What the notebooks' test and observation cells share.

`expect` turns a failed check into one or two sentences for the learner (what was observed,
what was expected, why it matters) instead of a bare AssertionError; long sentences are
broken into lines a dialog can show. `require_written` opens a test cell: while a function it
checks is still nbgrader's stub, the test says "not implemented yet", in the same words as the
observation cells, instead of failing with whatever the stub happens to cause.
`observation` lets an observation cell in the untouched release say the same and carry on;
`unexpected` lets it say when the learner's code made it disagree with the text around it.
`differences` names the fields in which a returned value differs from the expected one.
`fresh_shop` gives every cell its own seeded database, so cells do not depend on each other's
leftovers. `forced_race` is the harness behind the race in `01_claims`.
"""

from __future__ import annotations

import dataclasses
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from reference_organizations.store.agent import seed_lucy
from sovereign_agent.database import Database

WIDTH = 88  # characters per line of a failure message (nbgrader's Validate dialog, a traceback)


class CheckFailed(AssertionError):
    """A learner-facing check: its message is the whole explanation."""

    def __str__(self) -> str:
        return wrap(self.args[0]) if self.args else "check failed"


def wrap(message: str, width: int = WIDTH) -> str:
    """Break every paragraph of `message` into lines of at most `width` characters."""
    return "\n".join(textwrap.fill(line, width, break_on_hyphens=False) for line in message.splitlines())


def expect(condition: object, message: str) -> None:
    """Fail with `message` (observed, expected, why it matters) unless `condition` holds."""
    if not condition:
        raise CheckFailed(message)


def not_implemented(name: str, where: str = "in its cell above") -> str:
    """The one sentence for a function that is still a stub (observation, test and checkpoint)."""
    return f"not implemented yet: write `{name}` {where} and run it"


def is_stub(value: object) -> bool:
    """True for nbgrader's stub: a function whose body only raises NotImplementedError."""
    code = getattr(value, "__code__", None)
    return code is not None and code.co_names == ("NotImplementedError",)


def require_written(namespace: Mapping[str, Any], *names: str) -> None:
    """Stop a test with the "not implemented yet" sentence if one of `names` is still a stub.

    `namespace` is the cell's `globals()`; a class whose stub raised while it was defined
    (nbgrader's stub in a class body) is simply missing from it.
    """
    for name in names:
        value = namespace.get(name)
        if value is None or is_stub(value):
            raise CheckFailed(not_implemented(name))


@contextmanager
def observation(name: str) -> Iterator[None]:
    """Run an observation; if the learner's function is still a stub, say so and carry on."""
    try:
        yield
    except NotImplementedError:
        print(wrap(not_implemented(name) + ", then run this cell again."))


def unexpected(as_told: object, message: str) -> None:
    """In an observation: when the learner's code made the result differ from the text around
    the cell (`as_told` is false), say so right under the output."""
    if not as_told:
        print(wrap(f"Note: {message}; the test below explains."))


def differences(actual: object, expected: object) -> str:
    """'generation is 2, expected 1; owner is ...': the fields of two dataclasses that differ."""
    if not (dataclasses.is_dataclass(actual) and dataclasses.is_dataclass(expected)):
        return f"{actual!r}, expected {expected!r}"
    found = []
    for field in dataclasses.fields(expected):
        mine, wanted = getattr(actual, field.name, "<missing>"), getattr(expected, field.name)
        if mine != wanted:
            found.append(f"{field.name} is {mine!r}, expected {wanted!r}")
    return "; ".join(found) or "no field differs"


_shops: list[tempfile.TemporaryDirectory] = []


def fresh_shop(prefix: str = "lucy-ch12-") -> Database:
    """A new, seeded shop database in its own temporary folder (removed when Python exits)."""
    folder = tempfile.TemporaryDirectory(prefix=prefix)
    _shops.append(folder)
    db = Database(Path(folder.name) / "agent.sqlite")
    seed_lucy(db)
    return db


def forced_race(location: str | Path, take: Callable[..., Any], *, now: float | None = None,
                pause: float = 0.5) -> dict[str, Any]:
    """Worker A and worker B call take(db, owner, now=now), each on its own connection.

    B is released exactly between A's read of assistant_work and A's first write (A watches its
    own SQL through sqlite3's trace callback and waits at most `pause` seconds for B).
    Returns {"A": ..., "B": ..., "B waited": seconds B spent inside take}; B's error is raised.
    """
    ready, go, done = threading.Event(), threading.Event(), threading.Event()
    held: dict[str, Any] = {}

    def worker_b() -> None:
        rival = Database(location)  # a connection belongs to the thread that opens it
        ready.set()
        go.wait(10)
        started = time.monotonic()
        try:
            held["B"] = take(rival, "worker-B", now=now)
        except BaseException as error:  # handed to the caller below
            held["B error"] = error
        finally:
            held["B waited"] = time.monotonic() - started
            rival.close()
            done.set()

    def hold_a_between_read_and_write(statement: str) -> None:
        verb = (statement.split() or [""])[0].upper()
        if verb == "SELECT" and "assistant_work" in statement:
            held["A has read"] = True
        elif held.get("A has read") and verb in {"BEGIN", "UPDATE", "INSERT"} and not go.is_set():
            go.set()
            done.wait(pause)

    thread = threading.Thread(target=worker_b, daemon=True)
    thread.start()
    ready.wait(10)
    a = Database(location)
    a.connection.set_trace_callback(hold_a_between_read_and_write)
    try:
        held["A"] = take(a, "worker-A", now=now)
    finally:
        go.set()
        thread.join(15)
        a.close()
    if "B error" in held:
        raise held["B error"]
    return held


def race_claims(location: str | Path, claim: Callable[..., Any], *, now: float | None = None) -> dict[str, Any]:
    """`forced_race` over the learner's `claim` (30 s leases); a crash becomes an explanation."""
    try:
        return forced_race(location, lambda db, owner, now: claim(db, owner, now=now, ttl=30), now=now)
    except NotImplementedError:
        raise
    except Exception as error:
        hint = ""
        if "locked" in str(error):
            hint = (" Your claim began as a reader (a plain BEGIN) and tried to become a writer after the other "
                    "worker had committed; take the write lock before the first read with db.immediate().")
        raise CheckFailed(f"The forced race raised {type(error).__name__}: {error}; expected each worker to "
                          f"get a claim or None.{hint}") from None
