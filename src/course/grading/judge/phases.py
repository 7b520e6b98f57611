"""Visible and hidden parts of checks never run at the same time on one machine.

A hidden part's inputs reach learner code, and a learner process can pass what it holds to any
other learner process running at that moment through channels no sandbox closes (locks on a file
every sandbox reads, inotify, timing). So no learner code that may still author text a learner
is shown runs while hidden inputs exist in any learner process of this machine's grading. Each
check starts in the visible phase, where its learner process runs the notebook (what the cells
print is fixed there); a check without a hidden part stays in it. A check with a hidden part waits
for the hidden phase before its first statement and holds it until its learner processes are
gone, so that no wait for a phase falls between its visible and hidden parts (a lease taken in
one would run out before the other); its failure is told in the course's words only, so what is
left to a learner there is whether it passed. (A failure before its hidden part is told again,
as Lab tells it, by its visible part run alone in the visible phase.)

Each phase admits any number of checks (any student, any grading process of this user); the two
exclude each other, and checks waiting for one turn new entrants of the other away, so neither
starves. Made with flock(2) on files in a folder only the grader's user may use, outside /tmp:
`turn` (held while one entrant decides), `visible` and `hidden` (held shared by each check in
that phase), `visible.wait` and `hidden.wait` (held shared by each check waiting for it).
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import time
from pathlib import Path

VISIBLE, HIDDEN = "visible", "hidden"
POLL = 0.01  # seconds between two looks while the other phase runs


class PhaseTimeout(TimeoutError):
    """The other phase did not end in time (a grading error: grade that student again)."""


def _folder() -> Path:
    base = next((b for b in (os.environ.get("XDG_RUNTIME_DIR"), "/run/lock", "/dev/shm")
                 if b and os.access(b, os.W_OK | os.X_OK)), tempfile.gettempdir())
    path = Path(base) / f"ch12-grading-phases-{os.geteuid()}"
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise PermissionError(f"{path} is not a folder of this user's alone: remove it, then grade again")
    return path


class Gate:
    """This machine's two phases, for one grading process (any thread)."""

    def __init__(self) -> None:
        self.folder = _folder()

    def enter(self, phase: str, within: float) -> int:
        """Wait (at most `within` s) until `phase` may run; return what `leave` takes."""
        other = HIDDEN if phase == VISIBLE else VISIBLE
        waiting = self._open(f"{phase}.wait")
        fcntl.flock(waiting, fcntl.LOCK_SH)
        deadline = time.monotonic() + within
        try:
            while True:
                turn = self._open("turn")
                try:
                    fcntl.flock(turn, fcntl.LOCK_EX)
                    if self._free(other) and (self._free(f"{other}.wait") or self._free(phase)):
                        held = self._open(phase)
                        fcntl.flock(held, fcntl.LOCK_SH)
                        return held
                finally:
                    os.close(turn)
                if time.monotonic() > deadline:
                    raise PhaseTimeout(f"the {other} parts of other checks did not end within {within:g} s")
                time.sleep(POLL)
        finally:
            os.close(waiting)

    @staticmethod
    def leave(held: int) -> None:
        os.close(held)  # closing the descriptor releases its lock

    def _free(self, name: str) -> bool:
        """Nobody holds `name`."""
        probe = self._open(name)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(probe)

    def _open(self, name: str) -> int:
        return os.open(self.folder / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
