"""The instructor guide's table of checkpoint evidence, rendered from the code that counts it.

Field names are the evidence JSON's own keys (the fields of `CaseEvidence`); case titles, the
stale boundaries and the order's amount come from the checkpoint and the shop, so the guide
names what an instructor will actually read in `--evidence` output.
"""

from __future__ import annotations

import dataclasses
import signal
import tempfile
from pathlib import Path

from course.checkpoint.cases import ACCEPTED_THEN_CRASH, KILLED, LIVE_STALE, PAUSED, TITLES
from course.checkpoint.scenario import SUBJECT
from course.checkpoint.evidence import CaseEvidence
from course.checkpoint.verdict import STALE_BOUNDARIES
from reference_organizations.store.agent import seed_lucy, shortfalls
from sovereign_agent.database import Database


def restock_order() -> dict:
    """The one order the checkpoint's cases approve: the vanilla shortfall in a freshly seeded shop."""
    with tempfile.TemporaryDirectory(prefix="ch12-guide-") as folder:
        db = Database(Path(folder) / "shop.db")
        try:
            seed_lucy(db)
            (item,) = [row for row in shortfalls(db) if row["sku"] == SUBJECT]
        finally:
            db.close()
    return item


def rows() -> list[tuple[tuple[str, ...], str, str]]:
    """(evidence fields, where each number is counted, what a pass looks like)."""
    case = {name: f"*{title}*" for name, title in TITLES.items()}
    item = restock_order()
    amount = item["needed"] * item["unit_pence"]
    return [
        (("worker_exit", "worker_signal"), "the operating system (`Popen.returncode`)",
         f"`{-signal.SIGKILL}` / `{signal.SIGKILL.name}` in {case[KILLED]} and {case[ACCEPTED_THEN_CRASH]}; "
         f"`0` / `null` in {case[LIVE_STALE]} and {case[PAUSED]}, whose old worker exits when told, at the end"),
        (("worker_state_when_paused",), "`/proc/<pid>/stat` right after `SIGSTOP`", f"`T` in {case[PAUSED]}"),
        (("generation", "owner", "work_status"), "the shop database",
         "`old_generation + 1` (`2`), the replacement's owner label, `DONE`"),
        (("order_status",), "the shop database", "`CONFIRMED`"),
        (("supplier_orders", "supplier_operations"), "the supplier's own ledger file, read with plain `sqlite3`",
         "exactly 1 order, carrying the original `operation`"),
        (("supplier_posts", "supplier_gets"), "the supplier's `requests` table",
         f"1 POST (the original); in {case[ACCEPTED_THEN_CRASH]} also 1 GET (the replacement's lookup) "
         "and no retransmission"),
        (("model_calls",), "the instrumented `NoNewReasoning` model", "`0`"),
        (("model_calls_recorded",), "the shop database (model calls reserved since the takeover)", "`0`"),
        (("refused_boundaries",), "the old worker's own report of its attempts (`stale_attempts`)",
         ", ".join(f"`{b}`" for b in STALE_BOUNDARIES) + f" in {case[LIVE_STALE]} and {case[PAUSED]}"),
        (("transcript_rows",), "the shop database (rows per generation)",
         "no row from the old generation after the takeover"),
        (("reserved_pence", "spent_pence"), "the shop database",
         f"`0` / `{amount}` (the order's amount: {item['needed']} × {item['name']} at {item['unit_pence']} p)"),
        (("lease_waited_seconds", "wall_seconds"), "the wall clock",
         "the lease really elapsed (no longer than `lease_seconds` asked for); nothing rewrote the clock or a ledger"),
    ]


def render() -> str:
    known = {f.name for f in dataclasses.fields(CaseEvidence)}
    lines = ["| Field in the evidence JSON | Counted from | What a pass looks like |", "| --- | --- | --- |"]
    for fields, source, passes in rows():
        unknown = set(fields) - known
        if unknown:
            raise ValueError(f"the evidence has no field {sorted(unknown)}: update course.checkpoint.evidence_table")
        lines.append(f"| {', '.join(f'`{name}`' for name in fields)} | {source} | {passes} |")
    return "\n".join(lines)
