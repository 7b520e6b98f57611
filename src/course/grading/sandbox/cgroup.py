"""A control group per sandbox: bounds on tasks, memory and CPU that hold for root too.

RLIMIT_NPROC does not bind root, so where the cgroup file system is writable each sandbox gets a
group (`pids.max`, a memory ceiling, a CPU quota) that its first process joins before it execs
bwrap. Elsewhere `Cgroup.create` returns None and the rlimits are the bound.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from reference_organizations.children import alive

ROOT = Path("/sys/fs/cgroup")
PREFIX = "course-grading-"
# A label the grader's environment may set, carried in each group's name: a test suite judges only
# the groups of its own run, beside other graders on the same machine.
LABEL_VARIABLE = "COURSE_GRADING_LABEL"
CPU_PERIOD = 100_000  # microseconds; a quota of one period per core


class Cgroup:
    """One group (cgroup v2) or one group per controller (v1: pids, memory)."""

    _made: list[Cgroup] = []  # created by this process and not removed yet

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders
        Cgroup._made.append(self)

    @classmethod
    def remove_left(cls) -> None:
        """Remove every group this process made and did not remove (a grading worker, after
        killing what a student left behind: the groups would otherwise outlive it)."""
        for group in list(cls._made):
            group.remove()

    @classmethod
    def create(cls, tasks: int, memory_bytes: int, cores: int = 1) -> Cgroup | None:
        _remove_stale()
        label = "".join(c for c in os.environ.get(LABEL_VARIABLE, "") if c.isalnum())[:32]
        name = f"{PREFIX}{os.getpid()}-{label}{uuid.uuid4().hex[:8]}"  # the creator's pid: see _remove_stale
        quota = cores * CPU_PERIOD
        if (ROOT / "cgroup.controllers").exists():  # v2: one folder holds every controller
            plan = {ROOT / name: {"pids.max": tasks, "memory.max": memory_bytes, "cpu.max": f"{quota} {CPU_PERIOD}"}}
        else:  # v1: a tree per controller
            plan = {ROOT / "pids" / name: {"pids.max": tasks}, ROOT / "memory" / name: {"memory.limit_in_bytes": memory_bytes},
                    ROOT / "cpu" / name: {"cpu.cfs_period_us": CPU_PERIOD, "cpu.cfs_quota_us": quota}}
        group = cls([])
        for first, (folder, settings) in zip((True, False, False), plan.items()):
            try:
                folder.mkdir()
                group.folders.append(folder)
                for file, value in settings.items():
                    if file == "pids.max" or (folder / file).exists():
                        _write(folder / file, value)
            except OSError:
                if first:  # the pids bound is the one that matters for a fork bomb; the others are a bonus
                    group.remove()
                    return None
        return group

    def join_command(self) -> list[str]:
        """`sh` joins every group with its own pid, then execs the rest of the command line."""
        joins = " && ".join(f"echo $$ > {folder / 'cgroup.procs'}" for folder in self.folders)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "sandbox"]

    def remove(self, within: float = 10.0) -> None:
        """Remove the groups once their processes are gone (bounded wait; SIGKILL stragglers)."""
        deadline = time.monotonic() + within
        for folder in self.folders:
            while folder.exists():
                for pid in _members(folder):
                    try:
                        os.kill(pid, 9)
                    except ProcessLookupError:
                        pass
                try:
                    folder.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
        if not any(folder.exists() for folder in self.folders) and self in Cgroup._made:
            Cgroup._made.remove(self)


def _remove_stale() -> None:
    """Remove the empty groups of grading processes that died without removing them (a grading
    worker SIGKILLed mid-student: its sandboxes died with it, through bwrap's --die-with-parent,
    but their groups stay). A group whose creator is alive, or that still holds a process, stays."""
    for folder in [*ROOT.glob(f"{PREFIX}*"), *ROOT.glob(f"*/{PREFIX}*")]:
        creator = folder.name.removeprefix(PREFIX).split("-")[0]
        if not creator.isdigit() or alive(int(creator)) or _members(folder):
            continue
        try:
            folder.rmdir()
        except OSError:
            pass  # removed by another grader meanwhile, or not ours to remove


def _members(folder: Path) -> list[int]:
    try:
        return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _write(path: Path, value: int | str) -> None:
    path.write_text(str(value))
