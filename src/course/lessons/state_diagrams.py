"""The work and order state diagrams, derived from what the runtime does (01_claims).

Nothing here lists a transition by hand. `derive` explores the runtime on scratch shop databases:
from a freshly enqueued assignment it applies every public function of `sovereign_agent` that
writes a status (claim, finish, cancel, propose, approve, revoke, execute, with the supplier
answering each way it can), plus the clock running past the lease, to every state reached so
far, breadth first, until no new state turns up. It reads the statuses through
`sovereign_agent.records` before and after each call, and whenever the runtime hands control to
the supplier (the only moments a call is between its own transactions). Each change seen becomes
an edge, labelled with the function that made it; a work item's new generation under the same
status (a replacement's claim) is a change too. The states are the ones the
schema declares (its `CHECK (status IN (...))` lists); `draw` places them and draws the edges
it is given, tagging each arrow so a test can read the drawn edges back (`drawn_edges`).
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from reference_organizations.store.agent import SUPPLIER_IDENTITY, seed_lucy
from sovereign_agent import assistant_orders, assistant_work, records
from sovereign_agent.database import Database, authority_marker
from sovereign_agent.migrations import MIGRATIONS
from sovereign_agent.suppliers import OutcomeUnknown, SupplierRefused

START = "(start)"  # the edge into a record's first status (enqueue, propose)
MACHINES = {"work": "assistant_work", "orders": "assistant_orders"}
Edges = dict[str, dict[tuple[str, str], set[str]]]  # machine -> (before, after) -> functions


def declared_states(machine: str) -> list[str]:
    """The statuses the schema allows for `machine`, in the order it lists them."""
    table = MACHINES[machine]
    for statements in MIGRATIONS:
        for statement in statements:
            if re.search(rf"CREATE TABLE {table}\(", statement):
                listed = re.search(r"CHECK \(status IN\s*\(([^)]*)\)\)", statement)
                return re.findall(r"'([A-Z]+)'", listed.group(1))
    raise LookupError(f"no status list for {table} in the schema")


# --- deriving the edges ---------------------------------------------------------------------

TTL = 600.0  # the lease of every claim; "the lease runs out" moves the injected clock past it (and any retry delay)
Snapshot = tuple  # (work status, work generation, order status or None)


def _snapshot(db: Database, work: str) -> Snapshot:
    held = records.holding(db.connection, work)
    orders = records.orders_of(db.connection, work)
    return (held and held["status"], held and held["generation"], orders[0]["status"] if orders else None)


class _Died(BaseException):
    """The worker is killed while its request is on the way: the order stays SENDING."""


class _Supplier:
    """A supplier with its own ledger, answering one way: it accepts, declines (a REJECTED
    receipt), refuses (SupplierRefused), stays silent (OutcomeUnknown, nothing recorded),
    accepts or declines but the answer is lost, or the worker dies while sending. `peek` is
    called whenever the runtime hands it control: between the runtime's transactions."""

    identity, timeout = SUPPLIER_IDENTITY, 1.0

    def __init__(self, ledger: dict[str, dict[str, Any]], answer: str, peek: Callable[[], None]) -> None:
        self.ledger, self.answer, self.peek = ledger, answer, peek

    def lookup(self, operation: str) -> dict[str, Any] | None:
        self.peek()
        return self.ledger.get(operation)

    def order(self, operation: str, proposal: dict[str, Any]) -> dict[str, Any]:
        self.peek()
        if self.answer == "dies":
            raise _Died()
        if self.answer == "refuses":
            raise SupplierRefused("conflicting proposal")
        if self.answer == "silent":
            raise OutcomeUnknown("no answer")
        receipt = {"operation": operation, "status": "REJECTED" if self.answer.startswith("declines") else "ACCEPTED"}
        self.ledger.setdefault(operation, receipt)
        if self.answer.endswith("answer lost"):
            raise OutcomeUnknown("the answer was lost")
        return self.ledger[operation]


