"""The old worker: a real process that claims with a short lease, prepares the order, then obeys.

    python -m course.checkpoint.worker --database DB --implementation reference|FOLDER \
        --owner LABEL --lease SECONDS --ready FILE --commands FIFO [--idle-timeout SECONDS]

It loads the implementation under test (the reference runtime or a learner's notebooks) and
opens the shop database, then waits for one-line JSON commands. On `claim` it claims the queued
assignment with the short lease, records the six-tub vanilla proposal under the
implementation's fence and the operator's approval, and writes a ready record atomically (JSON:
pid, claim fields, the row's expiry, the order; or the error that stopped it). The parent can
therefore start the process early and decide exactly when the lease begins. Then:

    {"do": "claim"}                            as above (answered by the ready record)
    {"do": "observe"}                          try a transcript write with the held claim
    {"do": "stale", "endpoint": URL}           try a transcript write, a completion and a
                                               supplier execution with the held claim
    {"do": "execute", "endpoint": URL, "timeout": S}   execute the approved order (accepted,
                                               then crash: the parent kills us mid-request)
    {"do": "exit"}

The crash matrix uses two other commands instead of `claim`: {"do": "ping"} (answered once the
worker has loaded), then

    {"do": "pass", "point": P, "endpoint": URL, "identity": I, "timeout": S}   one whole worker
                                               pass that stops at crash point P (ready record),
                                               then waits for {"do": "go"}; answered when the
                                               pass ends (see crashpoints.py). Options: "model"
                                               ("offline", the default, or "none": a model that
                                               fails if asked), "owner", "own_lease" (true: the
                                               pass's own ttl, not --lease): the replacement's

The pass is `--worker`'s `run_once` (the reference, or a learner's 05_checkpoint) over
`--implementation`'s fences (the reference, or a learner's 01, 02 and 04).

Each command is answered by one JSON line on stdout; anything else the loaded code prints goes
to stderr. The command channel is a named pipe that only the parent holds open for writing
(children.spawn gives every child /dev/null as stdin, so no child competes with a kernel for
input). It behaves like stdin: end-of-file when the parent closes it or dies, and the worker
then exits. Every wait is bounded: no command for --idle-timeout seconds also ends it. It also
dies with its parent through PR_SET_PDEATHSIG (children.spawn).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from course.checkpoint.evidence import claim_fields
from course.checkpoint.scenario import APPROVAL_SECONDS, OPERATOR, SUBJECT


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    replies = _claim_stdout()
    record: dict[str, Any] = {"pid": os.getpid(), "owner": args.owner, "lease": args.lease, "started": time.time()}
    channel = os.open(args.commands, os.O_RDONLY | os.O_NONBLOCK)
    try:
        try:
            loaded = _load(args)
        except Exception as error:  # reported to the parent, which turns it into an explanation
            return _ready(args, record, error)
        record["loaded_at"] = time.time()
        held: Held | None = None
        commands = _commands(channel, args.idle_timeout)
        for command in commands:
            what = command.get("do")
            if held is None and what == "pass":  # the crash matrix: one whole pass, see crashpoints
                _reply(replies, _pass(args, loaded, record, command, commands))
                continue
            if held is None and what == "ping":  # answered once everything is imported and open
                _reply(replies, {"do": "ping", "loaded_at": record["loaded_at"]})
                continue
            if held is None and what == "exit":
                _exit(replies, loaded[1])
            if held is None:
                if what != "claim":
                    _reply(replies, {"do": what, "error": "nothing is held yet: send claim first"})
                    continue
                try:
                    held = _claim(args, loaded, record)
                except Exception as error:
                    return _ready(args, record, error)
                _ready(args, record, None)
            elif what == "exit":
                _exit(replies, held.db)
            else:
                _reply(replies, _handle(command, held))
        return 0  # end of file (the parent closed the channel or died) or idle timeout
    finally:
        os.close(channel)


def _exit(replies: Any, db: Any) -> None:
    db.close()
    _reply(replies, {"do": "exit", "pid": os.getpid()})
    sys.stderr.flush()
    os._exit(0)  # everything is closed; skip interpreter teardown (it only costs time)


def _pass(args: argparse.Namespace, loaded: tuple[Any, Any], record: dict[str, Any], command: dict[str, Any],
          commands: Iterator[dict[str, Any]]) -> dict[str, Any]:
    """Run one whole pass that stops at the crash point: the ready record says where it stands,
    then the worker waits for {"do": "go"} (after SIGCONT) or dies (SIGKILL, end-of-file)."""
    from course.checkpoint.crashpoints import worker_pass

    def stop(point: str) -> None:
        record.update(point=point, reached_at=time.time())
        _ready(args, record, None)
        if next(commands, {}).get("do") != "go":
            os._exit(0)  # the parent is gone, closed the channel or said something else: stop here

    implementation, db = loaded
    return worker_pass(db, implementation, command, owner=command.get("owner", args.owner),
                       lease=None if command.get("own_lease") else args.lease, stop=stop)


def _ready(args: argparse.Namespace, record: dict[str, Any], error: BaseException | None) -> int:
    """Write the ready record atomically: the claim and order, or what stopped the worker."""
    from reference_organizations.children import write_atomically

    if error is not None:
        from course.checkpoint.stale import explain

        record["error"] = explain(error)
    record["ready_at"] = time.time()
    write_atomically(args.ready, json.dumps(record, sort_keys=True))
    return 3 if error is not None else 0


class Held:
    """What the old worker keeps in memory: its database, its claim and its order."""

    def __init__(self, db: Any, ownership: Any, work: Any, order: str, policy: Any, identity: str) -> None:
        self.db, self.ownership, self.work, self.order = db, ownership, work, order
        self.policy, self.identity = policy, identity


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    """Import the runtime, load the implementation under test and open the database.

    Everything a later command needs is imported here, before the lease exists, so that no
    command pays for an import while the parent measures the experiment.
    """
    import course.checkpoint.crashpoints  # noqa: F401
    import reference_organizations.store.agent  # noqa: F401
    import reference_organizations.store.assistant  # noqa: F401
    import reference_organizations.store.supplier  # noqa: F401
    import sovereign_agent.assistant_orders  # noqa: F401
    from course.lab.learner import load_implementation
    from sovereign_agent.database import Database

    return load_implementation(args.implementation, worker=args.worker), Database(args.database)


def _claim(args: argparse.Namespace, loaded: tuple[Any, Any], record: dict[str, Any]) -> Held:
    """Claim with the short lease, propose the vanilla order under the fence, approve it."""
    from reference_organizations.store.agent import SUPPLIER_IDENTITY, shortfalls
    from sovereign_agent.assistant_orders import approve, propose
    from sovereign_agent.records import holding, spending_policy
    from sovereign_agent.records import order as recorded_order

    ownership, db = loaded[0].ownership, loaded[1]
    record["claim_requested_at"] = time.time()
    work = ownership.claim(db, args.owner, ttl=args.lease)
    record["claimed_at"] = time.time()
    if work is None:
        raise RuntimeError("claim returned None for the only READY assignment in an unpaused runtime")
    record["claim"] = claim_fields(work)
    row = holding(db.connection, work.id)
    record["row"] = row
    if row is not None:
        record["expires"] = row["expires"]
    needed = next((item["needed"] for item in shortfalls(db) if item["sku"] == SUBJECT), None)
    if needed is None:
        raise RuntimeError(f"the seeded shop shows no shortfall for {SUBJECT}")
    order = propose(db, work, SUBJECT, needed, target=SUPPLIER_IDENTITY, fence=ownership.assert_current)
    policy = spending_policy(db.connection, {OPERATOR})
    proposed = recorded_order(db.connection, order)
    approve(db, order, proposed["digest"], actor=OPERATOR, policy=policy, expires=time.time() + APPROVAL_SECONDS)
    record.update(order=order, sku=SUBJECT, quantity=needed, amount=proposed["amount"], approved_at=time.time())
    return Held(db, ownership, work, order, policy, SUPPLIER_IDENTITY)


def _commands(channel: int, idle_timeout: float) -> Iterator[dict[str, Any]]:
    """One JSON command per line until end-of-file, or until `idle_timeout` passes in silence."""
    buffer = b""
    deadline = time.monotonic() + idle_timeout
    while True:
        if b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line)
            deadline = time.monotonic() + idle_timeout
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            print(f"worker {os.getpid()}: no command for {idle_timeout} s, exiting", file=sys.stderr)
            return
        readable, _, _ = select.select([channel], [], [], remaining)
        if not readable:
            continue
        try:
            chunk = os.read(channel, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            return  # end of file: the parent closed the channel or is gone
        buffer += chunk


def _handle(command: dict[str, Any], held: Held) -> dict[str, Any]:
    from course.checkpoint import stale
    from sovereign_agent.assistant_orders import execute

    what = command.get("do")
    if what == "observe":
        return {"do": what, "attempts": [stale.transcript(held.db, held.ownership, held.work)]}
    if what == "stale":
        return {"do": what, "attempts": stale.writes(held.db, held.ownership, held.work, held.order,
                                                     _client(command, held), held.policy)}
    if what == "execute":
        client = _client(command, held)
        return {"do": what, "attempts": [stale.attempt("supplier", lambda: execute(
            held.db, held.work, held.order, client, policy=held.policy, fence=held.ownership.assert_current))]}
    return {"do": what, "error": f"unknown command {what!r}"}


def _client(command: dict[str, Any], held: Held) -> Any:
    from reference_organizations.store.supplier import SupplierClient

    return SupplierClient(command["endpoint"], identity=held.identity, timeout=float(command.get("timeout", 3.0)))


def _claim_stdout() -> Any:
    """Keep the real stdout for protocol replies; route every other print to stderr."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return replies


def _reply(replies: Any, message: dict[str, Any]) -> None:
    replies.write(json.dumps(message, sort_keys=True) + "\n")
    replies.flush()


def _positive(text: str) -> float:
    from sovereign_agent.assistant_work import check_ttl

    value = float(text)
    try:
        check_ttl(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course.checkpoint.worker")
    parser.add_argument("--database", type=Path, required=True)
    parser.add_argument("--implementation", default="reference", help="the fences: 'reference' or a notebook folder")
    parser.add_argument("--worker", default="reference", help="the pass: 'reference' or a notebook folder")
    parser.add_argument("--owner", required=True)
    parser.add_argument("--lease", type=_positive, required=True)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--commands", type=Path, required=True, help="named pipe the parent writes")
    parser.add_argument("--idle-timeout", type=_positive, default=60.0)
    return parser


if __name__ == "__main__":
    sys.exit(main())
