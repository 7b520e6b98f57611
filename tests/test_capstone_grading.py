"""The capstone graded through the real judge, as `course autograde` grades a class.

The class hands in 05_checkpoint only (its pass runs over the runtime's fences, so it needs no
other notebook): the solution, and each plausible wrong worker of test_capstone_workers. Every
worker process runs in a learner sandbox; the judge decides from the shop database and the
supplier's ledger. The solution, and the runtime's own pass pasted in (written differently), earn
every automatic point; each wrong worker loses points, and is told the step of its pass to revisit.
"""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import nbformat
import pytest

from course.grading.classes.autograde import autograde
from course.grading.nbgrader import commands
from course.grading.sandbox.bubblewrap import SandboxUnavailable, ensure_available
from reference_organizations.store import assistant
from test_capstone_workers import SOLUTION, WRONG, mutated, write_worker

pytestmark = pytest.mark.slow
NAME = "05_checkpoint.ipynb"
AUTOMATIC = 10  # test_continue_order 3, test_run_once 3, test_crash_matrix 4 (the written answer is by hand)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    try:
        ensure_available()
    except SandboxUnavailable as error:
        pytest.fail(f"the grading sandbox must work here (CI installs bubblewrap): {error}")
    root = tmp_path_factory.mktemp("capstone")
    (root / "nbgrader_config.py").write_text(
        "from course.grading.nbgrader.config import configure\nfrom pathlib import Path\n"
        "configure(c, Path(__file__).resolve().parent)\n")
    (root / "solutions" / commands.ASSIGNMENT).mkdir(parents=True)
    shutil.copy(SOLUTION, root / "solutions" / commands.ASSIGNMENT / NAME)
    commands.release(root=root)
    # Written differently: the runtime's own pass, its module pasted whole (other helpers, other structure).
    runtime = inspect.getsource(assistant).split('"""', 2)[2].lstrip()
    answers = {"right": None, "written_differently": {"continue_order": runtime, "run_once": "# defined above"},
               **{name: mutated(name) for name in WRONG}}
    for student, graded_cells in answers.items():
        folder = root / "submitted" / student / commands.ASSIGNMENT
        if graded_cells is None:
            folder.mkdir(parents=True)
            shutil.copy(SOLUTION, folder / NAME)
        else:
            write_worker(folder, graded_cells)
    results = {result.student: result for result in autograde(root=root, progress=False,
                                                               report=str(root / "report.csv"))}
    return root, results


def messages(root: Path, student: str) -> dict[str, str]:
    """{grade_id: the error its check showed} in the student's autograded notebook."""
    nb = nbformat.read(root / "autograded" / student / commands.ASSIGNMENT / NAME, as_version=4)
    return {cell.metadata.get("nbgrader", {}).get("grade_id", ""): str(output.get("evalue", ""))
            for cell in nb.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) if output.get("output_type") == "error"}


@pytest.mark.parametrize("student", ["right", "written_differently"])
def test_a_right_worker_earns_every_automatic_point_through_the_judge(graded, student):
    root, results = graded
    right = results[student]
    assert (right.score, right.reasons) == (AUTOMATIC, {}), messages(root, student)


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_worker_loses_points_through_the_judge_and_is_told_what_broke(graded, name):
    root, results = graded
    wrong = results[name]
    assert wrong.score < AUTOMATIC, f"the worker that {WRONG[name][0]} kept every point"
    said = messages(root, name)
    assert said, f"the worker that {WRONG[name][0]} lost points without a message"
    assert any("`continue_order`" in text or "`run_once`" in text for text in said.values()), json.dumps(said, indent=1)
