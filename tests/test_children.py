"""Child processes that die with their parent, bounded waits, reaping, atomic ready files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_organizations.children import alive, spawn, stop, wait_for_file, write_atomically

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc")




def python(code: str, *args: object) -> list[str]:
    return [sys.executable, "-c", code, *map(str, args)]


def dies_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


SLEEPER = "import sys, time; time.sleep(60)"

# A parent that spawns a sleeping child, announces its pid, then waits to be SIGKILLed.
PARENT_OF_SLEEPER = f"""
import sys, time
from reference_organizations.children import spawn, write_atomically
child = spawn([sys.executable, "-c", {SLEEPER!r}, sys.argv[1]])
write_atomically(sys.argv[1] + "/child.pid", str(child.pid))
time.sleep(60)
"""

# A parent that starts a real supplier (children.spawn underneath), then waits to be SIGKILLed.
PARENT_OF_SUPPLIER = """
import sys, time
from reference_organizations.store.supplier import start_supplier
start_supplier(sys.argv[1] + "/supplier.sqlite", ready=sys.argv[1] + "/ready.json")
time.sleep(60)
"""

# Something other than children.spawn starts the supplier: only --parent-pid can notice.
PLAIN_PARENT_OF_SUPPLIER = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-m", "reference_organizations.store.supplier",
                  "--database", sys.argv[1] + "/supplier.sqlite", "--ready", sys.argv[1] + "/ready.json",
                  "--parent-pid", str(os.getpid())])
time.sleep(60)
"""


@contextlib.contextmanager
def parent_running(script: str, folder: Path, *ready: str) -> Iterator[tuple[subprocess.Popen, int]]:
    """(parent, its child's pid) once the parent announced the child and every `ready` file exists."""
    parent = subprocess.Popen(python(script, folder))
    try:
        child = int(wait_for_file(folder / "child.pid", timeout=10, process=parent))
        for name in ready:
            wait_for_file(folder / name, timeout=10)
        yield parent, child
    finally:
        stop(parent)


def sigkill(parent: subprocess.Popen) -> None:
    parent.kill()
    assert parent.wait(5) == -signal.SIGKILL


@linux_only
def test_child_dies_when_its_parent_is_sigkilled(tmp_path: Path):
    with parent_running(PARENT_OF_SLEEPER, tmp_path) as (parent, child):
        assert alive(child)
        sigkill(parent)
        assert dies_within(child, 5)


# A parent whose child asks for SIGTERM: the child records the signal it got, then exits.
PARENT_OF_TERM_CATCHER = """
import signal, sys, time
from reference_organizations.children import spawn, write_atomically
catcher = (
    "import os, signal, sys, time\\n"
    "def caught(number, frame):\\n"
    "    open(sys.argv[1] + '/signal.tmp', 'w').write(signal.Signals(number).name)\\n"
    "    os.replace(sys.argv[1] + '/signal.tmp', sys.argv[1] + '/signal')\\n"
    "    sys.exit(0)\\n"
    "signal.signal(signal.SIGTERM, caught)\\n"
    "open(sys.argv[1] + '/armed', 'w').close()\\n"
    "time.sleep(60)\\n"
)
child = spawn([sys.executable, "-c", catcher, sys.argv[1]], death_signal=signal.SIGTERM)
write_atomically(sys.argv[1] + "/child.pid", str(child.pid))
time.sleep(60)
"""


@linux_only
def test_a_child_can_ask_for_a_gentler_death_signal(tmp_path: Path):
    with parent_running(PARENT_OF_TERM_CATCHER, tmp_path, "armed") as (parent, child):
        sigkill(parent)
        assert wait_for_file(tmp_path / "signal", timeout=5) == "SIGTERM"
        assert dies_within(child, 5)


