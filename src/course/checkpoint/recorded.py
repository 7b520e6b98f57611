"""Recorded histories: real runs of right and wrong workers, kept as data, on which an invariant a
learner writes over a history is graded (06_explore's `money_conserved`).

Each file in `histories/` is one real run of a checkpoint case, made by tests/record_histories.py:
the reference worker, or the solution's worker with one plausible mistake, sometimes against a
supplier that rejects. A file holds `name`, `how` (one sentence) and the `history` exactly as
course.checkpoint.history.load read it, its paths removed. Which runs break an invariant is never
stored: the course's own checker decides it when asked (`expected`).

Trusted: the judge calls a learner's invariant on `disguised` copies only, so an answer that
recognises a recording (by an id, an origin, a timestamp) instead of checking it gets nothing.
"""

from __future__ import annotations

import json
import random
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.checkpoint import history
from course.checkpoint.matrix import run_matrix, soak_specs
from course.lessons.checks import expect

FOLDER = Path(__file__).with_name("histories")


@dataclass(frozen=True)
class Recording:
    name: str
    how: str
    history: dict[str, Any]

    def expected(self, invariant: str) -> bool:
        """Whether the course's own `invariant` finds a violation in this run."""
        return bool(history.INVARIANTS[invariant](self.history))


def recordings(names: list[str] | None = None) -> list[Recording]:
    """The recorded runs (by file name order), or just `names`, in that order."""
    found = {path.stem: path for path in sorted(FOLDER.glob("*.json"))}
    unknown = sorted(set(names or ()) - set(found))
    if unknown:
        raise LookupError(f"no recorded history named {unknown}; recorded: {sorted(found)}")
    return [Recording(**json.loads(found[name].read_text())) for name in (names or found)]


def disguised(recorded: dict[str, Any], draw: random.Random) -> dict[str, Any]:
    """The same run under other names: each id (assignment, order, operation, supplier reference),
    digest and origin replaced by a fresh one, consistently; every clock shifted by one offset.
    Counts, amounts, statuses, generations and the order of events stay: every invariant gives the
    same verdict on it."""
    names: dict[str, str] = {}
    shift = draw.uniform(-86_400 * 30, 86_400 * 30)

    def rename(text: str) -> str:
        if text not in names:
            names[text] = (f"phone:caller-{len(names)}" if text.startswith("phone:")
                           else "PO-" + uuid.UUID(int=draw.getrandbits(128)).hex[:12].upper() if text.startswith("PO-")
                           else "".join(draw.choice("0123456789abcdef") for _ in text))
        return names[text]

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if isinstance(value, float) and key in ("created_at", "expires", "at"):
            return value + shift
        if isinstance(value, str) and (key in ("work", "order", "operation", "id", "digest", "origin", "reference")):
            return rename(value)
        return value

    return walk(recorded)


def flagged_by(invariant: Callable[[dict[str, Any]], Any], names: list[str]) -> dict[str, bool]:
    """{recording: whether `invariant` (a learner's) found a violation in a disguised copy of it}.
    Its answer must be a list (of sentences, [] when the invariant holds): a bool is refused, since
    True for "holds" and True for "violated" cannot be told apart."""
    draw, found = random.Random(), {}
    for recording in recordings(names):
        answer = invariant(disguised(recording.history, draw))
        expect(isinstance(answer, (list, tuple)),
               f"Your invariant returned {type(answer).__name__} {answer!r:.60} for a run; expected a list of "
               "violations (one sentence each), [] when the sum holds, so that a checker can say what broke.")
        found[recording.name] = bool(answer)
    return found


def show_history(name: str) -> dict[str, Any]:
    """Print a recorded run compactly (its events, orders and account) and return its history."""
    recording = recordings([name])[0]
    kept = recording.history
    print(f"{recording.name}: {recording.how}\n")
    print("events (commit order):")
    for event in kept["events"]:
        print(f"  {event['seq']:>3}  {event['kind']:<28} {json.dumps(event['payload'], sort_keys=True)}")
    print("\norders (at the end):")
    for order in kept["orders"]:
        print(f"  {order['id'][:8]}…  work {order['work'][:8]}…  {order['status']:<9} {order['amount']} pence")
    print(f"\naccount (at the end): {kept['account']}")
    return kept


def compare(invariant: Callable[[dict[str, Any]], Any], name: str) -> list[dict[str, Any]]:
    """Every recording, checked by `invariant` (a learner's) and by the course's own `name`: rows
    of run, how, course (True: a violation), yours (its answer) and others (the course's other
    invariants that run breaks), printed as a table."""
    rows = []
    for recording in recordings():
        rows.append({"run": recording.name, "how": recording.how, "course": recording.expected(name),
                     "yours": invariant(recording.history),
                     "others": [other for other in history.INVARIANTS if other != name and recording.expected(other)]})
    width = max(len(row["run"]) for row in rows)
    print(f"{'run':<{width}}  {'course':<9} {'yours':<9} {'also broken (course)':<22} how it ran")
    for row in rows:
        mine = "violated" if row["yours"] else "holds"
        agree = "" if bool(row["yours"]) == row["course"] else "  <- differs"
        print(f"{row['run']:<{width}}  {'violated' if row['course'] else 'holds':<9} {mine:<9} "
              f"{', '.join(row['others']) or '-':<22} {row['how']}{agree}")
    return rows


def over_fresh_runs(invariant: Callable[[dict[str, Any]], Any], name: str, trials: int = 4) -> list[dict[str, Any]]:
    """Run `trials` new crash trials of the reference worker (random points and nemeses, real
    processes and leases), then check each history with `invariant` and the course's own `name`."""
    with tempfile.TemporaryDirectory(prefix="ch12-fresh-") as folder:
        result = run_matrix(soak_specs(trials, seed=random.randrange(1 << 30)), "reference", output_dir=folder)
        rows = []
        for trial in result:
            kept = history.load(result.folder / trial.case)
            rows.append({"run": trial.case, "course": bool(history.INVARIANTS[name](kept)),
                         "yours": invariant(kept)})
    for row in rows:
        print(f"{row['run']:<34} course: {'violated' if row['course'] else 'holds':<9} "
              f"yours: {'violated' if row['yours'] else 'holds'}")
    return rows