@dataclass(frozen=True)
class _World:
    """What the explorer's worker remembers besides the database: its clock, its last claim,
    the order it proposed, the supplier's ledger, and when the records last changed."""

    now: float
    work: str
    held: assistant_work.Claim | None = None
    order: str | None = None
    ledger: dict[str, dict[str, Any]] = field(default_factory=dict)
    changed_at: float = 0.0
    trail: list[Snapshot] = field(default_factory=list, compare=False)  # this step's snapshots


def _claim(recovery: bool) -> Callable[[Database, _World], _World]:
    def act(db: Database, world: _World) -> _World:
        held = assistant_work.claim(db, "explorer", now=world.now, ttl=TTL, recovery_only=recovery)
        return replace(world, held=held or world.held)
    return act


def _finish(status: str) -> Callable[[Database, _World], _World]:
    def act(db: Database, world: _World) -> _World:
        if world.held is not None:
            assistant_work.finish(db, world.held, status, "explored", now=world.now)
        return world
    return act


def _cancel(db: Database, world: _World) -> _World:
    assistant_work.cancel(db, world.work)
    return world


def _propose(db: Database, world: _World) -> _World:
    if world.held is None:
        return world
    order = assistant_orders.propose(db, world.held, "SKU-VANILLA", 6, target=SUPPLIER_IDENTITY)
    return replace(world, order=order)


def _approve(db: Database, world: _World) -> _World:
    if world.order is not None:
        digest = records.order(db.connection, world.order)["digest"]
        assistant_orders.approve(db, world.order, digest, actor="lucy", policy=records.spending_policy(db.connection, {"lucy"}),
                                 expires=time.time() + 100 * TTL)
    return world


def _revoke(db: Database, world: _World) -> _World:
    if world.order is not None:
        assistant_orders.revoke(db, world.order, actor="lucy", policy=records.spending_policy(db.connection, {"lucy"}))
    return world


def _execute(answer: str) -> Callable[[Database, _World], _World]:
    def act(db: Database, world: _World) -> _World:
        if world.held is None or world.order is None:
            return world
        ledger = dict(world.ledger)  # what the supplier recorded stays recorded, whatever the worker saw
        supplier = _Supplier(ledger, answer, lambda: world.trail.append(_snapshot(db, world.work)))
        try:
            assistant_orders.execute(db, world.held, world.order, supplier,
                                     policy=records.spending_policy(db.connection, {"lucy"}), now=world.now)
        except EXPECTED_FAILURES:
            pass
        return replace(world, ledger=ledger)
    return act


def _lease_runs_out(db: Database, world: _World) -> _World:
    return replace(world, now=world.now + TTL)


# Every public function that writes a status, and the clock. (name shown on the edge, action)
ACTIONS: list[tuple[str, Callable[[Database, _World], _World]]] = [
    ("claim", _claim(False)),
    ("claim (recovery)", _claim(True)),
    ("finish", _finish("DONE")),
    ("finish", _finish("BLOCKED")),
    ("finish", _finish("CANCELLED")),
    ("cancel", _cancel),
    ("propose", _propose),
    ("approve", _approve),
    ("revoke", _revoke),
    *[("execute", _execute(answer)) for answer in
      ("accepts", "declines", "refuses", "silent", "accepts, answer lost", "declines, answer lost", "dies")],
    ("", _lease_runs_out),
]
EXPECTED_FAILURES = (PermissionError, ValueError, KeyError, OutcomeUnknown, _Died)  # OrderRefused is a PermissionError


def _copy(source: Path, target: Path) -> Database:
    into, outof = sqlite3.connect(target), sqlite3.connect(source)
    into.execute("PRAGMA synchronous=OFF")  # a scratch copy: nothing here has to survive a power cut
    outof.backup(into)
    into.close()
    outof.close()
    shutil.copyfile(authority_marker(source), authority_marker(target))
    return Database(target, synchronous="NORMAL")


def _record(name: str, trail: list[Snapshot], edges: Edges) -> bool:
    """Add the status changes between consecutive snapshots to `edges`; True if anything changed."""
    changed = False
    for (status, generation, order), (status2, generation2, order2) in zip(trail, trail[1:]):
        if (status, generation) != (status2, generation2):
            edges["work"].setdefault((status or START, status2), set()).add(name)
        if order != order2:
            edges["orders"].setdefault((order or START, order2), set()).add(name)
        changed |= (status, generation, order) != (status2, generation2, order2)
    return changed