def test_spawn_runs_exactly_the_command_with_its_environment_and_folder(tmp_path: Path):
    show = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('MARK'), os.getcwd()]))"
    child = spawn([sys.executable, "-c", show, "a b", "--c"], env={**os.environ, "MARK": "set"}, cwd=tmp_path,
                  stdout=subprocess.PIPE)
    out, _ = child.communicate(timeout=10)
    assert json.loads(out) == [["a b", "--c"], "set", str(tmp_path)]
    assert child.returncode == 0


@pytest.mark.parametrize("script", [PARENT_OF_SUPPLIER, PLAIN_PARENT_OF_SUPPLIER], ids=["spawn", "parent-pid"])
def test_supplier_dies_when_its_parent_is_sigkilled(tmp_path: Path, script: str):
    parent = subprocess.Popen(python(script, tmp_path))
    try:
        supplier = json.loads(wait_for_file(tmp_path / "ready.json", timeout=10, process=parent))["pid"]
        assert alive(supplier)
        parent.kill()
        parent.wait(5)
        assert dies_within(supplier, 5)
    finally:
        stop(parent)


def test_spawn_keeps_the_process_group_unless_asked(tmp_path: Path):
    same = spawn(python(SLEEPER, tmp_path))
    detached = spawn(python(SLEEPER, tmp_path), new_session=True)
    try:
        assert os.getpgid(same.pid) == os.getpgid(0)
        assert os.getpgid(detached.pid) == detached.pid != os.getpgid(0)
    finally:
        assert stop(same) == stop(detached) == -signal.SIGTERM


def test_stop_is_idempotent_and_reaps(tmp_path: Path):
    process = spawn(python("import sys; sys.exit(3)", tmp_path), stdout=subprocess.PIPE)
    process.wait(5)
    assert stop(process) == 3
    assert stop(process) == 3
    assert process.stdout.closed


def test_stop_kills_what_ignores_sigterm(tmp_path: Path):
    stubborn = f"""
import signal, sys, time
from reference_organizations.children import write_atomically
signal.signal(signal.SIGTERM, signal.SIG_IGN)
write_atomically({str(tmp_path / "ready")!r}, "ignoring SIGTERM")
time.sleep(60)
"""
    process = spawn(python(stubborn, tmp_path))
    wait_for_file(tmp_path / "ready", timeout=10, process=process)
    started = time.monotonic()
    assert stop(process, grace=0.2) == -signal.SIGKILL
    assert time.monotonic() - started < 5  # the grace, not the child's 60 s sleep


@linux_only
def test_a_zombie_is_not_alive(tmp_path: Path):
    process = spawn(python("pass", tmp_path))
    deadline = time.monotonic() + 5
    while Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not alive(process.pid)
    assert stop(process) == 0


def test_wait_for_file_returns_the_text(tmp_path: Path):
    write_atomically(tmp_path / "ready", "hello")
    assert wait_for_file(tmp_path / "ready", timeout=0.5) == "hello"


def test_wait_for_file_is_bounded(tmp_path: Path):
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        wait_for_file(tmp_path / "never", timeout=0.2)
    assert time.monotonic() - started < 3
    with pytest.raises(ValueError):
        wait_for_file(tmp_path / "never", timeout=float("inf"))


def test_wait_for_file_stops_when_the_process_exits(tmp_path: Path):
    process = spawn(python("import sys; sys.exit(7)", tmp_path))
    try:
        with pytest.raises(RuntimeError, match="status 7"):
            wait_for_file(tmp_path / "never", timeout=10, process=process)
    finally:
        stop(process)


def test_write_atomically_never_shows_half_a_file(tmp_path: Path):
    target = tmp_path / "ready.json"
    versions = [json.dumps({"version": n, "padding": "x" * 20_000}) for n in range(100)]
    write_atomically(target, versions[0])
    seen: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(target.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    for text in versions:
        write_atomically(target, text)
    done.set()
    reader.join()
    assert seen and set(seen) <= set(versions)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready.json"]  # no temporary left over
