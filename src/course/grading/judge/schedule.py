"""Forced races as the judge runs them: scheduled at the learner process's lock calls, which the
kernel reports, never at what the learner process says.

In Lab a forced race (course.lessons.checks.interleave) reads the statement trace of the learner's
own connection to release worker B between worker A's read and its write. Graded, a trace would be
the learner's word, and a wait inside learner code could reorder the race. So here:

- Worker A's lock calls reach the judge (course.grading.lockcalls), and the judge holds one of
  them while worker B runs to its end, then lets A go on. SQLite takes a lock before it reads and
  before it writes, so if A decides from a read and writes later, some lock call of A lies between.
- Which call that is, A is not asked: each call A makes when it runs alone while it holds a read
  mark (F_GETLK on the -shm file: it has read, and has not taken the write lock) and before it has
  made its last change is tried in turn, the last first, every trial from the same starting
  database, after both serial orders (A then B, B then A). Until the held call, A does what it did
  alone, so every place is tried.
- An outcome (what each worker returned or raised, and the database after, with times and new random
  ids left out) that no serial order explains is the race: when B ran before A had changed any
  table A changes, A decided after B, so only "B then A" explains it; after that, either order. The
  first such trial is what the check sees: its database is put back at `location`. With none, the
  check sees the latest place at which B ran before A's change (or, if there is none, B then A).
- A sleep changes nothing: a held A waits however long B takes (up to WITHIN seconds, after which
  the check fails), and B starts only at one of A's lock calls.
- A lock call at which A already holds the write lock is no place for B (B would wait for A): the
  judge sees that from the lock itself (fcntl F_GETLK on the database's files) and lets A go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import re
import sqlite3
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable

from course.grading.lockcalls import LockCalls
from course.lessons.checks import CheckFailed

WITHIN = 20.0  # seconds: A to reach a lock call, B to end while A waits, A to end once let go
CALLS = 64  # lock calls of A tried; a call that makes more is refused
_TIME = re.compile(r"\d+\.\d+")  # a time in a row or a message: it differs from trial to trial
_TOKEN = re.compile(r"[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # a random id


@dataclasses.dataclass
class Trial:
    schedule: str
    first: Any = None  # what A returned, or the exception it raised
    second: Any = None
    ran_inside: bool = False  # B ran to its end while A was held at a lock call
    inside: bool = False  # ... before A had changed any table it changes: B between A's reads and its write
    waited: float = 0.0  # seconds B took while A was held

    def outcome(self, location: str | Path, known: frozenset[str]) -> tuple:
        """What it returned and left, with times and random ids made in the trial (not in `known`) left out."""
        return _alike(repr((_shown(self.first), _shown(self.second), _contents(location))), known)


def forcing(locks: LockCalls) -> Callable[..., dict[str, Any]]:
    """A replacement for course.lessons.checks.interleave (same arguments, same result) in which A's
    lock calls are those `locks` reports (A is a learner process)."""

    def interleave(connection: Any, first: Callable[[], Any], location: str | Path, second: Callable[[Any], Any],
                   *, reopen: Callable[[Any], Any] | None = None, **lab_only: Any) -> dict[str, Any]:
        from sovereign_agent.database import Database

        reopen = reopen or Database

        def b() -> Any:
            other = reopen(location)
            try:
                return second(other)
            finally:
                other.close()

        trial = race(location, first, b, locks)
        for value in (trial.first, trial.second):
            if isinstance(value, BaseException):
                raise value
        return {"first": trial.first, "second": trial.second, "second in gap": trial.inside,
                "second waited": trial.waited}

    return interleave


def race(location: str | Path, first: Callable[[], Any], second: Callable[[], Any], locks: LockCalls) -> Trial:
    """Run A (`first`, whose lock calls `locks` reports) and B (`second`) in every schedule above;
    the trial the check sees, its database left at `location`."""
    start, initial = _copy(location), _contents(location)
    known = frozenset(_TOKEN.findall(repr(initial)))
    _restore(start, location)
    places: dict[int, tuple] = {}  # A's lock calls at which it has read and may still write, and what it had written

    def note(number: int) -> None:
        if _reading(location):
            places[number] = _contents(location)

    locks.hold(CALLS + 1, each=note)
    alone = Trial("A then B", _run(first))  # A alone: its lock calls are counted, none held
    calls = locks.calls
    locks.release()
    if calls > CALLS:
        raise CheckFailed(f"The function under test made {calls} lock calls on the database in one call (more than "
                          f"{CALLS}): the race could not be tried at each of them. Read and write in one transaction.")
    done = _contents(location)
    changed = {table for table, rows in done if (table, rows) not in initial}  # what A writes
    places = {number: was for number, was in places.items() if was != done}  # after its last change B can only follow A
    alone.second = _run(second)
    a_then_b = alone.outcome(location, known)
    _restore(start, location)
    seen = Trial("B then A", second=_run(second))
    seen.first = _run(first)
    b_then_a, chosen = seen.outcome(location, known), _copy(location)
    for number in sorted(places, reverse=True):  # the last first: a gap lies just before A's write
        _restore(start, location)
        trial = _inside(first, second, locks, number, location, {t: rows for t, rows in initial if t in changed})
        if trial is None or not trial.ran_inside:
            continue
        outcome = trial.outcome(location, known)
        # B ended before A changed anything it changes: A decided after B, as in B then A. Otherwise
        # either order will do (B may have come after A's change).
        if outcome != b_then_a and (trial.inside or outcome != a_then_b):
            trial.inside = True  # the race: an outcome no serial order explains
            seen, chosen = trial, _copy(location)
            break
        if trial.inside and seen.schedule == "B then A":  # the latest place before A's change
            seen, chosen = trial, _copy(location)
    _restore(chosen, location)
    return seen


def _inside(first: Callable[[], Any], second: Callable[[], Any], locks: LockCalls, number: int,
            location: str | Path, untouched: dict[str, tuple]) -> Trial | None:
    """B run to its end while A is held at its `number`-th lock call; None if A made fewer. A runs in
    this thread (a connection it is passed belongs here), the schedule in another."""
    woken, box = threading.Event(), {}

    def schedule() -> None:
        try:
            if not woken.wait(WITHIN) or not locks.held.is_set():
                return  # A ended first (or is still on its way: it is let go on below)
            if _write_locked(location):  # B would only wait for A here
                box["write locked"] = True
                return
            box["before A"] = all(untouched.get(table, rows) == rows for table, rows in _contents(location))
            began, b = time.monotonic(), _Bounded(second)
            if b.ended.wait(WITHIN):
                box["waited"] = time.monotonic() - began
                box["second"] = b.value
            else:
                box["second"] = CheckFailed(f"Worker B did not end within {WITHIN:g} s while worker A waited at a "
                                            "lock call: each worker should decide in well under a second.")
        finally:
            locks.release()

    locks.hold(number, wake=woken)
    scheduler = threading.Thread(target=schedule, name="schedule", daemon=True)
    scheduler.start()
    try:
        first_value = _run(first)
    finally:
        woken.set()
        scheduler.join(2 * WITHIN)
    if not locks.held.is_set():
        return None
    if "second" not in box:
        return Trial(f"A held at lock call {number}, holding the write lock", first_value)
    return Trial(f"B inside A's lock call {number}", first_value, box["second"], ran_inside=True,
                 inside=box["before A"], waited=box.get("waited", WITHIN))


class _Bounded:
    """A call in a thread of its own, so that waiting for it is bounded."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.value, self.ended = None, threading.Event()

        def run() -> None:
            self.value = _run(call)
            self.ended.set()

        threading.Thread(target=run, name="worker-B", daemon=True).start()


