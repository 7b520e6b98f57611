"""An append-only history of what the runtime decided, written inside the decision's transaction."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Iterator

from sovereign_agent.database import Database


def append_event(db: Database, kind: str, payload: dict[str, Any]) -> str:
    """Record one event through the caller's connection; never commits on its own.

    Called inside `db.immediate()`, the event lands or vanishes with the change it describes.
    """
    if not isinstance(kind, str) or not 0 < len(kind) <= 100:
        raise ValueError("event kind must be a non-empty string of at most 100 characters")
    identifier = uuid.uuid4().hex
    db.connection.execute(
        "INSERT INTO events(id, kind, payload, created_at) VALUES (?, ?, ?, ?)",
        (identifier, kind, json.dumps(payload, allow_nan=False, sort_keys=True), time.time()),
    )
    return identifier


def replay(db: Database, *, kind_prefix: str = "", after: int = 0) -> Iterator[dict[str, Any]]:
    """Events in the order they were committed, payloads decoded."""
    rows = db.connection.execute(
        "SELECT seq, id, kind, payload, created_at FROM events "
        "WHERE seq > ? AND substr(kind, 1, length(?)) = ? ORDER BY seq",
        (after, kind_prefix, kind_prefix),
    )
    for row in rows:
        yield {
            "seq": row["seq"],
            "id": row["id"],
            "kind": row["kind"],
            "payload": json.loads(row["payload"]),
            "created_at": row["created_at"],
        }
