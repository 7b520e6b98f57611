"""Run one command and leave nothing of it running.

A graded submission may SIGKILL its kernel or start children in a new session; both outlive
nbgrader. This supervisor makes itself a child subreaper (Linux prctl), so every orphaned
descendant re-parents to it, and kills and reaps them all once the command exits. It runs as its
own process (`python -m course.grading.sandbox.reaper CMD...`) so the caller (the CLI, pytest) never
becomes a subreaper and none of the caller's own children are touched. A grading worker
(course.grading.classes.unit.run: a pool process or a single-threaded Dask worker) does the same for
itself after each student.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def descendants(root_pid):
    """Pids whose parent chain (read from /proc) leads to root_pid."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # exited while we read
    found, frontier = set(), {root_pid}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def kill_all_descendants(deadline_s=10.0):
    """SIGKILL and reap every descendant; return how many were killed."""
    killed = set()
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        pids = descendants(os.getpid())
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            if not pids:
                return len(killed)
        time.sleep(0.05)
    raise RuntimeError(f"descendants still alive after {deadline_s} s: {descendants(os.getpid())}")


def become_subreaper():
    """Orphaned descendants of this process re-parent to it (so kill_all_descendants finds them)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def main(argv):
    """Run argv as a subprocess; return its exit code after killing what it left behind."""
    become_subreaper()
    # SIGTERM unwinds like Ctrl-C, so the cleanup below still runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        return subprocess.run(argv, check=False).returncode
    finally:
        left = kill_all_descendants()
        if left:
            print(f"reaper: killed {left} leftover process(es)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
