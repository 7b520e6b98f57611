"""An old holder frozen at `sending`: admitted by the shop's fence, stopped before its request leaves.

    python -P -m course.lessons.stale_sender --database DB --endpoint URL --identity ID --lease SECONDS --ready FILE

With the reference runtime it claims the one queued assignment with a short real lease, proposes
the six vanilla tubs, Lucy approves, and executes the order with a supplier client that carries
its fencing token (work id, generation). The shop's fence admits it (the order is SENDING); then,
just before the request leaves, it writes FILE (JSON: pid, work, generation, order) and stops
itself with SIGSTOP. Whoever started it takes over after the lease ran out and sends SIGCONT: the
request then leaves with the OLD generation. How the send ended (the supplier's receipt, its
refusal, or the shop's fence refusing the receipt) is printed as one JSON line on stdout, for
the picture only: `course.lessons.resource_fence` judges from the supplier's ledger.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

OWNER = "lucy-stock-worker"  # the replacement uses the same label: the generation is the only difference


class StopsAtSending:
    """The fenced client; `order` first reports where it stands and freezes this process."""

    def __init__(self, client: Any, ready: Path, record: dict[str, Any]) -> None:
        self.client, self.ready, self.record = client, ready, record
        self.identity, self.timeout, self.idempotent = client.identity, client.timeout, client.idempotent
        self.answer: dict[str, Any] = {}

    def lookup(self, operation: str) -> dict[str, Any] | None:
        return self.client.lookup(operation)

    def order(self, operation: str, proposal: dict[str, Any]) -> dict[str, Any]:
        from reference_organizations.children import write_atomically
        from sovereign_agent.suppliers import SupplierRefused

        write_atomically(self.ready, json.dumps({**self.record, "order": operation, "stopped_at": time.time()}))
        os.kill(os.getpid(), signal.SIGSTOP)  # admitted (SENDING), the request has not left
        self.answer["sent_at"] = time.time()
        try:
            receipt = self.client.order(operation, proposal)
        except SupplierRefused as refusal:
            self.answer["supplier"] = f"refused: {refusal}"
            raise
        self.answer["supplier"] = f"answered {receipt.get('status')}"
        return receipt


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from reference_organizations.store.agent import SUPPLIER_IDENTITY, shortfalls
    from reference_organizations.store.supplier import SupplierClient
    from sovereign_agent.assistant_orders import approve, execute, propose
    from sovereign_agent.assistant_work import claim
    from sovereign_agent.database import Database
    from sovereign_agent.records import order as recorded_order
    from sovereign_agent.records import spending_policy

    db = Database(args.database)
    work = claim(db, OWNER, ttl=args.lease)
    if work is None:
        print(json.dumps({"error": "nothing to claim"}), flush=True)
        return 3
    needed = next(item["needed"] for item in shortfalls(db) if item["sku"] == "SKU-VANILLA")
    order = propose(db, work, "SKU-VANILLA", needed, target=SUPPLIER_IDENTITY)
    policy = spending_policy(db.connection, {"lucy"})
    approve(db, order, recorded_order(db.connection, order)["digest"], actor="lucy", policy=policy,
            expires=time.time() + 600)
    client = SupplierClient(args.endpoint, identity=args.identity, timeout=args.lease / 4)
    record = {"pid": os.getpid(), "work": work.id, "generation": work.generation}
    supplier = StopsAtSending(client.fenced(work.id, work.generation), args.ready, record)
    try:
        execute(db, work, order, supplier, policy=policy)
        outcome = "the receipt was recorded"
    except PermissionError as error:
        outcome = f"the shop's fence refused the receipt: {error}"
    except Exception as error:
        outcome = f"{type(error).__name__}: {error}"
    print(json.dumps({**supplier.answer, "outcome": outcome, "ended_at": time.time()}), flush=True)
    db.close()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course.lessons.stale_sender")
    parser.add_argument("--database", type=Path, required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--lease", type=float, required=True)
    parser.add_argument("--ready", type=Path, required=True)
    return parser


if __name__ == "__main__":
    sys.exit(main())
