"""The four failure experiments. Each runs real processes and records facts; verdict.py judges.

Every case gets its own folder, its own supplier process (own ledger) and a fresh shop
database with one vanilla assignment. A real worker process claims it with the short lease,
records the six-tub proposal and the operator's approval, and reports ready; the parent checks
that a competing claim is refused while that lease is live. Then:

killed               SIGKILL the worker; wait for the lease to really run out; the replacement
                     continues the approved order (no model) and finishes the work.
live_stale           the worker stays alive. After expiry (before any replacement) it tries a
                     transcript write; after the replacement finished it tries a transcript
                     write, a completion and a supplier execution with its old claim.
paused               the worker is frozen (SIGSTOP) while it holds the lease, and resumed
                     (SIGCONT) while its replacement holds the assignment (RUNNING, live lease,
                     just before it completes), where it tries the same three writes. It uses the SAME owner label as its
                     replacement, as a process restarted from the same configuration would: the
                     row then differs from its claim in the generation alone.
answer_lost          (by name only) no crash: the old worker runs one whole pass; the supplier
                     commits its order and loses the answer (OutcomeUnknown). The pass must end
                     with the order in doubt and its money reserved, not DONE. A later assignment
                     is queued; once the retry delay has passed, a replacement pass (no model)
                     must reconcile the order before a second pass takes the later work.
accepted_then_crash  the worker sends the order; the supplier commits it and holds the answer;
                     the parent kills the worker as soon as the commit is on disk, so the order
                     is SENDING locally and accepted remotely. A later assignment is queued. After
                     real expiry the replacement discovers the order (lookup, no resend) and
                     settles it before it takes the later work.

Nothing rewrites the clock or the ledger: the parent polls the wall clock against the row's
`expires`. Every wait is bounded, and every process is stopped on the way out, whatever happens.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.checkpoint import stale
from course.checkpoint.evidence import CaseEvidence, claim_fields, count_shop, count_supplier, exit_signal, work_state
from course.checkpoint.processes import START_TIMEOUT, WorkerFailed, WorkerProcess
from course.checkpoint.scenario import OPERATOR, PROMPT, SUBJECT
from course.lab.learner import NotImplementedYet
from reference_organizations.store.agent import seed_lucy
from reference_organizations.store.supplier import SupplierProcess, start_supplier
from sovereign_agent.assistant_orders import SpendingPolicy
from sovereign_agent.assistant_work import Claim, enqueue
from sovereign_agent.database import Database
from sovereign_agent.ownership import Ownership
from sovereign_agent.records import authority_epoch, lease_expiry, spending_policy

KILLED, LIVE_STALE, PAUSED, ACCEPTED_THEN_CRASH = "killed", "live_stale", "paused", "accepted_then_crash"
ALL = (KILLED, LIVE_STALE, PAUSED, ACCEPTED_THEN_CRASH)
ANSWER_LOST = "answer_lost"  # run by name: a worker pass's own decision, no crash (05's capstone)
TITLES = {
    ANSWER_LOST: "the supplier's answer lost, then a later pass",
    KILLED: "killed holder (SIGKILL before sending)",
    LIVE_STALE: "live stale holder",
    PAUSED: "paused holder (SIGSTOP, then SIGCONT)",
    ACCEPTED_THEN_CRASH: "accepted by the supplier, then crash",
}
REPLACEMENT = "replacement"
SAME_LABEL = "lucy-stock-worker"  # the paused case: old holder and replacement share a label
SUPPLIER_TIMEOUT = 3.0  # the replacement's client
HOLD_SECONDS = 30.0  # accepted_then_crash: the supplier sits on its answer this long
PASS_TIMEOUT = 30.0  # bound on one replacement pass (its supplier waits are SUPPLIER_TIMEOUT each)


class Abort(Exception):
    """A step whose failure makes the rest of the case meaningless; its text is the explanation."""


@dataclass(frozen=True)
class Setting:
    ownership: Ownership  # the implementation under test, as the parent calls it
    worker_implementation: str  # the fences the workers load: "reference" or a folder
    label: str
    lease: float
    folder: Path
    # When grading (course.grading.judge.harness): how a worker process starts (in a learner
    # sandbox), a folder for the supplier ledgers that workers cannot reach, and `verify`: the
    # parent makes the stale writes itself, through `ownership`, and only those count.
    spawn: Callable[..., Any] | None = None
    private: Path | None = None
    verify: bool = False
    claim_class: type | None = None  # the learner's Claim, to rebuild the old holder's claim (verify)
    supplier_fence: Any = None  # start_supplier's `fence`: None, "reference", or a rule of this process
    worker_pass: str = "reference"  # the pass every worker runs: the reference `run_once`, or a folder's (05)


@dataclass
class Prepared:
    """A case whose assignment is queued and whose processes are starting (or started), but
    nothing is claimed yet: the runner prepares the next case while the current one waits."""

    name: str
    evidence: CaseEvidence
    folder: Path
    database: Path
    ledger: Path
    stack: ExitStack
    db: Database | None = None
    worker: WorkerProcess | None = None
    replacement: WorkerProcess | None = None  # loaded while the old one works: its start costs no lease
    supplier: SupplierProcess | None = None
    error: str | None = None
    starting: Future | None = None  # the processes being started on the spawner thread

    def started(self) -> None:
        """Wait (bounded) until the processes have been started."""
        if self.starting is not None:
            try:
                self.starting.result(timeout=START_TIMEOUT)
            except FutureTimeout:
                self.error = self.error or f"the worker and supplier did not start within {START_TIMEOUT} s"
            finally:
                self.starting = None

    def close(self) -> None:
        """Stop (and reap) the worker and the supplier, close the database. Idempotent."""
        self.started()
        self.stack.close()

    def release(self) -> None:
        """Ask the processes to stop without waiting for them (close() reaps them later):
        end-of-file on the worker's channel, SIGTERM to the supplier."""
        for worker in (self.worker, self.replacement):
            if worker is not None:
                worker.release()
        if self.supplier is not None and self.supplier.process.poll() is None:
            self.supplier.process.terminate()


