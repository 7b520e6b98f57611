"""Renewal, contrasted (06): a heartbeat keeps a stuck worker's lease forever; a sized lease ends.

Real threads and a real 1 s lease, bounded to a few seconds; the outcome is read from the database,
and every thread the experiment started has ended when it returns.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from course.lessons.renewal import TTL, stuck_worker

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def notebook_renew():
    """The heartbeat's write exactly as 06 shows it (the released notebook's locked cell)."""
    cells = json.loads((ROOT / "notebooks" / "ch12" / "06_explore.ipynb").read_text())["cells"]
    (source,) = ["".join(cell["source"]) for cell in cells if cell.get("id") == "renewal-heartbeat"]
    namespace: dict = {}
    exec(source, namespace)
    return namespace["renew"]


def test_a_renewed_lease_outlives_its_stuck_worker_and_no_replacement_gets_in():
    threads = set(threading.enumerate())
    seen = stuck_worker(notebook_renew(), seconds=2.5)
    assert seen.holder == {"status": "RUNNING", "generation": 1, "owner": "worker@shop"}
    assert seen.taken_over_after is None and seen.attempts >= 10
    assert seen.heartbeats >= 3 and seen.lease_end_moved >= 2.5 - 2 * TTL
    assert seen.late_write == "accepted"  # still the holder when its stuck call finally returned
    assert seen.threads_left == 0 and set(threading.enumerate()) == threads


def test_a_sized_lease_ends_and_the_stuck_workers_late_write_is_refused():
    threads = set(threading.enumerate())
    seen = stuck_worker(None, seconds=3.0)
    assert seen.holder == {"status": "RUNNING", "generation": 2, "owner": "replacement"}
    assert TTL <= seen.taken_over_after < 3.0 and seen.heartbeats == 0 and seen.lease_end_moved == 0
    assert seen.late_write == "refused: worker claim expired or superseded"
    assert seen.threads_left == 0 and set(threading.enumerate()) == threads
