"""The learner's first notebook, run in JupyterLab in a real browser (headless Debian chromium).

What a learner does: open the notebook, Run > Run All Cells, read the outputs, click nbgrader's
Validate button. The tests do the same through the UI on a temporary copy, save, read the
executed notebook back from disk and check it:

* learner release (notebooks/ch12/01_claims.ipynb): errors are allowed only in solution cells
  (nbgrader ``solution: true``, they still hold ``raise NotImplementedError()``) and in visible
  test cells (``grade: true, solution: false``); every code cell must have run; every cell
  tagged ``observation`` must show output and no error. The Validate button must answer.
* instructor sources (solutions/ch12/01-04, ``LAB_NOTEBOOKS`` of tests/test_course_notebooks.py), in a
  server with COURSE_STATED_FACTS=strict: every code cell runs, none ends in an error, and the run passes
  ``problems_in_course_run`` (tests/test_course_notebooks.py): every visible test says in a short last
  line that it passed (or what waits for the instructor), and no prediction is kept in the folder the
  notebook ran in. This is these notebooks' only such run: papermill runs only the others (their second
  parts, 05-07).
  02's Validate button reports success; in 01-05 every figure fits its output area (drawn for the
  notebook's width: shown at its natural size, not shrunk, and not past the area's edge; 05 in the
  capstone test).
* the learner's working copy (what `make lab` opens): every notebook opens without being marked
  changed; the capstone, 05_checkpoint then 05b_crashes, run with the worker pass still a stub (and again
  with a change the kernel ran but nobody saved), says what to do first once, with no table and no figure,
  and its checks point to that message; with a wrong worker saved, a check names the step to revisit and
  the failing case is in the table and the timeline; with the right one it prints each prediction beside
  what happened, then the table, the timeline and the crash matrix.

JupyterLab's Run All sends every cell with ``stop_on_error``: after the first error the kernel
aborts the rest, unless the erroring cell is tagged ``raises-exception``. So in the release the
solution and visible-test cells must carry that tag, or the observation cells after them never
run (the checks report such cells as "did not run").

Screenshots go to pytest-playwright's output folder (``--output``, default ``test-results/``
relative to the working directory, one sub-folder per test) and are also copied to
``<repo>/test-results/<same sub-folder>/`` when pytest runs from elsewhere.

``run_notebook_in_lab`` is the reusable machinery; ``test_machinery_on_generated_notebooks``
checks it on a small generated notebook pair, apart from the course's own notebooks.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from conftest import nbgrader_metadata
from test_course_notebooks import LAB_NOTEBOOKS, problems_in_course_run

from .conftest import REPO_ROOT, LabServer

pytestmark = pytest.mark.browser

# Environment overrides, e.g. to try a freshly generated release before it is committed.
LEARNER_NOTEBOOK = Path(
    os.environ.get(
        "LAB_TEST_LEARNER_NOTEBOOK", REPO_ROOT / "notebooks" / "ch12" / "01_claims.ipynb"
    )
).resolve()
SOLUTION_NOTEBOOK = Path(
    os.environ.get(
        "LAB_TEST_SOLUTION_NOTEBOOK", REPO_ROOT / "solutions" / "ch12" / "01_claims.ipynb"
    )
).resolve()

KERNEL_READY_TIMEOUT = 60.0
RUN_ALL_TIMEOUT = 300.0
SAVE_TIMEOUT = 30.0
VALIDATE_TIMEOUT = 180.0  # nbgrader executes the whole notebook again on the server

# Selectors (JupyterLab 4.6, nbgrader 0.9.6 lab extension).
MENU_BAR_ITEM = "#jp-MainMenu .lm-MenuBar-item"
RUN_ALL_ITEM = '.lm-Menu-content > li.lm-Menu-item[data-command="runmenu:run-all"]'
SAVE_ITEM = '.lm-Menu-content > li.lm-Menu-item[data-command="docmanager:save"]'
NOTEBOOK_PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
VALIDATE_BUTTON = f"{NOTEBOOK_PANEL} .jp-Toolbar jp-button.validate-button"
DIALOG = ".jp-Dialog"


# --------------------------------------------------------------------------------------------
# Machinery
# --------------------------------------------------------------------------------------------


@dataclass
class LabRun:
    notebook: nbformat.NotebookNode  # the executed notebook, as saved by JupyterLab
    rel_path: str  # path of the temporary copy, relative to the server root
    seconds: float  # from page load to saved notebook


def stage_copy(lab: LabServer, source: Path) -> str:
    """Copy the notebook's folder into the server root; clear outputs of the notebook copy.

    The whole folder is copied so that files next to the notebook resolve as they would for a
    learner. Outputs and execution counts are cleared so that every output read back comes from
    this run.
    """
    dest_dir = lab.root_dir / source.parent.name
    shutil.copytree(
        source.parent,
        dest_dir,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc"),
        dirs_exist_ok=True,
    )
    dest = dest_dir / source.name
    nb = nbformat.read(dest, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nbformat.write(nb, dest)
    return dest.relative_to(lab.root_dir).as_posix()


def wait_for_kernel(lab: LabServer, rel_path: str, timeout: float = KERNEL_READY_TIMEOUT) -> str:
    """Wait until the notebook's kernel is idle AND its websocket is connected.

    The UI shows "Idle" before the websocket is up; Run All clicked then runs the first cell
    only (TOOLCHAIN.md).
    """
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for session in lab.api("GET", "api/sessions") or []:
            if session.get("path") == rel_path and session.get("kernel"):
                kernel = lab.api("GET", f"api/kernels/{session['kernel']['id']}")
                last = kernel
                if kernel["execution_state"] == "idle" and kernel["connections"] >= 1:
                    return kernel["id"]
        time.sleep(0.25)
    raise AssertionError(
        f"kernel for {rel_path} not idle+connected within {timeout:.0f} s (last: {last})\n"
        + lab.log_tail()
    )


def click_menu(page, menu: str, item_selector: str) -> None:
    page.locator(MENU_BAR_ITEM, has_text=re.compile(rf"^\s*{re.escape(menu)}\s*$")).click()
    page.locator(item_selector).click()


def code_prompts(page) -> list[str]:
    return page.eval_on_selector_all(
        f"{NOTEBOOK_PANEL} .jp-CodeCell .jp-InputPrompt",
        "els => els.map(e => e.textContent.trim())",
    )


def wait_until_executed(
    lab: LabServer, page, kernel_id: str, timeout: float = RUN_ALL_TIMEOUT
) -> None:
    """Done when the first code cell has a number, no prompt shows [*] and the kernel is idle,
    twice in a row half a second apart. (The outputs were cleared before the run, so a number
    can only come from this run; Run All marks every queued cell [*] at once.)"""
    deadline = time.monotonic() + timeout
    stable = 0
    prompts: list[str] = []
    while time.monotonic() < deadline:
        prompts = code_prompts(page)
        kernel = lab.api("GET", f"api/kernels/{kernel_id}")
        done = (
            bool(prompts)
            and re.search(r"\d", prompts[0]) is not None
            and not any("*" in p for p in prompts)
            and kernel["execution_state"] == "idle"
        )
        stable = stable + 1 if done else 0
        if stable >= 2:
            return
        time.sleep(0.5)
    raise AssertionError(f"Run All did not finish within {timeout:.0f} s; prompts: {prompts}")


def save_notebook(lab: LabServer, page, rel_path: str, timeout: float = SAVE_TIMEOUT) -> None:
    path = lab.root_dir / rel_path
    before = path.stat().st_mtime_ns
    click_menu(page, "File", SAVE_ITEM)
    dirty_tab = page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.stat().st_mtime_ns != before and dirty_tab.count() == 0:
            return
        time.sleep(0.25)
    raise AssertionError(f"{rel_path} was not saved within {timeout:.0f} s")


def open_in_lab(lab: LabServer, page, rel_path: str) -> str:
    """Open the notebook at ``rel_path`` (relative to the server root) as a learner does, wait
    until Lab shows all its cells and its kernel is idle and connected; return the kernel id."""
    n_cells = len(nbformat.read(lab.root_dir / rel_path, as_version=4).cells)
    page.goto(lab.lab_url(rel_path), timeout=90_000)  # a loaded 2-core machine: 10-25 s
    cells = page.locator(f"{NOTEBOOK_PANEL} .jp-Notebook .jp-Cell")
    cells.first.wait_for(state="attached", timeout=60_000)
    deadline = time.monotonic() + 30
    while cells.count() != n_cells and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cells.count() == n_cells, f"Lab shows {cells.count()} cells, file has {n_cells}"
    return wait_for_kernel(lab, rel_path)


def run_all_and_save(lab: LabServer, page, rel_path: str, kernel_id: str) -> nbformat.NotebookNode:
    """Run > Run All Cells on the open notebook, wait for the end, save; the notebook as saved."""
    click_menu(page, "Run", RUN_ALL_ITEM)
    wait_until_executed(lab, page, kernel_id)
    save_notebook(lab, page, rel_path)
    return nbformat.read(lab.root_dir / rel_path, as_version=4)


def run_notebook_in_lab(lab: LabServer, page, source: Path) -> LabRun:
    """Open a temporary copy of ``source`` in Lab, Run All Cells through the menu, save it and
    return the executed notebook read back from disk. The page stays open on the notebook."""
    rel_path = stage_copy(lab, source)
    start = time.monotonic()
    kernel_id = open_in_lab(lab, page, rel_path)
    nb = run_all_and_save(lab, page, rel_path, kernel_id)
    return LabRun(notebook=nb, rel_path=rel_path, seconds=time.monotonic() - start)


def validate_in_lab(page, timeout: float = VALIDATE_TIMEOUT) -> tuple[str, str]:
    """Click nbgrader's Validate toolbar button; return (result kind, dialog text), then close
    the dialog. The kind is the class nbgrader puts on the dialog body: validation-success,
    validation-failed, validation-changed, validation-passed, or "error" when the validate
    command itself failed."""
    button = page.locator(VALIDATE_BUTTON)
    button.wait_for(state="visible", timeout=30_000)
    button.click()
    dialog = page.locator(DIALOG)
    dialog.wait_for(state="visible", timeout=timeout * 1000)
    title = dialog.locator(".jp-Dialog-header").inner_text().strip()
    body = dialog.locator(".jp-Dialog-body")
    text = body.inner_text().strip()
    kind = page.evaluate(
        """() => {
            const n = document.querySelector(
                '.jp-Dialog-body[class*="validation-"], .jp-Dialog-body [class*="validation-"]');
            if (!n) return 'error';
            return [...n.classList].find(c => c.startsWith('validation-'));
        }"""
    )
    return kind, f"{title}\n{text}"


def close_dialog(page) -> None:
    page.locator(f"{DIALOG} .jp-Dialog-footer button").last.click()
    page.locator(DIALOG).wait_for(state="detached", timeout=10_000)


def scroll_notebook_to_top(page) -> None:
    """Run All leaves the notebook scrolled to its last cell; show the first outputs instead."""
    page.evaluate(
        """sel => { for (const el of document.querySelectorAll(sel + ' *'))
                        if (el.scrollTop > 0) el.scrollTop = 0; }""",
        NOTEBOOK_PANEL,
    )
    page.wait_for_timeout(300)  # let the notebook repaint before the screenshot


def screenshot(page, output_path: str, name: str) -> Path:
    """Save to pytest-playwright's per-test output folder; mirror under <repo>/test-results/."""
    return _shoot(page, output_path, name)