@dataclass
class Stage:
    """One running case, for the steps below: what was prepared, and what the old worker said."""

    prepared: Prepared
    setting: Setting
    ready: dict[str, Any]
    policy: SpendingPolicy
    while_waiting: Callable[[], None] | None = None


def prepare(
    name: str,
    setting: Setting,
    spawner: Executor | None = None,
    *,
    title: str | None = None,
    owner: str | None = None,
    switches: dict[str, Any] | None = None,
) -> Prepared:
    """A fresh shop database with one vanilla assignment, then the worker and the supplier
    processes (the supplier starts while the worker loads). Nothing is claimed yet.

    With a `spawner` (an executor whose single thread outlives every child: PR_SET_PDEATHSIG
    belongs to the thread that spawned), the processes start in the background and this
    returns at once. A broken set-up is recorded for the case to report. `title`, `owner` and
    the supplier's `switches` default to the named case's; the crash matrix sets its own.
    """
    evidence = CaseEvidence(case=name, title=title or TITLES[name], implementation=setting.label,
                            lease_seconds=setting.lease, fences_learner=setting.worker_implementation != "reference",
                            worker_learner=setting.worker_pass != "reference")
    folder = setting.folder / name
    folder.mkdir(parents=True)
    ledgers = (setting.private or setting.folder) / name
    ledgers.mkdir(parents=True, exist_ok=True)
    prepared = Prepared(name, evidence, folder, folder / "agent.sqlite", ledgers / "supplier.sqlite", ExitStack())
    try:
        # The database stays on this thread: sqlite3 connections belong to their thread.
        prepared.db = Database(prepared.database)
        prepared.stack.callback(prepared.db.close)
        seed_lucy(prepared.db)
        evidence.work_id = enqueue(prepared.db, f"phone:{name}", OPERATOR, PROMPT, subject=SUBJECT)
    except Exception as error:
        prepared.error = f"the case could not be set up: {type(error).__name__}: {error}"
        return prepared
    if spawner is None:
        _start_processes(prepared, setting, owner, switches)
    else:
        prepared.starting = spawner.submit(_start_processes, prepared, setting, owner, switches)
    return prepared


