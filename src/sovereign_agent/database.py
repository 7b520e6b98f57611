"""One SQLite file per runtime, opened the same way by every process that shares it.

WAL lets readers and one writer overlap; the busy timeout lets writers queue instead of failing;
`immediate()` takes the write lock *before* the first read, so a check and the write it guards
can never be separated by another process's commit.

Creation is crash-safe: the `.authority` marker is made durable *before* the first migration
commits, so a committed schema always has its marker, and a file without a schema is always
a brand-new authority, whatever marker a killed creation (or a deleted database) left beside it.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from sovereign_agent.migrations import MIGRATIONS

BUSY_TIMEOUT_SECONDS = 10.0

# Test-only: called with the name of each creation step once it is done ("marker-written",
# "marker-renamed", then "before-commit" and "committed" for each migration applied), so a kill
# test can stop a child process exactly there. Nothing in the runtime sets it.
_creation_step: Callable[[str], None] = lambda step: None


class AuthorityMismatch(RuntimeError):
    """The database and its `.authority` marker disagree: one of them was replaced."""


def authority_marker(database_file: str | Path) -> Path:
    """`agent.sqlite` -> `agent.authority`, beside it."""
    return Path(database_file).with_suffix(".authority")


class Database:
    """A file SQLite connection with the runtime's schema applied."""

    def __init__(self, path: str | Path, *, synchronous: str = "FULL") -> None:
        if synchronous not in {"FULL", "NORMAL"}:
            raise ValueError("synchronous must be FULL or NORMAL")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.connection = _connect(self.path, synchronous)
        try:
            self._migrate()
            self._check_authority()
        except BaseException:
            self.connection.close()
            raise

    @classmethod
    def reopen(cls, path: str | Path) -> "Database":
        """Another connection to a database that exists, set up like every other (WAL, busy
        timeout, foreign keys) but neither migrated nor checked against its marker: a second
        process joining a database mid-experiment (the grader's learner process) must see it as
        it is, a missing marker included."""
        if not Path(path).is_file():
            raise FileNotFoundError(f"no database at {path}")
        db = cls.__new__(cls)
        db.path = Path(path)
        db.connection = _connect(db.path, "FULL")
        return db

    @contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE; commit on success, roll back and re-raise on any exception."""
        if self.connection.in_transaction:
            raise RuntimeError("a transaction is already pending on this connection")
        self.connection.execute("BEGIN IMMEDIATE")
        try:
            yield self.connection
            self.connection.commit()
        except BaseException:
            if self.connection.in_transaction:  # also when COMMIT itself failed
                self.connection.rollback()
            raise

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _migrate(self) -> None:
        """Forward-only: apply each migration newer than `user_version`, one transaction each."""
        for version, statements in enumerate(MIGRATIONS, start=1):
            with self.immediate() as connection:
                if connection.execute("PRAGMA user_version").fetchone()[0] >= version:
                    continue
                for statement in statements:
                    connection.execute(statement)
                if version == 1:
                    self._create_authority(connection)
                connection.execute(f"PRAGMA user_version={version}")
                _creation_step("before-commit")
            _creation_step("committed")  # skipped (by `continue`) for a migration already applied
        current = self.connection.execute("PRAGMA user_version").fetchone()[0]
        if current > len(MIGRATIONS):
            raise RuntimeError(f"database schema {current} is newer than this runtime")

    def _create_authority(self, connection: sqlite3.Connection) -> None:
        """The epoch is born with the schema; the marker file is its companion outside SQLite.

        A brand-new schema is always a new authority: a marker already here was left by a creation
        killed before its COMMIT or by a database that is gone, so it is replaced, never adopted
        (whoever holds its epoch must fail the fence). Refusing it instead left the file unopenable.
        """
        epoch = secrets.token_hex(16)
        connection.execute("INSERT INTO assistant_control(id, epoch, paused) VALUES (1, ?, 0)", (epoch,))
        _publish(authority_marker(self.path), epoch)

    def _check_authority(self) -> None:
        epoch = self.connection.execute("SELECT epoch FROM assistant_control WHERE id=1").fetchone()[0]
        marker = authority_marker(self.path)
        try:
            found = marker.read_text()
        except OSError:
            raise AuthorityMismatch(f"authority marker {marker} is missing") from None
        if found != epoch:
            raise AuthorityMismatch(f"{marker} does not match this database's epoch")


def _connect(path: Path, synchronous: str) -> sqlite3.Connection:
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
    connection.row_factory = sqlite3.Row
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute(f"PRAGMA synchronous={synchronous}")
    connection.execute("PRAGMA foreign_keys=ON")
    connection.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_SECONDS * 1000)}")
    return connection


def _publish(marker: Path, epoch: str) -> None:
    """Replace `marker` atomically and durably, before the schema commits.

    The temporary file is fsynced before the rename (else a power cut can leave an empty marker)
    and the folder after it (else the rename itself can be lost). Its name is fixed: it is only
    written under this database's write lock, and the next creation reuses a killed one's leftover.
    """
    temporary = marker.with_name(marker.name + ".tmp")
    with open(temporary, "w", encoding="ascii") as handle:
        handle.write(epoch)
        handle.flush()
        os.fsync(handle.fileno())
    _creation_step("marker-written")
    os.replace(temporary, marker)
    folder = os.open(marker.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    _creation_step("marker-renamed")
