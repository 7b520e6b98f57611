"""The database every process opens: pragmas, transactions, migrations and the authority marker."""

from __future__ import annotations

import re
import sqlite3

import pytest

from conftest import count, fence_verdicts
from reference_organizations.store.agent import seed_lucy
from sovereign_agent.database import AuthorityMismatch, Database, authority_marker
from sovereign_agent.migrations import MIGRATIONS


def test_connection_settings(tmp_path):
    db = Database(tmp_path / "defaults.sqlite")
    seed_lucy(db)
    connection = db.connection
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert connection.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
    assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL by default
    found = connection.execute("SELECT sku, unit_pence FROM shop_items WHERE sku='SKU-VANILLA'").fetchone()
    assert isinstance(found, sqlite3.Row)
    assert found["unit_pence"] == found[1] == 250
    db.close()


def test_synchronous_is_a_choice_of_two(tmp_path):
    with Database(tmp_path / "normal.sqlite", synchronous="NORMAL") as normal:
        assert normal.connection.execute("PRAGMA synchronous").fetchone()[0] == 1
    with pytest.raises(ValueError):
        Database(tmp_path / "off.sqlite", synchronous="OFF")
    assert not (tmp_path / "off.sqlite").exists()


def test_foreign_keys_are_enforced(db):
    with pytest.raises(sqlite3.IntegrityError), db.immediate() as connection:
        connection.execute("INSERT INTO assistant_transcript(work_id, generation, message) VALUES ('nope', 1, '{}')")
    assert count(db, "assistant_transcript") == 0


def test_immediate_commits_on_normal_exit(db, tmp_path):
    with db.immediate() as connection:
        assert connection.in_transaction
        connection.execute("UPDATE shop_cash SET pence = 123 WHERE id=1")
    assert not db.connection.in_transaction
    with Database(tmp_path / "agent.sqlite") as other:
        assert other.connection.execute("SELECT pence FROM shop_cash").fetchone()[0] == 123


def test_immediate_rolls_back_and_reraises(db):
    class Boom(Exception):
        pass

    with pytest.raises(Boom), db.immediate() as connection:
        connection.execute("UPDATE shop_cash SET pence = 1 WHERE id=1")
        raise Boom
    assert not db.connection.in_transaction
    assert db.connection.execute("SELECT pence FROM shop_cash").fetchone()[0] == 20_000


def test_immediate_takes_the_write_lock_before_reading(db, tmp_path):
    with Database(tmp_path / "agent.sqlite") as other:
        other.connection.execute("PRAGMA busy_timeout=50")
        with db.immediate(), pytest.raises(sqlite3.OperationalError, match="locked"):
            other.connection.execute("BEGIN IMMEDIATE")
        assert not other.connection.in_transaction


def test_immediate_refuses_inside_a_pending_transaction_and_changes_nothing(db, tmp_path):
    db.connection.execute("BEGIN")
    db.connection.execute("UPDATE shop_cash SET pence = 5 WHERE id=1")
    with pytest.raises(RuntimeError, match="already pending"), db.immediate() as connection:
        connection.execute("UPDATE shop_cash SET pence = 6 WHERE id=1")
    # The caller's transaction is still open and uncommitted: another connection sees nothing.
    assert db.connection.in_transaction
    reader = sqlite3.connect(tmp_path / "agent.sqlite")  # a plain reader: WAL lets it see the last commit
    assert reader.execute("SELECT pence FROM shop_cash").fetchone()[0] == 20_000
    reader.close()
    db.connection.rollback()
    assert db.connection.execute("SELECT pence FROM shop_cash").fetchone()[0] == 20_000


