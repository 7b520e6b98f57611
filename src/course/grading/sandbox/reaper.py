"""Run one command and leave nothing of it running (`python -m course.grading.sandbox.reaper CMD...`).

As a child subreaper (Linux prctl) every orphaned descendant re-parents to it, and it kills and
reaps them all once the command exits. A grading worker does the same after each student.
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


def children(pid):
    """The pids whose parent is `pid` (Linux's /proc children list)."""
    try:
        return [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


def kill_tree(pid):
    """SIGKILL `pid` and everything below it."""
    for victim in [pid, *descendants(pid)]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_all_descendants(deadline_s=10.0, spare=frozenset()):
    """SIGKILL and reap every descendant but `spare` (and what is below it); return how many were killed."""
    killed = set()
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        pids = descendants(os.getpid()) - set(spare) - {p for s in spare for p in descendants(s)}
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
            pass
        if not pids:
            return len(killed)
        time.sleep(0.05)
    raise RuntimeError(f"descendants still alive after {deadline_s} s: {descendants(os.getpid())}")


JANITOR = b"course.grading.sandbox.private"


def _let_janitors_finish(within=10.0):
    """A grading process killed before it removed its private folder leaves that to its janitor
    (course.grading.sandbox.private): give the janitors a bounded while before everything is killed."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        waiting = []
        for pid in descendants(os.getpid()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    waiting += [pid] if JANITOR in f.read() else []
            except OSError:
                continue
        if not waiting:
            return
        time.sleep(0.05)


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
        _let_janitors_finish()
        left = kill_all_descendants()
        if left:
            print(f"reaper: killed {left} leftover process(es)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