def _run(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as error:  # an outcome like any other; raised when it is the trial the check sees
        return error


# --- the database: copied, put back, compared, and whether someone holds its write lock -----------

def _copy(location: str | Path) -> sqlite3.Connection:
    copy = sqlite3.connect(":memory:", check_same_thread=False)
    with _opened(location) as source:
        source.backup(copy)
    return copy


def _restore(copy: sqlite3.Connection, location: str | Path) -> None:
    """`copy` put back, its log checkpointed and emptied: every run starts from the same shared
    memory too, so A's lock calls come in the same order each time (which read mark a reader takes,
    and whether it must set one first, depends on what the log holds)."""
    with _opened(location) as target:
        copy.backup(target)
        target.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _opened(location: str | Path) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(location, timeout=WITHIN))


def _contents(location: str | Path) -> tuple:
    """Every table's rows in order, a real number (a time) as ~."""
    with _opened(location) as connection:
        tables = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return tuple((table, tuple(tuple("~" if isinstance(value, float) else value for value in row)
                                   for row in connection.execute(f'SELECT * FROM "{table}" ORDER BY rowid')))
                     for table in tables)


def _shown(value: Any) -> str:
    return f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else repr(value)


def _alike(text: str, known: frozenset[str]) -> str:
    """`text` with each time, and each random id not in `known`, made the same in every trial."""
    return _TOKEN.sub(lambda found: found[0] if found[0] in known else "#", _TIME.sub("~", text))


_probes: dict[str, int] = {}  # kept open: closing a file drops every lock this process holds on it


def _write_locked(location: str | Path) -> bool:
    """Whether another process holds an exclusive lock of the database: one of the -shm file's
    (bytes 120-128: the write lock, a checkpoint, a recovery, a read mark being set, the first
    connection setting up) or the database file's (rollback journal's reserved, pending, exclusive).
    SQLite holds these briefly, so B (and the judge) would only wait for A."""
    return _locked(f"{location}-shm", 120, 9, fcntl.F_RDLCK) or _locked(str(location), 0x40000000, 512, fcntl.F_RDLCK)


def _reading(location: str | Path) -> bool:
    """Whether another process (A: B and the judge are idle then) holds a WAL read mark (-shm bytes
    123-127) and no exclusive lock: it is inside a read, and what it read may be stale by its write.
    At any other lock call B would find what it finds at the read's end, or after A's write."""
    return _locked(f"{location}-shm", 123, 5, fcntl.F_WRLCK) and not _write_locked(location)


def _locked(path: str, start: int, length: int, kind: int) -> bool:
    """Whether a lock of another process conflicts with a `kind` lock on those bytes (fcntl F_GETLK)."""
    try:
        if path not in _probes or os.fstat(_probes[path]).st_ino != os.stat(path).st_ino:  # a new file there
            _probes[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    found = fcntl.fcntl(_probes[path], fcntl.F_GETLK, struct.pack("hhqqi", kind, os.SEEK_SET, start, length, 0))
    return struct.unpack("hhqqi", found)[0] != fcntl.F_UNLCK

