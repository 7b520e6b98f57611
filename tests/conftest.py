"""Shared fixtures: a fresh seeded shop database, an operator policy, an in-process supplier, and
a check, after every test, that no process the test started is still running.

`FakeSupplier` implements `sovereign_agent.suppliers.Supplier` in memory and records every call
in order, so a test can assert on what was (not) sent and in which order. The real HTTP supplier
(`reference_organizations.store.supplier`) is tested elsewhere.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum

from reference_organizations.store.agent import SPENDING_CEILING_PENCE, SUPPLIER_IDENTITY, seed_lucy
from sovereign_agent.assistant_orders import SpendingPolicy, approve, execute, propose
from sovereign_agent.assistant_work import Claim, assert_current, claim, enqueue
from reference_organizations.children import alive
from course.grading.sandbox.cgroup import LABEL_VARIABLE
from sovereign_agent.database import Database
from sovereign_agent.suppliers import OutcomeUnknown, SupplierRefused

# Debian's chromium package, found on PATH (or named by $CHROMIUM); never a downloaded browser.
CHROMIUM = Path(os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

OPERATOR = "lucy"


def marked_pids(marker: str | Path) -> dict[int, str]:
    """Live processes (not zombies) whose command line mentions `marker` (a test's tmp folder)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = entry.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(marker) in command and alive(int(entry.name)):
            found[int(entry.name)] = command[:160]
    return found


def assert_nothing_left(
    marker: str | Path, pids: set[int] = frozenset(), within: float = 5.0, ignore: set[int] = frozenset()
) -> None:
    """Wait (bounded) for every marked or recorded process to end; kill and fail on survivors."""
    deadline = time.monotonic() + within
    while True:
        left = {pid: command for pid, command in marked_pids(marker).items() if pid not in ignore}
        left.update({pid: "recorded child" for pid in pids if alive(pid)})
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in left:  # do not let one failure contaminate the next test
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left running: {left}"


# Every grading process this test run starts names its sandboxes' cgroups with this label, so a test
# judges only the groups of its own run, not those of another grader on the same machine.
os.environ[LABEL_VARIABLE] = RUN_LABEL = f"pytest{os.getpid()}"


def sandbox_cgroups() -> set[str]:
    """The cgroups of this test run's grading sandboxes (none where the cgroup file system is absent)."""
    # os.walk, not glob: another test's group may vanish mid-walk, and walk skips what it cannot list.
    return {os.path.join(parent, name) for parent, names, _ in os.walk("/sys/fs/cgroup")
            for name in names if name.startswith("course-grading-") and RUN_LABEL in name}


def sandboxed_pids() -> dict[int, str]:
    """Live processes in one of this test run's sandbox cgroups (judges, learner processes, their
    bwrap), by /proc/PID/cgroup: another test's graders, running at the same time, are not counted."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and RUN_LABEL in entry.joinpath("cgroup").read_text() and alive(int(entry.name)):
                found[int(entry.name)] = entry.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
        except OSError:
            continue
    return found


def nbgrader_metadata(grade_id: str, *, grade=False, solution=False, locked=False, points=None) -> dict:
    """Cell metadata for a toy nbgrader notebook (schema 3); graded cells get `points` (default 1)."""
    meta = {
        "grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3, "solution": solution, "task": False,
    }
    if grade:
        meta["points"] = 1 if points is None else points
    return {"nbgrader": meta}


@pytest.fixture(scope="session", autouse=True)
def one_grading_machine_per_worker(tmp_path_factory: pytest.TempPathFactory):
    """Each pytest-xdist worker grades as a machine of its own. The phase rule
    (course.grading.judge.phases) keeps hidden and visible parts of checks apart across every grading
    of one machine, with locks in the user's runtime folder; two workers' classes are separate
    classes, and sharing one rule made each wait on the other's checks. A test of the rule itself
    starts its gradings in one worker, so they share this folder."""
    folder = tmp_path_factory.getbasetemp() / "runtime"
    folder.mkdir(mode=0o700, exist_ok=True)
    before = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(folder)
    yield
    if before is None:
        os.environ.pop("XDG_RUNTIME_DIR", None)
    else:
        os.environ["XDG_RUNTIME_DIR"] = before


@pytest.fixture(autouse=True)
def own_temporary_folder():
    """A test that sets TMPDIR (monkeypatch.setenv) may be the first to call tempfile.gettempdir(),
    which then keeps its tmp_path for the rest of the worker: a later test's files (a grading
    process's private folder and janitor, the hub test's environment) would land in a folder that
    test owns. Forget what tempfile cached during the test."""
    before = tempfile.tempdir
    yield
    tempfile.tempdir = before


@pytest.fixture(autouse=True)
def no_process_left_behind(tmp_path_factory: pytest.TempPathFactory):
    """Every process a test starts runs under the session's tmp folder; none may outlive the test."""
    marker = tmp_path_factory.getbasetemp()
    before = set(marked_pids(marker))  # e.g. a module-scoped supplier shared by several tests
    yield
    assert_nothing_left(marker, ignore=before)


