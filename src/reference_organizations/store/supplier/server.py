"""The supplier process: an HTTP server on 127.0.0.1 with its own SQLite ledger.

The standard library's ThreadingHTTPServer: no extra dependency for learners. Every request it
answers (or drops on purpose) is recorded in the ledger, so experiments can count retransmitted
POSTs and lookups with plain sqlite3.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import signal
import socket
import socketserver
import sqlite3
import threading
import time
from contextlib import closing, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

from reference_organizations.store.supplier.protocol import (
    BUSY_TIMEOUT_SECONDS,
    DEFAULT_IDENTITY,
    FENCING_GENERATION,
    FENCING_WORK,
    MAX_GENERATION,
    OPERATION,
    WORK_ID,
)
from reference_organizations.store.supplier.fence import chooser
from reference_organizations.children import alive, write_atomically

HOST = "127.0.0.1"
ORDER_PATH = re.compile(r"/orders/([^/]*)")
FIELDS = {"sku", "quantity", "unit_pence", "supplier", "currency"}
PARENT_POLL_SECONDS = 0.2
LINGER_SECONDS, LINGER_BYTES = 1.0, 1 << 20
STALE = 412  # an order whose fencing token is older than one already seen: refused, nothing stored

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    operation TEXT PRIMARY KEY,
    proposal TEXT NOT NULL,
    receipt TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    method TEXT,
    operation TEXT,
    status INTEGER,  -- NULL: the order was committed and the answer dropped on purpose
    at REAL          -- Unix time
);
-- Fencing at the resource (fence.py): the highest generation seen per work item, kept by the rule
CREATE TABLE IF NOT EXISTS fence (
    work_id TEXT PRIMARY KEY,
    generation INTEGER NOT NULL
);
-- Every order that carried a fencing token, and whether this supplier admitted it
CREATE TABLE IF NOT EXISTS tokens (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    operation TEXT,
    work_id TEXT,
    generation INTEGER,
    admitted INTEGER,  -- 1 admitted (always, when the supplier is not fenced), 0 refused as stale
    at REAL
);
"""


class Refusal(Exception):
    """A request the supplier answers with a 4xx and a JSON error, storing no order."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def validate(proposal: Any, identity: str) -> dict[str, Any]:
    """Return the proposal if this supplier accepts its shape; otherwise Refusal(400) saying why."""
    if not isinstance(proposal, dict):
        raise Refusal(400, "the proposal must be a JSON object")
    if proposal.keys() != FIELDS:
        missing, unknown = sorted(FIELDS - proposal.keys()), sorted(proposal.keys() - FIELDS)
        raise Refusal(
            400, f"fields must be exactly {sorted(FIELDS)}: missing {missing}, unknown {unknown}"
        )
    sku = proposal["sku"]
    if not (isinstance(sku, str) and 1 <= len(sku) <= 64):
        raise Refusal(400, "sku must be a string of 1 to 64 characters")
    for name, highest in (("quantity", 1000), ("unit_pence", 100_000)):
        value = proposal[name]
        if type(value) is not int or not 1 <= value <= highest:  # bool is not a quantity
            raise Refusal(400, f"{name} must be an integer from 1 to {highest}")
    if proposal["supplier"] != identity:
        raise Refusal(400, f"this supplier is {identity!r}, not {proposal['supplier']!r}")
    if proposal["currency"] != "GBP":
        raise Refusal(400, "currency must be 'GBP'")
    return proposal


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A repeated key would make the stored proposal differ from what the client meant."""
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("repeated key")
    return result


class Ledger:
    """The supplier's own SQLite file; one short connection per request (threads never share one)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        with closing(self._connect()) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")  # an answered order must survive a crash
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception."""
        with closing(self._connect()) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.rollback()
                raise
            db.commit()


class SupplierServer(ThreadingHTTPServer):
    """Holds the ledger, the test switches and the optional fence that the request handlers read.

    Handler threads are not daemons: closing the server waits for answers in flight (a held
    one is released early), so SIGTERM never cuts a reply in half.
    """

    daemon_threads = False

    def __init__(
        self,
        port: int,
        *,
        ledger: Ledger,
        identity: str,
        drop_first_response: bool = False,
        hold_seconds: float = 0.0,
        committed_file: Path | None = None,
        reject: bool = False,
        answer_first_as: str | None = None,
        max_body: int = 16384,
        stopping: threading.Event | None = None,
        fence: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.ledger = ledger
        self.fence = fence  # (work id, generation) -> admitted; None: tokens recorded, never refused
        self.identity = identity
        self.drop_next = drop_first_response
        self.misname_next = answer_first_as  # the first new order's answer names this supplier
        self.hold_seconds = hold_seconds
        self.committed_file = committed_file
        self.reject = reject
        self.max_body = max_body
        self.stopping = stopping or threading.Event()  # set on shutdown; ends held answers early
        self.order_lock = threading.Lock()  # guards drop_next, misname_next and the order commit
        super().__init__((HOST, port), SupplierHandler)


class UnixSupplierServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The same supplier (ledger, switches, locks) answering on a Unix socket as well: a process
    in a sandbox with a network of its own reaches it through the socket's file."""

    daemon_threads = False

    def __init__(self, path: Path, shared: SupplierServer) -> None:
        self.shared = shared
        super().__init__(str(path), SupplierHandler)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shared, name)


