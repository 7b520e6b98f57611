"""The judge's sandbox: one per student, a server that imports the course once and forks a judge
per check (`python -I -m course.grading.judge.server`).

No learner code runs in it, so judges may share it. Its standard input is a Unix socket to the
grader: b"R" and an 8-byte id with a descriptor (the judge's broker) starts a judge, b"K" and
an id kills one, end of file ends the server. Judges are not dumpable.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from course.grading.sandbox import reaper

PR_SET_DUMPABLE = 4
REQUEST, KILL = b"R", b"K"
DESCRIPTORS = 1
PRELOAD = (  # what the checks' setup cells import, and what the judge itself needs
    "course.lessons.checks", "course.lessons.fence_checks", "course.lab.kernel_runs", "course.lab.learner", "course.checkpoint.run", "course.checkpoint.cases", "course.checkpoint.report",
    "course.grading.judge.check", "course.grading.judge.broker", "sovereign_agent.assistant_work",
    "sovereign_agent.assistant_orders", "sovereign_agent.status", "reference_organizations.store.assistant",
    "reference_organizations.store.supplier.process",  # the package itself loads its parts on first use
)


# --- inside the judge's sandbox -------------------------------------------------------------------

def serve(control: socket.socket) -> None:
    """Fork one judge per request until the grader closes the socket."""
    judges: dict[int, tuple[int, str]] = {}  # request id -> (pid, its private folder)
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        while True:
            ready = selector.select(timeout=0.05)
            _reap(judges)
            if not ready:
                continue
            message, fds, _, _ = socket.recv_fds(control, 9, DESCRIPTORS)
            if not message:
                break
            ident = int.from_bytes(message[1:9], "big")
            if message[:1] == REQUEST and len(fds) == DESCRIPTORS:
                judges[ident] = _fork_judge(fds, control)
            else:
                for fd in fds:
                    os.close(fd)
                if message[:1] == KILL and ident in judges:
                    reaper.kill_tree(judges[ident][0])
    reaper.kill_all_descendants()  # the grader is gone: so are its judges (one may not be reaped yet) and their folders
    for _, folder in judges.values():
        shutil.rmtree(folder, ignore_errors=True)


def _fork_judge(fds: list[int], control: socket.socket) -> tuple[int, str]:
    """A child that becomes one judge, its broker on fd 3."""
    folder = tempfile.mkdtemp(prefix="judge-")
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            control.close()
            os.dup2(fds[0], 3)
            os.closerange(4, 1 << 16)
            os.environ["COURSE_PRIVATE"] = folder
            from course.grading.judge import check

            check.main()  # ends the process
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    return pid, folder


def _reap(judges: dict[int, tuple[int, str]]) -> None:
    """Collect finished judges; kill what a finished one left behind (a supplier); remove its folder."""
    finished = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        for ident, (child, folder) in list(judges.items()):
            if child == pid:
                del judges[ident]
                shutil.rmtree(folder, ignore_errors=True)
                finished = True
    if finished:
        running = {pid for pid, _ in judges.values()}
        for pid in set(reaper.children(os.getpid())) - running:
            reaper.kill_tree(pid)


def main() -> None:
    control = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # judges inherit it
    reaper.become_subreaper()  # what a judge leaves behind re-parents here, to be killed
    for module in PRELOAD:
        importlib.import_module(module)
    serve(control)


# --- the grader's side ----------------------------------------------------------------------------

class ServerGone(RuntimeError):
    """The judge's sandbox ended (or never started)."""


class JudgeServer:
    """The grader's handle on one running server: send a check, stop it."""

    _ids = itertools.count(1)

    def __init__(self, command: list[str], cwd: Path | None, env: dict | None) -> None:
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        with theirs:
            self.process = subprocess.Popen(command, cwd=cwd, env=env, stdin=theirs, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)

    def start(self, fds: list[int]) -> int:
        """Hand a judge its descriptors (closed here); return its id."""
        ident = next(self._ids)
        try:
            with self._lock:
                socket.send_fds(self._control, [REQUEST + ident.to_bytes(8, "big")], fds)
        except OSError:
            raise ServerGone("the judge's sandbox has ended") from None
        finally:
            for fd in fds:
                os.close(fd)
        return ident

    def kill(self, ident: int) -> None:
        try:
            with self._lock:
                self._control.send(KILL + ident.to_bytes(8, "big"))
        except OSError:
            pass

    def close(self) -> None:
        """End of file to the server; then, bounded, the whole sandbox."""
        self._control.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait(10)


if __name__ == "__main__":
    sys.exit(main())
