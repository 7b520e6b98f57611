"""One crash trial: a real worker stops itself at a crash point, the parent applies a nemesis.

    prepare (checkpoint's cases.prepare: shop database, worker process, supplier process)
    -> the worker runs one pass and stops at the point (ready record; or the supplier's
       committed file for `supplier-committed`, where the supplier holds its answer)
    -> jitter, then the nemesis: SIGKILL, or SIGSTOP
    -> the lease really runs out (wall clock against the row's `expires`)
    -> takeover snapshot, then the replacement: one pass of the same worker in a second process
       (loaded in advance), same owner label as the old worker (a restarted process), a counted
       offline model
    -> SIGSTOP only: SIGCONT just before the replacement completes (its row RUNNING, lease live),
       and the old worker goes on writing; then the replacement completes
    -> every process stopped and reaped; counts read from the shop database and the supplier's
       ledger file; invariants.judge_trial decides.

Everything the invariants use is read from files and the operating system, not from what the
workers say about themselves.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from course.checkpoint import blame
from course.checkpoint.cases import (
    HOLD_SECONDS, SAME_LABEL, Abort, Setting, Stage, _count, _wait_for_expiry, _worker_pass, prepare,
    recorded,
)
from course.checkpoint.crashpoints import POINTS, SUPPLIER_POINT, policy_for
from course.checkpoint.evidence import (
    CaseEvidence, count_supplier, first_claim, first_order, last_rows, stale_rows, transcript_rows, work_state,
)
from course.checkpoint.processes import START_TIMEOUT, WorkerFailed
from reference_organizations.children import alive

SIGKILL, SIGSTOP = "SIGKILL", "SIGSTOP"
NEMESES = (SIGKILL, SIGSTOP)
POINT_TIMEOUT = 10.0  # bound on the old worker's way from "go" to its crash point (after its lease began)
# At most this many old workers run their pass (claim to crash point, ~0.1 s) at once. Side by
# side on two cores, a pass starved for over a second would reach the supplier with less lease
# left than its timeout, and the fence (rightly) refuses to send: the crash would miss its point.
PASSING = threading.BoundedSemaphore(2)


@dataclass(frozen=True)
class TrialSpec:
    point: str
    nemesis: str
    jitter: float = 0.0  # seconds between reaching the point and the nemesis
    index: int = 0

    @property
    def name(self) -> str:
        return f"t{self.index:03d}-{self.point}-{self.nemesis.lower()}"


@dataclass
class TrialEvidence(CaseEvidence):
    point: str = ""
    nemesis: str = ""
    jitter: float = 0.0
    index: int = 0
    seed: int | None = None
    reached_at: float | None = None  # when the point was reached (ready record / committed file)
    at_crash: dict[str, Any] = field(default_factory=dict)  # shop and ledger state at the nemesis
    takeover: dict[str, Any] = field(default_factory=dict)  # high-water marks before the replacement
    after_replacement: dict[str, Any] = field(default_factory=dict)  # the work row when it finished
    old_pass: dict[str, Any] | None = None  # how the old worker's pass ended (its own account)
    left_running: list[int] = field(default_factory=list)  # pids alive after the trial
    invariants: list[dict[str, Any]] = field(default_factory=list)


def run_trial(spec: TrialSpec, setting: Setting, *, seed: int | None = None) -> TrialEvidence:
    """Run one trial end to end; never raises for a trial that goes wrong (it is recorded)."""
    from course.checkpoint.invariants import judge_trial

    if spec.point not in POINTS or spec.nemesis not in NEMESES:
        raise ValueError(f"unknown point or nemesis: {spec}")
    folder = setting.folder / spec.name
    switches = {"hold_seconds": HOLD_SECONDS, "committed_file": folder / "committed.json"} \
        if spec.point == SUPPLIER_POINT else {}
    prepared = prepare(spec.name, setting, title=f"{POINTS[spec.point]}, then {spec.nemesis}",
                       owner=SAME_LABEL, switches=switches)
    evidence = TrialEvidence(**asdict(prepared.evidence), point=spec.point, nemesis=spec.nemesis,
                             jitter=spec.jitter, index=spec.index, seed=seed)
    prepared.evidence = evidence
    started = time.monotonic()
    evidence.started_at = time.time()
    with recorded(prepared, "trial"):
        try:
            if prepared.error is not None:
                raise Abort(prepared.error)
            _steps(spec, setting, prepared, evidence)
        finally:
            prepared.close()
    evidence.left_running = _left_running(prepared, evidence, sandboxed=setting.spawn is not None)
    _facts(evidence, prepared.database)
    _count(evidence, prepared.database, prepared.ledger)
    evidence.wall_seconds = time.monotonic() - started
    return judge_trial(evidence)


def _left_running(prepared: Any, evidence: TrialEvidence, *, sandboxed: bool) -> list[int]:
    """The trial's processes still running after it was closed. A worker started in a learner
    sandbox (grading) is asked through its handle: its pid is the grader's number for it, not a
    process of this one's namespace."""
    found = [evidence.supplier_pid] if evidence.supplier_pid and alive(evidence.supplier_pid) else []
    for worker in (prepared.worker, prepared.replacement):
        if worker is None:
            continue
        if worker.process.poll() is None if sandboxed else alive(worker.pid):
            found.append(worker.pid)
    return found