def _start_processes(
    prepared: Prepared, setting: Setting, owner: str | None = None, switches: dict[str, Any] | None = None
) -> None:
    evidence, began = prepared.evidence, time.monotonic()
    owner = owner or (SAME_LABEL if prepared.name == PAUSED else "old-worker")
    try:
        prepared.worker, prepared.replacement = (prepared.stack.enter_context(WorkerProcess(
            prepared.folder, database=prepared.database, implementation=setting.worker_implementation,
            worker=setting.worker_pass, name=name, owner=owner, lease=setting.lease, spawn=setting.spawn,
        )) for name in ("worker", REPLACEMENT))
        evidence.worker_pid, evidence.worker_owner = prepared.worker.pid, owner
        evidence.mark("old worker", "process started", prepared.worker.started_at)
        if switches is None and prepared.name == ACCEPTED_THEN_CRASH:
            switches = {"hold_seconds": HOLD_SECONDS, "committed_file": prepared.folder / "committed.json"}
        if switches is None and prepared.name == ANSWER_LOST:
            switches = {"drop_first_response": True}
        socket = {"socket": prepared.folder / "supplier.sock"} if setting.spawn is not None else {}
        fence = {"fence": setting.supplier_fence} if setting.supplier_fence is not None else {}
        prepared.supplier = prepared.stack.enter_context(start_supplier(prepared.ledger, **(switches or {}), **socket,
                                                                        **fence))
        evidence.supplier_pid = prepared.supplier.pid
        evidence.mark("supplier", "listening", time.time())
    except Exception as error:
        prepared.error = f"the case could not be set up: {type(error).__name__}: {error}"
    evidence.prepare_seconds = time.monotonic() - began


def run_prepared(
    prepared: Prepared,
    setting: Setting,
    *,
    on_claim: Callable[[], None] | None = None,
    while_waiting: Callable[[], None] | None = None,
    reap_later: bool = False,
) -> CaseEvidence:
    """Run a prepared case end to end and return its (unjudged) evidence.

    `on_claim` is called once the old worker has been told to claim (the runner starts
    preparing the next case there, in the background); `while_waiting` once while the parent
    waits for the lease to run out (the runner reaps earlier cases' processes there).
    Its processes are stopped on the way out; with `reap_later`, a case that
    completed only *asks* them to stop, and the caller must call `prepared.close()` (the
    runner reaps them during the next case's wait). A failed or interrupted case is always
    stopped and reaped at once.
    """
    evidence = prepared.evidence
    started = time.monotonic()
    evidence.started_at = time.time()
    completed = False
    with recorded(prepared):
        try:
            prepared.started()
            if prepared.error is not None:
                raise Abort(prepared.error)
            policy = spending_policy(prepared.db.connection, {OPERATOR})
            if prepared.name == ANSWER_LOST:  # a whole pass, not the claim-and-obey protocol
                if on_claim is not None:
                    on_claim()
                STEPS[ANSWER_LOST](Stage(prepared, setting, {}, policy, while_waiting))
            else:
                _claim_and_obey(prepared, setting, policy, on_claim, while_waiting)
            completed = True
        finally:
            if completed and reap_later:
                prepared.release()
            else:
                prepared.close()
    _count(evidence, prepared.database, prepared.ledger)
    evidence.wall_seconds = time.monotonic() - started
    return evidence


def _claim_and_obey(prepared: Prepared, setting: Setting, policy: SpendingPolicy,
                    on_claim: Callable[[], None] | None, while_waiting: Callable[[], None] | None) -> None:
    """The four cases: the old worker claims and prepares the order, a competing claim is refused
    under its live lease, then the case's own steps."""
    worker, evidence = prepared.worker, prepared.evidence
    worker.send({"do": "claim"})
    if on_claim is not None:
        on_claim()
    ready = worker.ready()
    _record_ready(evidence, ready)
    if "error" in ready:
        if ready["error"].startswith("not implemented yet"):
            raise Abort(f"{ready['error']} (the old worker stopped while it claimed and prepared the order)")
        raise Abort(f"the old worker could not claim and prepare the order: {ready['error']}")
    stage = Stage(prepared, setting, ready, policy, while_waiting)
    _competing_claim(stage)
    STEPS[prepared.name](stage)


@contextmanager
def recorded(prepared: Prepared, what: str = "case") -> Iterator[None]:
    """A case (or crash trial) that stops becomes its explanation; how its old worker ended (exit
    status, the signals it was sent) is recorded whatever happened."""
    evidence = prepared.evidence
    try:
        yield
    except (NotImplementedYet, Abort, WorkerFailed) as stopped:
        evidence.failures.append(str(stopped))
    except Exception as error:  # anything else: say what, keep the other cases running
        evidence.failures.append(f"the {what} stopped unexpectedly: {type(error).__name__}: {error}")
    finally:
        if prepared.worker is not None:
            evidence.worker_exit = prepared.worker.process.returncode
            evidence.worker_signal = exit_signal(evidence.worker_exit)
            for sent in prepared.worker.signals:
                evidence.mark("old worker", sent["what"], sent["at"], signal=sent["signal"])


