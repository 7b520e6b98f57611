"""A lease renewed by a heartbeat ends only when the process does, not when its work stops.

    from course.lessons.renewal import stuck_worker
    seen = stuck_worker(renew)     # renew(db, work, ttl): your heartbeat's write, from 06
    seen = stuck_worker(None)      # the chapter's way: a sized lease, never renewed

A worker claims with a short real lease (1 s) and gets stuck in a tool call that never returns
(it waits on an event only the experiment sets, at the end). With `renew`, a heartbeat thread
renews the lease every third of it for as long as the worker's thread is alive. Meanwhile a
replacement tries to claim, ten times a second, for a few seconds of real time. Then the
worker is released, tries one late transcript write, and every thread is joined (bounded).
The outcome is read from the database: who holds the work, at which generation.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.checkpoint.evidence import count_shop
from sovereign_agent.assistant_work import claim, enqueue, observe
from sovereign_agent.database import Database
from sovereign_agent.records import lease_expiry

TTL = 1.0
OWNER = "worker@shop"
JOIN_SECONDS = 5.0


@dataclass
class Observed:
    renewed: bool
    attempts: int  # claims the replacement tried
    taken_over_after: float | None  # seconds from the worker's claim to the replacement's; None: never
    lease_end_moved: float  # how far the lease end moved while the replacement tried, in seconds
    heartbeats: int
    late_write: str  # the stuck worker's write once released: "accepted" or "refused: ..."
    holder: dict[str, Any]  # from the database at the end: status, generation, owner
    threads_left: int

    def summary(self) -> str:
        lease = (f"renewed lease: {self.heartbeats} heartbeats moved its end {self.lease_end_moved:.1f} s later"
                 if self.renewed else "sized lease, never renewed")
        taken = (f"a replacement took over after {self.taken_over_after:.1f} s ({self.attempts} tries)"
                 if self.taken_over_after is not None else f"no replacement got in ({self.attempts} tries)")
        return (f"{lease}; {taken}; at the end generation {self.holder['generation']} ({self.holder['owner']}, "
                f"{self.holder['status']}) holds the work; the stuck worker's late write was {self.late_write}")


def stuck_worker(renew: Callable[[Database, Any, float], None] | None, *, seconds: float = 3.0) -> Observed:
    """Run the experiment (at most `seconds` of trying, plus bounded joins) and report it."""
    with tempfile.TemporaryDirectory(prefix="ch12-renewal-") as scratch:
        path = Path(scratch) / "agent.sqlite"
        with Database(path) as db:
            work_id = enqueue(db, "phone:renewal", "lucy", "Restock vanilla", subject="SKU-VANILLA")
            worker = _Worker(path, renew)
            worker.start()
            try:
                tries, took, moved = _replacement(db, worker, seconds)
            finally:
                worker.finish()
            holder = count_shop(path, work_id)
        return Observed(renew is not None, tries, took, moved, worker.heartbeats, worker.late_write,
                        {key: holder[key] for key in ("status", "generation", "owner")}, worker.threads_left())


def _replacement(db: Database, worker: "_Worker", seconds: float) -> tuple[int, float | None, float]:
    """Try to claim ten times a second until it works or `seconds` pass; how far did the lease end move?"""
    if not worker.claimed.wait(JOIN_SECONDS):
        raise RuntimeError("the worker did not claim within 5 s")
    first_end = lease_expiry(db.connection, worker.work.id)
    tries, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        tries += 1
        last_end = lease_expiry(db.connection, worker.work.id)
        if claim(db, "replacement", ttl=30) is not None:
            return tries, time.time() - worker.claimed_at, last_end - first_end
        time.sleep(0.1)
    return tries, None, lease_expiry(db.connection, worker.work.id) - first_end


class _Worker:
    """The stuck worker and, with `renew`, its heartbeat: each thread with its own connection."""

    def __init__(self, path: Path, renew: Callable[[Database, Any, float], None] | None) -> None:
        self.path, self.renew = path, renew
        self.claimed, self.release, self.stop = threading.Event(), threading.Event(), threading.Event()
        self.work: Any = None
        self.claimed_at = 0.0
        self.heartbeats = 0
        self.late_write = "never tried"
        self.threads = [threading.Thread(target=self._loop, name="stuck worker", daemon=True)]
        if renew is not None:
            self.threads.append(threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True))

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _loop(self) -> None:
        with Database.reopen(self.path) as db:
            self.work = claim(db, OWNER, ttl=TTL)
            self.claimed_at = time.time()
            self.claimed.set()
            self.release.wait()  # the tool call that never returns (until the experiment ends)
            try:
                observe(db, self.work, {"role": "tool", "content": "the answer, at last"})
                self.late_write = "accepted"
            except PermissionError as refusal:
                self.late_write = f"refused: {refusal}"

    def _heartbeat(self) -> None:
        """Renew every third of the lease while the worker's thread is alive: alive, not making progress."""
        self.claimed.wait(JOIN_SECONDS)
        with Database.reopen(self.path) as db:
            while self.threads[0].is_alive() and not self.stop.wait(TTL / 3):
                self.renew(db, self.work, TTL)
                self.heartbeats += 1

    def finish(self) -> None:
        """Release the stuck call, stop the heartbeat, join every thread (bounded)."""
        self.release.set()
        self.threads[0].join(JOIN_SECONDS)
        self.stop.set()
        for thread in self.threads[1:]:
            thread.join(JOIN_SECONDS)

    def threads_left(self) -> int:
        return sum(thread.is_alive() for thread in self.threads)