def _steps(spec: TrialSpec, setting: Setting, prepared: Any, evidence: TrialEvidence) -> None:
    worker, supplier = prepared.worker, prepared.supplier
    worker.request({"do": "ping"}, timeout=START_TIMEOUT)  # loaded: its imports cannot eat the lease
    # The old worker's supplier timeout: admission needs more lease left than that. At
    # `supplier-committed` the worker waits for the held answer until it times out, and the
    # nemesis must land first: half the lease (as the checkpoint's accepted_then_crash case).
    timeout = setting.lease / (2 if spec.point == SUPPLIER_POINT else 4)
    with PASSING:
        worker.send({"do": "pass", "point": spec.point, "endpoint": supplier.socket_endpoint or supplier.endpoint,
                     "identity": supplier.identity, "timeout": round(timeout, 3)})
        _wait_for_point(spec, prepared, evidence)
    if spec.jitter > 0:
        time.sleep(spec.jitter)
    evidence.at_crash = _state(prepared.database, prepared.ledger, evidence.work_id)
    if spec.nemesis == SIGKILL:
        worker.kill()
    else:
        evidence.worker_state_when_paused = worker.pause()
    stage = Stage(prepared, setting, {}, policy_for(prepared.db))
    _wait_for_expiry(stage)
    evidence.takeover = _high_water(prepared.database, evidence.work_id)
    thawed: list[bool] = []

    def thaw() -> None:
        """SIGSTOP only: the old worker goes on with its pass, told to where its own hook stopped it."""
        thawed.append(True)
        worker.resume()
        if spec.point != SUPPLIER_POINT:  # stopped by its own hook: it waits to be told to go on
            worker.send({"do": "go"})
        evidence.old_pass = worker.reply()
        ended_with = evidence.old_pass.get("error") or evidence.old_pass.get("status") or "ended"
        refused = str(ended_with).startswith("PermissionError")
        evidence.mark("old worker", f"after takeover, pass ended: {ended_with}", evidence.old_pass["ended_at"],
                      boundary="its resumed pass", outcome="refused" if refused else str(ended_with)[:40])

    # A frozen worker is thawed just before the replacement completes: the row is RUNNING, its lease
    # live, its label the same, so the generation is the only difference between the claim and the row.
    outcome, began, ended = _worker_pass(stage, "offline", SAME_LABEL, thaw if spec.nemesis == SIGSTOP else None)
    evidence.model_calls = outcome.pop("model_calls")
    evidence.replacement = outcome | {"owner": SAME_LABEL, "began": began, "ended": ended}
    evidence.after_replacement = work_state(prepared.database, evidence.work_id) | {"at": time.time()}
    evidence.mark("replacement", "run_once", began)
    evidence.leases.append({"lane": "replacement", "generation": outcome.get("generation"), "owner": SAME_LABEL,
                            "start": began, "end": ended, "kind": "pass"})
    if spec.nemesis == SIGSTOP:
        if not thawed:  # the replacement completed nothing (the old pass had finished the work, or it failed)
            thaw()
        worker.request({"do": "exit"})
        if worker.wait() is None:
            raise WorkerFailed("the old worker did not exit after being told to")