# --- steps shared by the cases ---------------------------------------------------------------


def _record_ready(evidence: CaseEvidence, ready: dict[str, Any]) -> None:
    claim = ready.get("claim") or {}
    evidence.old_generation = claim.get("generation")
    evidence.operation = ready.get("order")
    evidence.order_amount = ready.get("amount")
    evidence.lease_started_at = ready.get("claimed_at")
    if ready.get("claimed_at") is not None and claim:
        evidence.mark("old worker", "claimed", ready["claimed_at"], generation=claim.get("generation"))
        evidence.leases.append({
            "lane": "old worker", "generation": claim.get("generation"), "owner": claim.get("owner"),
            "start": ready["claimed_at"], "end": ready.get("expires"), "kind": "lease",
        })
    if "ready_at" in ready and "error" not in ready:
        evidence.mark("old worker", "proposed + approved, ready", ready["ready_at"])


def _competing_claim(stage: Stage) -> None:
    """While the first lease is live, another claimant must get None."""
    evidence = stage.prepared.evidence
    expires = lease_expiry(stage.prepared.db.connection, evidence.work_id)
    at = time.time()
    evidence.competing_claim_lease_left = None if expires is None else expires - at
    if expires is not None and expires <= at:
        raise Abort(
            f"the old worker's lease had already run out ({at - expires:.2f} s ago) when the parent could first "
            f"check a competing claim: this machine is too slow for a {stage.setting.lease} s lease; "
            "run again with a longer lease"
        )
    competitor = stage.setting.ownership.claim(stage.prepared.db, "competitor", ttl=stage.setting.lease)
    evidence.competing_claim = None if competitor is None else claim_fields(competitor)
    evidence.mark("replacement", "competing claim: " + ("None" if competitor is None else "TAKEN"), at)
    if competitor is not None:
        left = evidence.competing_claim_lease_left
        raise Abort(
            "a competing claim succeeded while the first lease was live "
            f"(it took generation {getattr(competitor, 'generation', '?')} with "
            f"{left if left is None else round(left, 2)} s of the old worker's lease left)"
        )


def _wait_for_expiry(stage: Stage) -> None:
    """Poll the wall clock against the row's `expires` until the lease has really run out.

    Earlier cases' processes are reaped here first (the lease has to run out anyway). The
    lease time waited is the row's own interval, [claim, expires]: a late poll adds to the wall
    time, never to the lease time.
    """
    evidence = stage.prepared.evidence
    if stage.while_waiting is not None:
        stage.while_waiting()
        stage.while_waiting = None
    bound = stage.setting.lease + 5.0
    deadline = time.monotonic() + bound
    with closing(sqlite3.connect(stage.prepared.database, timeout=10)) as db:
        while True:
            expires = lease_expiry(db, evidence.work_id)
            now = time.time()
            if expires is None or now > expires:
                break
            if time.monotonic() > deadline:
                raise Abort(
                    f"the old worker's lease had not expired {bound:.1f} s after the wait began "
                    f"(the row says it expires in {expires - now:.1f} s; the lease asked for was "
                    f"{stage.setting.lease} s)"
                )
            time.sleep(min(0.05, max(0.001, expires - now)))
    evidence.expiry_observed_at = now
    evidence.lease_expires_at = expires if expires is not None else now
    if evidence.lease_started_at is not None:
        evidence.lease_waited_seconds = evidence.lease_expires_at - evidence.lease_started_at
    evidence.mark("replacement", "lease expired (wall clock)", now)


def _replace(stage: Stage, owner: str, holding: Callable[[], None] | None = None) -> None:
    """The replacement: one pass of the worker under test, in its own process, with a model that
    fails if asked (`holding`: see _worker_pass)."""
    evidence = stage.prepared.evidence
    outcome, began, ended = _worker_pass(stage, "none", owner, holding)
    evidence.model_calls = outcome.pop("model_calls", 0)
    evidence.replacement = outcome | {"owner": owner, "began": began, "ended": ended}
    evidence.mark("replacement", "run_once", began)
    evidence.leases.append({
        "lane": "replacement", "generation": outcome.get("generation"), "owner": owner,
        "start": began, "end": ended, "kind": "pass",
    })