class Crash(BaseException):
    """Stands for the process dying in the middle of a call (not an ordinary error)."""


class FakeSupplier:
    """An in-memory supplier ledger keyed by operation id, with switches for failures.

    * ``drop_requests``: the next N orders are lost before the supplier stores them.
    * ``lose_responses``: the next N orders are stored, then the answer is lost.
    * ``crash_on_order``: the caller "dies" (raises `Crash`) before the request leaves.
    * ``reject``: new orders are answered with a REJECTED receipt.
    """

    def __init__(self, identity: str = SUPPLIER_IDENTITY, timeout: float = 3.0) -> None:
        self.identity = identity
        self.timeout = timeout
        self.idempotent = True
        self.ledger: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        self.calls: list[tuple[str, str]] = []
        self.drop_requests = 0
        self.lose_responses = 0
        self.crash_on_order = False
        self.reject = False
        self.healthy = True

    def lookup(self, operation: str) -> dict[str, Any] | None:
        self.calls.append(("lookup", operation))
        entry = self.ledger.get(operation)
        return None if entry is None else dict(entry[1])

    def order(self, operation: str, proposal: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("order", operation))
        if self.crash_on_order:
            raise Crash("worker died before the request left")
        if self.drop_requests:
            self.drop_requests -= 1
            raise OutcomeUnknown("request lost before the supplier saw it")
        if operation in self.ledger:
            stored, receipt = self.ledger[operation]
            if stored != proposal:
                raise SupplierRefused("operation already used for a different proposal")
        else:
            receipt = {
                "operation": operation,
                "status": "REJECTED" if self.reject else "ACCEPTED",
                "amount_pence": proposal["quantity"] * proposal["unit_pence"],
            }
            self.ledger[operation] = (dict(proposal), receipt)
        if self.lose_responses:
            self.lose_responses -= 1
            raise OutcomeUnknown("response lost after the supplier stored the order")
        return dict(receipt)

    def health(self) -> dict[str, Any]:
        if not self.healthy:
            raise ConnectionError("supplier unreachable")
        return {"status": "ok", "orders": len(self.ledger)}

    def sent(self) -> list[str]:
        """Operation ids of every order request, in order (retransmissions included)."""
        return [operation for kind, operation in self.calls if kind == "order"]


class RaisingModel:
    """A model that must not be asked: recovery continues from records, not new reasoning."""

    calls = 0

    def complete(self, messages, tools, *, timeout, max_output_tokens):
        self.calls += 1
        raise AssertionError("recovery asked the model for new reasoning")


@pytest.fixture
def db(tmp_path: Path):
    # synchronous=NORMAL: these tests check rules, not durability, and a WAL commit then costs no
    # fsync. The runtime's default (FULL) is asserted in test_database on its own database.
    database = Database(tmp_path / "agent.sqlite", synchronous="NORMAL")
    seed_lucy(database)
    yield database
    database.close()


@pytest.fixture
def policy() -> SpendingPolicy:
    return SpendingPolicy(operators=frozenset({OPERATOR}), total_pence=SPENDING_CEILING_PENCE)


@pytest.fixture
def supplier() -> FakeSupplier:
    return FakeSupplier()


def count(db: Database, table: str, where: str = "1", *params: Any) -> int:
    return db.connection.execute(f"SELECT count(*) FROM {table} WHERE {where}", params).fetchone()[0]


