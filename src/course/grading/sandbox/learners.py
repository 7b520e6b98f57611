"""Learner sandboxes: each learner process of a check in a bubblewrap sandbox of its own.

It holds the system and the Python environment read-only, the course's packages with the graded
answers replaced by tripwires, the release read-only, the submitted notebooks as read-only copies
(read from descriptors the grader opened without following links), and the check's scratch folder
read-write (at the same path as in the judge's sandbox). Its working folder, /tmp and /dev/shm are
a room of its own in the student's bounded file system; its own pids, network and IPC: no learner
process can reach another's, nor the judge's. Only the grader starts them (for the judge's broker).

The grader never resolves a name inside a folder learner code can write: what it reads of a
learner process comes through a pipe or socket it made, or a file it created in a folder no
sandbox holds (a worker's stderr); removing a room or a scratch folder is the only operation
there, and it follows no link.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from course.grading import wire
from course.grading.lockcalls import LISTENER, VARIABLE, LockCalls
from course.grading.learner.tripwires import overlays
from course.grading.sandbox import reaper
from course.grading.sandbox.bubblewrap import WORKDIR, Limits, Sandbox, sandbox_disabled

RELEASE_INSIDE = "/course/release"
WIRE_FD = "COURSE_WIRE_FD"
CELL_SECONDS = "COURSE_CELL_SECONDS"


class LearnerFailed(RuntimeError):
    """A learner process that did not start, or did not report, in time."""


class Learner:
    """One running learner sandbox, from the grader's side."""

    def __init__(self, sandbox: Sandbox | None, argv: list[str], env: dict[str, str], cwd: Path | None = None,
                 wire_end: socket.socket | None = None, stdout: Any = subprocess.DEVNULL, stderr: Any = subprocess.DEVNULL):
        self.sandbox, self.sent, self._stack = sandbox, [], contextlib.ExitStack()
        self.log: Path | None = None  # a worker's stderr, where the grader keeps it
        self.locks: LockCalls | None = None  # its lock calls, answered here until the judge takes them
        keep = [wire_end.fileno()] if wire_end is not None else []
        try:
            if sandbox is not None:
                sandbox.env.update(env)
                keep += list(sandbox.data.values())
                argv, env = self._stack.enter_context(sandbox.bounded()).command(argv), {}
            self.process = subprocess.Popen(argv, env=env, cwd=cwd, pass_fds=keep, stdin=subprocess.DEVNULL,
                                            stdout=stdout, stderr=stderr, start_new_session=True)
        except BaseException:
            self._stack.close()
            raise
        finally:
            for fd in sandbox.data.values() if sandbox is not None else ():
                os.close(fd)  # bwrap has copied them (or never will)
            if wire_end is not None:
                wire_end.close()

    @property
    def pid(self) -> int:
        """The learner's own process: with a sandbox, bwrap's grandchild (bwrap's child is the
        sandbox's pid 1, which reaps; the learner process is an ordinary process, pid 2)."""
        if self.sandbox is None:
            return self.process.pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.process.poll() is None:
            init = reaper.children(self.process.pid)
            command = reaper.children(init[0]) if init else []
            if command:
                return command[0]
            time.sleep(0.005)
        return self.process.pid

    def stderr_tail(self, size: int = 1500) -> str:
        """The end of a worker's stderr: the grader's own file (`start_worker`)."""
        if self.log is None:
            return ""
        with open(self.log, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - size))
            return handle.read().decode(errors="replace")

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)
        self.sent.append(signum)

    def state(self) -> str:
        try:
            return Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return "gone"

    def status(self, timeout: float | None = 0.0) -> int | None:
        """Its exit status, as the system reports a signal: -N when a signal N we sent ended it."""
        try:
            code = self.process.wait(timeout) if timeout else self.process.poll()
        except subprocess.TimeoutExpired:
            return None
        if code is not None and self.sandbox is not None and code > 128 and code - 128 in self.sent:
            return -(code - 128)
        return code

    def close(self) -> None:
        """Kill it and its whole sandbox, reap it, remove its cgroup."""
        if self.locks is not None:
            self.locks.close()
            self.locks = None
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        self._stack.close()
        if self.sandbox is not None and self.sandbox.room is not None:
            shutil.rmtree(self.sandbox.room, ignore_errors=True)  # follows no link