HOLD_POINT = "receipt-recorded"  # where a replacement that is `holding` waits: its orders settled, finish not called


def _worker_pass(stage: Stage, model: str, owner: str,
                 holding: Callable[[], None] | None = None) -> tuple[dict[str, Any], float, float]:
    """One pass of the worker under test in the replacement process (`model`: "none", a model that
    fails if asked, or "offline"). `holding` runs once just before the pass completes its work: the
    row is still RUNNING under this pass's claim, with a live lease, and its orders are settled.
    Returns how the pass ended (its own account, for the picture: the judging reads the files)."""
    process = stage.prepared.replacement
    process.request({"do": "ping"}, timeout=START_TIMEOUT)  # loaded before its pass is timed
    began = time.time()
    process.send({"do": "pass", "point": HOLD_POINT if holding else None, "endpoint": _endpoint(stage),
                  "identity": stage.prepared.supplier.identity, "timeout": SUPPLIER_TIMEOUT, "model": model,
                  "owner": owner, "own_lease": True})
    reply = _held(process) if holding is not None else None
    if holding is not None and reply is None:
        holding()
        process.send({"do": "go"})
    reply = reply or process.reply(PASS_TIMEOUT)
    error = str(reply.get("error") or "")
    if error.startswith("NotImplementedYet: "):
        raise Abort(error.removeprefix("NotImplementedYet: "))
    outcome = dict(reply.get("outcome") or {}) | ({"error": error} if error else {})
    return outcome | {"model_calls": int(reply.get("model_calls") or 0)}, began, time.time()


def _held(process: WorkerProcess) -> dict[str, Any] | None:
    """None once the replacement stopped at HOLD_POINT (its ready record); else its pass's reply,
    as it ended before getting there (bounded: no reply in time is a WorkerFailed)."""
    deadline = time.monotonic() + PASS_TIMEOUT
    while not process.ready_file.exists():
        early = process.poll_reply(0.005)
        if early is not None:
            return early
        if process.process.poll() is not None or time.monotonic() > deadline:
            return process.reply(0)
    return None


def _stale_writes(stage: Stage) -> None:
    evidence = stage.prepared.evidence
    reply = stage.prepared.worker.request({"do": "stale", "endpoint": _endpoint(stage)})
    evidence.stale_attempts = reply.get("attempts", [])
    if stage.setting.verify:  # the worker's own report is not evidence: the parent's attempts are
        client = stage.prepared.supplier.client()
        evidence.stale_attempts = stale.writes(stage.prepared.db, stage.setting.ownership, _old_claim(stage),
                                               evidence.operation, client, stage.policy)
    evidence.refused_boundaries = [a["boundary"] for a in evidence.stale_attempts if a["outcome"] == "refused"]
    for attempt in evidence.stale_attempts:
        evidence.mark("old worker", f"{attempt['boundary']}: {attempt['outcome']}", attempt["at"],
                      boundary=attempt["boundary"], outcome=attempt["outcome"])


def _endpoint(stage: Stage) -> str:
    """Where the old worker reaches the supplier: its Unix socket when the worker has a network of
    its own (a learner sandbox), else its loopback address."""
    return stage.prepared.supplier.socket_endpoint or stage.prepared.supplier.endpoint


def _old_claim(stage: Stage) -> Any:
    """The old holder's claim, rebuilt from what the parent knows itself: the assignment it queued,
    the first generation, the label it gave the worker, the epoch in the database."""
    evidence = stage.prepared.evidence
    epoch = authority_epoch(stage.prepared.db.connection)
    fields = dict(id=evidence.work_id, session=OPERATOR, prompt=PROMPT, generation=1, owner=evidence.worker_owner,
                  epoch=epoch, subject=SUBJECT, role="shop")
    cls = stage.setting.claim_class or Claim
    try:
        return cls(**{name: fields[name] for name in (f.name for f in dataclasses.fields(cls))})
    except (KeyError, TypeError):  # a Claim declared with other fields: the chapter's own then
        return Claim(**fields)