class SupplierHandler(BaseHTTPRequestHandler):
    server: SupplierServer
    timeout = 5  # a stalled client cannot pin a handler thread (or delay shutdown) for long

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the requests table is the log, and notebooks stay readable."""

    def do_GET(self) -> None:
        if self.path == "/health":
            with self.server.ledger.transaction() as db:
                count = db.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
                self._record(db, None, 200)
            return self._reply(200, json.dumps({"identity": self.server.identity, "orders": count}))
        try:
            operation = self._operation()
        except Refusal as refusal:
            return self._refuse(None, refusal)
        with self.server.ledger.transaction() as db:
            row = db.execute("SELECT receipt FROM orders WHERE operation = ?", (operation,)).fetchone()
            self._record(db, operation, 200 if row else 404)
        if row is None:
            return self._reply(404, json.dumps({"error": f"no order {operation}"}))
        self._reply(200, row[0])

    def do_POST(self) -> None:
        operation = None
        try:
            operation = self._operation()
            proposal = validate(self._read_json(), self.server.identity)
            token = self._token()
        except Refusal as refusal:
            return self._refuse(operation, refusal)
        canonical = json.dumps(proposal, sort_keys=True, separators=(",", ":"))
        with self.server.order_lock:
            admitted = True
            if self.server.fence is not None:  # asked before the ledger's transaction: a rule takes its own
                try:
                    admitted = self.server.fence(*token)
                except Exception as error:  # no answer from the rule: the order's fate is not decided
                    return self._refuse(operation, Refusal(503, f"the fence could not decide: {error}"[:500]))
            with self.server.ledger.transaction() as db:
                if token is not None:
                    db.execute("INSERT INTO tokens (operation, work_id, generation, admitted, at) VALUES (?, ?, ?, ?, ?)",
                               (operation, *token, int(admitted), time.time()))
                row = db.execute(
                    "SELECT proposal, receipt FROM orders WHERE operation = ?", (operation,)
                ).fetchone()
                if not admitted:  # a stale holder gets nothing, not even a stored receipt
                    status, receipt = STALE, ""
                elif row is None:
                    receipt = json.dumps(self._new_receipt(operation, proposal), sort_keys=True)
                    db.execute("INSERT INTO orders VALUES (?, ?, ?)", (operation, canonical, receipt))
                    status = None if self.server.drop_next else 201
                else:
                    status, receipt = (200, row[1]) if row[0] == canonical else (409, "")
                self._record(db, operation, status)
            if status is None:
                self.server.drop_next = False
            answer = receipt
            if status == 201 and self.server.misname_next:
                answer = json.dumps({**json.loads(receipt), "supplier": self.server.misname_next}, sort_keys=True)
                self.server.misname_next = None
        if status == STALE:
            return self._refuse_after_record(STALE, f"fencing token refused: generation {token[1]} of work "
                                             f"{token[0]} is older than one this supplier has already seen")
        if status == 409:
            return self._refuse_after_record(409, f"operation {operation} holds a different proposal")
        if status != 200:  # a new order, committed just now
            if self.server.committed_file is not None:
                write_atomically(self.server.committed_file, receipt)
            if status is None:
                self.close_connection = True
                return  # closing without a word: the client cannot know the order exists
            self.server.stopping.wait(self.server.hold_seconds)
        self._reply(status, answer)

    def _token(self) -> tuple[str, int] | None:
        """The order's fencing token (work id, generation), or None; a fenced supplier requires one."""
        work, generation = self.headers.get_all(FENCING_WORK, []), self.headers.get_all(FENCING_GENERATION, [])
        if not work and not generation:
            if self.server.fence is not None:
                raise Refusal(428, f"this supplier is fenced: send {FENCING_WORK} and {FENCING_GENERATION}")
            return None
        if len(work) != 1 or len(generation) != 1 or WORK_ID.fullmatch(work[0]) is None \
                or not re.fullmatch(r"[0-9]{1,19}", generation[0]) or int(generation[0]) > MAX_GENERATION:
            raise Refusal(400, f"a fencing token is one {FENCING_WORK} (1 to 64 of [0-9A-Za-z:_.-]) and one "
                               f"{FENCING_GENERATION} (an integer from 0 to 2**62)")
        return work[0], int(generation[0])

    def _new_receipt(self, operation: str, proposal: dict[str, Any]) -> dict[str, Any]:
        return {
            "operation": operation,
            "status": "REJECTED" if self.server.reject else "ACCEPTED",
            "supplier": self.server.identity,
            "amount_pence": proposal["quantity"] * proposal["unit_pence"],
            "reference": f"PO-{secrets.token_hex(6).upper()}",
        }

    def _operation(self) -> str:
        match = ORDER_PATH.fullmatch(self.path)
        if match is None:
            raise Refusal(404, "no such resource")
        if OPERATION.fullmatch(match[1]) is None:
            raise Refusal(400, "operation must be 32 lowercase hex characters")
        return match[1]

    def _read_json(self) -> Any:
        lengths = self.headers.get_all("Content-Length", [])
        if len(lengths) != 1 or not re.fullmatch(r"[0-9]{1,12}", lengths[0]):
            raise Refusal(400, "exactly one numeric Content-Length is required")
        if "Transfer-Encoding" in self.headers:
            raise Refusal(400, "Transfer-Encoding is not supported; send a Content-Length")
        length = int(lengths[0])
        if length > self.server.max_body:
            raise Refusal(400, f"body is over {self.server.max_body} bytes")
        body = self.rfile.read(length)
        if len(body) != length:
            raise Refusal(400, "body is shorter than its Content-Length")
        try:
            return json.loads(
                body.decode("utf-8"), parse_constant=_no_constants, object_pairs_hook=_unique_keys
            )
        except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
            raise Refusal(400, f"body is not valid JSON: {error}") from None

    def _record(self, db: sqlite3.Connection, operation: str | None, status: int | None) -> None:
        db.execute(
            "INSERT INTO requests (method, operation, status, at) VALUES (?, ?, ?, ?)",
            (self.command, operation, status, time.time()),
        )

    def _refuse(self, operation: str | None, refusal: Refusal) -> None:
        with self.server.ledger.transaction() as db:
            self._record(db, operation, refusal.status)
        self._refuse_after_record(refusal.status, refusal.message)

    def _refuse_after_record(self, status: int, message: str) -> None:
        self._reply(status, json.dumps({"error": message}))
        self._linger()

    def _reply(self, status: int, body: str) -> None:
        data = body.encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except ConnectionError:
            pass  # the client gave up waiting; the ledger already holds the truth

    def _linger(self) -> None:
        """Discard what the client is still sending, briefly, before closing.

        A refused request may leave its body unread; closing a socket with unread data makes
        the kernel send a reset, which can destroy our 400 before the client has read it.
        """
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_SECONDS)
            received = 0
            while received < LINGER_BYTES:
                chunk = self.connection.recv(65536)
                if not chunk:
                    break
                received += len(chunk)
        except OSError:
            pass