def _shoot(target, output_path: str, name: str) -> Path:
    """Screenshot a page or an element into the output folder and its mirror."""
    out = Path(output_path)
    out.mkdir(parents=True, exist_ok=True)
    shot = out / name
    target.screenshot(path=str(shot))
    mirror = REPO_ROOT / "test-results" / out.name
    if mirror.resolve() != out.resolve():
        mirror.mkdir(parents=True, exist_ok=True)
        shutil.copy2(shot, mirror / name)
    return shot


# --------------------------------------------------------------------------------------------
# Checks on the executed notebook
# --------------------------------------------------------------------------------------------


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def may_error_in_release(cell) -> bool:
    """Solution cells (stubs raise NotImplementedError) and visible test cells (they call the
    stubs) are the only cells allowed to error in the learner release."""
    meta = _nbgrader(cell)
    return bool(meta.get("solution")) or (bool(meta.get("grade")) and not meta.get("solution"))


def _errors(cell) -> list[str]:
    return [
        f"{o.get('ename')}: {o.get('evalue')}" for o in cell.outputs if o.output_type == "error"
    ]


def _label(i: int, cell) -> str:
    meta = _nbgrader(cell)
    first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")[:60]
    gid = f" {meta['grade_id']}" if meta.get("grade_id") else ""
    return f"cell {i}{gid} ({first!r})"