def launch(argv: list[str], env: dict[str, str], answers: frozenset[str], submitted: Path, release: Path,
           scratch: tuple[Path, str], rooms: Path | None = None, **streams: Any) -> Learner:
    """`argv` in a learner sandbox (see the module's docstring), with `env` and nothing of the
    grader's, its room a new folder in `rooms` (the student's file system) when that is bounded;
    with --no-sandbox, the instructor's decision, a plain child among copies of the notebooks."""
    if sandbox_disabled():
        return Learner(None, argv, {**os.environ, **env, "COURSE_RELEASE": str(release)},
                       _copied(submitted, scratch[0]), **streams)
    files = {f"{RELEASE_INSIDE}/{p.name}": str(p) for p in sorted(Path(release).glob("*.ipynb"))}
    files.update(overlays(answers))
    room = Path(tempfile.mkdtemp(prefix="room-", dir=rooms)) if rooms is not None else None
    sandbox = Sandbox(files=files, data=submitted_notebooks(submitted), writable={scratch[1]: str(scratch[0])},
                      room=room, env={"COURSE_RELEASE": RELEASE_INSIDE, "TMPDIR": "/tmp"}, limits=Limits())
    return Learner(sandbox, argv, env, **streams)


def submitted_notebooks(folder: Path) -> dict[str, int]:
    """{inside path: a descriptor} for each notebook of the submitted folder that is a regular file,
    opened without following a link (nor waiting on a FIFO)."""
    found = {}
    for path in sorted(Path(folder).glob("*.ipynb")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            found[f"{WORKDIR}/{path.name}"] = fd
        else:
            os.close(fd)
    return found


def start(what: str, answers: frozenset[str], submitted: Path, release: Path, scratch: tuple[Path, str],
          cell_seconds: float, rooms: Path | None = None,
          races: bool = False) -> tuple[Learner, socket.socket, list[dict]]:
    """A learner process for `what` (a notebook, or `implementation`): (it, the judge's end of its
    wire, its report on each cell). Each cell has `cell_seconds`; a process that does not report
    within a few times that (its cells ignore the interrupt) is stopped. For a check that `races`,
    its lock calls are answered here (`learner.locks`) until the judge takes them."""
    ours, theirs = socket.socketpair()
    argv = [sys.executable, "-P", "-m", "course.grading.learner.process", what]
    env = {WIRE_FD: str(theirs.fileno()), CELL_SECONDS: repr(float(cell_seconds)),
           **({VARIABLE: "1"} if races else {})}
    learner = launch(argv, env, answers, submitted, release, scratch, rooms, wire_end=theirs)
    try:
        learner.locks = _lock_calls(ours, learner) if races else None
        report = _ready(ours, learner, max(30.0, 3 * cell_seconds))
    except BaseException:
        ours.close()
        learner.close()
        raise
    return learner, ours, report


def _lock_calls(sock: socket.socket, learner: Learner, within: float = 30.0) -> LockCalls:
    """The listener of its lock calls, the first thing it sends (before any learner code loads)."""
    message, fds = b"", []
    if select.select([sock], [], [], within)[0]:
        message, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if message != LISTENER or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise LearnerFailed(f"the process that runs your notebook could not hand its lock calls to the grader "
                            f"(it exited with status {learner.status(2.0)}): this system cannot grade races")
    return LockCalls(fds[0])


def _ready(sock: socket.socket, learner: Learner, within: float) -> list[dict]:
    if not select.select([sock], [], [], within)[0]:
        raise LearnerFailed(f"your notebook's cells did not finish running within {within:g} s")
    message = wire.receive_message(sock)
    if not message or "ready" not in message:
        status = learner.status(2.0)
        how = f"was killed (signal {status - 128})" if status and status > 128 else f"exited (status {status})"
        raise LearnerFailed(f"the process running your notebook {how} before its cells had all run: a cell of "
                            "yours ended it (os._exit, a signal, a crash), so nothing could be checked")
    return list(message["ready"])


def start_worker(argv: list[str], answers: frozenset[str], submitted: Path, release: Path,
                 scratch: tuple[Path, str], log: Path, rooms: Path | None = None) -> Learner:
    """A checkpoint worker (learner code, run by the course's worker) in a learner sandbox; its
    replies on a pipe, its stderr into `log`, a new file the grader makes in a folder no sandbox holds."""
    with open(log, "xb") as handle:
        worker = launch(argv, {}, answers, submitted, release, scratch, rooms, stdout=subprocess.PIPE, stderr=handle)
    worker.log = log
    return worker


def _copied(submitted: Path, scratch: Path) -> Path:
    """Without a sandbox: the notebooks copied into the check's scratch folder, the working folder."""
    folder = Path(scratch) / "notebooks"
    if not folder.exists():
        folder.mkdir(parents=True)
        for path in Path(submitted).glob("*.ipynb"):
            shutil.copy(path, folder / path.name)
    return folder
