"""The course as an instructor receives it: solutions run, release matches, grades are trustworthy.

- every solutions notebook runs top to bottom once, with COURSE_STATED_FACTS=strict, and every fact its
  observations state holds (nobody predicts there: every experiment runs, and no prediction is kept):
  01-04 (LAB_NOTEBOOKS) with Run All in JupyterLab in chromium (tests/browser/test_lab.py::test_solutions_run_in_lab),
  the others (the second parts, 05, 06, 07) with papermill, here;
- in either run no cell ends in an error, and every visible test passes and says so in its last line
  (`problems_in_course_run`, which both runs check); `nbgrader validate` (the learner's Validate) passes
  on the capstone;
- the committed learner release is exactly what nbgrader generates from the solutions (no drift),
  with outputs stripped, and carries no solution or hidden-test text;
- autograding gives the untouched release zero on every autograded part, while it still runs to the
  end, and no kernel runs at grading (that the solutions earn full marks, with no error in any cell of
  their feedback, is shown by the hostile class's complete student: tests/test_hostile_submissions.py).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import LocalSocketKernel

from course.lessons.checks import PASSED, STRICT
from course.lessons.predictions import KEPT
from course.grading.classes.autograde import autograde
from course.grading.judge.checks import hide_region
from course.grading.nbgrader import commands
from course.lab.workspace import LEARNER_CONFIG
from course.grading.nbgrader.preprocessors import NOT_RUN, OBSERVATION_NOT_RERUN, decided_outside, learners_code, observation

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "ch12"
RELEASE = ROOT / "notebooks" / "ch12"
NAMES = sorted(path.name for path in SOLUTIONS.glob("*.ipynb"))
REGION = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)
# The solutions tests/browser/test_lab.py::test_solutions_run_in_lab runs in JupyterLab (Run All, in a server with
# COURSE_STATED_FACTS=strict, checked with `problems_in_course_run`); papermill runs the others. Kept here, not
# there, so that this module imports no browser test.
LAB_NOTEBOOKS = ["01_claims.ipynb", "02_fencing.ipynb", "03_leases.ipynb", "04_recovery.ipynb"]
PAPERMILL_NOTEBOOKS = [name for name in NAMES if name not in LAB_NOTEBOOKS]

pytestmark = pytest.mark.slow


def is_test(cell: nbformat.NotebookNode) -> bool:
    """A graded code cell that is not an answer: an autograded test."""
    grading = cell.metadata.get("nbgrader", {})
    return bool(grading.get("grade")) and not grading.get("solution")


def cells_by_id(path: Path) -> dict[str, nbformat.NotebookNode]:
    cells = nbformat.read(path, as_version=4).cells
    return {cell.metadata["nbgrader"]["grade_id"]: cell for cell in cells if "nbgrader" in cell.metadata}


def test_the_course_has_its_twelve_notebooks():
    """Seven topics; five of them in two parts, so that each notebook fits one sitting (tests/test_pacing.py)."""
    assert NAMES == ["01_claims.ipynb", "01b_expiry.ipynb", "02_fencing.ipynb", "03_leases.ipynb", "03b_unfenced.ipynb",
                     "04_recovery.ipynb", "04b_cancel.ipynb", "05_checkpoint.ipynb", "05b_crashes.ipynb",
                     "06_explore.ipynb", "07_review.ipynb", "07b_recall.ipynb"]
    assert sorted(path.name for path in RELEASE.glob("*.ipynb")) == NAMES


def problems_in_course_run(name: str, notebook: nbformat.NotebookNode, folder: Path) -> list[str]:
    """What is wrong with a run of the solutions notebook `name` with COURSE_STATED_FACTS=strict: `notebook` as
    executed, `folder` where its kernel ran. Empty when the run is as it must be. Both runs of the solutions
    check this: papermill's (below) and JupyterLab's (tests/browser/test_lab.py::test_solutions_run_in_lab)."""
    problems = []
    # Nobody predicts in the course's own run: every experiment ran, and no prediction was compared or kept.
    if (folder / KEPT).exists():
        problems.append(f"{name}: a prediction was kept in {folder / KEPT}")
    # No cell ends in an error (a test cell's `raises-exception` tag lets the run go on past a failing test,
    # as Lab's Run All does), and every visible test says in its last line that it passed, or what waits.
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        errors = [f"{o.ename}: {o.evalue}" for o in cell.get("outputs", []) if o.output_type == "error"]
        if errors:
            problems.append(f"{name}/{grade_id or cell.source[:60]}: {errors}")
        if cell.cell_type != "code" or not is_test(cell) or not ast.parse(hide_region(cell.source, None)).body:
            continue  # a test whose code is all hidden (07's key cells) has nothing to say
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        said = text[text.rfind(PASSED):] if PASSED in text else text
        if PASSED not in text and "when your instructor grades" not in text:
            problems.append(f"{name}/{grade_id} passed silently: {text!r}")
        elif not 0 < len(said.strip().splitlines()) <= 2:
            problems.append(f"{name}/{grade_id}: its last line is not short: {said!r}")
    return problems


@pytest.mark.parametrize("name", PAPERMILL_NOTEBOOKS)
def test_solutions_run_top_to_bottom_with_papermill(name, tmp_path, monkeypatch):
    """Every fact an observation states (course.lessons.checks.unexpected) must hold with the solutions.
    The notebooks not run in JupyterLab (LAB_NOTEBOOKS are, by tests/browser/test_lab.py, with the same checks)."""
    import papermill

    monkeypatch.setenv(STRICT, "strict")  # the kernel inherits it

    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)  # 05_checkpoint grades the notebooks beside it
    ran = papermill.execute_notebook(folder / name, tmp_path / f"run-{name}", cwd=folder, kernel_name="python3",
                                     progress_bar=False, kernel_manager_class=LocalSocketKernel)
    assert not (problems := problems_in_course_run(name, ran, folder)), "\n".join(problems)


def test_nbgrader_validate_passes_on_the_capstone(tmp_path):
    """The learner's Validate button, with the learner's nbgrader settings (course.lab.workspace), on the notebook
    whose cells wait longest for output (05's crash trials). That every visible test of every notebook passes
    with the solutions is the runs' to show (papermill's, above, and Lab's for LAB_NOTEBOOKS): Validate runs the
    same cells again."""
    folder = tmp_path / "ch12"
    shutil.copytree(SOLUTIONS, folder)  # 05_checkpoint grades the notebooks beside it
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(ROOT / LEARNER_CONFIG)}
    done = subprocess.run([sys.executable, "-m", "nbgrader", "validate", "05_checkpoint.ipynb"], cwd=folder, text=True,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "Success! Your notebook passes all the tests." in done.stdout, done.stdout[-3000:]


@pytest.mark.parametrize("name", NAMES)
def test_release_is_stripped_and_holds_no_solution_or_hidden_test(name):
    released, source = cells_by_id(RELEASE / name), cells_by_id(SOLUTIONS / name)
    text = (RELEASE / name).read_text()
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    for grade_id, cell in released.items():
        assert cell.cell_type == "markdown" or (cell.outputs == [] and cell.execution_count is None), grade_id
        released_lines = {line.strip() for line in cell.source.splitlines()}
        visible = {line.strip() for line in REGION.sub("", source[grade_id].source).splitlines()}
        for _, hidden in REGION.findall(source[grade_id].source):
            for line in {line.strip() for line in hidden.splitlines()} - visible:
                if len(line) > 12 and not line.startswith("#"):
                    assert line not in released_lines, f"{name}/{grade_id} leaks {line!r}"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A throwaway course root: our nbgrader settings, the solutions, a fresh release."""
    root = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    (root / "nbgrader_config.py").write_text(
        "from course.grading.nbgrader.config import configure\n"
        "from pathlib import Path\n"
        "configure(c, Path(__file__).resolve().parent)\n"
    )
    shutil.copytree(SOLUTIONS, root / "solutions" / "ch12")
    commands.release(root=root)
    return root


@pytest.mark.parametrize("name", NAMES)
def test_committed_release_is_what_nbgrader_generates(course, name):
    generated, committed = course / "notebooks" / "ch12" / name, RELEASE / name
    assert nbformat.read(generated, as_version=4) == nbformat.read(committed, as_version=4), (
        f"notebooks/ch12/{name} has drifted from solutions/ch12/{name}: run `make release` and commit the result"
    )


def test_autograde_gives_the_untouched_release_zero_and_runs_no_kernel(course):
    from nbgrader.api import Gradebook

    shutil.copytree(RELEASE, course / "submitted" / "untouched" / "ch12")
    results = {result.student: result for result in autograde(root=course)}
    assert results["untouched"].reasons == {}, "the untouched release must run to the end (no dead process, no timeout)"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        graded = [(notebook.name, grade.name, grade.auto_score)
                  for notebook in gradebook.find_submission("ch12", "untouched").notebooks
                  for grade in notebook.grades if grade.cell_type == "code"]
    assert graded, "no autograded parts found"
    assert [part for part in graded if part[2] != 0] == [], "the untouched release earned points"
    for name in NAMES:  # no kernel runs at grading: the learner's cells ran in a learner process, as written
        autograded = nbformat.read(course / "autograded" / "untouched" / "ch12" / name, as_version=4)
        code = [cell for cell in autograded.cells if cell.cell_type == "code"]
        assert all(cell.execution_count is None for cell in code), f"{name}: a cell ran in a kernel at grading"
        # A learner process runs a notebook's cells for its checks only when the notebook has both checks
        # and answers (05's checkpoint also runs the saved 01, 02 and 04, in workers of their own).
        checked = any(decided_outside(cell) for cell in code) and any(
            cell.metadata.get("nbgrader", {}).get("solution") for cell in code)
        for cell in code:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if observation(cell):
                assert cell.outputs[0]["text"] == OBSERVATION_NOT_RERUN, grade_id
            elif learners_code(cell) and not checked:
                assert [o.get("text") for o in cell.outputs] == [NOT_RUN], f"{name}/{grade_id}: {cell.outputs}"
            elif learners_code(cell):  # the release's stub: its learner process ran it (a stub class raises there)
                assert all(o.get("text") != NOT_RUN for o in cell.outputs), f"{name}/{grade_id}: not run"
                assert {o.get("ename") for o in cell.outputs if o.output_type == "error"} <= {"NotImplementedError"}, (
                    f"{name}/{grade_id}: {cell.outputs}")
            elif not decided_outside(cell):  # the course's setup cells: nothing of theirs is shown
                assert cell.outputs == [], f"{name}/{grade_id}: {cell.outputs}"
