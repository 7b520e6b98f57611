"""Every schedule of two holders' steps, run one after another on a real SQLite file.

    from course.lessons.interleavings import explore_schedules
    found = explore_schedules(ownership)      # claim, observe, finish: yours or the reference
    found.schedules, found.seconds, found.violating, found.first

04 says that no number of runs proves every interleaving safe. For a small case, enumeration
does: holders A and B each claim, write a transcript row and finish; the lease expires once;
the operator cancels once. Every order of those eight steps (respecting each holder's own
order) is one schedule, run in a fresh copy of one template database, in one thread, in order.
Nothing sleeps: lease expiry is *injected*: `expire` moves the schedule's clock past every
lease granted so far (InjectedClock); 05 and 06's crash matrix wait for real expiry instead.
Each step's verdict is judged against the row read just before it, so the truth comes from
the database, not from a second model of the rules.

Both holders use the same owner label, as a restarted process does: then the generation is the
only difference between an old claim and the row, and a fence that ignores it is caught.
"""

from __future__ import annotations

import inspect
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course.checkpoint.evidence import count_shop
from course.lessons.checks import rebound
from sovereign_agent.assistant_work import cancel, enqueue
from sovereign_agent.database import Database, authority_marker
from sovereign_agent.records import holding

PROGRAMS: dict[str, tuple[str, ...]] = {
    "A": ("claim", "write", "finish"),
    "B": ("claim", "write", "finish"),
    "clock": ("expire",),
    "operator": ("cancel",),
}
HOLDERS = ("A", "B")
OWNER = "worker@shop"  # both holders: a restarted process keeps its label
TTL = 30.0  # injected seconds; `expire` moves the clock past every lease granted so far
SAID = {"claim": "claims", "write": "writes", "finish": "finishes", "expire": "lease expires",
        "cancel": "operator cancels"}


@dataclass(frozen=True)
class Step:
    actor: str  # "A", "B", "clock" or "operator"
    action: str  # "claim", "write", "finish", "expire" or "cancel"

    def __str__(self) -> str:
        return SAID[self.action] if self.actor not in HOLDERS else f"{self.actor} {SAID[self.action]}"


@dataclass
class Outcome:
    """What one step did. For a holder's write or finish: `current`, whether the row read just
    before it said this claim was the live holding; `accepted`, whether the call returned.
    Both stay None for other steps, and when the holder has no claim (nothing to do)."""

    step: Step
    text: str
    current: bool | None = None
    accepted: bool | None = None
    why: str = ""  # why the holder was not current, read from the row
    generation: int | None = None  # the holder's claim, if it has one

    @property
    def wrong(self) -> bool:
        """A write the fence decided against the row: accepted though stale, or refused though current."""
        return self.current is not None and self.accepted is not None and self.current != self.accepted


@dataclass
class Run:
    schedule: tuple[Step, ...]
    outcomes: list[Outcome] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def marked(self) -> int | None:
        """The index of the first step the fence got wrong (the violating write), if any."""
        return next((i for i, outcome in enumerate(self.outcomes) if outcome.wrong), None)

    def line(self) -> str:
        """The schedule in one line, the violating step in capitals."""
        return " · ".join(str(o.step).upper() if i == self.marked else str(o.step)
                          for i, o in enumerate(self.outcomes))


@dataclass
class Exploration:
    schedules: int
    seconds: float
    violating: int
    by_invariant: dict[str, int]
    first: Run | None


def schedule_count(programs: Mapping[str, tuple[str, ...]] = PROGRAMS) -> int:
    """The multinomial coefficient: (sum of lengths)! / product of each length!."""
    count = math.factorial(sum(len(steps) for steps in programs.values()))
    for steps in programs.values():
        count //= math.factorial(len(steps))
    return count


def schedules(programs: Mapping[str, tuple[str, ...]] = PROGRAMS) -> Iterator[tuple[Step, ...]]:
    """Every interleaving that keeps each actor's own order, in a fixed (deterministic) order."""

    def extend(prefix: tuple[Step, ...], done: dict[str, int]) -> Iterator[tuple[Step, ...]]:
        moved = False
        for actor, steps in programs.items():
            if done[actor] < len(steps):
                moved = True
                yield from extend(prefix + (Step(actor, steps[done[actor]]),), {**done, actor: done[actor] + 1})
        if not moved:
            yield prefix

    yield from extend((), {actor: 0 for actor in programs})


