"""The judge asks the grader for learner processes; the grader starts, signals and reads them.

A judge cannot start a learner sandbox, see its processes or signal them; the grader, outside
every sandbox, can. Over a SOCK_SEQPACKET socket, one message each way (descriptors passed with
it), the judge asks for `learner` (a learner process: its report and its wire), `worker` (a
checkpoint worker in a learner sandbox: its stdout), and `signal`, `state`, `status` of one.
`Broker` is the judge's side; `serve` the grader's, for one check.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any, Callable

from course.grading import wire

WORKER_MODULE = "course.checkpoint.worker"


class Broker:
    """The judge's side: one request at a time, answered by the grader."""

    def __init__(self, sock: socket.socket, job: dict[str, Any]) -> None:
        self.sock, self.job, self._lock = sock, job, threading.Lock()

    def request(self, message: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        with self._lock:
            self.sock.send(json.dumps(message).encode())
            data, fds, _, _ = socket.recv_fds(self.sock, 1 << 20, 2)
        if not data:
            raise wire.PeerGone("the grader is gone")
        reply = json.loads(data)
        if "error" in reply:
            for fd in fds:
                os.close(fd)
            raise RuntimeError(reply["error"])
        return reply, fds

    def learner(self, what: str) -> tuple[wire.Peer, list[dict]]:
        """Another learner process (a notebook, or `implementation`): its wire and its report."""
        reply, (fd,) = self.request({"op": "learner", "what": what})
        return wire.Peer(socket.socket(fileno=fd)), reply["ready"]

    def worker(self, argv: list[str], log: Path) -> BrokeredProcess:
        reply, (fd,) = self.request({"op": "worker", "argv": [str(a) for a in argv], "log": str(log)})
        return BrokeredProcess(self, int(reply["id"]), fd)


class BrokeredProcess:
    """A worker in a learner sandbox, with the part of `subprocess.Popen` the checkpoint uses."""

    stdin = stderr = None

    def __init__(self, broker: Broker, ident: int, stdout: int) -> None:
        self.broker, self.pid, self.returncode = broker, ident, None
        self.stdout = os.fdopen(stdout, "rb", buffering=0)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.broker.request({"op": "status", "id": self.pid, "timeout": 0})[0]["status"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            reply = self.broker.request({"op": "status", "id": self.pid, "timeout": 30.0 if timeout is None else timeout})
            self.returncode = reply[0]["status"]
        if self.returncode is None:
            raise subprocess.TimeoutExpired(WORKER_MODULE, timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        self.broker.request({"op": "signal", "id": self.pid, "signal": int(signum)})

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def state(self) -> str:
        return self.broker.request({"op": "state", "id": self.pid})[0]["state"]


def serve(sock: socket.socket, start_learner: Callable[[str], tuple[Any, socket.socket, list]],
          start_worker: Callable[[list[str], str], Any], started: dict[int, Any]) -> bool:
    """Answer one request of the judge (False: the judge is gone). `started` keeps every process
    started for this check, to be killed when the check ends."""
    try:
        data = sock.recv(1 << 20)
    except OSError:
        return False
    if not data:
        return False
    fds: list[int] = []
    try:
        request = json.loads(data)
        op = request.get("op")
        if op == "learner":
            learner, wire_end, ready = start_learner(str(request["what"]))
            started[len(started) + 1] = learner
            reply, fds = {"ready": ready}, [wire_end.detach()]
        elif op == "worker":
            argv = [str(a) for a in request["argv"]]
            if argv[1:4] != ["-P", "-m", WORKER_MODULE]:
                raise ValueError("only the checkpoint's worker runs in a worker sandbox")
            worker = start_worker(argv, str(request["log"]))
            ident = len(started) + 1
            started[ident] = worker
            reply, fds = {"id": ident}, [os.dup(worker.process.stdout.fileno())]  # the grader keeps its own
        else:
            process = started[int(request["id"])]
            if op == "signal":
                process.signal(signal.Signals(int(request["signal"])))
                reply = {"ok": True}
            elif op == "state":
                reply = {"state": process.state()}
            elif op == "status":
                reply = {"status": process.status(float(request.get("timeout", 0)))}
            else:
                raise ValueError(f"unknown request {op!r}")
    except Exception as error:  # the judge is told; the check then says what failed
        reply, fds = {"error": f"{type(error).__name__}: {error}"[:500]}, []
    try:
        socket.send_fds(sock, [json.dumps(reply).encode()], fds)
    finally:
        for fd in fds:
            os.close(fd)
    return True