# --- the process -----------------------------------------------------------------------------


def _seconds(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError("must be a finite number >= 0")
    return value


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m reference_organizations.store.supplier")
    parser.add_argument("--database", type=Path, required=True, help="the supplier's SQLite ledger")
    parser.add_argument("--port", type=_bounded_int(0, 65535), default=0, help="0: any free port")
    parser.add_argument("--ready", type=Path, required=True, help="JSON written once listening")
    parser.add_argument("--host", choices=[HOST], default=HOST, help="loopback only, by design")
    parser.add_argument("--identity", default=DEFAULT_IDENTITY)
    parser.add_argument("--drop-first-response", action="store_true")
    parser.add_argument("--hold-seconds", type=_seconds, default=0.0)
    parser.add_argument("--committed-file", type=Path)
    parser.add_argument("--reject", action="store_true")
    parser.add_argument("--answer-first-as", metavar="IDENTITY", help="store the first new order, "
                        "then answer it with a receipt naming this other supplier")
    parser.add_argument("--max-body", type=_bounded_int(1, 1 << 20), default=16384)
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    parser.add_argument("--socket", type=Path, help="also answer on this Unix socket")
    parser.add_argument("--fence", metavar="reference|relay:PATH", help="refuse orders whose fencing token "
                        "is older than one seen for their work item, by the course's rule or by asking the "
                        "process listening at PATH (fence.py)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT or until the parent is gone; exit 0 either way."""
    args = _parser().parse_args(argv)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    server = SupplierServer(
        args.port,
        ledger=Ledger(args.database),
        identity=args.identity,
        drop_first_response=args.drop_first_response,
        hold_seconds=args.hold_seconds,
        committed_file=args.committed_file,
        reject=args.reject,
        answer_first_as=args.answer_first_as,
        max_body=args.max_body,
        stopping=stopping,
        fence=chooser(args.fence, args.database.resolve()),
    )
    servers = [server] + ([UnixSupplierServer(args.socket, server)] if args.socket else [])
    serving = [threading.Thread(target=one.serve_forever, kwargs={"poll_interval": 0.05}) for one in servers]
    for thread in serving:
        thread.start()
    try:
        port = server.server_address[1]
        ready = {
            "pid": os.getpid(),
            "port": port,
            "endpoint": f"http://{HOST}:{port}",
            "identity": args.identity,
            "ledger": str(args.database.resolve()),
        }
        if args.socket:
            ready["socket_endpoint"] = f"unix:{args.socket}"
        write_atomically(args.ready, json.dumps(ready))
        while not stopping.wait(PARENT_POLL_SECONDS):
            if args.parent_pid is not None and not alive(args.parent_pid):
                break
    finally:
        stopping.set()
        for one, thread in zip(servers, serving):
            one.shutdown()
            thread.join()
            one.server_close()
        if args.socket:
            args.socket.unlink(missing_ok=True)
    return 0


