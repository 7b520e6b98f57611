"""The recovery checkpoint: real processes, counted evidence, specific explanations, no leftovers.

Every test gives the processes it starts a path under its own tmp folder (TMPDIR or
output_dir), so "nothing outlives the checkpoint" is checked by scanning /proc for command
lines that mention that folder, plus the child pids the evidence recorded. All waits bounded.
"""

from __future__ import annotations

import inspect
import json
import os
import runpy
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from contextlib import closing
from pathlib import Path

import pytest

from conftest import LocalSocketKernel, assert_nothing_left, marked_pids
from course.checkpoint import run_checkpoint
from sovereign_agent import assistant_orders, assistant_work

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "checkpoints" / "ch12_worker_recovery_checkpoint.py"
CASES = ["killed", "live_stale", "paused", "accepted_then_crash"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="real processes, /proc, PR_SET_PDEATHSIG"),
]


# --- leftovers ---------------------------------------------------------------------------------


def recorded_pids(evidence: list) -> set[int]:
    pids = set()
    for case in evidence:
        get = case.get if isinstance(case, dict) else lambda name, case=case: getattr(case, name)
        pids |= {pid for pid in (get("worker_pid"), get("supplier_pid")) if pid}
    return pids


def wait_for_children(marker: Path, count: int, within: float) -> dict[int, str]:
    deadline = time.monotonic() + within
    while len(found := marked_pids(marker)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} checkpoint processes appeared: {found}"
        time.sleep(0.05)
    return found


# --- learner notebooks, written with nbformat ----------------------------------------------------

SETUP = {
    "01_claims.ipynb": """
        import math
        import time
        from dataclasses import dataclass
        from sovereign_agent.assistant_work import MAX_TTL_SECONDS, _ELIGIBLE, _RECOVERABLE, _clock, check_ttl
        from sovereign_agent.database import Database
        from sovereign_agent.events import append_event
        print("learner setup output must not break the worker protocol")
    """,
    "02_fencing.ipynb": """
        import json
        import sqlite3
        import time
        from pathlib import Path
        from typing import Any
        from sovereign_agent import assistant_work as reference
        from sovereign_agent.assistant_work import TERMINAL_STATES, Claim, _clock, claim
        from sovereign_agent.database import Database, authority_marker
        from sovereign_agent.events import append_event
    """,
    "04_recovery.ipynb": """
        from sovereign_agent.assistant_work import Claim, claim, finish, observe
        from sovereign_agent.database import Database
    """,
}

# The reference functions' own source, pasted into the graded cells: a learner who got it right.
RIGHT = {
    "claim_dataclass": inspect.getsource(assistant_work.Claim),
    "claim": inspect.getsource(assistant_work.claim),
    "assert_current": inspect.getsource(assistant_work.assert_current),
    "observe": inspect.getsource(assistant_work.observe),
    "finish": inspect.getsource(assistant_work.finish),
    "order_to_continue": inspect.getsource(assistant_orders.order_to_continue),
}
GRADED = {
    "01_claims.ipynb": ["claim_dataclass", "claim"],
    "02_fencing.ipynb": ["assert_current", "observe", "finish"],
    "04_recovery.ipynb": ["order_to_continue"],
}
STUB_CLASS = '''
@dataclass(frozen=True)
class Claim:
    """The learner fills in the fields."""
    raise NotImplementedError()
'''


def stub(source: str) -> str:
    """nbgrader's release form: the body replaced by `raise NotImplementedError()`."""
    opening = source.index('"""')  # every graded function here has a docstring; keep it
    head = source[: source.index('"""', opening + 3) + 3]
    return head + "\n    raise NotImplementedError()\n"


