"""Fencing at the resource: the supplier keeps the highest generation it has seen per work item.

The shop's fence (assert_current) guards the shop's own database. A holder that was admitted
there and then frozen before its request left can still reach the supplier after a replacement
took over. Kleppmann's *fencing token* (Chubby's *sequencer*) closes that window at the resource:
every order carries the sender's work id and generation (`Fencing-Work`, `Fencing-Generation`),
and a fenced supplier refuses a generation lower than the highest it has already seen for that
work item.

The rule is a function `rule(ledger, work_id, generation) -> bool` over the supplier's ledger
(a sqlite3 connection in autocommit mode, table `fence(work_id, generation)`): admit or refuse,
atomically, recording the highest generation seen. `admit_generation` is the course's own.

A supplier process runs the rule in one of two ways (`--fence`): `reference` (this module's rule,
in the supplier process), or `relay:PATH`: for each fenced order it asks whoever started it,
over a Unix socket, and that process calls its own rule (`FenceRelay`). A learner's rule thus
runs where the learner's code runs (their kernel; when graded, their learner process, reached
through the grader's proxy), never in the supplier process.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import tempfile
import threading
from contextlib import closing
from pathlib import Path
from typing import Any, Callable

Rule = Callable[[sqlite3.Connection, str, int], bool]
RELAY = "relay:"
RELAY_TIMEOUT_SECONDS = 30.0


def admit_generation(ledger: sqlite3.Connection, work_id: str, generation: int) -> bool:
    """Admit `generation` for `work_id` unless a higher one was seen; record the highest.

    One statement, so the check and the record are one atomic step: the upsert only writes when
    the generation is at least the recorded one, and the number of rows it changed is the answer.
    """
    changed = ledger.execute(
        "INSERT INTO fence (work_id, generation) VALUES (?, ?) ON CONFLICT (work_id) DO UPDATE "
        "SET generation = excluded.generation WHERE excluded.generation >= fence.generation",
        (work_id, generation),
    ).rowcount
    if ledger.in_transaction:  # a caller's connection outside autocommit: this step still ends here
        ledger.commit()
    return changed == 1


def open_ledger(path: str | os.PathLike[str]) -> Any:
    """A connection to the ledger as a rule gets it: the runtime's settings (WAL, busy timeout,
    rows by name, autocommit), the same in a notebook, the supplier process and a grader's learner
    process (which reopens a connection it is passed by its path in the same way)."""
    from sovereign_agent.database import Database

    return Database.reopen(path)


def apply(rule: Rule, ledger: str | os.PathLike[str], work_id: str, generation: int) -> bool:
    """Run `rule` on a fresh connection to `ledger`; it must answer True or False."""
    db = open_ledger(ledger)
    try:
        admitted = rule(db.connection, work_id, generation)
    finally:
        db.close()
    if not isinstance(admitted, bool):
        raise TypeError(f"the fence rule returned {type(admitted).__name__} {admitted!r}, not True or False")
    return admitted


class FenceRelay:
    """Answers a supplier process's fence questions by calling `rule` in this process.

    A Unix socket in a private temporary folder (short enough for AF_UNIX); one thread per
    question, so two questions may be in the rule at once, as two supplier threads would be.
    """

    def __init__(self, rule: Rule) -> None:
        if not callable(rule):
            raise TypeError(f"a fence rule must be a function, not {type(rule).__name__}")
        self.rule = rule
        short = "/tmp" if os.path.isdir("/tmp") else None  # AF_UNIX paths are short; TMPDIR may be long
        self.folder = Path(tempfile.mkdtemp(prefix="fence-", dir=short))
        self.path = self.folder / "relay.sock"
        self.errors: list[str] = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(16)
        self._thread = threading.Thread(target=self._serve, name="fence-relay", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"{RELAY}{self.path}"

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._answer, args=(connection,), name="fence-question", daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with closing(connection):
            try:
                question = json.loads(_read_line(connection))
                answer: dict[str, Any] = {"admitted": apply(self.rule, question["ledger"], str(question["work"]),
                                                            int(question["generation"]))}
            except Exception as error:  # told to the supplier, which answers 503 (outcome unknown)
                answer = {"error": f"{type(error).__name__}: {error}"[:500]}
                self.errors.append(answer["error"])
            try:
                connection.sendall((json.dumps(answer) + "\n").encode())
            except OSError:
                pass

    def close(self) -> None:
        self._server.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def ask(relay: str, ledger: str | os.PathLike[str], work_id: str, generation: int) -> bool:
    """The supplier's side of the relay: one question, one answer (raises if there is none)."""
    path = relay[len(RELAY):] if relay.startswith(RELAY) else relay
    with closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as connection:
        connection.settimeout(RELAY_TIMEOUT_SECONDS)
        connection.connect(path)
        question = {"ledger": str(ledger), "work": work_id, "generation": generation}
        connection.sendall((json.dumps(question) + "\n").encode())
        answer = json.loads(_read_line(connection))
    if "error" in answer:
        raise RuntimeError(f"the fence rule failed: {answer['error']}")
    return answer["admitted"] is True


def _read_line(connection: socket.socket, limit: int = 1 << 16) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > limit:
            raise ValueError("a relay message over its limit")
    return data


def chooser(spec: str | None, ledger: str | os.PathLike[str]) -> Callable[[str, int], bool] | None:
    """What `--fence` names, as the supplier calls it: (work id, generation) -> admitted."""
    if spec is None:
        return None
    if spec == "reference":
        return lambda work_id, generation: apply(admit_generation, ledger, work_id, generation)
    if spec.startswith(RELAY):
        return lambda work_id, generation: ask(spec, ledger, work_id, generation)
    raise ValueError(f"--fence must be 'reference' or 'relay:PATH', not {spec!r}")
