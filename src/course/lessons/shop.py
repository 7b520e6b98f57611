"""Lucy's side of the shop, as 04_recovery and 07_review set it up: her spending policy, her
approval of a recorded proposal, and the money on the account.

Every helper goes through the runtime's own functions (`propose`, `approve`) or its named reads
(`sovereign_agent.records`); none edits a table behind the runtime's back.
"""

from __future__ import annotations

import time

from reference_organizations.store.agent import SPENDING_CEILING_PENCE, SUPPLIER_IDENTITY
from sovereign_agent import records
from sovereign_agent.assistant_orders import SpendingPolicy, approve, propose
from sovereign_agent.assistant_work import Claim
from sovereign_agent.database import Database

POLICY = SpendingPolicy(operators=frozenset({"lucy"}), total_pence=SPENDING_CEILING_PENCE)


def money(db: Database) -> tuple[int, int]:
    """(reserved, spent) on the shop's single spending account, in pence."""
    return records.money(db.connection)


def order_status(db: Database, order_id: str) -> str:
    return records.order(db.connection, order_id)["status"]


def approve_as_lucy(db: Database, order_id: str, *, policy: SpendingPolicy = POLICY) -> None:
    """Lucy approves exactly the recorded proposal (named by its digest), valid for ten minutes."""
    digest = records.order(db.connection, order_id)["digest"]
    approve(db, order_id, digest, actor="lucy", policy=policy, expires=time.time() + 600)


def approved_order(db: Database, work: Claim, sku: str, quantity: int) -> str:
    """Propose under `work` (fenced, exactly as the shop's tool does), then Lucy approves it."""
    order_id = propose(db, work, sku, quantity, target=SUPPLIER_IDENTITY)
    approve_as_lucy(db, order_id)
    return order_id