def row(db: Database, table: str, identifier: str) -> dict[str, Any]:
    found = db.connection.execute(f"SELECT * FROM {table} WHERE id=?", (identifier,)).fetchone()
    return dict(found)


def snapshot(db: Database, *tables: str) -> dict[str, list[tuple]]:
    """Every row of the named tables, for "changed nothing" comparisons."""
    tables = tables or (
        "assistant_work",
        "assistant_transcript",
        "assistant_orders",
        "assistant_spending",
        "assistant_model_calls",
        "events",
    )
    return {
        table: [tuple(r) for r in db.connection.execute(f"SELECT * FROM {table} ORDER BY rowid")] for table in tables
    }


def fence_verdicts(db: Database, epochs: set[str]) -> dict[str, bool]:
    """For each epoch: does a live claim carrying it pass the real fence (`assert_current`) on `db`?"""
    identifier = enqueue(db, "fence-check", "fence-check", "check the fence")
    work = claim(db, "fence-checker", identifier=identifier)
    assert work is not None
    verdicts = {}
    for epoch in epochs:
        try:
            with db.immediate() as connection:
                assert_current(connection, dataclasses.replace(work, epoch=epoch))
            verdicts[epoch] = True
        except PermissionError:
            verdicts[epoch] = False
    return verdicts


def money(db: Database) -> tuple[int, int]:
    found = db.connection.execute("SELECT reserved_pence, spent_pence FROM assistant_spending").fetchone()
    return found["reserved_pence"], found["spent_pence"]


def expire_lease(db: Database, work_id: str) -> None:
    """Accelerate the lease of a holder we declare dead (a fixture change, not elapsed time)."""
    db.connection.execute("UPDATE assistant_work SET expires=? WHERE id=?", (time.time() - 1, work_id))


def held_work(
    db: Database, *, origin: str = "phone:vanilla", session: str = "lucy", ttl: float = 60, now: float | None = None
) -> Claim:
    enqueue(db, origin, session, "Reorder what is short", subject="SKU-VANILLA")
    work = claim(db, "first-owner", ttl=ttl, now=now)
    assert work is not None
    return work


def approved_vanilla(
    db: Database, policy: SpendingPolicy, work: Claim, quantity: int = 6, sku: str = "SKU-VANILLA"
) -> str:
    """Propose `quantity` vanilla tubs (or another `sku`) under `work` and approve exactly that proposal."""
    order = propose(db, work, sku, quantity, target=SUPPLIER_IDENTITY)
    digest = row(db, "assistant_orders", order)["digest"]
    approve(db, order, digest, actor=OPERATOR, policy=policy, expires=time.time() + 3600)
    return order


def died_while_sending(db: Database, policy: SpendingPolicy, supplier: FakeSupplier, work: Claim) -> str:
    """An approved vanilla order, admitted (SENDING), whose worker died before the request left."""
    order = approved_vanilla(db, policy, work)
    supplier.crash_on_order = True
    with pytest.raises(Crash):
        execute(db, work, order, supplier, policy=policy)
    supplier.crash_on_order = False
    return order


# --------------------------------------------------------------------------------------------
# Chromium, for any test that asks for pytest-playwright's `page` (tests/browser, and the
# hostile class's analytics page)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    if not CHROMIUM.exists():
        reason = (
            "chromium is missing: install Debian's chromium package (apt-get install chromium); "
            "never run `playwright install`"
        )
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {reason}", pytrace=False)
        pytest.skip(reason)
    return str(CHROMIUM)


@pytest.fixture(scope="session")
def browser_type_launch_args(chromium_executable: str) -> dict:
    """Override pytest-playwright: always Debian's chromium, headless, with the known-good args."""
    return {"executable_path": chromium_executable, "headless": True, "args": CHROMIUM_ARGS}


class LocalSocketKernel(AsyncKernelManager):
    """papermill's kernel on local sockets (`kernel_manager_class=`): over TCP, jupyter_client picks free
    ports that the kernel binds a moment later, and on a busy machine another process can take one in
    between ("Address already in use", a kernel dead at start: seen once in CI)."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)