def explore_schedules(ownership: Any, programs: Mapping[str, tuple[str, ...]] = PROGRAMS, *,
                      namespaces: Iterable[dict[str, Any]] = (), folder: str | Path | None = None) -> Exploration:
    """Run every schedule against `ownership` (its claim, observe and finish) and check each.

    `namespaces`: where the functions read the wall clock themselves (your notebooks' modules):
    there `time` and `_clock` are the schedule's injected clock while it runs (see InjectedClock).
    """
    started, namespaces = time.perf_counter(), list(namespaces)
    count, violating, by_invariant, first = 0, 0, {}, None
    with tempfile.TemporaryDirectory(prefix="ch12-schedules-", dir=folder or _memory_backed()) as scratch:
        template, work_id = _template(Path(scratch))
        for schedule in schedules(programs):
            clock = InjectedClock()
            with _clock_in(namespaces, clock):
                run = run_schedule(ownership, schedule, template, work_id, Path(scratch) / f"s{count}", clock)
            count += 1
            if run.violations:
                violating += 1
                first = first or run
                for sentence in run.violations:
                    name = sentence.split(":", 1)[0]
                    by_invariant[name] = by_invariant.get(name, 0) + 1
    return Exploration(count, time.perf_counter() - started, violating, by_invariant, first)


class InjectedClock:
    """The schedule's wall clock: it starts at the real time and moves only at `expire`.

    `claim` and `finish` take it as `now=`. `observe` has no `now` (a worker calls it with a
    message only), so it reads the wall clock itself; in the namespaces handed to
    explore_schedules this object stands in for the `time` module (`time()` is the injected
    clock, everything else is the real module's) and `_clock` reads it too.
    """

    def __init__(self) -> None:
        self.start = self.now = time.time()

    def time(self) -> float:
        return self.now

    def clock(self, now: float | None = None) -> float:
        return float(self.now if now is None else now)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@contextmanager
def _clock_in(namespaces: list[dict[str, Any]], clock: InjectedClock) -> Iterator[None]:
    """While a schedule runs, `time` and `_clock` (where a namespace has them) are `clock`; restored
    after, however the schedule ends."""
    with ExitStack() as stack:
        for namespace in namespaces:
            for name, stand_in in (("time", clock), ("_clock", clock.clock)):
                if name in namespace:
                    stack.enter_context(rebound(namespace, name, lambda _, stand_in=stand_in: stand_in))
        yield


def _memory_backed() -> str | None:
    """/dev/shm where there is one: still real SQLite files, but a commit's fsync costs nothing there,
    and this experiment is about order, not durability (3 s instead of 10 for 1,120 schedules)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _template(scratch: Path) -> tuple[Path, str]:
    """One database with one queued assignment, copied for every schedule (cheaper than migrating)."""
    path = scratch / "template.sqlite"
    with Database(path) as db:
        work_id = enqueue(db, "phone:schedules", "lucy", "Restock vanilla", subject="SKU-VANILLA", now=0.0)
    return path, work_id


def run_schedule(ownership: Any, schedule: tuple[Step, ...], template: Path, work_id: str, folder: Path,
                 clock: InjectedClock) -> Run:
    """One schedule on its own copy of the template: each holder and the operator on their own
    connection, as separate processes would be. Every connection is closed and the copy removed."""
    folder.mkdir()
    path = folder / "agent.sqlite"
    shutil.copyfile(template, path)
    shutil.copyfile(authority_marker(template), authority_marker(path))
    connections = {actor: Database.reopen(path) for actor in (*HOLDERS, "operator")}
    try:
        run = Run(schedule)
        world = {"clock": clock, "claims": {}, "work": work_id}
        for step in schedule:
            run.outcomes.append(_take(ownership, step, connections, world))
        run.violations = check(run, count_shop(path, work_id))
        return run
    finally:
        for db in connections.values():
            db.close()
        shutil.rmtree(folder)


def _take(ownership: Any, step: Step, connections: dict[str, Database], world: dict[str, Any]) -> Outcome:
    """Take one step; a holder's write or finish is first judged against the row as it is now."""
    clock, claims = world["clock"], world["claims"]
    if step.action == "expire":
        clock.now += TTL + 1
        return Outcome(step, f"clock +{TTL + 1:.0f} s")
    if step.action == "cancel":
        return Outcome(step, "cancelled" if cancel(connections["operator"], world["work"]) else "already finished")
    db = connections[step.actor]
    if step.action == "claim":
        got = claims[step.actor] = ownership.claim(db, OWNER, now=clock.now, ttl=TTL)
        return Outcome(step, f"generation {got.generation}" if got else "no work (None)",
                       generation=got.generation if got else None)
    work = claims.get(step.actor)
    if work is None:
        return Outcome(step, "skipped (no claim)")
    why = _not_current(db, work, clock)
    try:
        if step.action == "write":
            message = {"holder": step.actor, "generation": work.generation}
            if "now" in inspect.signature(ownership.observe).parameters:
                ownership.observe(db, work, message, now=clock.now)
            else:
                ownership.observe(db, work, message)
        else:
            ownership.finish(db, work, "DONE", f"{step.actor}'s result", now=clock.now)
        accepted = True
    except PermissionError:
        accepted = False
    return Outcome(step, "accepted" if accepted else "refused", not why, accepted, why, work.generation)


