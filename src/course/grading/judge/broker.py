"""The judge asks the grader for learner processes; the grader starts, signals and reads them.

A judge cannot start a learner sandbox, see its processes or signal them; the grader, outside
every sandbox, can. Over a SOCK_SEQPACKET socket the grader first sends the job; then, one
message each way (descriptors passed with it), the judge asks for `learner` (a learner process:
its report, its wire, and in a race the listener of its lock calls), `worker` (a checkpoint
worker in a learner sandbox: its stdout), and
`signal`, `state`, `status` of one; last it sends its `verdict`. `Broker` is the judge's side;
`serve` the grader's, for one check.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
from typing import Any, Callable

from course.grading import wire
from course.grading.lockcalls import LockCalls

WORKER_MODULE = "course.checkpoint.worker"


MESSAGE = 1 << 20  # bytes of one message (a job is some 15 KB)
GONE = "gone"  # what `serve` returns for a judge that ended (killed, crashed) without a verdict


class Refused(RuntimeError):
    """The grader could not do what the judge asked (a learner process that did not start, say)."""

    def __init__(self, ename: str, message: str) -> None:
        super().__init__(message)
        self.ename = ename


class Broker:
    """The judge's side: the job, then one request at a time, answered by the grader."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self._lock = sock, threading.Lock()
        self.job = json.loads(sock.recv(MESSAGE))

    def verdict(self, verdict: dict[str, Any]) -> None:
        self.sock.send(json.dumps({"op": "verdict", "verdict": verdict}).encode())

    def request(self, message: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        with self._lock:
            self.sock.send(json.dumps(message).encode())
            data, fds, _, _ = socket.recv_fds(self.sock, MESSAGE, 2)
        if not data:
            raise wire.PeerGone("the grader is gone")
        reply = json.loads(data)
        if "error" in reply:
            for fd in fds:
                os.close(fd)
            raise Refused(str(reply.get("ename", "GraderError")), reply["error"])
        return reply, fds

    def learner(self, what: str) -> tuple[wire.Peer, list[dict]]:
        """Another learner process (a notebook, or `implementation`): its wire and its report. Its
        lock calls, in a check that forces a race, are answered here (`peer.locks`), where the race
        may hold one."""
        reply, (fd, *listener) = self.request({"op": "learner", "what": what})
        peer = wire.Peer(socket.socket(fileno=fd))
        peer.locks = LockCalls(listener[0]) if listener else None
        return peer, reply["ready"]

    def worker(self, argv: list[str]) -> BrokeredProcess:
        reply, (fd,) = self.request({"op": "worker", "argv": [str(a) for a in argv]})
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

    def log_tail(self) -> str:
        """The end of its stderr, which the grader keeps where no sandbox reaches."""
        return str(self.broker.request({"op": "log", "id": self.pid})[0]["tail"])


def serve(sock: socket.socket, start_learner: Callable[[str], tuple[Any, socket.socket, list]],
          start_worker: Callable[[list[str]], Any], started: dict[int, Any], begin: Callable[[], None]) -> Any:
    """Answer one message of the judge: None, or its verdict (`GONE` when it ended without one).
    `started` keeps every process started for this check, to be killed when the check ends.
    `start`: the check's own statements begin; answered once `begin` lets them (its phase)."""
    try:
        data = sock.recv(MESSAGE)
        request = json.loads(data) if data else {}
    except (OSError, ValueError):
        return GONE
    fds: list[int] = []
    if request.get("op") in ("verdict", None):
        return request.get("verdict", GONE)
    if request.get("op") == "start":
        begin()
        sock.send(json.dumps({"ok": True}).encode())
        return None
    try:
        op = request.get("op")
        if op == "learner":
            learner, wire_end, ready = start_learner(str(request["what"]))
            started[len(started) + 1] = learner
            reply, fds = {"ready": ready}, [wire_end.detach()]
            if learner.locks is not None:  # the judge answers its lock calls from now on
                fds.append(learner.locks.detach())
                learner.locks = None
        elif op == "worker":
            argv = [str(a) for a in request["argv"]]
            if argv[1:4] != ["-P", "-m", WORKER_MODULE]:
                raise ValueError("only the checkpoint's worker runs in a worker sandbox")
            worker = start_worker(argv)
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
            elif op == "log":
                reply = {"tail": process.stderr_tail()}
            else:
                raise ValueError(f"unknown request {op!r}")
    except Exception as error:  # the judge is told; the check then says what failed
        reply, fds = {"ename": type(error).__name__, "error": str(error)[:500]}, []
    try:
        socket.send_fds(sock, [json.dumps(reply).encode()], fds)
    finally:
        for fd in fds:
            os.close(fd)
    return None
