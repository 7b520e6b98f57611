"""The grading process's private folder on the host, and each student's bounded file system in it.

Everything a grading process keeps (tripwire copies, the unit's scratch course, each student's
file system, the checkpoint workers' logs) lives in one folder that only the grader's user can
enter (0700). It goes when the process ends, however it ends: a janitor (a session of its own, so
a signal to the grader's process group misses it) waits for end of file on a pipe whose only
writer is the grader, then detaches every mount below the folder and removes it, never following
a link.

A student's file system (`student_filesystem`) holds everything that student's learner code can
write: the checks' scratch folders and each learner sandbox's working folder, /tmp and /dev/shm.
When the grader may mount (root), it is a tmpfs of a fixed size, so that every bound the guide
states holds for the student as a whole; otherwise a plain folder, bounded per file only.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PREFIX = "ch12-grading-"
MNT_DETACH = 2
MS_NOSUID, MS_NODEV = 2, 4
_made: dict[int, tuple[Path, subprocess.Popen, int]] = {}  # creator pid -> (folder, janitor, pipe's write end)


def folder() -> Path:
    """This process's private folder (made, with its janitor, on first use)."""
    pid = os.getpid()
    if pid not in _made:
        path = Path(tempfile.mkdtemp(prefix=PREFIX))  # mode 0700
        read, write = os.pipe()  # not inherited by any child: the grader is the only writer
        janitor = subprocess.Popen([sys.executable, "-I", "-m", __name__, str(path)], stdin=read,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(read)
        _made[pid] = (path, janitor, write)
        atexit.register(_end, pid)  # at a normal exit
    return _made[pid][0]


@functools.cache
def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def janitors() -> set[int]:
    """The janitors' pids: a grading worker that kills every descendant after a student spares them."""
    return {janitor.pid for _, janitor, _ in _made.values()}


def close() -> None:
    """Remove this process's folder now (a process that grades, then goes on: the next use makes a
    new one); the janitor then finds nothing to do."""
    _end(os.getpid())


def _end(pid: int) -> None:
    if os.getpid() != pid or pid not in _made:
        return
    path, janitor, write = _made.pop(pid)
    remove(path)
    os.close(write)
    try:
        janitor.wait(10)
    except subprocess.TimeoutExpired:
        janitor.kill()


def student_filesystem(size: int) -> Path:
    """A new folder for one student's writable files: a tmpfs of `size` bytes where the grader may
    mount, else a plain folder."""
    path = Path(tempfile.mkdtemp(prefix="student-", dir=folder()))
    if os.geteuid() == 0:  # may still fail (a container without the right): then bounded per file only
        _libc().mount(b"tmpfs", str(path).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=0700".encode())
    return path


def bounded(path: Path) -> bool:
    """Whether `path` is a file system of its own (a student's tmpfs)."""
    return os.path.ismount(path)


def remove(path: Path) -> None:
    """Detach every mount at or below `path`, then remove it without following links."""
    for mount in sorted(_mounts_below(path), key=len, reverse=True):
        _libc().umount2(mount.encode(), MNT_DETACH)
    shutil.rmtree(path, ignore_errors=True)


def _mounts_below(path: Path) -> list[str]:
    top = os.path.realpath(path)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    points = [_unescape(line.split()[4]) for line in lines if len(line.split()) > 4]
    return [p for p in points if p == top or p.startswith(top + "/")]


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field


def main(path: str) -> None:
    """The janitor: wait until the grader is gone, then remove its folder."""
    while os.read(0, 4096):
        pass
    remove(Path(path))


if __name__ == "__main__":
    main(sys.argv[1])
