"""The supplier as a real process: its ledger, its answers, its test switches, and its client."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from reference_organizations.store.supplier import SupplierClient, start_supplier
from reference_organizations.children import wait_for_file
from sovereign_agent.suppliers import OutcomeUnknown, SupplierRefused

OP = "0123456789abcdef0123456789abcdef"
OTHER_OP = "fedcba9876543210fedcba9876543210"


def proposal(**changes: object) -> dict[str, object]:
    base = {
        "sku": "vanilla-5l",
        "quantity": 3,
        "unit_pence": 1250,
        "supplier": "lucy-wholesale",
        "currency": "GBP",
    }
    return {**base, **changes}




@pytest.fixture
def live_supplier(tmp_path: Path):
    with start_supplier(tmp_path / "supplier.sqlite") as running:
        yield running
    assert running.process.returncode == 0


@pytest.fixture(scope="module")
def shared_supplier(tmp_path_factory: pytest.TempPathFactory):
    """One process for the many malformed-request cases, which must all leave the ledger empty."""
    with start_supplier(tmp_path_factory.mktemp("shared") / "supplier.sqlite") as running:
        yield running
    assert running.process.returncode == 0


def raw(endpoint: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """(status, decoded JSON) for a hand-made request, bypassing the client's own checks."""
    port = int(endpoint.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        if headers is None:
            connection.request(method, path, body=body)
        else:
            connection.putrequest(method, path)
            for name, value in headers.items():
                connection.putheader(name, value)
            connection.endheaders(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_ready_file_describes_the_listening_process(tmp_path: Path):
    ledger = tmp_path / "supplier.sqlite"
    with start_supplier(ledger, ready=tmp_path / "ready.json", identity="acme-dairy") as running:
        ready = json.loads((tmp_path / "ready.json").read_text())
        assert set(ready) == {"pid", "port", "endpoint", "identity", "ledger"}
        assert ready["pid"] == running.pid
        assert ready["endpoint"] == f"http://127.0.0.1:{ready['port']}" == running.endpoint
        assert ready["identity"] == "acme-dairy" and ready["ledger"] == str(ledger)
        assert raw(running.endpoint, "GET", "/health") == (200, {"identity": "acme-dairy", "orders": 0})
        assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_order_replay_and_conflict(live_supplier):
    client = live_supplier.client()
    receipt = client.order(OP, proposal())
    assert receipt["operation"] == OP and receipt["status"] == "ACCEPTED"
    assert receipt["supplier"] == "lucy-wholesale" and receipt["amount_pence"] == 3 * 1250
    assert client.order(OP, proposal()) == receipt  # a retransmission replays, never re-orders
    with pytest.raises(SupplierRefused, match="409"):
        client.order(OP, proposal(quantity=4))
    [row] = live_supplier.orders()
    assert row == {"operation": OP, "proposal": proposal(), "receipt": receipt}
    assert [r["status"] for r in live_supplier.requests("POST")] == [201, 200, 409]


def test_first_answer_is_201_and_replay_is_200(live_supplier):
    body = json.dumps(proposal()).encode()
    first, receipt = raw(live_supplier.endpoint, "POST", f"/orders/{OP}", body)
    assert (first, raw(live_supplier.endpoint, "POST", f"/orders/{OP}", body)) == (201, (200, receipt))


def test_lookup(live_supplier):
    client = live_supplier.client()
    assert client.lookup(OP) is None
    receipt = client.order(OP, proposal())
    assert client.lookup(OP) == receipt
    assert client.lookup(OTHER_OP) is None
    assert [(r["operation"], r["status"]) for r in live_supplier.requests("GET")] == [(OP, 404), (OP, 200), (OTHER_OP, 404)]
    assert len(live_supplier.requests("POST")) == 1


MALFORMED = {
    "not json": b"{sku: vanilla",
    "not an object": b"[1, 2, 3]",
    "nan": json.dumps(proposal(unit_pence=float("nan"))).encode(),
    "repeated key": b'{"sku": "a", "sku": "b", "quantity": 1, "unit_pence": 1, "supplier": "lucy-wholesale", "currency": "GBP"}',
    "unknown field": json.dumps(proposal(colour="pink")).encode(),
    "missing field": json.dumps({k: v for k, v in proposal().items() if k != "sku"}).encode(),
    "quantity 0": json.dumps(proposal(quantity=0)).encode(),
    "quantity 1001": json.dumps(proposal(quantity=1001)).encode(),
    "bool quantity": json.dumps(proposal(quantity=True)).encode(),
    "float quantity": json.dumps(proposal(quantity=2.0)).encode(),
    "unit_pence 0": json.dumps(proposal(unit_pence=0)).encode(),
    "empty sku": json.dumps(proposal(sku="")).encode(),
    "long sku": json.dumps(proposal(sku="x" * 65)).encode(),
    "wrong currency": json.dumps(proposal(currency="EUR")).encode(),
    "wrong supplier": json.dumps(proposal(supplier="acme-dairy")).encode(),
    "not utf-8": json.dumps(proposal()).encode("utf-16"),
    "oversized body": json.dumps(proposal(sku="x" * 20_000)).encode(),
    "deep nesting": b"[" * 8000 + b"]" * 8000,
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_body_is_400_and_stores_nothing(shared_supplier, case):
    status, answer = raw(shared_supplier.endpoint, "POST", f"/orders/{OP}", MALFORMED[case])
    assert status == 400 and answer["error"]
    assert shared_supplier.orders() == []


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no length"),
        pytest.param({"Content-Length": "999999"}, id="declared too long"),
        pytest.param({"Content-Length": "-5"}, id="negative length"),
        pytest.param({"Transfer-Encoding": "chunked"}, id="chunked"),
        pytest.param({"Transfer-Encoding": "chunked", "Content-Length": "2"}, id="chunked and length"),
    ],
)
def test_bad_content_length_is_400_and_stores_nothing(shared_supplier, headers):
    status, answer = raw(shared_supplier.endpoint, "POST", f"/orders/{OP}", None, headers)
    assert status == 400 and answer["error"]
    assert shared_supplier.orders() == []


@pytest.mark.parametrize("path, expected", [("/orders/ABCDEF", 400), (f"/orders/{OP.upper()}", 400), ("/nope", 404)])
def test_bad_paths(shared_supplier, path, expected):
    body = json.dumps(proposal()).encode()
    assert raw(shared_supplier.endpoint, "POST", path, body)[0] == expected
    assert raw(shared_supplier.endpoint, "GET", path)[0] == expected
    assert shared_supplier.orders() == []


def test_identity_mismatch(live_supplier):
    stranger = SupplierClient(live_supplier.endpoint, identity="acme-dairy")
    with pytest.raises(SupplierRefused, match="lucy-wholesale"):
        stranger.order(OP, proposal(supplier="acme-dairy"))
    assert live_supplier.orders() == []
    live_supplier.client().order(OP, proposal())
    with pytest.raises(OutcomeUnknown, match="answered as 'lucy-wholesale'"):
        stranger.lookup(OP)  # a receipt from someone else is not ours to trust, nor a "no"


def test_a_success_naming_another_supplier_is_an_unknown_outcome(tmp_path: Path):
    with start_supplier(tmp_path / "supplier.sqlite", answer_first_as="acme-dairy") as running:
        client = running.client()
        with pytest.raises(OutcomeUnknown, match="answered as 'acme-dairy'"):
            client.order(OP, proposal())
        [row] = running.orders()  # the supplier did take it
        assert row["receipt"]["supplier"] == "lucy-wholesale"
        assert client.lookup(OP) == row["receipt"]  # only a lookup can tell, and it does
        assert client.order(OP, proposal()) == row["receipt"]  # the switch fires once
        assert [(r["method"], r["status"]) for r in running.requests()] == [("POST", 201), ("GET", 200), ("POST", 200)]


def test_dropped_response_leaves_an_order_only_a_lookup_can_find(tmp_path: Path):
    with start_supplier(tmp_path / "supplier.sqlite", drop_first_response=True) as running:
        client = running.client()
        with pytest.raises(OutcomeUnknown):
            client.order(OP, proposal())
        [row] = running.orders()
        assert client.lookup(OP) == row["receipt"]
        assert client.order(OP, proposal()) == row["receipt"]  # the retry replays
        assert [r["status"] for r in running.requests("POST")] == [None, 200]
        assert len(running.orders()) == 1


def test_held_answer_times_out_as_unknown_after_commit(tmp_path: Path):
    committed = tmp_path / "committed.json"
    with start_supplier(tmp_path / "supplier.sqlite", hold_seconds=30, committed_file=committed) as running:
        started = time.monotonic()
        with pytest.raises(OutcomeUnknown):
            running.client(timeout=0.3).order(OP, proposal())
        assert time.monotonic() - started < 5  # far less than the 30 s hold
        # The client gave up after 0.3 s, which on a busy machine can come before the supplier has read
        # the request: it commits when it does, whatever the client did (bounded wait).
        deadline = time.monotonic() + 10
        while not committed.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(committed.read_text())["operation"] == OP
        assert [row["operation"] for row in running.orders()] == [OP]
        # Shutdown releases the hold; otherwise stop() would have to SIGKILL (status -9).
        assert running.stop() == 0


def test_shutdown_releases_a_held_answer(tmp_path: Path):
    committed = tmp_path / "committed.json"
    with start_supplier(tmp_path / "supplier.sqlite", hold_seconds=30, committed_file=committed) as running:
        answers: list[object] = []
        waiting = threading.Thread(target=lambda: answers.append(running.client(timeout=10).order(OP, proposal())))
        waiting.start()
        wait_for_file(committed, timeout=10)
        os.kill(running.pid, signal.SIGTERM)
        waiting.join(15)
        assert running.process.wait(5) == 0
        assert answers == [running.orders()[0]["receipt"]]


def test_reject(tmp_path: Path):
    with start_supplier(tmp_path / "supplier.sqlite", reject=True) as running:
        status, receipt = raw(running.endpoint, "POST", f"/orders/{OP}", json.dumps(proposal()).encode())
        assert (status, receipt["status"]) == (201, "REJECTED")
        assert running.orders()[0]["receipt"]["status"] == "REJECTED"


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://10.0.0.1:8000",
        "http://example.com:8000",
        "https://127.0.0.1:8000",
        "http://127.0.0.1",
        "http://127.0.0.1:0",
        "http://127.0.0.1:8000/orders",
        "http://user@127.0.0.1:8000",
        "http://127.0.0.1:8000@example.com:80",
        "http://127.0.0.2:8000",
    ],
)
def test_client_refuses_non_loopback_endpoints(endpoint):
    with pytest.raises(ValueError):
        SupplierClient(endpoint)


