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
- Run again from the same database, A must hold what it held alone before each lock call up to the
  held one (the judge sees that from the locks themselves, fcntl F_GETLK on the database's files).
  SQLite takes the same locks for the same statements, so only a function that counts its calls
  (to be racy when run alone and careful when held) strays, and its check fails.
- A can read a clock, and a held call takes long: at the last place A is also held as long as B took
  there with no B at all, and must then return and leave what it did alone. A function that gives
  up when its calls took long (which "B then A" would explain in the trial) fails there.
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
STRAYED = ("Called again on the same database, the function under test took other locks than the first time "
           "(or fewer): a forced race calls each worker several times, and only a function that does the same "
           "from the same state can be shown safe. Decide from the database, not from how often you were called.")
PAUSED = ("Held at a lock call as long as the other worker takes, with no other worker running, the function "
          "under test did something other than what it did alone: it went by how long its calls took. A worker must "
          "decide from what the database holds, read under the write lock.")
PAUSE = 0.05  # seconds: the least A is held with no B
_TIME = re.compile(r"\d+\.\d+|\b1\d{9}(?:\d{3})?\b")  # a time in a row or a message (or whole seconds or
# milliseconds since 1970, as an answer may keep a lease's end): it differs from trial to trial
_TOKEN = re.compile(r"[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # a random id


@dataclasses.dataclass
class Trial:
    schedule: str
    first: Any = None  # what A returned, or the exception it raised
    second: Any = None
    inside: bool = False  # B ran while A was held, before A changed what it changes: between its read and write
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
    states: list[tuple[bool, bool]] = []  # what A held before each of its lock calls, alone
    places: dict[int, tuple] = {}  # the calls at which it has read and may still write, and what it had written

    def note(number: int) -> None:
        states.append(_state(location))
        if states[-1] == READING and number <= CALLS:
            places[number] = _contents(location)

    locks.hold(None, each=note)
    alone = Trial("A then B", _run(first))  # A alone: its lock calls are counted, none held
    locks.release()
    if len(states) > CALLS:
        raise CheckFailed(f"The function under test made {len(states)} lock calls on the database in one call "
                          f"(more than {CALLS}): the race could not be tried at each of them. Read and write in one "
                          "transaction.")
    done = _contents(location)
    by_itself = _alike(repr((_shown(alone.first), done)), known)  # what A returned and left, alone
    changed = {table for table, rows in done if (table, rows) not in initial}  # what A writes
    read = set(places)  # where the judge read the database while A ran
    places = {number: was for number, was in places.items() if was != done}  # after its last change B can only follow A
    alone.second = _run(second)
    a_then_b = alone.outcome(location, known)
    _restore(start, location)
    seen = Trial("B then A", second=_run(second))
    seen.first = _run(first)
    b_then_a, chosen = seen.outcome(location, known), _copy(location)
    for number in sorted(places, reverse=True):  # the last first: a gap lies just before A's write
        _restore(start, location)
        trial = _inside(first, second, locks, number, location, {t: rows for t, rows in initial if t in changed},
                        states[:number], read)
        outcome = trial.outcome(location, known)
        # B ended before A changed anything it changes: A decided after B, as in B then A. Otherwise
        # either order will do (B may have come after A's change).
        if outcome != b_then_a and (trial.inside or outcome != a_then_b):
            trial.inside = True  # the race: an outcome no serial order explains
            seen, chosen = trial, _copy(location)
            break
        if trial.inside and seen.schedule == "B then A":  # the latest place before A's change
            seen, chosen = trial, _copy(location)
        if number == max(places):  # A held there as long, with no B: only a clock tells it from the trial
            _restore(start, location)
            paused = _inside(first, None, locks, number, location, {}, states[:number], read, pause=trial.waited)
            if _alike(repr((_shown(paused.first), _contents(location))), known) != by_itself:
                raise CheckFailed(PAUSED)
    _restore(chosen, location)
    return seen


def _inside(first: Callable[[], Any], second: Callable[[], Any] | None, locks: LockCalls, number: int,
            location: str | Path, untouched: dict[str, tuple], alone: list[tuple[bool, bool]], read: set[int],
            pause: float = 0.0) -> Trial:
    """B run to its end while A is held at its `number`-th lock call (no B: A held 1.5 x `pause` seconds,
    at least PAUSE), A having held what it held alone (`alone`) before each call until then. The judge
    reads the database at the same calls (`read`) as it did when A ran alone: a read may set a read
    mark, and so change which locks A takes next. A runs in this thread (a connection it is passed
    belongs here), the schedule in another."""
    woken, box, states = threading.Event(), {}, []

    def each(call: int) -> None:
        states.append(_state(location))
        if call in read and call < number:
            _contents(location)

    def schedule() -> None:
        try:
            woken.wait(WITHIN)
            if not locks.held.is_set():
                box["late"] = not woken.is_set()  # A is still on its way (it is let go on), or it ended first
                return
            if states != alone:
                return  # A strayed from what it did alone: B is not run, and the check fails below
            box["before A"] = all(untouched.get(table, rows) == rows for table, rows in _contents(location))
            if second is None:
                time.sleep(max(pause * 1.5, PAUSE))
                box["second"] = None
                return
            began, b = time.monotonic(), _Bounded(second)
            if b.ended.wait(WITHIN):
                box["waited"] = time.monotonic() - began
                box["second"] = b.value
            else:
                box["second"] = CheckFailed(f"Worker B did not end within {WITHIN:g} s while worker A waited at a "
                                            "lock call: each worker should decide in well under a second.")
        finally:
            locks.release()

    locks.hold(number, wake=woken, each=each)
    scheduler = threading.Thread(target=schedule, name="schedule", daemon=True)
    scheduler.start()
    try:
        first_value = _run(first)
    finally:
        woken.set()
        scheduler.join(2 * WITHIN)
    if box.get("late"):
        raise CheckFailed(f"Worker A did not reach its lock call {number} within {WITHIN:g} s, although it had "
                          "reached it at once the first time: each worker should decide in well under a second.")
    if "second" not in box:  # from the same database, the same process did something else this time
        raise CheckFailed(STRAYED)
    return Trial(f"B inside A's lock call {number}", first_value, box["second"],
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


def _state(location: str | Path) -> tuple[bool, bool]:
    """What another process (A: B and the judge are idle then) holds of the database: (a WAL read mark,
    -shm bytes 123-127; an exclusive lock, one of the -shm file's bytes 120-128 (the write lock, a
    checkpoint, a recovery, a read mark being set, the first connection setting up) or the database
    file's (rollback journal's reserved, pending, exclusive)). READING, a read mark and no exclusive
    lock, is inside a read: what A read may be stale by its write. At any other lock call B would
    find what it finds at the read's end, or after A's write, or wait for A."""
    return (_locked(f"{location}-shm", 123, 5, fcntl.F_WRLCK),
            _locked(f"{location}-shm", 120, 9, fcntl.F_RDLCK) or _locked(str(location), 0x40000000, 512, fcntl.F_RDLCK))


READING = (True, False)


def _locked(path: str, start: int, length: int, kind: int) -> bool:
    """Whether a lock of another process conflicts with a `kind` lock on those bytes (fcntl F_GETLK)."""
    try:
        if path not in _probes or os.fstat(_probes[path]).st_ino != os.stat(path).st_ino:  # a new file there
            _probes[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    found = fcntl.fcntl(_probes[path], fcntl.F_GETLK, struct.pack("hhqqi", kind, os.SEEK_SET, start, length, 0))
    return struct.unpack("hhqqi", found)[0] != fcntl.F_UNLCK

