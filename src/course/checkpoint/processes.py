"""The parent's handle on one worker process (the old worker, or its replacement): start, read its ready record, command, signal.

Every wait here has a bound. Closing the handle always leaves no process behind: it closes the
command channel (the worker exits on end-of-file), resumes a paused worker so it can exit, and
falls back to children.stop (SIGTERM, then SIGKILL, always reaped).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from reference_organizations.children import spawn as children_spawn
from reference_organizations.children import stop, wait_for_file

START_TIMEOUT = 30.0
REPLY_TIMEOUT = 15.0
EXIT_TIMEOUT = 5.0


class WorkerFailed(RuntimeError):
    """The worker did not do what the protocol promised (no ready record, no reply, died)."""


class WorkerProcess:
    """`with WorkerProcess(...) as worker:` starts the worker at once (it does not wait)."""

    def __init__(
        self,
        folder: Path,
        *,
        database: Path,
        implementation: str,
        owner: str,
        lease: float,
        worker: str = "reference",
        name: str = "worker",
        idle_timeout: float = 60.0,
        spawn: Any = None,
    ) -> None:
        self.folder = folder
        self.ready_file = folder / f"{name}.ready.json"
        self.commands = folder / f"{name}.commands"
        self.log = folder / f"{name}.log"
        os.mkfifo(self.commands, 0o600)
        # O_RDWR never blocks on a FIFO; we are then its only writer, so the worker sees
        # end-of-file as soon as we close it or die.
        self._channel: int | None = os.open(self.commands, os.O_RDWR)
        self._buffer = b""
        self.paused = False
        self.signals: list[dict[str, Any]] = []
        argv = [  # -P: the working folder (the learner's) stays off sys.path; no file there stands in for ours
            sys.executable, "-P", "-m", "course.checkpoint.worker",
            "--database", str(database), "--implementation", implementation, "--worker", worker, "--owner", owner,
            "--lease", repr(float(lease)), "--ready", str(self.ready_file),
            "--commands", str(self.commands), "--idle-timeout", repr(float(idle_timeout)),
        ]
        if spawn is None:  # a child of this process, dying with it
            with open(self.log, "ab") as log:
                self.process: Any = children_spawn(argv, stdout=subprocess.PIPE, stderr=log)
        else:  # grading: a process in a learner sandbox, started (and signalled) by the grader, who keeps its stderr
            self.process = spawn(argv)
        self.started_at = time.time()

    @property
    def pid(self) -> int:
        return self.process.pid

    def ready(self, timeout: float = START_TIMEOUT) -> dict[str, Any]:
        """The worker's ready record (its claim and order, or the error that stopped it)."""
        try:
            text = wait_for_file(self.ready_file, timeout=timeout, process=self.process)
        except (RuntimeError, TimeoutError) as error:
            raise WorkerFailed(f"the worker wrote no ready record: {error}{self._log_tail()}") from None
        return json.loads(text)

    def request(self, command: dict[str, Any], timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        self.send(command)
        return self.reply(timeout)

    def send(self, command: dict[str, Any]) -> None:
        if self._channel is None:
            raise WorkerFailed("the command channel is closed")
        os.write(self._channel, (json.dumps(command) + "\n").encode())

    def reply(self, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        reply = self.poll_reply(timeout)
        if reply is None:
            exited = self.process.poll() is not None
            state = f"exited with status {self.process.returncode}" if exited else "is silent"
            raise WorkerFailed(f"the worker {state}: no reply within {timeout} s{self._log_tail()}")
        return reply

    def poll_reply(self, timeout: float = 0.0) -> dict[str, Any] | None:
        """One reply line if it arrives within `timeout` seconds, else None."""
        deadline = time.monotonic() + timeout
        stream = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            readable, _, _ = select.select([stream], [], [], max(0.0, remaining))
            if not readable:
                return None
            chunk = os.read(stream, 65536)
            if not chunk:
                return None  # the worker closed stdout: it has exited
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def kill(self) -> int:
        """SIGKILL; return the exit status the operating system reports (-9)."""
        self._signal(signal.SIGKILL, "kill")
        try:
            return self.process.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise WorkerFailed(f"worker {self.pid} survived SIGKILL for {EXIT_TIMEOUT} s") from None

    def pause(self) -> str:
        """SIGSTOP; return the process state /proc reports afterwards ('T' when stopped)."""
        self._signal(signal.SIGSTOP, "pause")
        self.paused = True
        deadline = time.monotonic() + EXIT_TIMEOUT
        while (state := self.state()) not in {"T", "t"} and time.monotonic() < deadline:
            time.sleep(0.005)
        return state

    def resume(self) -> None:
        self._signal(signal.SIGCONT, "resume")
        self.paused = False

    def state(self) -> str:
        if hasattr(self.process, "state"):
            return self.process.state()
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return "gone"
        return stat.rpartition(")")[2].split()[0]

    def wait(self, timeout: float = EXIT_TIMEOUT) -> int | None:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def release(self) -> None:
        """Close the command channel: a waiting worker sees end-of-file and exits by itself."""
        if self._channel is not None:
            os.close(self._channel)
            self._channel = None

    def close(self) -> None:
        """Leave nothing running: end-of-file first, then SIGCONT/SIGTERM/SIGKILL as needed."""
        self.release()
        if self.process.poll() is None and self.paused:
            self.process.send_signal(signal.SIGCONT)
            self.paused = False
        if self.process.poll() is None:
            self.wait(1.0)
        stop(self.process, grace=1.0)
        self.commands.unlink(missing_ok=True)

    def _signal(self, signum: signal.Signals, what: str) -> None:
        self.process.send_signal(signum)
        self.signals.append({"what": what, "signal": signum.name, "at": time.time()})

    def _log_tail(self) -> str:
        try:
            kept = getattr(self.process, "log_tail", None)
            text = (kept() if kept is not None else self.log.read_text(errors="replace")).strip()
        except (OSError, RuntimeError):
            return ""
        return f"; its stderr ends with:\n{text[-1500:]}" if text else ""

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

