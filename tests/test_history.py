"""The history checker: read a trial's records, check invariants over them alone.

A seeded soak of the reference holds all six invariants; each invariant flags a real history
with one fact changed (and not the real one); a run with a fence blind to the generation is
caught from its records; bad input is refused, and nothing is written anywhere.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_nothing_left
from course.checkpoint import history
from course.checkpoint.matrix import run_matrix, soak_specs
from course.checkpoint.trial import SIGKILL, SIGSTOP, TrialSpec
from test_checkpoint import ALL_BUT_GENERATION, RIGHT, recorded_pids, write_learner

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="real processes, /proc, PR_SET_PDEATHSIG"),
]

SOAK_TRIALS, SOAK_SEED = 80, 12  # 200 and more by hand (the figure): CI's 35 minutes hold 80
# Trials mostly wait for a lease; on two cores a soak is bound by the ~0.75 s of CPU each trial's
# processes take, and 12 at once keep both cores busy where the matrix's default 8 leave gaps.
SOAK_PARALLEL = 12


def files(folder: Path) -> dict[str, str]:
    """Every file under `folder` and a digest of its bytes: what "left exactly as it was" compares."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One real trial: killed right after its claim, so the replacement (generation 2) did everything."""
    output = tmp_path_factory.mktemp("recorded")
    result = run_matrix([TrialSpec("claimed", SIGKILL)], "reference", output_dir=output)
    assert result.violations == 0, result[0].failures
    assert_nothing_left(output, recorded_pids(result))
    return result.folder / result[0].case


def test_a_seeded_soak_of_the_reference_breaks_no_invariant(tmp_path):
    began = time.monotonic()
    result = run_matrix(soak_specs(SOAK_TRIALS, seed=SOAK_SEED), "reference", lease_seconds=1.0, seed=SOAK_SEED,
                        parallel=SOAK_PARALLEL, output_dir=tmp_path)
    ran = time.monotonic() - began
    summary = history.check_soak(result)
    print(f"soak of {SOAK_TRIALS} trials: {ran:.1f} s to run, {time.monotonic() - began - ran:.2f} s to check")
    assert summary == {"trials": SOAK_TRIALS, "checked": SOAK_TRIALS, "unreadable": [],
                       "violations": dict.fromkeys(history.INVARIANTS, 0), "first": dict.fromkeys(history.INVARIANTS)}
    assert history.check_soak(result.folder) == summary  # the same, read back from the run's folder alone
    assert_nothing_left(tmp_path, recorded_pids(result))


def test_a_recorded_history_is_plain_data_read_without_leaving_a_trace(recorded):
    before = files(recorded)
    seen = history.load(recorded)
    assert files(recorded) == before  # no byte changed, no -wal or -shm file left beside the databases
    assert json.loads(json.dumps(seen)) == seen
    (work,) = seen["work"]
    assert (work["status"], work["generation"]) == ("DONE", 2)
    assert [e["payload"]["generation"] for e in seen["events"] if e["kind"] == "assistant.work.claimed"] == [1, 2]
    assert {row["generation"] for row in seen["transcript"]} == {2}
    assert [o["operation"] for o in seen["supplier"]["orders"]] == [o["id"] for o in seen["orders"]]
    assert history.load((recorded / "agent.sqlite", recorded / "supplier.sqlite")) == seen
    assert history.check(seen) == []


def _late_old_row(seen):
    """A transcript row of generation 1, committed after generation 2's rows."""
    last = seen["transcript"][-1]
    seen["transcript"].append({**last, "seq": last["seq"] + 1, "generation": 1})


def _second_ledger_order(seen):
    seen["supplier"]["orders"].append(copy.deepcopy(seen["supplier"]["orders"][0]))


def _money_astray(seen):
    seen["account"]["spent_pence"] += 100


def _done_with_unknown_order(seen):
    seen["orders"][0]["status"] = "UNKNOWN"