def _dismiss(stage: Stage) -> None:
    """Tell a live old worker to exit, and wait (bounded) for it to do so."""
    stage.prepared.worker.request({"do": "exit"})
    if stage.prepared.worker.wait() is None:
        raise WorkerFailed("the old worker did not exit after being told to")
    stage.prepared.evidence.mark("old worker", "exited", time.time())


# --- the four cases ----------------------------------------------------------------------------


def _killed(stage: Stage) -> None:
    stage.prepared.worker.kill()
    _wait_for_expiry(stage)
    _replace(stage, REPLACEMENT)


def _live_stale(stage: Stage) -> None:
    _wait_for_expiry(stage)
    # Beyond the chapter: expiry alone (nobody has replaced it yet) must end its authority.
    probe = stage.prepared.worker.request({"do": "observe"})
    stage.prepared.evidence.expired_probe = probe.get("attempts", [])
    if stage.setting.verify:
        stage.prepared.evidence.expired_probe = [stale.transcript(stage.prepared.db, stage.setting.ownership,
                                                                  _old_claim(stage))]
    for attempt in stage.prepared.evidence.expired_probe:
        stage.prepared.evidence.mark("old worker", f"after expiry, {attempt['boundary']}: {attempt['outcome']}",
                            attempt["at"], boundary=attempt["boundary"], outcome=attempt["outcome"])
    _replace(stage, REPLACEMENT)
    _stale_writes(stage)
    _dismiss(stage)


def _paused(stage: Stage) -> None:
    stage.prepared.evidence.worker_state_when_paused = stage.prepared.worker.pause()
    _wait_for_expiry(stage)

    def thaw() -> None:  # the replacement holds generation 2, RUNNING, under the same label, lease live
        stage.prepared.worker.resume()
        _stale_writes(stage)

    _replace(stage, SAME_LABEL, holding=thaw)
    if not stage.prepared.evidence.stale_attempts:  # the replacement never reached its completion
        stage.prepared.worker.resume()
        _stale_writes(stage)
    _dismiss(stage)


def _accepted_then_crash(stage: Stage) -> None:
    evidence, worker = stage.prepared.evidence, stage.prepared.worker
    # The client's timeout must be shorter than what is left of the lease, or the fence (rightly)
    # refuses to admit the request.
    timeout = round(stage.setting.lease / 2, 3)
    committed = stage.prepared.folder / "committed.json"
    worker.send({"do": "execute", "endpoint": _endpoint(stage), "timeout": timeout})
    deadline = time.monotonic() + stage.setting.lease + 5.0
    while not committed.exists():
        early = worker.poll_reply(0.005)
        if early is not None:  # the worker finished executing: the request was not held
            raise Abort(f"the old worker's order was not left in flight: it answered {early.get('attempts')}")
        if worker.process.poll() is not None:
            raise Abort(f"the old worker exited (status {worker.process.returncode}) before the supplier "
                        "committed its order")
        if time.monotonic() > deadline:
            raise Abort(f"the supplier did not commit the old worker's order within {stage.setting.lease + 5.0} s")
    worker.kill()
    state = work_state(stage.prepared.database, evidence.work_id)
    evidence.order_status_after_crash = state["orders"][0] if state["orders"] else None
    evidence.supplier_orders_at_crash = count_supplier(stage.prepared.supplier.ledger)["orders"]
    later = enqueue(stage.prepared.db, "phone:later", OPERATOR, "Check the strawberry stock", subject="SKU-STRAWBERRY")
    evidence.mark("replacement", "later assignment queued", time.time())
    _wait_for_expiry(stage)
    _replace(stage, REPLACEMENT)
    # A second pass may take the later assignment; new work may reason, so it gets a real model
    # whose calls are counted separately from the recovery's.
    outcome, began, ended = _worker_pass(stage, "offline", REPLACEMENT)
    evidence.later_work = {"id": later, "model_calls": outcome.pop("model_calls"), "pass": outcome,
                           "began": began, "ended": ended}
    evidence.mark("replacement", "second pass (later work)", began)


