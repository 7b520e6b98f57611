"""A learner process's lock calls, answered outside it: the kernel's view of when it reads and writes.

SQLite takes a lock (an `fcntl` F_SETLK call) before it reads a database and before it writes
one. `install` runs in the learner process before any learner code loads: a seccomp filter that
stops each such call until a supervisor holding the filter's listener answers it (seccomp_unotify(2)).
A filter cannot be removed, and the listener leaves the process before learner code runs, so
nothing a learner writes can skip, answer or fake these stops. `LockCalls` is the supervisor: it
lets every call go on at once, except the one a forced race asks it to hold (`hold`). Only the
learner processes of a check that forces a race carry the filter (`forces_a_race`, decided by the
grader from the course's own check): elsewhere a lock call costs nothing extra.

libseccomp (via pyseccomp) writes the filter: it also stops the calls of another system-call
table (32-bit calls from a 64-bit process), which a hand-written filter easily forgets.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import struct
import threading
from typing import Callable

SETLK_COMMANDS = (6, 7, 37, 38)  # F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW: taking or releasing a lock
VARIABLE = "COURSE_LOCK_CALLS"  # set by the grader for a check that forces a race: the filter goes in
FORCED = ("race_claims", "race_admissions", "between_check_and_write")  # the harnesses that force a race
LISTENER = b"L"  # what a learner process sends first: one byte, the listener of its lock calls passed with it
_NOTIFICATION, _RESPONSE = 80, 24  # sizeof(struct seccomp_notif), sizeof(struct seccomp_notif_resp)
_RECEIVE = (3 << 30) | (_NOTIFICATION << 16) | (ord("!") << 8) | 0  # SECCOMP_IOCTL_NOTIF_RECV
_SEND = (3 << 30) | (_RESPONSE << 16) | (ord("!") << 8) | 1  # SECCOMP_IOCTL_NOTIF_SEND
_CONTINUE = 1  # SECCOMP_USER_NOTIF_FLAG_CONTINUE: the call runs as the learner process made it


def forces_a_race(check: str) -> bool:
    """Whether the course's check (its source, hidden part included) calls a race harness."""
    return any(f"{name}(" in check for name in FORCED)


class Unavailable(RuntimeError):
    """This system cannot hand a process's lock calls to another (no libseccomp, an old kernel)."""


def install() -> int:
    """In the learner process, before any learner code: stop every lock call until it is answered.
    Returns the listener, which the caller must send away and close."""
    try:
        import pyseccomp as seccomp

        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        for command in SETLK_COMMANDS:
            rules.add_rule(seccomp.NOTIFY, "fcntl", seccomp.Arg(1, seccomp.EQ, command))
        rules.load()
        listener = seccomp._libseccomp.seccomp_notify_fd(rules._filter)  # libseccomp's call, not wrapped by pyseccomp
    except (ImportError, OSError, RuntimeError, AttributeError) as error:
        raise Unavailable(f"the lock calls of a learner process cannot be handed to the grader: {error}") from error
    if listener < 0:
        raise Unavailable("libseccomp gave no listener for the filter")
    return listener


class LockCalls:
    """The supervisor of one learner process's lock calls: each is let go on at once, except the
    `hold`-th after `hold` was set, which waits until `release`."""

    def __init__(self, listener: int) -> None:
        self.listener, self.calls = listener, 0
        self._hold: int | None = None
        self._wake: threading.Event | None = None
        self._each: Callable[[int], None] | None = None
        self.held, self._released = threading.Event(), threading.Event()
        self._lock = threading.Lock()
        self._stop_read, self._stop_write = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="lock-calls", daemon=True)
        self._thread.start()

    def hold(self, number: int | None, wake: threading.Event | None = None,
             each: Callable[[int], None] | None = None) -> None:
        """From now, count this process's lock calls and hold the `number`-th (None: none; `held`, and
        `wake`, are set when it is held); `each(n)` runs before the n-th call is let go on."""
        with self._lock:
            self.calls, self._hold, self._wake, self._each = 0, number, wake, each
            self.held.clear()
            self._released.clear()

    def release(self) -> None:
        """Let the held call (if any) go on, and every later one."""
        with self._lock:
            self._hold = self._each = None
        self._released.set()

    def detach(self) -> int:
        """Stop answering; the listener is the caller's (the grader hands it to the judge)."""
        self.release()
        os.write(self._stop_write, b"x")
        self._thread.join(5)
        for fd in (self._stop_read, self._stop_write):
            os.close(fd)
        return self.listener

    def close(self) -> None:
        os.close(self.detach())

    def _serve(self) -> None:
        poll = select.poll()
        poll.register(self.listener, select.POLLIN)
        poll.register(self._stop_read, select.POLLIN)
        while True:
            events = dict(poll.poll())
            if self._stop_read in events or events.get(self.listener, 0) & (select.POLLHUP | select.POLLERR):
                return  # stopped, or no process is left to make a call
            notification = bytearray(_NOTIFICATION)
            try:
                fcntl.ioctl(self.listener, _RECEIVE, notification)
            except OSError as error:
                if error.errno in (errno.ENOENT, errno.EINTR):  # the caller was interrupted or killed meanwhile
                    continue
                return  # the process is gone
            with self._lock:
                self.calls += 1
                holding, wake, each, number = self.calls == self._hold, self._wake, self._each, self.calls
            if each is not None:
                each(number)
            if holding:
                self.held.set()
                if wake is not None:
                    wake.set()
                self._released.wait()
            (ident,) = struct.unpack_from("Q", notification)
            try:
                fcntl.ioctl(self.listener, _SEND, bytearray(struct.pack("QqiI", ident, 0, 0, _CONTINUE)))
            except OSError:
                pass  # the caller is gone, or was interrupted: nothing waits for this answer