def _new_work_while_in_doubt(seen):
    """The replacement's answer was lost (it finished BLOCKED, its order UNKNOWN), then it claimed other work."""
    (work,), (order,) = seen["work"], seen["orders"]
    for event in seen["events"]:
        if event["kind"] == "assistant.order.settled":
            event["kind"], event["payload"] = "assistant.order.unknown", {k: v for k, v in event["payload"].items()
                                                                            if k != "status"}
        if event["kind"] == "assistant.work.finished":
            event["payload"]["status"] = "BLOCKED"
    work["status"], order["status"] = "BLOCKED", "UNKNOWN"
    last = seen["events"][-1]
    seen["events"].append({**last, "seq": last["seq"] + 1, "kind": "assistant.work.claimed",
                           "payload": {"work": "other-work", "generation": 1, "owner": "replacement", "expires": 0.0}})


def _status_without_its_event(seen):
    seen["work"][0]["status"] = "BLOCKED"


@pytest.mark.parametrize(("invariant", "change", "named"), [
    ("current_writer", _late_old_row, "generation 1"),
    ("one_order_per_operation", _second_ledger_order, "2 orders"),
    ("money_conserved", _money_astray, "spent 1600"),
    ("done_means_settled", _done_with_unknown_order, "is UNKNOWN"),
    ("reconciled_first", _new_work_while_in_doubt, "waited BLOCKED"),
    ("finished_with_event", _status_without_its_event, "recorded DONE"),
])
def test_each_invariant_flags_one_changed_fact_and_only_that(recorded, invariant, change, named):
    real = history.load(recorded)
    faulty = copy.deepcopy(real)
    change(faulty)
    assert history.INVARIANTS[invariant](real) == []
    found = history.check(faulty)
    assert [violation.invariant for violation in found] == [invariant], found
    (work,), (order,) = real["work"], real["orders"]
    assert named in found[0].detail and (work["id"] in found[0].detail or order["id"] in found[0].detail), found


def test_a_run_with_a_generation_blind_fence_is_caught_from_its_records(tmp_path):
    # Frozen, then thawed while the replacement holds the row under the same label, the old holder
    # gets past a fence that ignores the generation; a killed one never writes again.
    folder = write_learner(tmp_path / "learner", RIGHT | {"assert_current": ALL_BUT_GENERATION})
    result = run_matrix(soak_specs(6, seed=2), folder, output_dir=tmp_path / "out")
    caught = {trial.index for trial in result
              if history.check(history.load(result.folder / trial.case))}
    thawed = {trial.index for trial in result if trial.nemesis == SIGSTOP and trial.point != "finished"}
    assert len(thawed) >= 2 and caught == thawed, (caught, thawed)
    assert caught <= {trial.index for trial in result if not trial.passed}  # the matrix's judgement agrees
    summary = history.check_soak(result)
    first = summary["first"]["current_writer"]
    assert summary["violations"]["current_writer"] >= len(thawed) and first["index"] == min(thawed)
    assert (first["point"], first["nemesis"]) == (result[min(thawed)].point, SIGSTOP)
    assert "written by generation 1 while generation 2 held it" in first["detail"], first
    assert_nothing_left(tmp_path, recorded_pids(result))


def test_bad_input_is_refused_clearly_and_leaves_nothing_behind(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="has no agent.sqlite"):
        history.load(empty)
    with pytest.raises(FileNotFoundError, match="is not a file"):
        history.load((empty / "agent.sqlite", empty / "supplier.sqlite"))
    with pytest.raises(FileNotFoundError, match="has no evidence.json"):
        history.check_soak(empty)
    assert list(empty.iterdir()) == []
    run = tmp_path / "run"  # a run whose one trial stopped before its folder was made
    run.mkdir()
    (run / "evidence.json").write_text(json.dumps([{"case": "t000-claimed-sigkill", "index": 0, "point": "claimed",
                                                    "nemesis": SIGKILL}]))
    summary = history.check_soak(run)
    assert (summary["trials"], summary["checked"], [u["index"] for u in summary["unreadable"]]) == (1, 0, [0])
    assert "has no agent.sqlite" in summary["unreadable"][0]["error"]
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    for name in ("agent.sqlite", "supplier.sqlite"):
        (garbage / name).write_text("not a database\n" * 100)
    before = files(garbage)
    with pytest.raises(ValueError, match="cannot read a trial's history"):
        history.load(garbage)
    assert files(garbage) == before
    with pytest.raises(ValueError, match="output_dir"):
        history.check_soak(run_matrix([], "reference"))
