"""The append-only event history: written inside the caller's transaction, never rewritten."""

from __future__ import annotations

import math
import sqlite3

import pytest

from conftest import count
from sovereign_agent.events import append_event, replay


def test_an_event_commits_with_the_change_it_describes(db):
    before = count(db, "events")
    with db.immediate() as connection:
        connection.execute("UPDATE shop_cash SET pence = 100 WHERE id=1")
        identifier = append_event(db, "shop.cash.set", {"pence": 100})
    assert count(db, "events") == before + 1
    stored = db.connection.execute("SELECT kind, payload FROM events WHERE id=?", (identifier,)).fetchone()
    assert tuple(stored) == ("shop.cash.set", '{"pence": 100}')


def test_an_event_is_rolled_back_with_its_transaction(db):
    before = count(db, "events")
    with pytest.raises(LookupError), db.immediate() as connection:
        connection.execute("UPDATE shop_cash SET pence = 100 WHERE id=1")
        append_event(db, "shop.cash.set", {"pence": 100})
        raise LookupError("the decision failed after the event was written")
    assert count(db, "events") == before
    assert db.connection.execute("SELECT pence FROM shop_cash").fetchone()[0] == 20_000


def test_append_does_not_commit_on_its_own(db, tmp_path):
    before = count(db, "events")
    with db.immediate():
        append_event(db, "probe", {})
        reader = sqlite3.connect(tmp_path / "agent.sqlite")
        assert reader.execute("SELECT count(*) FROM events").fetchone()[0] == before
        reader.close()
        assert db.connection.in_transaction


@pytest.mark.parametrize("statement", ["UPDATE events SET kind='rewritten'", "DELETE FROM events"])
def test_events_cannot_be_updated_or_deleted(db, statement):
    with db.immediate():
        append_event(db, "probe", {"n": 1})
    before = [tuple(r) for r in db.connection.execute("SELECT * FROM events ORDER BY seq")]
    with pytest.raises(sqlite3.IntegrityError, match="append-only"), db.immediate() as connection:
        connection.execute(statement)
    assert [tuple(r) for r in db.connection.execute("SELECT * FROM events ORDER BY seq")] == before


@pytest.mark.parametrize(
    "kind, payload",
    [("", {}), ("x" * 101, {}), (None, {}), ("probe", {"bad": math.nan}), ("probe", {"bad": [math.inf]})],
)
def test_bad_events_are_refused_and_leave_no_row(db, kind, payload):
    before = count(db, "events")
    with pytest.raises(ValueError), db.immediate():
        append_event(db, kind, payload)
    assert count(db, "events") == before


def test_replay_returns_events_in_commit_order(db):
    start = db.connection.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
    for n in range(5):
        with db.immediate():
            append_event(db, "probe.a" if n % 2 == 0 else "probe.b", {"n": n})
    replayed = list(replay(db, after=start))
    assert [e["payload"]["n"] for e in replayed] == [0, 1, 2, 3, 4]
    assert [e["seq"] for e in replayed] == sorted(e["seq"] for e in replayed)
    assert [e["payload"]["n"] for e in replay(db, kind_prefix="probe.a")] == [0, 2, 4]
    assert [e["payload"]["n"] for e in replay(db, kind_prefix="probe.", after=replayed[2]["seq"])] == [3, 4]
    assert len({e["id"] for e in replayed}) == 5