def write_learner(folder: Path, graded: dict[str, str]) -> Path:
    """Three small nbformat-4 notebooks: narrative, a `setup` cell, the graded cells, scratch.

    Written as the nbformat 4 JSON they are, with the cell metadata nbgrader writes: importing
    nbformat here would cost seconds of the test budget (jsonschema compiles format grammars at
    import), and the checkpoint reads the same JSON either way.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name, grade_ids in GRADED.items():
        cells = [
            _cell("markdown", "A question, then the thing that answers it."),
            _cell("code", textwrap.dedent(SETUP[name]).strip(), tags=["setup"]),
            *(_cell("code", graded[grade_id], nbgrader={
                "grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3,
                "solution": True, "task": False}) for grade_id in grade_ids),
            # Learner scratch work: never executed by the checkpoint.
            _cell("code", "raise SystemExit('scratch cells are not graded')"),
        ]
        notebook = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                               "name": "python3"}},
                    "nbformat": 4, "nbformat_minor": 5}
        (folder / name).write_text(json.dumps(notebook, indent=1))
    return folder


def _cell(kind: str, source: str, *, tags: list[str] | None = None, nbgrader: dict | None = None) -> dict:
    metadata = {**({"tags": tags} if tags else {}), **({"nbgrader": nbgrader} if nbgrader else {})}
    cell = {"cell_type": kind, "id": uuid.uuid4().hex[:8], "metadata": metadata, "source": source}
    return cell | ({"execution_count": None, "outputs": []} if kind == "code" else {})


OWNER_ONLY = '''
def assert_current(connection, work, now=None):
    """Wrong on purpose: trusts the owner label and nothing else."""
    held = connection.execute(
        "SELECT 1 FROM assistant_work WHERE id=? AND owner=?", (work.id, work.owner)
    ).fetchone()
    if held is None:
        raise PermissionError("not the owner")
'''

ALL_BUT_GENERATION = '''
def assert_current(connection, work, now=None):
    """Wrong on purpose: the owner, the running state, the lease and the fields, not the generation."""
    import time
    now = time.time() if now is None else now
    held = connection.execute(
        "SELECT 1 FROM assistant_work WHERE id=? AND owner=? AND status='RUNNING' AND expires>? "
        "AND subject=? AND role=? AND session=? AND prompt=?",
        (work.id, work.owner, now, work.subject, work.role, work.session, work.prompt)).fetchone()
    if held is None:
        raise PermissionError("not the current holder")
'''

UNFENCED_FINISH = '''
def finish(db, work, status, result, *, now=None):
    """Wrong on purpose: records the outcome without checking that `work` is still current."""
    with db.immediate() as connection:
        connection.execute(
            "UPDATE assistant_work SET status=?, result=?, expires=NULL WHERE id=?", (status, result, work.id)
        )
        append_event(db, "assistant.work.finished", {"work": work.id, "status": status, "generation": work.generation})
'''


# --- the script, with the reference --------------------------------------------------------------


def test_script_passes_all_four_cases_and_prints_counted_evidence(tmp_path):
    output = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--evidence", "--output-dir", str(output)], check=False,
        capture_output=True, text=True, timeout=80, env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    summary, _, document = run.stdout.partition("\n[")
    evidence = json.loads("[" + document)
    assert [case["case"] for case in evidence] == CASES
    assert all(case["passed"] and not case["failures"] for case in evidence), summary
    assert "wall time / real lease time waited = " in summary
    by_case = {case["case"]: case for case in evidence}

    for case in evidence:
        assert case["old_generation"] == 1 and case["generation"] == 2 and case["work_status"] == "DONE"
        assert case["competing_claim"] is None and case["competing_claim_lease_left"] > 0
        assert case["supplier_orders"] == 1 and case["supplier_operations"] == [case["operation"]]
        assert case["supplier_posts"] == 1
        assert case["model_calls"] == 0 and case["model_calls_recorded"] == 0
        assert (case["reserved_pence"], case["spent_pence"]) == (0, case["order_amount"]) == (0, 6 * 250)
        assert case["transcript_rows"] == {"1": 0, "2": 0}
        assert case["expiry_observed_at"] >= case["lease_expires_at"]  # real expiry, never early
        assert 1.0 < case["lease_waited_seconds"] <= 2.0  # the real lease, never more than asked
        # Counted, not written down: recount the supplier's ledger file ourselves.
        ledger = next(output.glob(f"run-*/{case['case']}/supplier.sqlite"))
        with closing(sqlite3.connect(ledger)) as db:
            assert db.execute("SELECT operation FROM orders").fetchall() == [(case["operation"],)]
            posts = db.execute("SELECT count(*) FROM requests WHERE method='POST'").fetchone()[0]
            assert posts == case["supplier_posts"]
    assert by_case["killed"]["worker_exit"] == -9 and by_case["killed"]["worker_signal"] == "SIGKILL"
    for name in ("live_stale", "paused"):
        assert by_case[name]["worker_exit"] == 0
        assert by_case[name]["refused_boundaries"] == ["transcript", "completion", "supplier"]
        assert all(a["error"].startswith("PermissionError") for a in by_case[name]["stale_attempts"])
    assert [a["outcome"] for a in by_case["live_stale"]["expired_probe"]] == ["refused"]
    assert by_case["paused"]["worker_state_when_paused"] == "T"
    assert by_case["paused"]["owner"] == by_case["paused"]["worker_owner"]  # same label, other generation
    crash = by_case["accepted_then_crash"]
    assert crash["worker_exit"] == -9 and crash["order_status_after_crash"] == "SENDING"
    assert crash["supplier_orders_at_crash"] == 1 and crash["supplier_gets"] == 1
    assert crash["later_work"]["settled_seq"] < crash["later_work"]["first_seq"]
    assert_nothing_left(tmp_path, recorded_pids(evidence))


def test_listing_7_runs_the_script_without_running_the_experiment(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    started = time.monotonic()
    checkpoint = runpy.run_path(str(SCRIPT))
    probe = checkpoint["NoNewReasoning"]()
    with pytest.raises(AssertionError):
        probe.complete([], [])
    assert probe.calls == 1
    assert time.monotonic() - started < 5 and not marked_pids(tmp_path) and not list(tmp_path.iterdir())


# --- learner folders -----------------------------------------------------------------------------


def test_an_owner_label_check_is_caught_by_the_paused_and_expired_holders(tmp_path):
    folder = write_learner(tmp_path / "owner-only", RIGHT | {"assert_current": OWNER_ONLY})
    evidence = run_checkpoint(folder, cases=["live_stale", "paused"], output_dir=tmp_path / "out")
    live, paused = evidence
    assert not live.passed and not paused.passed
    assert any("transcript observation was accepted after its lease expired" in f for f in live.failures), live.failures
    assert ("the old worker's completion was accepted after generation 2 took over (revisit `assert_current` in "
            "02_fencing, then `finish` in 02_fencing)") in paused.failures
    assert ("the old worker's transcript observation was accepted after generation 2 took over (revisit "
            "`assert_current` in 02_fencing, then `observe` in 02_fencing)") in paused.failures
    assert ("the old worker's supplier execution was accepted after generation 2 took over (revisit "
            "`assert_current` in 02_fencing)") in paused.failures
    assert paused.failures[0].startswith("the old worker's transcript observation was accepted"), paused.failures
    assert paused.supplier_orders == 1  # the fence failed, the idempotent supplier did not duplicate
    assert_nothing_left(tmp_path, recorded_pids(evidence))


def test_a_fence_blind_to_the_generation_is_caught_where_the_generation_is_the_only_difference(tmp_path):
    # The paused holder is thawed while its replacement holds the row (RUNNING, live lease, same
    # label): a fence that checks everything but the generation accepts its writes there, and
    # nowhere else does the generation alone decide, so the killed case passes.
    folder = write_learner(tmp_path / "no-generation", RIGHT | {"assert_current": ALL_BUT_GENERATION})
    killed, paused = run_checkpoint(folder, cases=["killed", "paused"], output_dir=tmp_path / "out")
    assert killed.passed, killed.failures
    assert paused.owner == paused.worker_owner and not paused.passed
    assert any(f.startswith("the old worker's transcript observation was accepted after generation 2 took over")
               for f in paused.failures), paused.failures
    assert any(f.startswith("the old worker's completion was accepted after generation 2 took over")
               for f in paused.failures), paused.failures
    assert_nothing_left(tmp_path, recorded_pids([killed, paused]))


def test_a_case_whose_experiment_went_wrong_runs_again_and_a_learner_failure_does_not(tmp_path, monkeypatch):
    from course.checkpoint import cases

    stumbled = []
    real = cases.STEPS["killed"]

    def stumbles_once(stage):  # the machine's fault, once: no function of the learner's is named
        if not stumbled:
            stumbled.append(stage.prepared.evidence.work_id)
            raise cases.Abort("the old worker's lease had already run out when the parent could first look")
        real(stage)

    monkeypatch.setitem(cases.STEPS, "killed", stumbles_once)
    folder = write_learner(tmp_path / "owner-only", RIGHT | {"assert_current": OWNER_ONLY})
    killed, live = run_checkpoint(folder, cases=["killed", "live_stale"], output_dir=tmp_path / "out")
    assert len(stumbled) == 1 and killed.passed and killed.tries == 2, killed.failures
    assert killed.work_id != stumbled[0]  # a fresh shop, supplier and worker for the second run
    from course.checkpoint.report import case_line

    assert "run 2 times: the experiment itself went wrong before" in case_line(killed)
    assert not live.passed and live.tries == 1  # the learner's fence is named: running again changes nothing
    assert_nothing_left(tmp_path, recorded_pids([killed, live]))


def test_a_finish_without_the_fence_is_caught(tmp_path):
    folder = write_learner(tmp_path / "unfenced", RIGHT | {"finish": UNFENCED_FINISH})
    (case,) = run_checkpoint(folder, cases=["live_stale"], output_dir=tmp_path / "out")
    assert any(f.startswith("the old worker's completion was accepted after generation 2 took over") for f in case.failures)
    assert any(f.startswith("the stored work result is the old worker's stale result") for f in case.failures)
    assert case.refused_boundaries == ["transcript", "supplier"]
    assert_nothing_left(tmp_path, {case.worker_pid, case.supplier_pid})


def test_the_untouched_release_reports_what_is_not_implemented(tmp_path):
    stubs = {grade_id: stub(source) for grade_id, source in RIGHT.items()} | {"claim_dataclass": STUB_CLASS}
    folder = write_learner(tmp_path / "release", stubs)
    evidence = run_checkpoint(folder, output_dir=tmp_path / "out")
    assert [case.case for case in evidence] == CASES
    for case in evidence:
        assert not case.passed
        assert case.failures[0].startswith("not implemented yet: write `claim` in 01_claims and run it"), case.failures
    assert_nothing_left(tmp_path, recorded_pids(evidence))

    # Only observe left as a stub: the killed case never needs it, the live stale one does.
    folder = write_learner(tmp_path / "no-observe", RIGHT | {"observe": stub(RIGHT["observe"])})
    killed, live = run_checkpoint(folder, cases=["killed", "live_stale"], output_dir=tmp_path / "out2")
    assert killed.passed, killed.failures  # the learner's claim, fence, finish and recovery decision
    assert killed.implementation == str(folder)
    assert "not implemented yet: write `observe` in 02_fencing and run it" in live.failures
    assert_nothing_left(tmp_path, recorded_pids([killed, live]))


def test_a_missing_notebook_is_a_clear_failure_not_a_crash(tmp_path):
    folder = write_learner(tmp_path / "partial", RIGHT)
    (folder / "02_fencing.ipynb").unlink()
    evidence = run_checkpoint(folder, cases=["killed"], output_dir=tmp_path / "out")
    assert "missing notebook" in evidence[0].failures[0] and "02_fencing.ipynb" in evidence[0].failures[0]


# --- interruptions -------------------------------------------------------------------------------


def test_sigint_to_the_running_script_leaves_nothing_behind(tmp_path):
    script = subprocess.Popen(
        [sys.executable, str(SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    try:
        children = wait_for_children(tmp_path, 2, within=30)
        time.sleep(1.0)  # inside the first lease
        children |= marked_pids(tmp_path)
        script.send_signal(signal.SIGINT)
        out, err = script.communicate(timeout=20)
    finally:
        if script.poll() is None:
            script.kill()
            script.wait(5)
    assert script.returncode == 130, out + err
    assert "every worker and supplier process was stopped" in err
    assert_nothing_left(tmp_path, set(children))


def test_sigkill_of_a_jupyter_kernel_mid_checkpoint_leaves_nothing_behind(tmp_path):
    from jupyter_client import KernelManager

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env={**os.environ, "TMPDIR": str(tmp_path)}, cwd=str(tmp_path))
    client = manager.client()
    try:
        client.start_channels()
        client.wait_for_ready(timeout=60)
        client.execute("from course.checkpoint import run_checkpoint\nevidence = run_checkpoint()")
        children = wait_for_children(tmp_path, 2, within=30)
        time.sleep(2.5)  # into the second case: a live old worker and a prepared next case
        children |= marked_pids(tmp_path)
        kernel = manager.provisioner.process
        os.kill(kernel.pid, signal.SIGKILL)
        kernel.wait(10)
        assert_nothing_left(tmp_path, set(children), within=10)
    finally:
        client.stop_channels()
        if manager.is_alive():
            manager.shutdown_kernel(now=True)
        manager.cleanup_resources()


@pytest.mark.parametrize("release", ["solutions", "notebooks"])
def test_papermill_checkpoint_notebook_passes_on_solutions_and_explains_the_release(release, tmp_path):
    import papermill

    learner = tmp_path / "learner"
    shutil.copytree(ROOT / release / "ch12", learner)
    parameters = {"implementation": str(learner), "lease_seconds": 2.0, "output_dir": str(tmp_path / "output")}
    notebook = ROOT / "checkpoints" / "ch12_worker_recovery_checkpoint.ipynb"
    run = lambda: papermill.execute_notebook(  # noqa: E731
        notebook, tmp_path / "run.ipynb", parameters=parameters, cwd=ROOT, kernel_name="python3", progress_bar=False,
        kernel_manager_class=LocalSocketKernel)
    if release == "solutions":
        run()
        assert list((tmp_path / "output").glob("*/timeline.png")), "the timeline was not saved"
    else:
        with pytest.raises(papermill.PapermillExecutionError) as failed:
            run()
        assert "not implemented yet: write `claim` in 01_claims and run it" in str(failed.value)
    assert_nothing_left(tmp_path)


# --- only saved code is judged; a wrong recovery decision is named ----------------------------------

APPROVED_ONLY = '''
def order_to_continue(db, work):
    """Wrong on purpose: continues APPROVED orders only, and forgets SENDING and UNKNOWN."""
    row = db.connection.execute(
        "SELECT id FROM assistant_orders WHERE work_id=? AND status='APPROVED' ORDER BY created DESC", (work.id,)
    ).fetchone()
    return None if row is None else row[0]
'''


def test_a_wrong_order_to_continue_is_named_not_a_key_error(tmp_path):
    folder = write_learner(tmp_path / "approved-only", RIGHT | {"order_to_continue": APPROVED_ONLY})
    (case,) = run_checkpoint(folder, cases=["accepted_then_crash"], output_dir=tmp_path / "out")
    assert not case.passed
    named = [f for f in case.failures if "your `order_to_continue` returned None" in f]
    assert named and named[0].endswith("(revisit `order_to_continue` in 04_recovery)"), case.failures
    assert all("(revisit" in f or f.startswith("not implemented yet") for f in case.failures), case.failures
    assert_nothing_left(tmp_path, {case.worker_pid, case.supplier_pid})


def run_in_lab_kernel(notebook: Path, cells: list[str]) -> None:
    """Run `cells` in a kernel that believes a Jupyter server started it for `notebook`
    (JPY_SESSION_NAME), as JupyterLab does: the setup cell's watch() is then active."""
    from jupyter_client import KernelManager

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env={**os.environ, "JPY_SESSION_NAME": str(notebook)}, cwd=str(notebook.parent))
    client = manager.client()
    try:
        client.start_channels()
        client.wait_for_ready(timeout=60)
        for source in cells:
            reply = client.execute_interactive(source, timeout=60, output_hook=lambda message: None)
            assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        manager.cleanup_resources()


