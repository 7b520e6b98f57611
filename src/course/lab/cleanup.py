"""`course cleanup`: end the checkpoint workers and suppliers started from this course folder.

On a shared teaching server `pkill -f course.checkpoint.worker` would end every learner's
workers. A process is ours when it runs one of the course's process modules AND was started
from this course folder: its interpreter (the first word of its command line) or its working
directory lies inside the folder. Other users' processes are never touched either way.
Processes get SIGTERM, then SIGKILL after `grace` seconds; every wait is bounded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

MODULES = ("course.checkpoint.worker", "reference_organizations.store.supplier")


@dataclass(frozen=True)
class Ended:
    pid: int
    command: str
    how: str  # "terminated" or "killed"


def _inside(path: str | None, folder: Path) -> bool:
    if not path:
        return False
    try:
        return Path(path).resolve().is_relative_to(folder)
    except (OSError, ValueError):
        return False


def course_processes(folder: Path) -> list[psutil.Process]:
    """This user's course worker and supplier processes started from `folder`."""
    folder = folder.resolve()
    found = []
    for process in psutil.process_iter(["pid", "uids", "cmdline", "cwd"]):
        info = process.info
        command = info.get("cmdline") or []
        if process.pid == os.getpid() or not any(module in " ".join(command) for module in MODULES):
            continue
        if info.get("uids") is None or info["uids"].real != os.getuid():
            continue
        if _inside(command[0] if command else None, folder) or _inside(info.get("cwd"), folder):
            found.append(process)
    return found


def cleanup(folder: Path, grace: float = 3.0) -> list[Ended]:
    """End the course's processes started from `folder`; return what was ended and how."""
    processes = course_processes(folder)
    commands = {}
    for process in processes:
        try:
            commands[process.pid] = " ".join(process.cmdline())
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    gone, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return [Ended(p.pid, commands.get(p.pid, ""), "terminated") for p in gone] + [
        Ended(p.pid, commands.get(p.pid, ""), "killed") for p in alive]
