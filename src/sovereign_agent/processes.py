"""Which operating-system process holds a claim: evidence about liveness, never authority.

A worker records its process under the owner label of each claim it takes (`record_process`).
The status report compares that record with the operating system (`is_running`): the same host,
the same boot, and a process with that pid *and that start time* (a reused pid shows up as
another process). Nothing decides ownership from this: the generation and the lease in the work
row do. It answers the operator's other question: is the holder of this work still there?
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from sovereign_agent.database import Database

PROC = Path("/proc")


def identity(pid: int | None = None) -> dict[str, Any] | None:
    """This process (or `pid`) as the operating system names it; None where /proc cannot say."""
    pid = os.getpid() if pid is None else pid
    try:
        stat = (PROC / str(pid) / "stat").read_text()
        boot = (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return None
    started = stat.rpartition(")")[2].split()[19]  # field 22: start time, in clock ticks after boot
    return {"host": socket.gethostname(), "boot": boot, "pid": pid, "started": started}


def record_process(db: Database, owner: str) -> None:
    """Record that `owner` is this process (replacing what that label said before)."""
    me = identity()
    if me is None:
        return  # no /proc here: the report says it cannot tell
    with db.immediate() as connection:
        connection.execute(
            "INSERT INTO assistant_processes(owner, host, boot, pid, started) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(owner) DO UPDATE SET host=excluded.host, boot=excluded.boot, pid=excluded.pid, "
            "started=excluded.started",
            (owner, me["host"], me["boot"], me["pid"], me["started"]),
        )


def is_running(record: dict[str, Any] | None) -> bool | None:
    """True or False for a recorded process of this host and boot; None when this machine cannot
    tell (no record, another host, no /proc)."""
    if record is None:
        return None
    here = identity()
    if here is None or record["host"] != here["host"]:
        return None
    if record["boot"] != here["boot"]:
        return False  # the machine restarted since
    now = identity(int(record["pid"]))
    return now is not None and now["started"] == record["started"] and _not_a_zombie(int(record["pid"]))


def _not_a_zombie(pid: int) -> bool:
    try:
        return (PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False