def test_an_unsaved_change_run_in_the_kernel_stops_the_checkpoint(tmp_path):
    folder = write_learner(tmp_path / "learner", RIGHT)
    fencing = folder / "02_fencing.ipynb"
    saved = {cell["metadata"].get("nbgrader", {}).get("grade_id"): "".join(cell["source"])
             for cell in json.loads(fencing.read_text())["cells"]}
    watch = "from course.lab.kernel_runs import watch\nwatch()"
    # The learner runs the saved cell, then breaks assert_current and runs it without saving.
    run_in_lab_kernel(fencing, [watch, SETUP_SOURCE["02_fencing.ipynb"], saved["assert_current"], OWNER_ONLY])

    evidence = run_checkpoint(folder, cases=["killed"], require_saved=True)
    failure = evidence[0].failures[0]
    assert failure.startswith("save 02_fencing first: your kernel ran `assert_current`"), failure
    assert not marked_pids(tmp_path)  # nothing was started for code that was not saved

    # Saved now (the broken version is what the file holds): the checkpoint judges it, and says so.
    notebook = json.loads(fencing.read_text())
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "assert_current":
            cell["source"] = OWNER_ONLY
    fencing.write_text(json.dumps(notebook))
    (case,) = run_checkpoint(folder, cases=["paused"], require_saved=True, output_dir=tmp_path / "out")
    judged = {version.name: version for version in case_versions(folder)}
    assert judged["assert_current"].same_as_run is True and judged["claim"].same_as_run is None
    assert any("revisit `assert_current` in 02_fencing" in f for f in case.failures), case.failures
    assert_nothing_left(tmp_path, {case.worker_pid, case.supplier_pid})