def _not_run(nb) -> list[str]:
    """One line naming the code cells that never ran, and the first error before them."""
    missing = [
        i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count is None
    ]
    if not missing:
        return []
    first_error = next(
        (f"{_label(i, c)}: {_errors(c)}" for i, c in enumerate(nb.cells[: missing[0]])
         if c.cell_type == "code" and _errors(c)),
        None,
    )  # fmt: skip
    why = (
        f" Run All stopped after the error in {first_error}; JupyterLab aborts the remaining "
        "cells unless the erroring cell is tagged 'raises-exception'."
        if first_error
        else ""
    )
    return [f"{len(missing)} code cell(s) did not run: {missing}.{why}"]


def problems_in_release_run(nb) -> list[str]:
    problems = _not_run(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = _errors(cell)
        if errors and not may_error_in_release(cell):
            problems.append(
                f"{_label(i, cell)} errored but is neither solution nor grade: {errors}"
            )
        if "observation" in cell.get("metadata", {}).get("tags", []):
            if errors:
                problems.append(f"observation {_label(i, cell)} errored: {errors}")
            if not cell.outputs:
                problems.append(f"observation {_label(i, cell)} has no output")
    return problems


def problems_in_solution_run(nb) -> list[str]:
    problems = _not_run(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if errors := _errors(cell):
            problems.append(f"{_label(i, cell)} errored: {errors}")
        if "observation" in cell.get("metadata", {}).get("tags", []) and not cell.outputs:
            problems.append(f"observation {_label(i, cell)} has no output")
    return problems


def _require(path: Path) -> Path:
    if not path.exists():
        msg = f"{path} does not exist yet"
        if os.environ.get("CI"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return path


# Requested before ``lab`` and ``page`` so that a missing notebook skips before a server starts.
@pytest.fixture
def learner_notebook() -> Path:
    return _require(LEARNER_NOTEBOOK)


@pytest.fixture
def solution_notebook() -> Path:
    return _require(SOLUTION_NOTEBOOK)


# --------------------------------------------------------------------------------------------
# The real notebooks
# --------------------------------------------------------------------------------------------


def test_learner_release_runs_in_lab(learner_notebook, learner_lab, page, output_path):
    lab = learner_lab  # what `make lab` starts: the working copy, no instructor tools
    run = run_notebook_in_lab(lab, page, learner_notebook)
    scroll_notebook_to_top(page)
    screenshot(page, output_path, "learner-run-all.png")
    menus = page.eval_on_selector_all(MENU_BAR_ITEM, "els => els.map(e => e.textContent.trim())")
    assert "Run" in menus and "Nbgrader" in menus, menus
    page.locator(MENU_BAR_ITEM, has_text="Nbgrader").click()  # with the instructor's plugins off: one item
    shown = page.eval_on_selector_all(".lm-Menu .lm-Menu-item:not(.lm-mod-hidden) .lm-Menu-itemLabel",
                                      "els => els.map(e => e.textContent.trim())")
    page.keyboard.press("Escape")
    assert shown == ["Assignment List"], shown
    assert page.get_by_text("Create Assignment").count() == 0
    # Validate before asserting, so that one run reports both.
    kind, text = validate_in_lab(page)
    overflowing = dialog_lines_cut_off(page)
    screenshot(page, output_path, "learner-validate.png")
    close_dialog(page)

    assert not (problems := problems_in_release_run(run.notebook)), "\n".join(problems)
    # The blank release fails every visible test, and each failure says why in the same words.
    assert kind == "validation-failed", f"expected validation-failed on the blank release, got {kind}:\n{text}"
    failed_tests = [
        _nbgrader(cell)["grade_id"] for cell in run.notebook.cells
        if _nbgrader(cell).get("grade") and not _nbgrader(cell).get("solution") and cell.cell_type == "code"
    ]
    assert text.count("not implemented yet: write `") >= len(failed_tests), text
    assert overflowing == [], f"explanations run off the dialog's right edge: {overflowing}"
    # jupyter/learner's nbgrader_config.py: each failure's explanation comes before its traceback,
    # and the test's source is cut to its first lines (the whole cell is in the notebook)
    first = text.split("The following cell failed:")[1]
    assert first.index("not implemented yet: write `") < first.index("Traceback"), first[:600]
    assert "more lines of this test" in first.split("CheckFailed")[0], first[:600]


def dialog_lines_cut_off(page) -> list[str]:
    """Text blocks in the open dialog whose lines are wider than the dialog shows (a line that runs
    off the right edge), ignoring code: the explanation must be readable without scrolling."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.jp-Dialog-body pre, .jp-Dialog-body div')]
            .filter(e => e.children.length === 0 && /not implemented yet|expected/.test(e.textContent))
            .filter(e => e.scrollWidth > e.clientWidth + 2)
            .map(e => e.textContent.slice(0, 120))"""
    )


# The instructor sources run in Lab (Run All, then Validate), and those that draw figures: the
# screenshots are how a person judges whether the pictures read at notebook width. LAB_NOTEBOOKS
# (01-04, from tests/test_course_notebooks.py) run here only: papermill runs the others (01b-04b, 05-07), so this
# run checks what papermill's would (problems_in_course_run), in a server with COURSE_STATED_FACTS=strict.
# 05 and 05b run in full, solution included, in the capstone test below (a stub, an unsaved change, a wrong worker,
# the right one), and with papermill.
DRAWING = {"01_claims.ipynb", "03_leases.ipynb", "04_recovery.ipynb"}
# Validate in Lab on one solved notebook: the button's path. That every visible test passes with the
# solutions is the runs' to show: this one for LAB_NOTEBOOKS, papermill's for the others.
VALIDATED = "02_fencing.ipynb"


@pytest.mark.parametrize("name", LAB_NOTEBOOKS)
def test_solutions_run_in_lab(name, lab, page, output_path):
    notebook = _require(SOLUTION_NOTEBOOK.parent / name)
    run = run_notebook_in_lab(lab, page, notebook)
    scroll_notebook_to_top(page)
    screenshot(page, output_path, "solutions-run-all.png")
    figures = screenshot_figures(page, output_path)
    if name == VALIDATED:
        kind, text = validate_in_lab(page)
        screenshot(page, output_path, "solutions-validate.png")
        close_dialog(page)
        assert kind == "validation-success", f"the instructor source does not validate:\n{text}"

    ran_in = lab.root_dir / Path(run.rel_path).parent  # the kernel's working folder: the notebook's (jupyter_server)
    problems = problems_in_solution_run(run.notebook) + problems_in_course_run(name, run.notebook, ran_in)
    assert not problems, "\n".join(problems)
    assert bool(figures) == (name in DRAWING), f"figures drawn: {len(figures)}"
    assert not (wide := figures_not_fitting(page)), f"figures wider than their output area: {wide}"
    if name == "03_leases.ipynb":  # the lost lease: "follow generation 1 along the timeline" must be possible
        (shot, _), = figures
        share = lease_share(shot, GENERATION_1)
        assert share >= 0.15, f"generation 1's lease spans {share:.0%} of the main axis in {shot}; expected >= 15%"


GENERATION_1 = (0x1F, 0x77, 0xB4, 0.35)  # 03's draw_holders: generation 1's lease colour and its alpha, on white


def lease_share(shot: Path, colour: tuple[int, int, int, float]) -> float:
    """In a screenshot of 03's lost-lease figure: the share of its first (main) axis that the lease
    bar of `colour` (r, g, b, alpha over white) spans. The axes are found by their frames (columns
    with a long vertical run of dark pixels), the bar by its colour inside the first frame."""
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    width, height = image.size
    pixels = image.load()
    frame_columns = []
    for x in range(width):
        run = longest = 0
        for y in range(height):
            run = run + 1 if max(pixels[x, y]) < 140 else 0
            longest = max(longest, run)
        if longest > 0.4 * height:
            frame_columns.append(x)
    edges = [x for i, x in enumerate(frame_columns) if i == 0 or x - frame_columns[i - 1] > 2]
    assert len(edges) >= 2, f"no axis frame found in {shot} (dark columns: {frame_columns})"
    left, right = edges[0], edges[1]
    *rgb, alpha = colour
    wanted = [255 - alpha * (255 - value) for value in rgb]
    bar = [x for x in range(left, right + 1) for y in range(height)
           if all(abs(have - want) <= 8 for have, want in zip(pixels[x, y], wanted))]
    assert bar, f"no bar of colour {colour} inside the first axis of {shot}"
    return (max(bar) - min(bar)) / (right - left)


def figures_not_fitting(page) -> list[dict]:
    """Every image in the open notebook's outputs that does not fit its output area: it runs past
    the area's right edge, or (a figure a cell displayed) it is drawn wider than the area, so Lab
    shrinks it and its text with it. One dict per image, with the sizes, for the message."""
    return page.evaluate(
        """sel => [...document.querySelectorAll(sel + ' .jp-OutputArea-output img')].map((img, index) => {
                const area = img.closest('.jp-OutputArea-output');
                const box = img.getBoundingClientRect(), room = area.getBoundingClientRect();
                return {index, natural: img.naturalWidth, shown: Math.round(box.width),
                        area: area.clientWidth, past_edge: Math.round(box.right - room.right),
                        figure: !!img.closest('.jp-RenderedImage')};
            }).filter(f => f.natural > 0 && (f.past_edge > 1 || (f.figure && f.natural > f.area)))""",
        NOTEBOOK_PANEL,
    )


def broken_images(page) -> list[str]:
    """Images the open notebook shows broken: loaded with no picture, or given no source at all
    (the browser draws its broken-image icon), among those that take up room on the page."""
    return page.evaluate(
        """sel => [...document.querySelectorAll(sel + ' img')]
            .filter(img => img.getBoundingClientRect().width > 0 && img.getBoundingClientRect().height > 0)
            .filter(img => !img.getAttribute('src') || (img.complete && img.naturalWidth === 0))
            .map(img => (img.closest('.jp-Cell')?.querySelector('.jp-InputArea-editor')?.textContent || '')
                        .trim().slice(0, 60) + ' -> <img src=' + (img.getAttribute('src') || '').slice(0, 40) + '>')""",
        NOTEBOOK_PANEL,
    )


def screenshot_figures(page, output_path: str) -> list[tuple[Path, float]]:
    """One screenshot per image output, as the notebook shows it; returns (file, drawn width in px)."""
    shots = []
    images = page.locator(f"{NOTEBOOK_PANEL} .jp-RenderedImage img")
    for index in range(images.count()):
        image = images.nth(index)
        image.scroll_into_view_if_needed()
        page.wait_for_timeout(200)
        shot = _shoot(image, output_path, f"figure-{index + 1}.png")
        shots.append((shot, page.evaluate("img => img.naturalWidth", image.element_handle())))
    return shots


# --------------------------------------------------------------------------------------------
# The machinery, on a generated notebook pair
# --------------------------------------------------------------------------------------------


def make_sample_notebook(path: Path, *, release: bool, tag_raises: bool = True) -> Path:
    """A tiny nbgrader-style notebook shaped like the real one (release or source).

    ``tag_raises``: tag the solution and visible-test cells ``raises-exception`` (without the
    tag, Lab's Run All stops at the first error and the observation cell never runs)."""
    raises = {"tags": ["raises-exception"]} if tag_raises else {}
    body = (
        "    # YOUR CODE HERE\n    raise NotImplementedError()"
        if release
        else "    ### BEGIN SOLUTION\n    return sorted(set(workers))\n    ### END SOLUTION"
    )
    cells = [
        new_markdown_cell("# Claims\nEach job is claimed by exactly one worker."),
        new_code_cell(
            'assignments = {"job-1": "w1", "job-2": "w2"}\n'
            'print("Distinct assignments:", len(set(assignments)) == len(assignments))',
            metadata=nbgrader_metadata("setup", locked=True),
        ),
        new_code_cell(
            f"def distinct_workers(workers):\n{body}",
            metadata={**nbgrader_metadata("distinct_workers", solution=True), **raises},
        ),
        new_code_cell(
            'assert distinct_workers(["w2", "w1", "w2"]) == ["w1", "w2"]',
            metadata={**nbgrader_metadata("test_distinct_workers", grade=True, locked=True), **raises},
        ),
        new_code_cell(
            "try:\n"
            '    print("Workers:", distinct_workers(list(assignments.values())))\n'
            "except NotImplementedError:\n"
            '    print("distinct_workers is not implemented yet")',
            metadata={**nbgrader_metadata("observe_workers", locked=True), "tags": ["observation"]},
        ),
        new_markdown_cell("That's all."),
    ]
    nb = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_machinery_on_generated_notebooks(lab, page, output_path, tmp_path):
    """Smoke test of the machinery (server, kernel wait, Run All, save, checks, Validate)."""
    release = make_sample_notebook(tmp_path / "release" / "sample.ipynb", release=True)
    run = run_notebook_in_lab(lab, page, release)
    scroll_notebook_to_top(page)
    screenshot(page, output_path, "sample-release-run-all.png")
    assert not (problems := problems_in_release_run(run.notebook)), "\n".join(problems)
    assert "Distinct assignments: True" in run.notebook.cells[1].outputs[0]["text"]
    assert [o.ename for o in run.notebook.cells[3].outputs] == ["NotImplementedError"]
    assert "not implemented yet" in run.notebook.cells[4].outputs[0]["text"]
    kind, text = validate_in_lab(page)
    screenshot(page, output_path, "sample-release-validate.png")
    close_dialog(page)
    assert kind == "validation-failed", text
    # The checker rejects an erroring observation cell and a cell that did not run.
    broken = nbformat.from_dict(run.notebook)
    broken.cells[4].outputs = [
        nbformat.v4.new_output("error", ename="NameError", evalue="x", traceback=[])
    ]
    broken.cells[1].execution_count = None
    assert len(problems_in_release_run(broken)) == 3

    source = make_sample_notebook(tmp_path / "source" / "sample_solution.ipynb", release=False)
    run = run_notebook_in_lab(lab, page, source)
    scroll_notebook_to_top(page)
    screenshot(page, output_path, "sample-source-run-all.png")
    assert not (problems := problems_in_solution_run(run.notebook)), "\n".join(problems)
    assert "Workers: ['w1', 'w2']" in run.notebook.cells[4].outputs[0]["text"]
    kind, text = validate_in_lab(page)
    close_dialog(page)
    assert kind == "validation-success", text


# --------------------------------------------------------------------------------------------
# The learner's working copy (what `make lab` opens)
# --------------------------------------------------------------------------------------------

RELEASE = REPO_ROOT / "notebooks" / "ch12"
SOLUTIONS = REPO_ROOT / "solutions" / "ch12"
DIRTY_TAB = ".lm-TabBar-tab.jp-mod-dirty"


def test_every_notebook_opens_unchanged_in_the_learners_lab(learner_lab, page, output_path):
    """Each notebook of the working copy, opened as a learner opens it, starts its kernel with no
    dialog and is not marked as changed before anyone touched it (a notebook Lab rewrites on open
    would ask to be saved, and 05 would then judge a notebook the learner never edited), and no
    pop-up asks about Jupyter's news."""
    names = sorted(path.name for path in learner_lab.root_dir.glob("*.ipynb"))
    assert names == sorted(path.name for path in RELEASE.glob("*.ipynb")) and len(names) == 12, names
    changed = {}
    for name in names:
        learner_lab_url = learner_lab.lab_url(name) + "&reset"  # one notebook open at a time
        page.goto(learner_lab_url, timeout=90_000)
        page.locator(f"{NOTEBOOK_PANEL} .jp-Notebook .jp-Cell").first.wait_for(state="attached", timeout=60_000)
        wait_for_kernel(learner_lab, name)
        page.wait_for_timeout(1500)  # Lab writes what the kernel reports into the notebook's model
        if page.locator(DIRTY_TAB).count() or page.locator(DIALOG).count():
            changed[name] = page.locator(DIALOG).inner_text() if page.locator(DIALOG).count() else "marked unsaved"
            screenshot(page, output_path, f"changed-on-open-{name}.png")
    assert not changed, f"notebooks changed by merely opening them: {changed}"
    assert page.get_by_text("official Jupyter news").count() == 0, "Lab's news pop-up greets the learner"


def _outputs_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
        else:
            parts.extend(str(value) for kind, value in output.get("data", {}).items() if kind.startswith("text/"))
    return "\n".join(parts)


def _by_grade_id(nb, grade_id: str):
    return next(cell for cell in nb.cells if _nbgrader(cell).get("grade_id") == grade_id)


CHECKPOINT_TESTS = ["test_continue_order", "test_run_once", "test_crash_matrix"]  # 05's checks of the pass


def _said_once(nb, phrase: str) -> str:
    """The run cell's only output (a message, no table, no figure), said once in the notebook."""
    run = _by_grade_id(nb, "run_checkpoint")
    kinds = [output.output_type for output in run.outputs]
    assert kinds == ["stream"], f"the run cell should show one message and nothing else, not {kinds}"
    everything = "\n".join(_outputs_text(cell) for cell in nb.cells if cell.cell_type == "code")
    assert " ".join(everything.split()).count(phrase) == 1, f"{phrase!r} should be said once:\n{everything}"
    return " ".join(run.outputs[0].text.split())


def _write_answers(path: Path, answers: dict[str, str], predictions: dict[str, str] = ()) -> None:
    """What a learner types into answer (and prediction) cells of 05 or 05b, written to the saved notebook."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        grade_id = _nbgrader(cell).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
        for name, value in dict(predictions).items():
            if cell.source.startswith(f"{name} = None"):
                cell.source = f"{name} = {value}" + cell.source[len(f"{name} = None"):]
    nbformat.write(nb, path)


def test_the_capstone_in_lab_a_stub_an_unsaved_change_a_wrong_worker_then_the_right_one(learner_lab, page, output_path):
    """05_checkpoint (the worker pass and its checks) and 05b_crashes (the checkpoint and the crash matrix
    on the saved pass) in the learner's Lab, as a learner works through the capstone: first as released
    (the pass still a stub: its tests say so, and 05b's run cell one message, said once, no table, no
    figure), then with a change 05's kernel ran and the file does not hold ("save 05_checkpoint first"),
    then with a plausible wrong worker (it asks the model again after a kill: the check names the step
    to revisit, and 05b shows the failing case in the table and the timeline), then the right one with
    a prediction typed in: each prediction beside what happened, the table, the timeline, the crash
    matrix's 24 trials, and every check of 05 passes."""
    import sys

    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from course.lab import kernel_runs
    from test_capstone_workers import answers, mutated

    lab, worker, crashes = learner_lab, "05_checkpoint.ipynb", "05b_crashes.ipynb"

    def run(name: str) -> nbformat.NotebookNode:
        return run_all_and_save(lab, page, name, open_in_lab(lab, page, name))

    # 1. As released: `continue_order` and `run_once` still hold nbgrader's stubs.
    nb = run(worker)
    assert all("not implemented yet" in " ".join(_errors(_by_grade_id(nb, test))) for test in CHECKPOINT_TESTS)
    nb = run(crashes)
    screenshot(page, output_path, "checkpoint-fresh.png")
    message = _said_once(nb, "The checkpoint has not run your code yet")
    assert "`continue_order` and `run_once` in 05_checkpoint" in message and "(File > Save)" in message, message
    assert page.locator(f"{NOTEBOOK_PANEL} .jp-OutputArea-output img, {NOTEBOOK_PANEL} .jp-OutputArea-output table"
                        ).count() == 0, "a table or a figure is shown although nothing ran"

    # 2. The worker written and saved, but the kernel then ran a change to `run_once` that was not saved.
    _write_answers(lab.root_dir / worker, answers())
    kernel_runs.record(lab.root_dir / worker, "def run_once(db, model, **options):\n    pass", {"run_once"},
                       at=time.time() + 60)
    nb = run(worker)
    said = " ".join(" ".join(_outputs_text(cell) for cell in nb.cells if cell.cell_type == "code").split())
    assert said.count("save 05_checkpoint first") == 1, said  # by the first check that needed the run, in full
    first = " ".join(_errors(_by_grade_id(nb, "test_continue_order")))
    assert "could not run: save 05_checkpoint first" in first, first
    assert "for the reason given above" in " ".join(_errors(_by_grade_id(nb, "test_run_once")))
    shutil.rmtree(lab.root_dir / kernel_runs.FOLDER)

    # 3. A plausible wrong worker: after a kill it asks the model instead of continuing the approved order.
    _write_answers(lab.root_dir / worker, mutated("asks_the_model"))
    told = " ".join(_errors(_by_grade_id(run(worker), "test_run_once")))
    assert "asked the model" in told and "`run_once`" in told, told
    nb = run(crashes)
    scroll_to_cell_of(page, "run_checkpoint(worker=HERE)")
    screenshot(page, output_path, "checkpoint-wrong-worker.png")
    printed = " ".join(_by_grade_id(nb, "run_checkpoint").outputs[0].text.split())
    assert "killed" in printed and "cases passed" in printed and "4/4 cases passed" not in printed, printed
    assert page.locator(f"{NOTEBOOK_PANEL} .jp-RenderedImage img").count() == 1, "the failing run has its timeline"

    # 4. The right worker, and one prediction typed in.
    _write_answers(lab.root_dir / worker, answers())
    _write_answers(lab.root_dir / crashes, {}, {"predicted_killed": "1"})
    checked = run(worker)
    nb = run(crashes)
    scroll_to_cell_of(page, "run_checkpoint(worker=HERE)")
    screenshot(page, output_path, "checkpoint-saved.png")
    ran = _by_grade_id(nb, "run_checkpoint")
    shown = _outputs_text(ran)
    assert [o.output_type for o in ran.outputs] == ["stream", "display_data", "display_data"], shown[:2000]
    printed = " ".join(ran.outputs[0].text.split())
    assert printed.startswith("Your predictions beside what happened:"), printed
    assert "killed supplier orders at the end: you predicted 1; its ledger holds 1 (as predicted)" in printed, printed
    assert "accepted_then_crash the replacement's first request: you predicted nothing yet; GET, a lookup" in printed
    assert "4/4 cases passed" in printed, printed
    assert "24/24 trials passed" in _outputs_text(_by_grade_id(nb, "crash_matrix"))
    cells = page.eval_on_selector_all(f"{NOTEBOOK_PANEL} .jp-OutputArea-output td",
                                      "tds => tds.map(td => td.textContent.trim())")
    assert cells and not [c for c in cells if re.fullmatch(r"None|None -> None|None, None|None / None", c)], cells
    assert page.locator(f"{NOTEBOOK_PANEL} .jp-RenderedImage img").count() == 1
    assert not (wide := figures_not_fitting(page)), f"figures wider than their output area: {wide}"
    failed = {name: _errors(_by_grade_id(checked, name)) for name in CHECKPOINT_TESTS if _errors(_by_grade_id(checked, name))}
    assert not failed, failed


def scroll_to_cell_of(page, text: str) -> None:
    """Scroll the open notebook so that the cell whose source holds `text` is at the top."""
    page.evaluate(
        """([sel, text]) => {
            const source = c => c.querySelector('.jp-InputArea-editor')?.textContent || '';
            const cell = [...document.querySelectorAll(sel + ' .jp-Cell')].find(c => source(c).includes(text));
            if (cell) cell.scrollIntoView({block: 'start'});
        }""",
        [NOTEBOOK_PANEL, text],
    )
    page.wait_for_timeout(300)


def test_a_prediction_set_in_the_learners_lab_is_printed_beside_what_happened(learner_lab, page, output_path):
    """01_claims in the learner's Lab: Run All with the prediction as released, and the naive race
    says in one line to predict first, and races nobody; then the learner types a prediction into
    its cell and runs it and the race (Shift+Enter twice): the race runs and prints the prediction
    beside what happened, and the prediction is kept in the working copy for 07's calibration."""
    import json

    lab, name = learner_lab, "01_claims.ipynb"
    kernel = open_in_lab(lab, page, name)
    nb = run_all_and_save(lab, page, name, kernel)
    waiting = " ".join(_outputs_text(_by_grade_id(nb, "naive_race")).split())
    told = "Predict first: set `predicted_winners` in the cell above, run it, then run this cell again."
    assert waiting == told, waiting  # one line, and no race
    assert not (lab.root_dir / ".predictions.jsonl").exists()

    cell = page.locator(f"{NOTEBOOK_PANEL} .jp-CodeCell", has_text="predicted_winners = None")
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.type("predicted_winners = 2")
    page.keyboard.press("Shift+Enter")  # the prediction, then the race below it
    page.keyboard.press("Shift+Enter")
    race = page.locator(f"{NOTEBOOK_PANEL} .jp-CodeCell", has_text='bound("predicted_winners", globals())')
    race.locator(".jp-OutputArea-output", has_text="You predicted").wait_for(timeout=60_000)
    wait_until_executed(lab, page, kernel)
    save_notebook(lab, page, name)
    scroll_to_cell_of(page, 'bound("predicted_winners", globals())')
    screenshot(page, output_path, "prediction-beside-the-race.png")

    nb = nbformat.read(lab.root_dir / name, as_version=4)
    said = " ".join(_outputs_text(_by_grade_id(nb, "naive_race")).split())
    assert "Worker A believes it holds generation 1" in said and "Worker B believes it holds generation 1" in said, said
    assert "You predicted 2; the run showed 2: as you predicted." in said, said
    assert "Predict first" not in said, said
    kept = [json.loads(line) for line in (lab.root_dir / ".predictions.jsonl").read_text().splitlines()]
    assert [(k["notebook"], k["name"], k["predicted"], k["happened"], k["held"]) for k in kept] == [
        ("01_claims", "predicted_winners", 2, 2, True)], kept
