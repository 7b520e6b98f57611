"""What the order fence needs from a supplier, and the two ways a request can fail."""

from __future__ import annotations

from typing import Any, Protocol


class OutcomeUnknown(Exception):
    """No answer within the timeout (or the connection dropped): the order may or may not exist."""


class SupplierRefused(ValueError):
    """The supplier answered and refused the request (malformed, or a conflicting proposal)."""


class Supplier(Protocol):
    identity: str
    timeout: float

    def lookup(self, operation: str) -> dict[str, Any] | None:
        """The stored receipt for `operation`, or None if the supplier has no such order."""

    def order(self, operation: str, proposal: dict[str, Any]) -> dict[str, Any]:
        """Place (or replay) the order; raises OutcomeUnknown or SupplierRefused."""
