"""Start a supplier process from a notebook, a test or the checkpoint; it dies with its parent."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from reference_organizations.store.supplier.client import SupplierClient
from reference_organizations.store.supplier.fence import FenceRelay
from reference_organizations.store.supplier.protocol import (
    BUSY_TIMEOUT_SECONDS,
    DEFAULT_IDENTITY,
)
from reference_organizations.children import spawn, stop, wait_for_file


@dataclass
class SupplierProcess:
    """A running supplier started by `start_supplier`; stop it (or use `with`) when done."""

    process: subprocess.Popen[bytes]
    ledger: Path
    endpoint: str
    identity: str
    socket_endpoint: str | None = None  # `unix:PATH`, when started with a socket
    relay: Any = None  # the FenceRelay answering for a rule of this process (fence.py), if any

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self, timeout: float = 3.0) -> SupplierClient:
        return SupplierClient(self.endpoint, identity=self.identity, timeout=timeout)

    def orders(self) -> list[dict[str, Any]]:
        """The ledger's orders, read with plain sqlite3 (proposal and receipt decoded)."""
        rows = self._query("SELECT operation, proposal, receipt FROM orders ORDER BY rowid")
        return [
            {"operation": operation, "proposal": json.loads(proposal), "receipt": json.loads(receipt)}
            for operation, proposal, receipt in rows
        ]

    def requests(self, method: str | None = None) -> list[dict[str, Any]]:
        """Every request the supplier answered or dropped, oldest first; optionally one method."""
        sql = "SELECT seq, method, operation, status, at FROM requests WHERE ?1 IS NULL OR method = ?1"
        rows = self._query(sql + " ORDER BY seq", (method,))
        return [dict(zip(("seq", "method", "operation", "status", "at"), row)) for row in rows]

    def tokens(self) -> list[dict[str, Any]]:
        """Every order that carried a fencing token, oldest first, and whether it was admitted."""
        return ledger_tokens(self.ledger)

    def stale_tokens(self) -> list[dict[str, Any]]:
        return stale_tokens(self.tokens())

    def stop(self) -> int:
        try:
            return stop(self.process)
        finally:
            if self.relay is not None:
                self.relay.close()

    def _query(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.ledger, timeout=BUSY_TIMEOUT_SECONDS)) as db:
            return db.execute(sql, parameters).fetchall()

    def __enter__(self) -> SupplierProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def ledger_tokens(ledger: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every order that carried a fencing token, oldest first, and whether it was admitted (none in a
    ledger older than the fence)."""
    with closing(sqlite3.connect(ledger, timeout=BUSY_TIMEOUT_SECONDS)) as db:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name='tokens'").fetchone() is None:
            return []
        rows = db.execute("SELECT seq, operation, work_id, generation, admitted, at FROM tokens ORDER BY seq").fetchall()
    return [dict(zip(("seq", "operation", "work_id", "generation", "admitted", "at"), row)) for row in rows]


def stale_tokens(tokens: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tokens lower than one the supplier had already admitted for the same work item (a holder
    replaced before its order arrived); each says whether the supplier admitted it anyway."""
    return [token for token in tokens if any(
        earlier["seq"] < token["seq"] and earlier["admitted"] and earlier["work_id"] == token["work_id"]
        and earlier["generation"] > token["generation"] for earlier in tokens)]


def start_supplier(
    ledger: str | os.PathLike[str],
    *,
    ready: str | os.PathLike[str] | None = None,
    identity: str = DEFAULT_IDENTITY,
    drop_first_response: bool = False,
    hold_seconds: float = 0,
    committed_file: str | os.PathLike[str] | None = None,
    reject: bool = False,
    answer_first_as: str | None = None,
    socket: str | os.PathLike[str] | None = None,
    timeout: float = 15,
    fence: str | Callable[..., bool] | None = None,
) -> SupplierProcess:
    """Start a supplier process that dies with this one; return once it is listening.

    Its stderr goes to `<ledger>.log` (shown if it fails to start); the ready file defaults
    to `<ledger>.ready`. With `socket`, it also answers on that Unix socket (`socket_endpoint`).
    With `fence`, it refuses orders whose fencing token is older than one it has seen for their
    work item: "reference" (the course's rule, run by the supplier), or a function
    `rule(ledger, work_id, generation) -> bool`, run in THIS process for each fenced order.
    """
    ledger = Path(ledger).resolve()
    ledger.parent.mkdir(parents=True, exist_ok=True)
    ready = Path(ready) if ready is not None else ledger.with_suffix(".ready")
    ready.unlink(missing_ok=True)  # a stale ready file would announce a process that is gone
    argv = [  # -P: the working folder stays off sys.path; no file there stands in for the supplier's code
        sys.executable, "-P", "-m", "reference_organizations.store.supplier",
        "--database", ledger, "--port", "0", "--ready", ready,
        "--identity", identity, "--hold-seconds", str(hold_seconds),
        "--parent-pid", str(os.getpid()),
    ]
    argv += ["--drop-first-response"] if drop_first_response else []
    argv += ["--committed-file", committed_file] if committed_file is not None else []
    argv += ["--reject"] if reject else []
    argv += ["--answer-first-as", answer_first_as] if answer_first_as is not None else []
    argv += ["--socket", socket] if socket is not None else []
    relay, fenced = _fence(fence)
    argv += fenced
    log = ledger.with_suffix(".log")
    try:
        with open(log, "ab") as stderr:
            process = spawn(argv, stdout=subprocess.DEVNULL, stderr=stderr)
        info = _listening(process, ready, log, timeout)
    except BaseException:
        if relay is not None:
            relay.close()
        raise
    return SupplierProcess(process, ledger, info["endpoint"], info["identity"], info.get("socket_endpoint"), relay)


def _fence(fence: str | Callable[..., bool] | None) -> tuple[FenceRelay | None, list[str]]:
    """The `--fence` argument: the course's rule by name, or a relay to `fence`, run in this process."""
    if callable(fence):
        relay = FenceRelay(fence)
        return relay, ["--fence", relay.endpoint]
    return None, [] if fence is None else ["--fence", str(fence)]


def _listening(process: subprocess.Popen[bytes], ready: Path, log: Path, timeout: float) -> dict[str, Any]:
    """What the supplier wrote in its ready file once it listens; one that fails is stopped, and
    the end of its log told."""
    try:
        info = json.loads(wait_for_file(ready, timeout=timeout, process=process))
        if info["pid"] != process.pid:
            raise RuntimeError(f"{ready} was written by process {info['pid']}, not {process.pid}")
        return info
    except RuntimeError as error:
        stop(process)
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{error}; its stderr ends with:\n{tail}") from None
    except BaseException:
        stop(process)
        raise