def _wait_for_point(spec: TrialSpec, prepared: Any, evidence: TrialEvidence) -> None:
    """Until the old worker stops at its point (or the supplier committed), bounded."""
    worker = prepared.worker
    signal_file = prepared.folder / "committed.json" if spec.point == SUPPLIER_POINT else worker.ready_file
    deadline = time.monotonic() + setting_bound(evidence)
    checked = time.monotonic()
    while not signal_file.exists():
        early = worker.poll_reply(0.003)
        if early is not None:
            # The points are calls through `ownership` and the supplier: a pass that completed its work
            # without reaching one made that step some other way, which no fence can check. Any other
            # early end (a lease too short on a loaded machine) says nothing of the learner's code.
            bypassed = early.get("status") == "DONE" and not early.get("reached") and spec.point != SUPPLIER_POINT
            step = blame.revisit_text(("assert_current",), evidence) if bypassed else None
            raise Abort(f"the old worker's pass ended before crash point {spec.point} "
                        f"({POINTS[spec.point]}): {early.get('error') or early.get('status')}"
                        + (f" (revisit {step})" if step else ""))
        if time.monotonic() - checked > 0.05:  # asking the process's state may cost a round trip (grading)
            checked = time.monotonic()
            if worker.process.poll() is not None:
                raise Abort(f"the old worker exited (status {worker.process.returncode}) before crash point "
                            f"{spec.point}")
        if time.monotonic() > deadline:
            raise Abort(f"the old worker did not reach crash point {spec.point} within {setting_bound(evidence)} s")
    evidence.reached_at = signal_file.stat().st_mtime
    evidence.mark("old worker", f"crash point: {spec.point}", evidence.reached_at, crash_point=spec.point)


def setting_bound(evidence: TrialEvidence) -> float:
    return POINT_TIMEOUT + evidence.lease_seconds


def _state(database: Path, ledger: Path, work_id: str) -> dict[str, Any]:
    """The shop and the supplier at the nemesis: where the crash really landed."""
    state = work_state(database, work_id)
    state["transcript"] = transcript_rows(database, work_id)
    state["supplier_orders"] = count_supplier(ledger)["orders"]
    state["at"] = time.time()
    return state


def _high_water(database: Path, work_id: str) -> dict[str, Any]:
    """Before the replacement: the generation held, the order's state, the last row of each log."""
    state = work_state(database, work_id)
    return {"at": time.time(), "generation": state.get("generation"), "order_status": (state["orders"] or [None])[0],
            "status": state.get("status"), "last_rowid": last_rows(database)}


def _facts(evidence: TrialEvidence, database: Path) -> None:
    """The old worker's generation, lease and order, from the shop's own tables."""
    if evidence.work_id is None or not database.exists():
        return
    claimed, order = first_claim(database), first_order(database, evidence.work_id)
    if claimed is not None:
        payload = json.loads(claimed["payload"])
        evidence.old_generation = payload["generation"]
        evidence.lease_started_at = claimed["created_at"]
        evidence.leases.insert(0, {"lane": "old worker", "generation": payload["generation"],
                                   "owner": payload["owner"], "start": claimed["created_at"],
                                   "end": payload["expires"], "kind": "lease"})
        if evidence.lease_expires_at is not None:
            evidence.lease_waited_seconds = evidence.lease_expires_at - claimed["created_at"]
    if evidence.takeover and evidence.takeover.get("status") == "DONE":
        evidence.lease_waited_seconds = 0.0  # the work was finished: no lease was left to wait for
    if order is not None:
        evidence.operation, evidence.order_amount = order["id"], order["amount"]
    if evidence.takeover:
        evidence.takeover["stale_rows"] = stale_rows(database, evidence.takeover["last_rowid"])