def _signature(db: Database, world: _World) -> tuple:
    """What decides what the next action can do: statuses, lease, cancellation, holder, ledger,
    and whether time has passed since the last change (a BLOCKED item's retry delay)."""
    held = records.holding(db.connection, world.work)
    orders = records.orders_of(db.connection, world.work)
    lease = None if held["expires"] is None else held["expires"] > world.now
    current = world.held is not None and (world.held.generation, held["status"]) == (held["generation"], "RUNNING")
    receipt = world.ledger.get(orders[0]["id"], {}).get("status") if orders else None
    return (held["status"], records.is_cancelled(db.connection, world.work), lease, current,
            orders[0]["status"] if orders else None, receipt,
            world.now > world.changed_at if held["status"] == "BLOCKED" else None)


def _step(path: Path, target: Path, world: _World, name: str, act: Callable, edges: Edges) -> tuple[_World, tuple]:
    """Apply one action to a copy of the database at `path`; record what changed."""
    db = _copy(path, target)
    try:
        world = replace(world, trail=[_snapshot(db, world.work)])
        try:
            after = act(db, world)
        except EXPECTED_FAILURES:  # refused: whatever it had begun was rolled back
            after = world
        world.trail.append(_snapshot(db, world.work))
        if _record(name, world.trail, edges):
            after = replace(after, changed_at=after.now)
        return after, _signature(db, after)
    finally:
        db.close()


def derive(max_states: int = 400) -> Edges:
    """Explore the runtime breadth first from one enqueued assignment; return every status change
    it made, as {machine: {(before, after): {function, ...}}}."""
    edges: Edges = {machine: {} for machine in MACHINES}
    memory = Path("/dev/shm")  # scratch files in memory where the system offers it (Linux)
    with tempfile.TemporaryDirectory(prefix="state-diagrams-", dir=memory if memory.is_dir() else None) as name:
        folder = Path(name)
        with Database(folder / "0.sqlite", synchronous="NORMAL") as db:
            seed_lucy(db)
            now = time.time()
            work = assistant_work.enqueue(db, "phone:explore", "lucy", "Restock vanilla", subject="SKU-VANILLA")
            _record("enqueue", [(None, None, None), _snapshot(db, work)], edges)
        seen: set[tuple] = set()
        queue: deque[tuple[Path, _World]] = deque([(folder / "0.sqlite", _World(now=now, work=work, changed_at=now))])
        count = 0
        while queue:
            path, world = queue.popleft()
            for name, act in ACTIONS:
                count += 1
                after, signature = _step(path, folder / f"{count}.sqlite", world, name, act, edges)
                if signature in seen:
                    (folder / f"{count}.sqlite").unlink()
                    continue
                seen.add(signature)
                if len(seen) > max_states:
                    raise RuntimeError(f"more than {max_states} states: the exploration does not settle")
                queue.append((folder / f"{count}.sqlite", after))
    return edges


# --- drawing ------------------------------------------------------------------------------

# Where each state sits (x, y): layout only; the edges come from `derive`.
LAYOUT = {
    "work": {START: (-1.5, 1.0), "READY": (0.0, 1.0), "RUNNING": (3.0, 1.0),
             "DONE": (6.0, 2.0), "BLOCKED": (1.4, -0.9), "CANCELLED": (6.0, -0.6)},
    "orders": {START: (-1.5, 1.0), "DRAFT": (0.0, 1.0), "APPROVED": (2.4, 1.0), "SENDING": (4.8, 1.0),
               "CONFIRMED": (7.4, 1.9), "REJECTED": (7.4, -0.5), "UNKNOWN": (4.8, -0.5), "REVOKED": (1.2, -0.5)},
}
# How much an edge curves (matplotlib's arc3 rad), where a straight line would cross a box.
BENDS = {"work": {("READY", "CANCELLED"): 0.12}, "orders": {}}
TITLES = {"work": "A work item (assistant_work.status)", "orders": "A supplier order (assistant_orders.status)"}