@pytest.mark.parametrize("timeout", [0, -1, 60.5, float("nan"), float("inf"), True, "3"])
def test_client_refuses_unbounded_timeouts(timeout):
    with pytest.raises(ValueError):
        SupplierClient("http://127.0.0.1:8000", timeout=timeout)


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8000", "http://localhost:8000/", "http://[::1]:8000"])
def test_client_accepts_loopback(endpoint):
    client = SupplierClient(endpoint, timeout=60)
    assert (client.identity, client.timeout, client.idempotent) == ("lucy-wholesale", 60.0, True)


def test_client_from_ready_file_and_gone_supplier(tmp_path: Path):
    with start_supplier(tmp_path / "supplier.sqlite", ready=tmp_path / "ready.json") as running:
        client = SupplierClient.from_ready_file(tmp_path / "ready.json", timeout=1)
        assert client.order(OP, proposal()) == running.orders()[0]["receipt"]
    with pytest.raises(OutcomeUnknown):  # refused: still "unknown", never "failed"
        client.lookup(OP)
    with pytest.raises(ValueError):
        client.lookup("../health")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_is_a_clean_exit(tmp_path: Path, signum):
    running = start_supplier(tmp_path / "supplier.sqlite")
    running.client().order(OP, proposal())
    os.kill(running.pid, signum)
    assert running.process.wait(5) == 0
    running.stop()
    assert len(running.orders()) == 1


def test_server_refuses_a_non_loopback_host(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "reference_organizations.store.supplier", "--database", tmp_path / "s.sqlite",
         "--ready", tmp_path / "ready.json", "--host", "0.0.0.0"],
        capture_output=True, timeout=10,
    )
    assert result.returncode == 2 and not (tmp_path / "ready.json").exists()


def test_health_names_the_supplier_and_counts_its_orders(live_supplier):
    client = live_supplier.client()
    assert client.health() == {"identity": "lucy-wholesale", "orders": 0}
    client.order("c" * 32, proposal())
    assert client.health()["orders"] == 1
