"""The crash explorer (06_explore) in JupyterLab in a real browser, driven through its buttons.

The notebook is opened and run like a learner would (Run All, through the menu; as in any release,
only answer cells and the visible tests that call them may end in an error). Before any button
is pressed, nothing on the page is a broken image and every figure fits its output area. Then, in
the explorer (found as the output that holds its "Run all points" button, so a section added to the
notebook does not move the test), the test chooses the reference functions and a crash point with
SIGSTOP and presses Run: the timeline picture and the evidence appear beside it. Then it presses
Run all points: every crash point with both nemeses, and the grid fills with a verdict per trial
(the reference passes them all). Buttons are found by the words they show.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from course.checkpoint.crashpoints import POINTS
from course.checkpoint.trial import NEMESES

from .conftest import REPO_ROOT
from .test_lab import (NOTEBOOK_PANEL, broken_images, figures_not_fitting, problems_in_release_run, run_notebook_in_lab,
                       screenshot)

pytestmark = pytest.mark.browser

EXPLORER_NOTEBOOK = Path(
    os.environ.get("LAB_TEST_EXPLORER_NOTEBOOK", REPO_ROOT / "notebooks" / "ch12" / "06_explore.ipynb")
).resolve()
TRIAL_TIMEOUT_MS = 90_000  # one real trial takes ~3 s; a loaded 2-core machine much longer
ALL_POINTS_TIMEOUT = 600.0  # every point x nemesis: 15-20 s alone, minutes on a loaded 2-core machine


def button(scope, words: str):
    """The button that shows exactly `words` (an icon beside them is not text)."""
    return scope.locator("button", has_text=re.compile(rf"^\s*{re.escape(words)}\s*$"))


def test_explorer_runs_one_trial_then_every_point_through_its_buttons(lab, page, output_path):
    if not EXPLORER_NOTEBOOK.exists():
        pytest.skip(f"{EXPLORER_NOTEBOOK} is missing: run `make release`")
    run = run_notebook_in_lab(lab, page, EXPLORER_NOTEBOOK)
    print(f"Run All took {run.seconds:.1f} s")
    # as in any release: only answer cells (stubs) and the visible tests that call them may fail
    assert not (problems := problems_in_release_run(run.notebook)), "\n".join(problems)
    panel = page.locator(NOTEBOOK_PANEL)
    explorer = panel.locator(".jp-OutputArea-output").filter(has=button(page, "Run all points"))
    assert explorer.count() == 1, f"{explorer.count()} outputs hold a 'Run all points' button; expected one"

    # Before the first run: no broken image anywhere, and every figure fits where it is shown.
    broken, wide = broken_images(page), figures_not_fitting(page)

    # One trial.
    point = f"supplier-committed: {POINTS['supplier-committed']}"
    explorer.locator(".widget-dropdown select").select_option(label=point)
    button(explorer, "SIGSTOP").click()
    button(explorer, "reference").click()
    button(explorer, "Run").click()
    picture = explorer.locator("img.widget-image")
    page.wait_for_function(
        "img => img.naturalWidth > 300", arg=picture.element_handle(), timeout=TRIAL_TIMEOUT_MS,
    )
    evidence = explorer.locator(".ch12-evidence")
    evidence.wait_for(state="visible", timeout=10_000)
    text = evidence.inner_text()
    status = explorer.get_by_text("supplier-committed with SIGSTOP").inner_text()
    picture.scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    screenshot(page, output_path, "explorer-after-run.png")
    wide_after_run = figures_not_fitting(page)
    width_after_run = picture.bounding_box()["width"]

    # Every point, both nemeses: the grid fills in, one verdict per trial.
    started = time.monotonic()
    button(explorer, "Run all points").click()
    trials = len(POINTS) * len(NEMESES)
    verdicts = explorer.locator(".widget-gridbox span", has_text=re.compile(r"^(PASS|FAIL)$"))
    deadline = started + ALL_POINTS_TIMEOUT
    while time.monotonic() < deadline:
        if verdicts.count() == trials and button(explorer, "Run all points").is_enabled():
            break
        time.sleep(1.0)
    summary = explorer.get_by_text(re.compile(r"trials passed")).inner_text()
    print(f"Run all points took {time.monotonic() - started:.1f} s: {summary}")
    explorer.locator(".widget-gridbox").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    screenshot(page, output_path, "explorer-after-run-all.png")
    # the detail panel no longer shows the single trial from before, which the grid may contradict
    detail_after_all = (picture.is_visible(), explorer.locator(".widget-html", has_text="fills the grid below").count())

    assert width_after_run > 300
    assert detail_after_all == (False, 1), f"after Run all points: picture shown, notes = {detail_after_all}"
    assert status.startswith("PASS"), status
    for invariant in ("one-order", "money", "done", "no-stale-write", "lookup-first", "nothing-running"):
        assert invariant in text, text
    assert "supplier orders 1" in text and "at the takeover: generation 1, order SENDING" in text, text
    said = [verdicts.nth(i).inner_text() for i in range(verdicts.count())]
    assert said == ["PASS"] * trials, f"the reference should pass all {trials} trials; the grid says {said}"
    assert summary.startswith(f"{trials}/{trials} trials passed, 0 violation(s)"), summary
    assert not wide_after_run, f"after Run, pictures run past their output area: {wide_after_run}"
    assert not wide, f"before the first run, figures do not fit their output area: {wide}"
    assert not broken, f"before the first run, 06 shows broken images: {broken}"
