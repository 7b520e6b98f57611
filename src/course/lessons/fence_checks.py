"""06's graded exercise: a fence rule (`admit_generation`) judged through a real supplier process.

    run = fenced_orders(admit_generation, [("W", 1), ("W", 1), ("W", 2), ("W", 1)])
    run.admitted()        # [True, True, True, False], read from the supplier's ledger
    race = race_admissions(admit_generation)

`fenced_orders` starts a supplier process fenced by the rule (fence.py: the supplier asks this
process, which calls the rule) and sends one order per step, each with its fencing token (work
id, generation); a step that repeats an earlier (work, generation, label) resends that operation.
What was admitted is read from the supplier's ledger (`tokens`, `orders`) and checked against the
answers the supplier gave: a ledger that disagrees with them is not believed.

`race_admissions` calls the rule for generation 1 and, on another connection in another thread,
for generation 2 of the same work item, with generation 2 released exactly between the first
call's read of `fence` and its first write (the statement tracer, as 01's forced race; graded, at
the learner process's lock calls instead: course.grading.judge.schedule). An atomic
rule keeps generation 2 waiting, or decides in one statement; a check and a record in two
transactions lets generation 2 be admitted first and generation 1 after it.

When graded, the rule is the learner's function across the grader's wire: the supplier process
and everything here run in the judge; the rule runs in the learner's process, on the ledger
passed by its path.
"""

from __future__ import annotations

import hashlib
import sqlite3
import tempfile
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from course.lessons.checks import CheckFailed, interleave

Step = tuple[Any, ...]  # (work_id, generation) or (work_id, generation, label): the same label resends that order


def _operation(work: str, label: str) -> str:
    return hashlib.sha256(f"{work}/{label}".encode()).hexdigest()[:32]


@dataclass
class FencedRun:
    steps: list[tuple[str, int, str]]
    answers: list[str] = field(default_factory=list)  # what the supplier answered each step (this side saw it)
    tokens: list[tuple[str, int, int]] = field(default_factory=list)  # the ledger: (work, generation, admitted)
    orders: list[str] = field(default_factory=list)  # the ledger: the operations it holds
    rule_errors: list[str] = field(default_factory=list)

    def admitted(self) -> list[bool]:
        """Per step, whether the supplier admitted it, from its ledger (checked against its answers)."""
        if self.rule_errors:
            raise CheckFailed(f"Your rule raised while the supplier asked it: {self.rule_errors[0]}. It must "
                              "answer True or False.")
        if len(self.tokens) != len(self.steps) or [(w, g) for w, g, _ in self.tokens] != [(w, g) for w, g, _ in self.steps]:
            raise CheckFailed("The supplier's ledger does not list the orders that were sent, one per step, in order: "
                              "the rule must only read and write the `fence` table.")
        found = [bool(admitted) for _, _, admitted in self.tokens]
        for step, (answer, admitted) in enumerate(zip(self.answers, found)):
            if (answer == "accepted") != admitted:
                raise CheckFailed(f"Step {step + 1}: the supplier answered {answer!r} but its ledger says "
                                  f"{'admitted' if admitted else 'refused'}: the rule must only read and write `fence`.")
        held = set(self.orders)
        for (work, _, label), admitted in zip(self.steps, found):
            if admitted and _operation(work, label) not in held:
                raise CheckFailed("An admitted order is missing from the supplier's ledger: the rule must only read "
                                  "and write the `fence` table.")
        return found


def fenced_orders(rule: Callable[..., bool], steps: list[Step]) -> FencedRun:
    """Each step's order sent, with its token, to a real supplier process fenced by `rule`."""
    from reference_organizations.store.supplier import start_supplier
    from sovereign_agent.suppliers import OutcomeUnknown, SupplierRefused

    normal = [(str(s[0]), int(s[1]), str(s[2]) if len(s) > 2 else f"{s[0]}-{s[1]}-{n}") for n, s in enumerate(steps)]
    run = FencedRun(normal)
    with tempfile.TemporaryDirectory(prefix="ch12-fence-") as folder, \
            start_supplier(Path(folder) / "supplier.sqlite", fence=rule) as supplier:
        client = supplier.client(timeout=30)
        for work, generation, label in normal:
            proposal = {"sku": "SKU-VANILLA", "quantity": 6, "unit_pence": 250, "supplier": supplier.identity,
                        "currency": "GBP"}
            try:
                client.fenced(work, generation).order(_operation(work, label), proposal)
                run.answers.append("accepted")
            except SupplierRefused as refusal:
                run.answers.append("refused" if "fencing token refused" in str(refusal) else f"refused: {refusal}")
            except OutcomeUnknown as unknown:
                run.answers.append(f"no answer: {unknown}")
        run.rule_errors = list(supplier.relay.errors) if supplier.relay is not None else []
        with closing(sqlite3.connect(supplier.ledger, timeout=10)) as ledger:
            run.tokens = [tuple(row) for row in ledger.execute("SELECT work_id, generation, admitted FROM tokens ORDER BY seq")]
            run.orders = [row[0] for row in ledger.execute("SELECT operation FROM orders")]
    return run


_ledgers: list[tempfile.TemporaryDirectory] = []  # removed when Python exits


def fresh_ledger() -> sqlite3.Connection:
    """A new, empty supplier ledger (its own temporary folder), as a rule gets it."""
    from reference_organizations.store.supplier.fence import open_ledger
    from reference_organizations.store.supplier.server import Ledger

    folder = tempfile.TemporaryDirectory(prefix="ch12-ledger-")
    _ledgers.append(folder)
    path = Path(folder.name) / "supplier.sqlite"
    Ledger(path)
    return open_ledger(path).connection


def race_admissions(rule: Callable[..., bool], *, work: str = "W-race", pause: float = 1.5,
                    rival: Callable[..., bool] | None = None,
                    force: Callable[..., dict[str, Any]] = interleave) -> dict[str, Any]:
    """Generation 1 (A, here) and generation 2 (B, another thread and connection: `rival`, by default
    the same rule; when graded, the rule in a second learner process) of one work item;
    B is released between A's read of `fence` and A's first write (course.lessons.checks.interleave), and
    A waits for B at most `pause` s. Returns {"A", "B": admitted (or the error's text), "B first": B
    admitted and returned while A was held between its read and its write (A decided after B,
    whatever the clocks of a loaded machine say), "later 1": a generation-1 request decided after
    both}."""
    from reference_organizations.store.supplier.fence import open_ledger

    a = fresh_ledger()
    path = a.execute("PRAGMA database_list").fetchone()[2]
    try:
        box = force(a, lambda: _decided(rule, a, work, 1), path,
                    lambda other: _decided(rival or rule, other.connection, work, 2), pause=pause, table="fence",
                    reopen=open_ledger, told="`ledger`, keeping the highest generation in its `fence` table")
    finally:
        a.close()
    later = open_ledger(path)
    try:
        box["later 1"] = _decided(rule, later.connection, work, 1)
    finally:
        later.close()
    return {"A": box["first"], "B": box.get("second"),
            "B first": box.get("second in gap", False) and box.get("second") is True, "later 1": box["later 1"]}


def _decided(rule: Callable[..., bool], ledger: Any, work: str, generation: int) -> Any:
    try:
        return rule(ledger, work, generation)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
