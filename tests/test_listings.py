"""The chapter's listings 1-6, run verbatim in one namespace against our library.

The listings file is the specification and lives outside the repository (../shared/seed); when
it is absent the test is skipped with that reason rather than silently passing.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import types
from pathlib import Path

import pytest

LISTINGS = Path(__file__).resolve().parents[2] / "shared" / "seed" / "ch12-listings.json"


def load_listings() -> list[dict]:
    if not LISTINGS.exists():
        pytest.skip(f"chapter listings not found at {LISTINGS}")
    return json.loads(LISTINGS.read_text())["listings"]


def test_listings_1_to_6_print_the_chapters_observations(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    module = types.ModuleType("chapter_listings")  # dataclasses look their module up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    listings = [entry for entry in load_listings() if 1 <= entry["listing"] <= 6]
    assert [entry["listing"] for entry in listings] == [1, 2, 3, 4, 5, 6]
    for entry in listings:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(entry["code"], f"<listing {entry['listing']}>", "exec"), namespace)
        assert printed.getvalue() == entry["expected_output"], f"listing {entry['listing']}"
