"""A Hypothesis state machine over claim / observe / finish / cancel / pause / clock advance.

This is a MODEL OF THE RULES, not an operational test: the clock is injected. `claim`,
`observe` and `finish` take `now` directly, so the machine's clock is the only clock. Real lease
expiry with real processes is exercised elsewhere (the checkpoint).

A plain-Python model predicts, from the same sequence of operations, which assignment each claim
gets and whether each write is allowed; the database must agree, and:
* at most one live holder per session, ever;
* an assignment's generation strictly increases with each acquisition (and never decreases);
* every write by a holder that is not current raises PermissionError and changes nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule

from sovereign_agent.assistant_work import cancel, claim, enqueue, finish, observe
from sovereign_agent.database import Database

SESSIONS = ("lucy", "lucy", "lucy", "tom", "tom", "ann")  # one entry per assignment, in queue order
OWNERS = ("worker-a", "worker-b")  # few labels, so the same label is reused across generations
START = 1_000_000.0


def retry_delay(generation: int) -> float:
    return min(60, 2 ** min(generation, 6))


class OwnershipRules(RuleBasedStateMachine):
    claims = Bundle("claims")

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.TemporaryDirectory(prefix="ownership-model-")
        self.now = START
        # NORMAL: this machine checks rules, not durability; it keeps 1,500 steps fast.
        self.db = Database(Path(self.directory.name) / "model.sqlite", synchronous="NORMAL")
        self.paused = False
        self.items: list[str] = []
        self.model: dict[str, dict] = {}
        for index, session in enumerate(SESSIONS):
            identifier = enqueue(self.db, f"origin-{index}", session, f"prompt {index}", now=START)
            self.items.append(identifier)
            self.model[identifier] = {
                "session": session,
                "status": "READY",
                "owner": None,
                "generation": 0,
                "expires": None,
                "available_after": 0.0,
            }
        self.transcript = 0

    def teardown(self) -> None:
        self.db.close()
        self.directory.cleanup()

    # --- the model ------------------------------------------------------------------------------

    def live(self, item: dict) -> bool:
        return item["status"] == "RUNNING" and item["expires"] > self.now

    def expected_claim(self) -> str | None:
        if self.paused:
            return None
        for identifier in self.items:  # queue order: created, then rowid
            item = self.model[identifier]
            eligible = item["status"] == "READY" or (item["status"] == "RUNNING" and item["expires"] <= self.now)
            blocked = any(self.live(other) for other in self.model.values() if other["session"] == item["session"])
            if eligible and item["available_after"] <= self.now and not blocked:
                return identifier
        return None

    def is_current(self, held) -> bool:
        item = self.model[held.id]
        return (
            not self.paused and self.live(item) and (item["owner"], item["generation"]) == (held.owner, held.generation)
        )

    def snapshot(self) -> dict[str, list[tuple]]:
        return {
            table: [tuple(r) for r in self.db.connection.execute(f"SELECT * FROM {table} ORDER BY rowid")]
            for table in ("assistant_work", "assistant_transcript", "assistant_control", "events")
        }

    # --- rules ----------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([0.5, 1, 2, 5, 10, 29.5, 30, 64]))
    def advance(self, seconds):
        self.now += seconds

    @rule(paused=st.booleans())
    def pause(self, paused):
        self.db.connection.execute("UPDATE assistant_control SET paused=?", (int(paused),))
        self.paused = paused

    @rule(target=claims, owner=st.sampled_from(OWNERS), ttl=st.sampled_from([5, 10, 30]))
    def take(self, owner, ttl):
        expected = self.expected_claim()
        before = self.snapshot()
        held = claim(self.db, owner, now=self.now, ttl=ttl)
        if expected is None:
            assert held is None
            assert self.snapshot() == before
            return multiple()
        assert held is not None and held.id == expected
        item = self.model[expected]
        assert held.generation == item["generation"] + 1  # strictly increases per acquisition
        assert (held.owner, held.session) == (owner, item["session"])
        item.update(status="RUNNING", owner=owner, generation=held.generation, expires=self.now + ttl)
        return held

    @rule(held=claims, text=st.text(alphabet="abc xyz\u00e9", max_size=20))
    def write_observation(self, held, text):
        if self.is_current(held):
            observe(self.db, held, {"role": "assistant", "content": text}, now=self.now)
            self.transcript += 1
            last = self.db.connection.execute(
                "SELECT work_id, generation FROM assistant_transcript ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            assert tuple(last) == (held.id, held.generation)
        else:
            before = self.snapshot()
            with pytest.raises(PermissionError):
                observe(self.db, held, {"role": "assistant", "content": text}, now=self.now)
            assert self.snapshot() == before

    @rule(held=claims, status=st.sampled_from(["DONE", "BLOCKED", "CANCELLED"]))
    def complete(self, held, status):
        if self.is_current(held):
            finish(self.db, held, status, f"{status} by {held.owner}", now=self.now)
            delay = retry_delay(held.generation) if status == "BLOCKED" else 0
            self.model[held.id].update(status=status, expires=None, available_after=self.now + delay)
            stored = self.db.connection.execute(
                "SELECT status, available_after FROM assistant_work WHERE id=?", (held.id,)
            ).fetchone()
            assert tuple(stored) == (status, self.now + delay)
        else:
            before = self.snapshot()
            with pytest.raises(PermissionError):
                finish(self.db, held, status, "stale", now=self.now)
            assert self.snapshot() == before

    @rule(index=st.integers(0, len(SESSIONS) - 1))
    def operator_cancels(self, index):
        identifier = self.items[index]
        item = self.model[identifier]
        expected = item["status"] in {"READY", "RUNNING", "BLOCKED"}
        assert cancel(self.db, identifier) is expected
        if expected:
            item.update(status="CANCELLED", generation=item["generation"] + 1, expires=None)

    # --- invariants -----------------------------------------------------------------------------

    @invariant()
    def database_agrees_with_the_model(self):
        rows = {
            r["id"]: r
            for r in self.db.connection.execute(
                "SELECT id, status, owner, generation, expires, available_after FROM assistant_work"
            )
        }
        for identifier, item in self.model.items():
            found = rows[identifier]
            assert (found["status"], found["owner"], found["generation"], found["expires"]) == (
                item["status"],
                item["owner"],
                item["generation"],
                item["expires"],
            )
        assert self.db.connection.execute("SELECT count(*) FROM assistant_transcript").fetchone()[0] == self.transcript

    @invariant()
    def at_most_one_live_holder_per_session(self):
        crowded = self.db.connection.execute(
            "SELECT session, count(*) FROM assistant_work WHERE status='RUNNING' AND expires>? "
            "GROUP BY session HAVING count(*) > 1",
            (self.now,),
        ).fetchall()
        assert crowded == []

    @invariant()
    def transcript_rows_belong_to_generations_that_were_current(self):
        stale = self.db.connection.execute(
            "SELECT count(*) FROM assistant_transcript t JOIN assistant_work w ON w.id = t.work_id "
            "WHERE t.generation > w.generation OR t.generation < 1"
        ).fetchone()[0]
        assert stale == 0


OwnershipRules.TestCase.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
TestOwnershipRules = OwnershipRules.TestCase
