"""Lucy's ice-cream shop: its catalogue, the tools its assistant may use, and an offline model.

Money is in pence. Vanilla is the running example: 2 tubs on hand, reorder at 8, so the
assistant proposes 8 - 2 = 6 tubs at 250 pence, 1500 pence in all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from reference_organizations.store.supplier.protocol import DEFAULT_IDENTITY as SUPPLIER_IDENTITY  # the shop's one wholesaler
from sovereign_agent.assistant_orders import open_account, propose
from sovereign_agent.assistant_work import Claim, assert_current
from sovereign_agent.database import Database
from sovereign_agent.events import append_event
from sovereign_agent.model import ModelTurn, ToolCall

CATALOGUE = (
    # sku, name, on hand, reorder threshold, unit cost (pence)
    ("SKU-VANILLA", "Vanilla tub", 2, 8, 250),
    ("SKU-CHOCOLATE", "Chocolate tub", 12, 6, 300),
    ("SKU-STRAWBERRY", "Strawberry tub", 1, 5, 275),
)
OPENING_CASH_PENCE = 20_000
# The account ceiling: vanilla (1500) and strawberry (4 x 275 = 1100) each fit, both together do not.
SPENDING_CEILING_PENCE = 2_500


def seed_lucy(db: Database) -> None:
    """Create the shop's catalogue, cash and spending account once; later calls change nothing."""
    with db.immediate() as connection:
        created = connection.execute(
            "INSERT OR IGNORE INTO shop_cash(id, pence) VALUES (1, ?)", (OPENING_CASH_PENCE,)
        ).rowcount
        connection.executemany(
            "INSERT OR IGNORE INTO shop_items(sku, name, on_hand, reorder_at, unit_pence) VALUES (?, ?, ?, ?, ?)",
            CATALOGUE,
        )
        open_account(connection, SPENDING_CEILING_PENCE)
        if created:
            append_event(db, "shop.seeded", {"items": len(CATALOGUE), "cash_pence": OPENING_CASH_PENCE})


def shortfalls(db: Database) -> list[dict[str, Any]]:
    """Items below their reorder threshold, with the quantity that brings them back to it."""
    rows = db.connection.execute(
        "SELECT sku, name, on_hand, reorder_at, unit_pence FROM shop_items WHERE on_hand < reorder_at ORDER BY sku"
    )
    return [dict(row) | {"needed": row["reorder_at"] - row["on_hand"]} for row in rows]


@dataclass
class ShopTools:
    """The assistant's tools, bound to one claim: every write goes through the fence."""

    db: Database
    work: Claim
    target: str = SUPPLIER_IDENTITY
    fence: Callable[..., None] = assert_current
    specs: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {"name": "stock_report", "description": "Items below their reorder threshold.", "parameters": {}},
            {
                "name": "propose_order",
                "description": "Draft a supplier order for operator approval.",
                "parameters": {"sku": "string", "quantity": "integer"},
            },
        ]
    )

    def __call__(self, call: ToolCall) -> Any:
        if call.name == "stock_report":
            return shortfalls(self.db)
        if call.name == "propose_order":
            sku, quantity = call.arguments.get("sku"), call.arguments.get("quantity")
            order = propose(self.db, self.work, sku, quantity, target=self.target, fence=self.fence)
            return {"order": order, "status": "DRAFT", "awaiting": "operator approval"}
        return {"error": f"unknown tool {call.name!r}"}


class OfflineShopModel:
    """A deterministic stand-in for a model, so the course runs with no network.

    First turn: ask for the stock report. Second: propose an order for the first item in
    short supply (or the one named by the assignment's subject). Third: summarise.
    """

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages, tools, *, timeout, max_output_tokens) -> ModelTurn:
        self.calls += 1
        tool_results = [m for m in messages if m.get("role") == "tool"]
        if not tool_results:
            return ModelTurn(calls=(ToolCall("call-1", "stock_report", {}),), output_tokens=12)
        last = tool_results[-1]
        if last["name"] == "stock_report":
            short = json.loads(last["content"])
            subject = next((m.get("subject", "") for m in messages if m.get("role") == "user"), "")
            chosen = [item for item in short if not subject or item["sku"] == subject][:1]
            if not chosen:
                return ModelTurn(content="Nothing needs reordering.", output_tokens=5)
            item = chosen[0]
            arguments = {"sku": item["sku"], "quantity": item["needed"]}
            return ModelTurn(calls=(ToolCall("call-2", "propose_order", arguments),), output_tokens=20)
        drafted = json.loads(last["content"])
        return ModelTurn(content=f"Drafted order {drafted.get('order')} for operator approval.", output_tokens=15)