SETUP_SOURCE = {name: textwrap.dedent(source).strip() for name, source in SETUP.items()}


def case_versions(folder: Path) -> list:
    from course.lab.learner import load_implementation

    return load_implementation(folder).versions


def test_a_stub_reached_through_another_graded_function_is_the_one_named():
    from course.lab.learner import _innermost_stub

    namespace: dict = {}
    exec(compile("def assert_current(connection, work, now=None):\n    raise NotImplementedError()\n",
                 "<02_fencing.ipynb, cell 'assert_current'>", "exec"), namespace)
    exec(compile("def observe(db, work, message):\n    assert_current(None, work)\n",
                 "<02_fencing.ipynb, cell 'observe'>", "exec"), namespace)
    exec(compile("def assert_current_elsewhere():\n    raise NotImplementedError()\n", "<scratch>", "exec"), namespace)
    with pytest.raises(NotImplementedError) as through_observe:
        namespace["observe"](None, None, {})
    assert _innermost_stub(through_observe.value, "observe") == "assert_current"
    with pytest.raises(NotImplementedError) as elsewhere:
        namespace["assert_current_elsewhere"]()
    assert _innermost_stub(elsewhere.value, "observe") == "observe"  # not the learner's graded code: the default


def test_modules_planted_beside_the_notebooks_do_not_stand_in_for_the_course(tmp_path, monkeypatch):
    """The checkpoint's worker and supplier, and the killed holder of 04_recovery, start in the
    learner's folder (at grading, a folder learner code can write). A `course.py` or
    `sovereign_agent.py` there (an honest scratch file, or planted) must not replace ours."""
    from course.lessons.checks import fresh_shop, killed_holder

    folder = write_learner(tmp_path / "planted", RIGHT)
    for name in ("course", "reference_organizations", "sovereign_agent"):
        (folder / f"{name}.py").write_text(f"raise SystemExit('the planted {name}.py ran')\n")
    monkeypatch.chdir(folder)
    evidence = run_checkpoint(".", cases=["killed", "live_stale"], output_dir=tmp_path / "out")
    assert [(case.case, case.passed, case.failures) for case in evidence] == [
        ("killed", True, []), ("live_stale", True, [])]
    db = fresh_shop()
    try:
        work_id = assistant_work.enqueue(db, "phone:vanilla", "lucy", "Restock vanilla", subject="SKU-VANILLA")
        assert killed_holder(db, work_id, ttl=1.0) == -9
    finally:
        db.close()
    assert_nothing_left(tmp_path, recorded_pids(evidence))