def _positions(machine: str, states: list[str]) -> dict[str, tuple[float, float]]:
    placed = dict(LAYOUT[machine])
    for number, state in enumerate(s for s in states if s not in placed):  # a state the layout does not know yet
        placed[state] = (number * 2.0, -1.6)
    return placed


def draw(machine: str, edges: Edges, ax: Any = None) -> Any:
    """Draw `machine`'s states (all the schema declares) and exactly the given edges; returns the
    figure. Each arrow's gid is "edge:BEFORE->AFTER", each state's "state:NAME"."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    states = declared_states(machine)
    where = _positions(machine, states + [s for pair in edges[machine] for s in pair if s != START])
    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 3.6))
    boxes = {}
    for state, (x, y) in where.items():
        if state == START:
            ax.plot([x], [y], "o", color="black", markersize=6, gid="state:" + START)
            continue
        reached = any(state in pair for pair in edges[machine])
        boxes[state] = ax.text(x, y, state, ha="center", va="center", fontsize=9, gid="state:" + state,
                               bbox=dict(boxstyle="round,pad=0.4", fc="#eef3fb" if reached else "#fbeaea",
                                         ec="#34568b" if reached else "#b03030"))
    pairs = sorted(edges[machine])
    for before, after in pairs:
        label = ", ".join(sorted(n for n in edges[machine][(before, after)] if n))
        (x0, y0), (x1, y1) = where[before], where[after]
        if before == after:  # a self-loop: drawn above the box
            arrow = FancyArrowPatch((x0 - 0.25, y0 + 0.2), (x0 + 0.25, y0 + 0.2), connectionstyle="arc3,rad=-1.6",
                                    arrowstyle="-|>", mutation_scale=11, color="#34568b", gid=f"edge:{before}->{after}")
            ax.add_patch(arrow)
            ax.text(x0, y0 + 0.72, label, ha="center", fontsize=7, color="#34568b")
            continue
        bend = BENDS[machine].get((before, after), 0.45 if (after, before) in edges[machine] else 0.0)  # two-way: two arcs
        arrow = FancyArrowPatch((x0, y0), (x1, y1), connectionstyle=f"arc3,rad={bend}", arrowstyle="-|>",
                                mutation_scale=11, color="#34568b", shrinkA=8 if before == START else 24,
                                shrinkB=26, gid=f"edge:{before}->{after}")
        ax.add_patch(arrow)
        dx, dy = x1 - x0, y1 - y0
        ax.text((x0 + x1) / 2 + bend * dy * 0.5, (y0 + y1) / 2 - bend * dx * 0.5, label,  # on the arc's middle
                ha="center", va="center", fontsize=7, color="#1d2f4d",
                bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="#c8d3e6", lw=0.5))
    xs, ys = zip(*where.values())
    ax.set(xlim=(min(xs) - 0.6, max(xs) + 1.0), ylim=(min(ys) - 0.5, max(ys) + 0.9), title=TITLES[machine])
    ax.set_axis_off()
    return ax.figure


def drawn_edges(figure: Any) -> dict[str, set[tuple[str, str]]]:
    """The edges a figure shows, per axes title's machine, read back from the arrows' gids."""
    found: dict[str, set[tuple[str, str]]] = {}
    for ax in figure.axes:
        machine = next((m for m, title in TITLES.items() if ax.get_title() == title), ax.get_title())
        for patch in ax.patches:
            gid = patch.get_gid() or ""
            if gid.startswith("edge:"):
                before, after = gid.removeprefix("edge:").split("->")
                found.setdefault(machine, set()).add((before, after))
    return found


def disagreements(runtime: dict[str, set[tuple[str, str]]], drawn: dict[str, set[tuple[str, str]]]) -> list[str]:
    """What a drawing shows that the runtime does not do, and the reverse; [] when they agree."""
    found = []
    for machine in sorted(set(runtime) | set(drawn)):
        done, shown = runtime.get(machine, set()), drawn.get(machine, set())
        found += [f"{machine}: drawn but the runtime never does {b} -> {a}" for b, a in sorted(shown - done)]
        found += [f"{machine}: the runtime does {b} -> {a} but it is not drawn" for b, a in sorted(done - shown)]
    return found
