"""06: the `sending` window, with and without fencing at the resource, counted from the supplier's ledger.

    from course.lessons.resource_fence import watch_window
    print(watch_window(admit_generation, trials=2).summary())   # a rule of yours, or "reference"

One trial: a real old holder (`course.lessons.stale_sender`) is admitted by the shop's fence and freezes
itself with SIGSTOP just before its order leaves; its 2 s lease really runs out; a replacement
(the reference runtime, the same owner label, generation 2) looks the order up, sends it with its
own token and has it confirmed; then the old holder gets SIGCONT and its request leaves with
generation 1. Without a fence the supplier answers it (a replayed receipt: the operation id is the
same); with one, the supplier itself refuses it. Whether a stale request got through is read from
the supplier's ledger (`tokens`: every order's work id, generation and admission), never from what
the old holder says.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from reference_organizations.children import spawn, stop, wait_for_file
from sovereign_agent.records import lease_expiry, orders_of

LEASE_SECONDS = 2.0


@dataclass
class WindowTrial:
    fenced: bool
    old_generation: int | None = None
    new_generation: int | None = None
    stale_requests: int = 0  # orders that arrived with a generation below one already admitted
    stale_admitted: int = 0  # of those, the ones the supplier admitted: the window was open
    supplier_orders: int = 0
    posts: int = 0
    state_when_stopped: str = ""
    order_status: str = ""  # the shop's order after both holders are done
    old_holder: dict[str, Any] = field(default_factory=dict)  # its own account (for the picture only)
    error: str = ""
    wall_seconds: float = 0.0

    @property
    def window_open(self) -> bool:
        return self.stale_admitted > 0


@dataclass
class Window:
    before: list[WindowTrial]  # the supplier without a fence
    after: list[WindowTrial]  # the same trials, the supplier fenced by the rule

    def counts(self) -> dict[str, int]:
        return {"before": sum(t.window_open for t in self.before), "after": sum(t.window_open for t in self.after)}

    def summary(self) -> str:
        lines = []
        for name, trials in (("without a fence at the supplier", self.before), ("with the fence at the supplier", self.after)):
            open_ = sum(t.window_open for t in trials)
            lines.append(f"{name}: {open_} of {len(trials)} trials let a stale order through")
            for t in trials:
                said = t.old_holder.get("supplier") or t.old_holder.get("outcome") or "no answer"
                lines.append(f"  generation {t.old_generation} sent after generation {t.new_generation}: "
                             f"{t.stale_admitted} of {t.stale_requests} stale request(s) admitted; "
                             f"supplier orders {t.supplier_orders}, POSTs {t.posts}; old holder: {said[:70]}"
                             + (f"; ERROR {t.error}" if t.error else ""))
        return "\n".join(lines)


def watch_window(rule: str | Callable[..., bool] = "reference", *, trials: int = 2,
                 lease_seconds: float = LEASE_SECONDS) -> Window:
    """`trials` SIGSTOP-at-sending trials without a fence at the supplier, then as many with `rule`.
    A rule that cannot answer (a stub, say) raises here, before any process starts."""
    if callable(rule):
        _probe(rule)
    return Window([run_window(None, lease_seconds=lease_seconds) for _ in range(trials)],
                  [run_window(rule, lease_seconds=lease_seconds) for _ in range(trials)])


def _probe(rule: Callable[..., bool]) -> None:
    """One call of the rule on a fresh, empty ledger: what it raises is raised here, in the caller."""
    from course.lessons.fence_checks import fresh_ledger

    ledger = fresh_ledger()
    try:
        answer = rule(ledger, "probe", 1)
    finally:
        ledger.close()
    if not isinstance(answer, bool):
        raise TypeError(f"the rule answered {answer!r} for a work item never seen; it must return True or False")


def run_window(rule: str | Callable[..., bool] | None, *, lease_seconds: float = LEASE_SECONDS) -> WindowTrial:
    """One trial (about lease_seconds + 1 s); every process is stopped before it returns."""
    from reference_organizations.store.supplier import start_supplier

    trial = WindowTrial(fenced=rule is not None)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ch12-window-") as scratch:
        folder = Path(scratch)
        db, work_id = _shop(folder / "agent.sqlite")
        try:
            with start_supplier(folder / "supplier.sqlite", fence=rule) as supplier:
                _trial(trial, db, work_id, supplier, folder, lease_seconds)
                _count(trial, supplier)
        except Exception as error:  # recorded, so that a notebook shows what went wrong
            trial.error = f"{type(error).__name__}: {error}"
        finally:
            trial.order_status = _order_status(db, work_id)
            db.close()
    trial.wall_seconds = time.monotonic() - began
    return trial


def _shop(path: Path) -> tuple[Any, str]:
    from course.checkpoint.scenario import OPERATOR, PROMPT, SUBJECT
    from reference_organizations.store.agent import seed_lucy
    from sovereign_agent.assistant_work import enqueue
    from sovereign_agent.database import Database

    db = Database(path)
    seed_lucy(db)
    return db, enqueue(db, "phone:window", OPERATOR, PROMPT, subject=SUBJECT)


def _trial(trial: WindowTrial, db: Any, work_id: str, supplier: Any, folder: Path, lease: float) -> None:
    from course.lessons.stale_sender import OWNER
    from sovereign_agent.assistant_orders import execute
    from sovereign_agent.assistant_work import claim, finish
    from sovereign_agent.records import spending_policy

    ready = folder / "stopped.json"
    argv = [sys.executable, "-P", "-m", "course.lessons.stale_sender", "--database", folder / "agent.sqlite",
            "--endpoint", supplier.endpoint, "--identity", supplier.identity, "--lease", str(lease), "--ready", ready]
    with open(folder / "sender.log", "ab") as log:
        sender = spawn(argv, stdout=subprocess.PIPE, stderr=log)
    try:
        stopped = json.loads(wait_for_file(ready, timeout=30, process=sender))
        trial.old_generation = stopped["generation"]
        trial.state_when_stopped = _wait_stopped(sender.pid)
        _wait_for_expiry(db, work_id)
        replacement = claim(db, OWNER, ttl=30)
        if replacement is None:
            raise RuntimeError("the replacement could not claim the assignment after the lease ran out")
        trial.new_generation = replacement.generation
        policy = spending_policy(db.connection, {"lucy"})
        client = supplier.client(timeout=5).fenced(replacement.id, replacement.generation)
        execute(db, replacement, stopped["order"], client, policy=policy)  # looked up, sent, confirmed
        sender.send_signal(signal.SIGCONT)  # the old holder wakes while the replacement still holds the row
        out, _ = sender.communicate(timeout=30)
        line = out.decode(errors="replace").strip().splitlines()
        trial.old_holder = json.loads(line[-1]) if line else {"outcome": f"exited {sender.returncode}"}
        finish(db, replacement, "DONE", "restocked vanilla")
    finally:
        if sender.poll() is None:
            sender.send_signal(signal.SIGCONT)
            stop(sender)


def _wait_stopped(pid: int, within: float = 10.0) -> str:
    deadline = time.monotonic() + within
    state = ""
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return state
        if state == "T":
            return state
        time.sleep(0.005)
    raise RuntimeError(f"the old holder did not stop itself at `sending` within {within} s (state {state!r})")


def _wait_for_expiry(db: Any, work_id: str, within: float = 30.0) -> None:
    """Until the old lease has really run out on the wall clock."""
    expires = lease_expiry(db.connection, work_id)
    if expires is None:
        raise RuntimeError(f"{work_id} holds no lease to wait out")
    if expires - time.time() > within:
        raise RuntimeError(f"the old lease ends in {expires - time.time():.1f} s, more than {within} s")
    while time.time() <= expires:
        time.sleep(min(0.05, max(0.0, expires - time.time()) + 0.001))
    time.sleep(0.02)


def _count(trial: WindowTrial, supplier: Any) -> None:
    stale = supplier.stale_tokens()
    trial.stale_requests = len(stale)
    trial.stale_admitted = sum(1 for token in stale if token["admitted"])
    trial.supplier_orders = len(supplier.orders())
    trial.posts = len(supplier.requests("POST"))


def _order_status(db: Any, work_id: str) -> str:
    found = orders_of(db.connection, work_id)
    return found[0]["status"] if found else ""


def main(argv: list[str] | None = None) -> int:
    """`python -m course.lessons.resource_fence --trials 10`: the window without and with the course's fence."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m course.lessons.resource_fence")
    parser.add_argument("--trials", type=int, default=2, help="trials of each kind (about 3 s each)")
    parser.add_argument("--lease", type=float, default=LEASE_SECONDS)
    args = parser.parse_args(argv)
    window = watch_window("reference", trials=args.trials, lease_seconds=args.lease)
    print(window.summary())
    print(json.dumps(window.counts()))
    return 0 if window.counts()["after"] == 0 and not any(t.error for t in window.before + window.after) else 1


if __name__ == "__main__":
    sys.exit(main())
