"""Record the histories course.checkpoint.recorded serves: real checkpoint cases, run again.

    .venv/bin/python tests/record_histories.py     (rewrites src/course/checkpoint/histories/)

Each run is one case of the checkpoint, run by the reference worker or by the solution's worker
with one plausible mistake (test_capstone_workers' mutations, and one more below), sometimes against a
supplier that rejects. Its history is read with course.checkpoint.history.load and kept without
its paths. test_recorded_histories records them again and checks that each verdict of the course's
checker is the one the kept file gives.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from course.checkpoint import history, recorded  # noqa: E402
from course.checkpoint.cases import prepare, run_prepared  # noqa: E402
from course.checkpoint.run import setting_for  # noqa: E402
from course.lab.learner import load_implementation  # noqa: E402
from test_capstone_workers import WRONG, answers, mutated, write_worker  # noqa: E402

# A worker that gives an unanswered order up: it marks the order REJECTED (money that no longer
# counts as reserved) and leaves the reservation where it is.
REJECTS_WHEN_UNKNOWN = [(
    "        except OutcomeUnknown:\n",
    "        except OutcomeUnknown:\n"
    "            with db.immediate() as connection:  # no answer: give the order up\n"
    "                connection.execute(\"UPDATE assistant_orders SET status='REJECTED' WHERE id=?\", (order,))\n")]

# name -> (how, case, the worker's mistake or None, the supplier's switches or None: the case's own)
RUNS: dict[str, tuple[str, str, str | None, dict[str, Any] | None]] = {
    "reference-killed": ("The reference worker, killed after the approval; its replacement sent the order.",
                         "killed", None, None),
    "reference-in-flight": ("The reference worker, killed while the supplier held its order; its replacement "
                            "looked the order up.", "accepted_then_crash", None, None),
    "reference-answer-lost": ("The reference worker; the supplier's first answer was lost, a later pass looked "
                              "the order up, then took new work.", "answer_lost", None, None),
    "reference-frozen": ("The reference worker, frozen after its approval and thawed after its replacement "
                         "finished.", "paused", None, None),
    "reference-rejected": ("The reference worker, killed after the approval; the supplier rejected the order "
                           "its replacement sent.", "killed", None, {"reject": True}),
    "done-when-unknown": ("A worker that finished DONE when the supplier's answer was lost.", "answer_lost",
                          "done_when_unknown", None),
    "releases-when-unknown": ("A worker that released the reservation when the supplier's answer was lost.",
                              "answer_lost", "releases_when_unknown", None),
    "rejects-when-unknown": ("A worker that marked the order REJECTED when the supplier's answer was lost.",
                             "answer_lost", "rejects_when_unknown", None),
}


def worker_answers(mistake: str | None) -> dict[str, str]:
    if mistake is None:
        return answers()
    if mistake in WRONG:
        return mutated(mistake)
    found = answers()
    for old, new in {"rejects_when_unknown": REJECTS_WHEN_UNKNOWN}[mistake]:
        assert found["continue_order"].count(old) == 1, f"the mistake {mistake} no longer matches the solution"
        found["continue_order"] = found["continue_order"].replace(old, new)
    return found


def record(name: str, folder: Path) -> dict[str, Any]:
    """Run `name` of RUNS in a new folder under `folder`; return its history, paths removed."""
    how, case, mistake, switches = RUNS[name]
    worker = write_worker(folder / name / "worker", worker_answers(mistake))
    loaded = load_implementation("reference", worker=worker, require_saved=False)
    setting = setting_for("reference", loaded, name, 2.0, folder / name, worker)
    prepared = prepare(case, setting, switches=switches)
    evidence = run_prepared(prepared, setting)  # stops its processes on the way out
    if evidence.failures:  # a wrong worker's case may stop early: its history is what it left
        print(f"{name}: the case stopped: {evidence.failures}", file=sys.stderr)
    kept = history.load(prepared.folder)
    return {key: value for key, value in kept.items() if key not in ("database", "ledger")}


def main() -> None:
    recorded.FOLDER.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ch12-histories-") as folder:
        for name, (how, *_) in RUNS.items():
            kept = record(name, Path(folder))
            verdicts = {invariant: bool(check(kept)) for invariant, check in history.INVARIANTS.items()}
            (recorded.FOLDER / f"{name}.json").write_text(json.dumps(
                {"name": name, "how": how, "history": kept}, indent=1, sort_keys=True) + "\n")
            print(f"{name}: {verdicts}")


if __name__ == "__main__":
    main()
