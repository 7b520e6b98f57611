"""One sandbox for a group of checks: a server that loads the checker once and forks one per check.

Starting a checker from nothing cost about 0.17 s of CPU (bubblewrap, Python, and the same
course modules imported every time), and a student's four notebooks hold 28 checks. Now the
grader starts one sandbox per group of checks (a student's, `CheckServer`). Its first process
(`serve`) imports the checker and everything the checker preloads, and never runs learner code.
For each check it forks a child that runs `checker.main` on that check's own pipes (the job in,
the verdict out), so every check still starts from the same untouched state.

What a check keeps to itself: its process and session, its pipes and a temporary folder of its
own. What the checks of one group share: the sandbox (its file system view, private loopback
and bounds) and so one student's code; no other student's. The server and its children are not
dumpable, so one check cannot read or write another's memory or open its pipes through /proc.
Whatever a check leaves running is killed when the server reaps it.

    python -I -m course.grading.checkserver [MODULE ...]   (the grader runs it inside the sandbox;
                                                            MODULEs: what the course's cells import)

Its standard input is a Unix socket to the grader. A request is one message, b"R" and an
8-byte id, carrying two descriptors (the job's read end, the verdict's write end); b"K" and an
id kills that check; end of file ends the server, and with it the sandbox.
"""

from __future__ import annotations

import ctypes
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


# --- inside the sandbox ---------------------------------------------------------------------

def serve(control: socket.socket) -> None:
    """Fork one checker per request until the grader closes the socket."""
    checks: dict[int, tuple[int, str]] = {}  # request id -> (pid, its temporary folder)
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        while True:
            ready = selector.select(timeout=0.05)
            _reap(checks)
            if not ready:
                continue
            message, fds, _, _ = socket.recv_fds(control, 9, 2)
            if not message:
                break
            ident = int.from_bytes(message[1:9], "big")
            if message[:1] == REQUEST and len(fds) == 2:
                checks[ident] = _fork_check(fds, control)
            else:
                for fd in fds:
                    os.close(fd)
                if message[:1] == KILL and ident in checks:
                    _kill_tree(checks[ident][0])


def _fork_check(fds: list[int], control: socket.socket) -> tuple[int, str]:
    """A child that becomes one checker: the job on fd 0, the verdict on fd 1."""
    folder = tempfile.mkdtemp(prefix="check-")
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            control.close()
            os.dup2(fds[0], 0)
            os.dup2(fds[1], 1)
            os.closerange(3, 1 << 16)  # nothing of the server's (or of a sibling's) stays open
            os.environ["TMPDIR"] = tempfile.tempdir = folder
            from course.grading import checker

            checker.main()  # ends the process
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    return pid, folder


def _reap(checks: dict[int, tuple[int, str]]) -> None:
    """Collect finished checkers; kill what a finished one left behind; remove its folder."""
    finished = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        for ident, (child, folder) in list(checks.items()):
            if child == pid:
                del checks[ident]
                shutil.rmtree(folder, ignore_errors=True)
                finished = True
    if finished:
        running = {pid for pid, _ in checks.values()}
        for pid in _children(os.getpid()) - running:
            _kill_tree(pid)


def _children(pid: int) -> set[int]:
    try:
        return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def _kill_tree(pid: int) -> None:
    """SIGKILL a checker (or a leftover) with every process below it."""
    for victim in [pid, *reaper.descendants(pid)]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main() -> None:
    control = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # children inherit it: no /proc peeking
    reaper.become_subreaper()  # what a checker leaves behind re-parents here, to be killed
    import importlib

    from course.grading import checker

    for module in checker.PRELOAD:
        importlib.import_module(module)
    for module in sys.argv[1:]:  # what the group's course cells import (trusted: the grader's list)
        try:
            importlib.import_module(module)
        except Exception:  # the check will say so itself when its cell imports it
            pass
    serve(control)


# --- the grader's side ----------------------------------------------------------------------

class ServerGone(RuntimeError):
    """The group's sandbox ended (killed by a check, or never started)."""


class CheckServer:
    """The grader's handle on one running server: send a check, read its verdict, stop it."""

    _ids = itertools.count(1)

    def __init__(self, command: list[str], cwd: Path | None, env: dict | None) -> None:
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        with theirs:
            self.process = subprocess.Popen(command, cwd=cwd, env=env, stdin=theirs, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)

    def start(self, payload: bytes) -> tuple[int, int]:
        """Send one job; return (its id, the read end of its verdict pipe)."""
        ident = next(self._ids)
        job_in, job_out = os.pipe()
        verdict_in, verdict_out = os.pipe()
        try:
            with self._lock:
                socket.send_fds(self._control, [REQUEST + ident.to_bytes(8, "big")], [job_in, verdict_out])
        except OSError:
            for fd in (job_out, verdict_in):
                os.close(fd)
            raise ServerGone("the checks' sandbox has ended") from None
        finally:
            os.close(job_in)
            os.close(verdict_out)
        threading.Thread(target=_feed, args=(job_out, payload), daemon=True).start()
        return ident, verdict_in

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


def _feed(fd: int, payload: bytes) -> None:
    try:
        with open(fd, "wb") as pipe:
            pipe.write(payload)
    except OSError:  # the checker ended without reading it all
        pass


if __name__ == "__main__":
    sys.exit(main())