def _not_current(db: Database, work: Any, clock: InjectedClock) -> str:
    """The truth the fence must match, read from the row: "" when it is RUNNING at this claim's
    generation and label with its lease still running now, else what differs."""
    row = holding(db.connection, work.id)
    if row["generation"] != work.generation:
        return f"the row was at generation {row['generation']}"
    if row["status"] != "RUNNING":
        return f"the row was {row['status']}"
    if row["owner"] != work.owner:
        return f"the row named {row['owner']}"
    if row["expires"] <= clock.now:
        return f"its lease had ended at {row['expires'] - clock.start:+.0f} s (now {clock.now - clock.start:+.0f} s)"
    return ""


def check(run: Run, shop: dict[str, Any]) -> list[str]:
    """The invariants, from the database after the schedule (and what each call returned). Each
    sentence starts with the invariant's short name."""
    return _transcript(run, shop["transcript"]) + _completion(run, shop["result"])


def _transcript(run: Run, rows_by_generation: dict[str, int]) -> list[str]:
    """No row from a holder that was not current; no row from a refused write; no current holder refused."""
    broken = []
    for write in (o for o in run.outcomes if o.accepted is not None):
        actor = write.step.actor
        rows = rows_by_generation.get(str(write.generation), 0) if write.step.action == "write" else 0
        if rows and not write.current:
            broken.append(f"stale write: {actor} (generation {write.generation}) has a transcript row, written "
                          f"when it was not the current holder: {write.why}")
        if rows and not write.accepted:
            broken.append(f"refused write left a row: {actor}'s write was refused, yet its row is there")
        if write.current and not write.accepted:
            broken.append(f"current holder refused: {actor} held the live lease and its {write.step.action} "
                          "was refused")
    return broken


def _completion(run: Run, result: str | None) -> list[str]:
    """At most one holder believes it finished; the stored result is the last current finisher's."""
    broken = []
    finishes = [o for o in run.outcomes if o.step.action == "finish" and o.accepted is not None]
    believers = [o.step.actor for o in finishes if o.accepted]
    if len(believers) > 1:
        broken.append(f"two finished: {' and '.join(believers)} both believe they finished")
    rightful = [o for o in finishes if o.current]
    wrongful = [o for o in finishes if o.accepted and not o.current]
    expected = f"{rightful[-1].step.actor}'s result" if rightful else None
    if expected is not None and result != expected:
        broken.append(f"wrong result: the work says {result!r}; the last holder to finish while current "
                      f"was {rightful[-1].step.actor}")
    if expected is None and result in {f"{actor}'s result" for actor in HOLDERS}:
        broken.append(f"wrong result: the work says {result!r}, but no holder finished while current"
                      + (f": {wrongful[0].step.actor} finished when {wrongful[0].why}" if wrongful else ""))
    return broken
