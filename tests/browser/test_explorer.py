"""The crash explorer (05_explore) in JupyterLab in a real browser: Run draws a trial and its evidence.

The notebook is opened and run like a learner would (Run All, through the menu); then the test
chooses the reference functions and a crash point with SIGSTOP, clicks Run, and waits (bounded)
for the timeline picture and the evidence beside it. The screenshot shows the explorer after
that one run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from course.checkpoint.crashpoints import POINTS

from .conftest import REPO_ROOT
from .test_lab import NOTEBOOK_PANEL, run_notebook_in_lab, screenshot

pytestmark = pytest.mark.browser

EXPLORER_NOTEBOOK = Path(
    os.environ.get("LAB_TEST_EXPLORER_NOTEBOOK", REPO_ROOT / "notebooks" / "ch12" / "05_explore.ipynb")
).resolve()
TRIAL_TIMEOUT_MS = 90_000  # one real trial takes ~3 s; a loaded 2-core machine much longer


def test_explorer_runs_one_trial_and_shows_the_picture_and_the_evidence(lab, page, output_path):
    if not EXPLORER_NOTEBOOK.exists():
        pytest.skip(f"{EXPLORER_NOTEBOOK} is missing: run `make release`")
    run = run_notebook_in_lab(lab, page, EXPLORER_NOTEBOOK)
    print(f"Run All took {run.seconds:.1f} s")
    assert all(not cell.get("outputs") or all(o.get("output_type") != "error" for o in cell.outputs)
               for cell in run.notebook.cells if cell.cell_type == "code")
    panel = page.locator(NOTEBOOK_PANEL)
    panel.locator(".widget-dropdown select").select_option(label=f"supplier-committed: {POINTS['supplier-committed']}")
    panel.get_by_role("button", name="SIGSTOP", exact=True).click()
    panel.get_by_role("button", name="reference", exact=True).click()
    panel.locator("button", has_text=re.compile(r"^\s*Run\s*$")).click()  # not "Run all points"

    picture = panel.locator("img.widget-image")
    page.wait_for_function(
        "sel => { const i = document.querySelector(sel); return i && i.naturalWidth > 300; }",
        arg=f"{NOTEBOOK_PANEL} img.widget-image", timeout=TRIAL_TIMEOUT_MS,
    )
    evidence = panel.locator(".ch12-evidence")
    evidence.wait_for(state="visible", timeout=10_000)
    text = evidence.inner_text()
    status = panel.get_by_text("supplier-committed with SIGSTOP").inner_text()
    picture.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    shot = screenshot(page, output_path, "explorer-after-run.png")

    assert picture.bounding_box()["width"] > 300 and shot.stat().st_size > 10_000
    assert status.startswith("PASS"), status
    for invariant in ("one-order", "money", "done", "no-stale-write", "lookup-first", "nothing-running"):
        assert invariant in text, text
    assert "supplier orders 1" in text and "at the takeover: generation 1, order SENDING" in text, text