def _answer_lost(stage: Stage) -> None:
    evidence, worker = stage.prepared.evidence, stage.prepared.worker
    worker.request({"do": "ping"}, timeout=START_TIMEOUT)
    reply = worker.request({"do": "pass", "point": None, "endpoint": _endpoint(stage), "model": "offline",
                            "identity": stage.prepared.supplier.identity, "timeout": SUPPLIER_TIMEOUT,
                            "own_lease": True}, timeout=PASS_TIMEOUT)
    evidence.mark("old worker", f"pass ended: {reply.get('status') or reply.get('error')}", reply.get("ended_at") or time.time())
    error = str(reply.get("error") or "")
    if error.startswith("NotImplementedYet: "):
        raise Abort(error.removeprefix("NotImplementedYet: "))
    state, shop = work_state(stage.prepared.database, evidence.work_id), count_shop(stage.prepared.database, evidence.work_id)
    evidence.operation = next((o["id"] for o in shop["orders"]), None)
    evidence.order_amount = next((o["amount"] for o in shop["orders"]), None)
    evidence.old_generation = shop["generation"]
    evidence.after_lost_answer = {"status": state.get("status"), "order_status": (state["orders"] or [None])[0],
                                  "reserved_pence": shop["reserved_pence"], "spent_pence": shop["spent_pence"],
                                  "available_after": state.get("available_after"), "pass": reply.get("outcome")}
    later = enqueue(stage.prepared.db, "phone:later", OPERATOR, "Check the strawberry stock", subject="SKU-STRAWBERRY")
    _wait_until(state.get("available_after"), stage)
    evidence.expiry_observed_at = time.time()
    _replace(stage, REPLACEMENT)
    outcome, began, ended = _worker_pass(stage, "offline", REPLACEMENT)
    evidence.later_work = {"id": later, "model_calls": outcome.pop("model_calls"), "pass": outcome,
                           "began": began, "ended": ended}


def _wait_until(moment: float | None, stage: Stage) -> None:
    """The retry delay of BLOCKED work, on the wall clock (bounded by the runtime's 60 s cap)."""
    if moment is not None:
        time.sleep(max(0.0, min(moment - time.time(), 61.0)) + 0.05)
    stage.prepared.evidence.mark("replacement", "retry delay over (wall clock)", time.time())


STEPS: dict[str, Callable[[Stage], None]] = {
    KILLED: _killed,
    LIVE_STALE: _live_stale,
    PAUSED: _paused,
    ACCEPTED_THEN_CRASH: _accepted_then_crash,
    ANSWER_LOST: _answer_lost,
}


# --- counting, after every process is gone ------------------------------------------------------


def _count(evidence: CaseEvidence, database: Path, ledger: Path) -> None:
    if evidence.work_id is not None and database.exists():
        shop = count_shop(database, evidence.work_id)
        evidence.generation, evidence.owner = shop["generation"], shop["owner"]
        evidence.work_status, evidence.work_result = shop["status"], shop["result"]
        evidence.transcript_rows = shop["transcript"]
        evidence.model_calls_recorded = shop["model_calls"]
        evidence.reserved_pence, evidence.spent_pence = shop["reserved_pence"], shop["spent_pence"]
        evidence.order_status = next(
            (o["status"] for o in shop["orders"] if o["id"] == evidence.operation), None
        )
        evidence.events = shop["events"]
    if ledger.exists():
        supplier = count_supplier(ledger)
        evidence.supplier_orders, evidence.supplier_operations = supplier["orders"], supplier["operations"]
        evidence.supplier_posts, evidence.supplier_gets = supplier["posts"], supplier["gets"]
        evidence.supplier_stale_admitted, evidence.supplier_stale_refused = supplier["stale_admitted"], supplier["stale_refused"]
        evidence.supplier_requests = supplier["requests"]
        for request in supplier["requests"]:
            if request["operation"] is not None:
                evidence.mark("supplier", f"{request['method']} {request['status']}", request["at"],
                              method=request["method"], status=request["status"])
    if evidence.later_work is not None:
        later_id = evidence.later_work["id"]
        settled = [e["seq"] for e in evidence.events if e["kind"] == "assistant.order.settled"
                   and e["payload"].get("order") == evidence.operation]
        touched = [e for e in evidence.events if e["payload"].get("work") == later_id
                   and e["kind"] != "assistant.work.enqueued"]
        evidence.later_work |= {
            "settled_seq": settled[0] if settled else None,
            "first_seq": touched[0]["seq"] if touched else None,
            "first_kind": touched[0]["kind"] if touched else None,
            "status": work_state(database, later_id).get("status"),
        }
