"""Real child processes that cannot outlive the experiment that started them.

Crash-recovery experiments kill processes on purpose, so the helpers here make the rest safe:
if a Jupyter kernel is SIGKILLed, its ordinary children are re-parented to init and keep
running (and keep their ports and files). `spawn` asks Linux to SIGKILL the child when its
parent dies; `stop` always reaps; `wait_for_file` never waits without a bound; and
`write_atomically` lets another process read a ready file without ever seeing half of it.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Mapping, Sequence

_POLL_SECONDS = 0.02

Target = int | IO[Any] | None

# Runs first in every spawned child, as a fresh Python (no fork-time code: a preexec_fn is unsafe
# while the parent runs threads, as kernels and test runners do). It asks Linux to send the
# signal when the parent dies, closes the race with a parent that died first (the child has then
# been re-parented and would never get the signal), then becomes the real command; the setting
# survives exec.
_DIE_WITH_PARENT = """
import ctypes, os, sys
parent, signal_number = int(sys.argv[1]), int(sys.argv[2])
if ctypes.CDLL(None, use_errno=True).prctl(1, signal_number, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_PDEATHSIG) failed")
if os.getppid() != parent:
    sys.exit("the parent died before the child started")
os.execvp(sys.argv[3], sys.argv[3:])
"""


def spawn(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdout: Target = None,
    stderr: Target = None,
    new_session: bool = False,
    death_signal: signal.Signals = signal.SIGKILL,
) -> subprocess.Popen[bytes]:
    """Start `argv` as a child that dies with this process, even if this process is SIGKILLed.

    On Linux the child gets PR_SET_PDEATHSIG (`death_signal`, SIGKILL unless a server should
    get the chance to clean up). Caveat: Linux ties it to the *thread* that spawned the child,
    so spawn from a thread that lives as long as the child (a kernel cell's main thread does).
    Elsewhere there is no such guarantee; children that care should also watch their parent
    (the supplier's `--parent-pid`).

    By default the child stays in our process group, so a kernel interrupt (SIGINT to the
    group) reaches it too; `new_session=True` detaches it from that. stdin is always
    /dev/null: a child must never compete with a kernel or a test runner for input.
    """
    command = [os.fspath(arg) for arg in argv]
    if sys.platform.startswith("linux"):
        command = [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), str(int(death_signal)),
                   *command]
    return subprocess.Popen(
        command,
        env=None if env is None else dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=new_session,
    )


def alive(pid: int) -> bool:
    """Whether `pid` is a running process; a zombie (dead, not yet reaped) counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, it just is not ours
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return not sys.platform.startswith("linux")  # no /proc: trust kill(0)
    except OSError:
        return True
    # The state letter follows the parenthesised command name, which may itself contain ')'.
    return stat.rpartition(")")[2].split()[0] not in {"Z", "X"}


def wait_for_file(
    path: str | os.PathLike[str],
    *,
    timeout: float,
    process: subprocess.Popen[Any] | None = None,
) -> str:
    """Poll until `path` exists and return its text; never wait longer than `timeout` seconds.

    If `process` exits before the file appears, waiting longer is pointless: RuntimeError with
    its exit status. Pair it with `write_atomically`, so an existing file is a complete file.
    """
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError("timeout must be a finite number of seconds > 0")
    path = Path(path)
    deadline = time.monotonic() + timeout
    while True:
        if path.exists():
            return path.read_text()
        if process is not None and process.poll() is not None:
            if path.exists():  # written just before it exited
                return path.read_text()
            raise RuntimeError(
                f"process {process.pid} exited with status {process.returncode} "
                f"before {path} appeared"
            )
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(_POLL_SECONDS)


def stop(process: subprocess.Popen[Any], *, grace: float = 2.0) -> int:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL; always reap. Returns the exit status.

    Idempotent: stopping an exited (or already stopped) process just reaps it and closes our
    ends of its pipes.
    """
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    return process.returncode


def write_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` so that readers see either no file (or the old one) or all of the new one.

    A temporary file in the same folder, then os.replace (atomic within one filesystem).
    No fsync: these files are signals between live processes, not records meant to survive
    a power cut.
    """
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
