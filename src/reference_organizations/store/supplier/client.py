"""The shop's side of the supplier protocol: a timeout means "outcome unknown", never "failed"."""

from __future__ import annotations

import copy
import http.client
import json
import math
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from reference_organizations.store.supplier.protocol import (
    DEFAULT_IDENTITY, FENCING_GENERATION, FENCING_WORK, MAX_GENERATION, OPERATION, WORK_ID,
)
from sovereign_agent.suppliers import OutcomeUnknown, SupplierRefused

LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}


class SupplierClient:
    """The shop's side of the protocol (implements sovereign_agent.suppliers.Supplier).

    Any answer we did not get (timeout, refused or reset connection, dropped response, 5xx),
    and any 2xx receipt that is not ours (another supplier or operation), raises OutcomeUnknown:
    the order may exist, and only a lookup can tell. A 4xx raises SupplierRefused. `timeout`
    bounds each socket operation, not the whole call. A client made by `fenced(work_id,
    generation)` sends that fencing token with every order (see fence.py); one without sends none.
    """

    idempotent = True  # the interface's promise: the same operation id is answered with the same receipt

    def __init__(self, endpoint: str, *, identity: str = DEFAULT_IDENTITY, timeout: float = 3.0) -> None:
        self._socket = endpoint[len("unix:"):] if isinstance(endpoint, str) and endpoint.startswith("unix:") else None
        parts = urlsplit("http://127.0.0.1:1" if self._socket else endpoint) if isinstance(endpoint, str) else None
        try:
            port = parts.port if parts else None
        except ValueError:
            port = None
        if (
            parts is None
            or parts.scheme != "http"
            or parts.hostname not in LOOPBACK_NAMES
            or not port
            or parts.username is not None
            or parts.path not in {"", "/"}
            or parts.query
            or parts.fragment
        ):
            raise ValueError(
                f"endpoint must be http://127.0.0.1:PORT (or localhost, [::1]) or unix:PATH: {endpoint!r}"
            )
        if not (
            isinstance(timeout, (int, float))
            and not isinstance(timeout, bool)
            and math.isfinite(timeout)
            and 0 < timeout <= 60
        ):
            raise ValueError(f"timeout must be a finite number of seconds in (0, 60]: {timeout!r}")
        self.endpoint = endpoint if self._socket else f"http://{parts.netloc}"
        self.identity = identity
        self.timeout = float(timeout)
        self._host, self._port = parts.hostname, port
        self.token: tuple[str, int] | None = None

    def fenced(self, work_id: str, generation: int) -> SupplierClient:
        """The same client, sending the holder's fencing token (work id, generation) with its orders."""
        if not (isinstance(work_id, str) and WORK_ID.fullmatch(work_id)):
            raise ValueError(f"a work id is 1 to 64 of [0-9A-Za-z:_.-]: {work_id!r}")
        if type(generation) is not int or not 0 <= generation <= MAX_GENERATION:
            raise ValueError(f"a generation is an integer from 0 to 2**62: {generation!r}")
        bound = copy.copy(self)
        bound.token = (work_id, generation)
        return bound

    @classmethod
    def from_ready_file(cls, path: str | os.PathLike[str], *, timeout: float = 3.0) -> SupplierClient:
        ready = json.loads(Path(path).read_text())
        return cls(ready["endpoint"], identity=ready["identity"], timeout=timeout)

    def lookup(self, operation: str) -> dict[str, Any] | None:
        status, body = self._request("GET", _order_path(operation))
        return None if status == 404 else self._receipt(operation, status, body)

    def order(self, operation: str, proposal: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps(proposal, allow_nan=False).encode("utf-8")
        return self._receipt(operation, *self._request("POST", _order_path(operation), payload))

    def health(self) -> dict[str, Any]:
        """The supplier's identity and order count; raises OutcomeUnknown if it does not answer."""
        status, body = self._request("GET", "/health")
        if status != 200:
            raise OutcomeUnknown(f"GET /health: HTTP {status}")
        return json.loads(body)

    def _request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = {} if body is None else {"Content-Type": "application/json"}
        if body is not None and self.token is not None:
            headers.update({FENCING_WORK: self.token[0], FENCING_GENERATION: str(self.token[1])})
        connection = (_UnixConnection(self._socket, self.timeout) if self._socket
                      else http.client.HTTPConnection(self._host, self._port, timeout=self.timeout))
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as error:
            raise OutcomeUnknown(f"{method} {path}: no answer from {self.endpoint} ({error!r})") from error
        finally:
            connection.close()

    def _receipt(self, operation: str, status: int, body: bytes) -> dict[str, Any]:
        if 400 <= status < 500:
            try:
                message = json.loads(body)["error"]
            except (ValueError, KeyError, TypeError):
                message = body.decode("utf-8", "replace")
            raise SupplierRefused(f"HTTP {status}: {message}")
        try:
            receipt = json.loads(body) if status in {200, 201} else None
        except ValueError:
            receipt = None
        if not isinstance(receipt, dict):
            raise OutcomeUnknown(f"{operation}: HTTP {status} without a readable receipt")
        if receipt.get("operation") != operation or receipt.get("supplier") != self.identity:
            # A success that names someone else is not a refusal: the request may well have been
            # accepted somewhere, so the order is looked up (and its reservation kept), never resent.
            raise OutcomeUnknown(
                f"{self.endpoint} answered as {receipt.get('supplier')!r}"
                f" for {receipt.get('operation')!r}"
            )
        return receipt


def _order_path(operation: str) -> str:
    if not (isinstance(operation, str) and OPERATION.fullmatch(operation)):
        raise ValueError(f"operation must be 32 lowercase hex characters: {operation!r}")
    return f"/orders/{operation}"


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over the supplier's Unix socket (`unix:PATH` endpoints)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)