def schema(database: Database) -> list[tuple]:
    return [tuple(r) for r in database.connection.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name")]


def test_migrations_are_applied_once_and_reopening_changes_nothing(tmp_path):
    path = tmp_path / "agent.sqlite"
    with Database(path) as first:
        version = first.connection.execute("PRAGMA user_version").fetchone()[0]
        before = schema(first)
        epoch = first.connection.execute("SELECT epoch FROM assistant_control").fetchone()[0]
    assert version == len(MIGRATIONS) >= 1
    for _ in range(2):
        with Database(path) as again:
            assert again.connection.execute("PRAGMA user_version").fetchone()[0] == version
            assert schema(again) == before
            assert again.connection.execute("SELECT count(*), epoch FROM assistant_control").fetchone()[:] == (1, epoch)
    assert authority_marker(path).read_text() == epoch


def test_data_survives_reopening(tmp_path):
    path = tmp_path / "agent.sqlite"
    with Database(path) as first, first.immediate() as connection:
        connection.execute("INSERT INTO shop_cash(id, pence) VALUES (1, 42)")
    with Database(path) as again:
        assert again.connection.execute("SELECT pence FROM shop_cash").fetchone()[0] == 42


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "agent.sqlite"
    Database(path).close()
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    raw.close()
    with pytest.raises(RuntimeError, match="newer"):
        Database(path)


def test_authority_marker_is_born_with_the_schema(tmp_path):
    path = tmp_path / "agent.sqlite"
    marker = tmp_path / "agent.authority"
    assert authority_marker(path) == marker
    with Database(path) as database:
        epoch = database.connection.execute("SELECT epoch FROM assistant_control WHERE id=1").fetchone()[0]
    content = marker.read_text()
    assert content == epoch
    assert re.fullmatch(r"[0-9a-f]{32}", content)  # no newline, no padding
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    with Database(tmp_path / "second.sqlite") as second:
        other = second.connection.execute("SELECT epoch FROM assistant_control").fetchone()[0]
    assert other != epoch


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda marker: marker.write_text("0" * 32), id="different"),
        pytest.param(lambda marker: marker.unlink(), id="missing"),
        pytest.param(lambda marker: marker.write_text(marker.read_text() + "\n"), id="trailing-newline"),
    ],
)
def test_a_database_whose_marker_disagrees_refuses_to_open(tmp_path, tamper):
    path = tmp_path / "agent.sqlite"
    Database(path).close()
    marker = authority_marker(path)
    tamper(marker)
    left = marker.read_text() if marker.exists() else None
    with pytest.raises(AuthorityMismatch):
        Database(path)
    # Refusing did not "repair" the marker or the database.
    assert (marker.read_text() if marker.exists() else None) == left
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT count(*) FROM assistant_control").fetchone()[0] == 1
    raw.close()


def epoch_of(database: Database) -> str:
    return database.connection.execute("SELECT epoch FROM assistant_control WHERE id=1").fetchone()[0]


@pytest.mark.parametrize("left", ["no database file", "a WAL file with no schema"])
def test_a_file_without_a_schema_is_a_new_authority_whatever_marker_is_left(tmp_path, left):
    """The state a kill between the marker's rename and the COMMIT leaves (or a deleted database)."""
    path = tmp_path / "agent.sqlite"
    if left == "a WAL file with no schema":
        raw = sqlite3.connect(path)
        assert raw.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        assert raw.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
        raw.close()
    foreign = "a" * 32
    authority_marker(path).write_text(foreign)
    with Database(path) as database:
        epoch = epoch_of(database)
        verdicts = fence_verdicts(database, {epoch, foreign})
    assert epoch != foreign and authority_marker(path).read_text() == epoch
    assert verdicts == {epoch: True, foreign: False}  # a holder of the old epoch is fenced out
    assert sorted(p.name for p in tmp_path.iterdir() if "authority" in p.name) == ["agent.authority"]


def test_a_database_with_a_schema_and_a_foreign_marker_is_still_refused(tmp_path):
    path = tmp_path / "agent.sqlite"
    with Database(path) as database:
        epoch = epoch_of(database)
    authority_marker(path).write_text("a" * 32)  # the replaced-file case the marker exists for
    with pytest.raises(AuthorityMismatch):
        Database(path)
    assert authority_marker(path).read_text() == "a" * 32
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT epoch FROM assistant_control").fetchall() == [(epoch,)]
    raw.close()


def test_assignment_fields_are_immutable_and_generation_never_decreases(db):
    with db.immediate() as connection:
        connection.execute(
            "INSERT INTO assistant_work(id, origin, session, prompt, created, generation) "
            "VALUES ('w1', 'o1', 's1', 'p1', 0, 3)"
        )
    for column in ("origin", "session", "prompt", "subject", "role"):
        with pytest.raises(sqlite3.IntegrityError, match="immutable"), db.immediate() as connection:
            connection.execute(f"UPDATE assistant_work SET {column}='changed' WHERE id='w1'")
    with pytest.raises(sqlite3.IntegrityError, match="never decreases"), db.immediate() as connection:
        connection.execute("UPDATE assistant_work SET generation=2 WHERE id='w1'")
    found = db.connection.execute(
        "SELECT origin, session, prompt, subject, role, generation FROM assistant_work"
    ).fetchone()
    assert tuple(found) == ("o1", "s1", "p1", "", "shop", 3)


def test_the_account_ceiling_is_a_constraint(db):
    with pytest.raises(sqlite3.IntegrityError), db.immediate() as connection:
        connection.execute("UPDATE assistant_spending SET reserved_pence = limit_pence + 1")
    assert tuple(db.connection.execute("SELECT reserved_pence, spent_pence FROM assistant_spending").fetchone()) == (
        0,
        0,
    )
