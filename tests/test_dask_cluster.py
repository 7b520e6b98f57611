"""The grading unit on a real Dask cluster: a scheduler and two workers on loopback, one SIGKILLed.

The test starts `dask scheduler` and two `dask worker --nthreads 1` processes (no nanny, so the
pid we hold is the worker itself), grades the toy class of test_grading_tools through
`course autograde --scheduler`, kills a worker while it grades a student, and checks that every
student is recorded exactly once with the scores a single machine gives. Every process is
stopped by pid; the workers' temporary folders live under the test's folder, so the check for
leftovers (conftest) sees their kernels and checkers too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import assert_nothing_left, sandbox_cgroups
from course.grading.classes.autograde import autograde
from course.grading.nbgrader import commands
from test_grading_tools import build_course, submit

distributed = pytest.importorskip("distributed", reason="the [cluster] extra is part of the test install")

pytestmark = pytest.mark.slow

PARTIAL = "def double(x):\n    return 2 * x if x < 10 else 0"
SOLID = "def double(x):\n    return 2 * x"
SLOW = "import time\ntime.sleep(3)\n\ndef double(x):\n    return 2 * x"  # long enough to be caught mid-grading
CLASS = {"ada": SLOW, "bo": PARTIAL, "cy": SLOW, "di": SOLID, "ed": SLOW, "fay": PARTIAL}
EXPECTED = {"ada": 3, "bo": 1, "cy": 3, "di": 3, "ed": 3, "fay": 1}  # 1 of the 4 points is a manual answer


def wait_for(what, condition, within=60.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {within:g} s waiting for {what}")


def start(argv, log: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def test_a_worker_killed_mid_class_loses_no_student_and_records_none_twice(tmp_path):
    dask = str(Path(sys.executable).parent / "dask")
    scratch = tmp_path / "worker-tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    scheduler_file = tmp_path / "scheduler.json"
    processes, clients = [], []
    groups_before = sandbox_cgroups()
    try:
        processes.append(start([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                "--scheduler-file", str(scheduler_file)], tmp_path / "scheduler.log", env))
        for name in ("one", "two"):
            processes.append(start([dask, "worker", "--scheduler-file", str(scheduler_file), "--nthreads", "1",
                                    "--no-nanny", "--name", name, "--host", "127.0.0.1", "--no-dashboard",
                                    "--local-directory", str(tmp_path / name)], tmp_path / f"{name}.log", env))
        client = distributed.Client(scheduler_file=str(scheduler_file), timeout="30s")
        clients.append(client)
        client.wait_for_workers(2, timeout=60)
        address = client.scheduler.address
        pids = client.run(os.getpid)  # worker address -> the pid we started (no nanny in between)

        root = tmp_path / "course"
        root.mkdir()
        build_course(root)
        commands.release(root=root)
        for student, solution in CLASS.items():
            submit(root, student, solution)
        finished = {}
        grading = threading.Thread(target=lambda: finished.update(results=autograde(
            root=root, scheduler=address, progress=False)), daemon=True)
        grading.start()

        def busy_worker():
            busy = [worker for worker, tasks in client.processing().items() if tasks]
            return busy[0] if busy else None

        victim = wait_for("a worker to start grading", busy_worker)
        time.sleep(1.5)  # inside the student's grading: kernel and checkers are running
        held = {str(key).split("-")[1] for key in client.processing()[victim]}  # keys: grade-<student>-<uuid>
        os.kill(pids[victim], signal.SIGKILL)
        grading.join(240)
        assert not grading.is_alive(), "grading did not finish after a worker died"
    finally:
        for client in clients:
            client.close()
        for process in processes:
            stop(process)
    assert next(p for p in processes[1:] if p.pid == pids[victim]).returncode == -signal.SIGKILL

    assert held, "the killed worker held a student"
    results = {r.student: r for r in finished["results"]}
    assert {s: results[s].score for s in held} == {s: EXPECTED[s] for s in held}, "its students were graded elsewhere"
    assert {s: r.score for s, r in results.items()} == EXPECTED
    assert all(r.reasons == {} for r in results.values()), {s: r.reasons for s, r in results.items()}
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        assert sorted(s.id for s in gb.students) == sorted(CLASS)
        submissions = gb.find_assignment(commands.ASSIGNMENT).submissions
        assert sorted(s.student.id for s in submissions) == sorted(CLASS), "each student recorded exactly once"
        assert {s.student.id: s.score for s in submissions} == EXPECTED
    assert sorted(p.parent.parent.name for p in (root / "autograded").glob("*/ch12/toy.ipynb")) == sorted(CLASS)
    assert_nothing_left(tmp_path, {p.pid for p in processes})
    # The killed worker's sandboxes died with it; their cgroups were removed by the next sandbox made.
    assert sandbox_cgroups() <= groups_before
