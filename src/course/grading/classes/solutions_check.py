"""Before a release: the course's own solutions, graded through the judge, must earn every
automatic point. A check that cannot run as written (a name only a non-`setup` cell defines, an
argument that cannot cross to the learner process) passes in the author's kernel and would cost
every learner its points; grading the solutions as one student finds it before anyone submits.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from course.grading.nbgrader import commands
from course.grading.nbgrader.gradebook import DB_URL_VARIABLE, db_url

STUDENT = "course-solutions"
CONFIG = ("from pathlib import Path\nfrom course.grading.nbgrader.config import configure\n"
          "configure(c, Path(__file__).resolve().parent)\n")


class SolutionsFail(RuntimeError):
    """The solutions lose automatic points under the judge: the release would grade learners wrong."""


def shortfalls(root: Path) -> list[str]:
    """Each automatic part the solutions of `root` do not earn in full, with what grading said."""
    from course.grading.classes.autograde import autograde

    class_gradebook = os.environ.pop(DB_URL_VARIABLE, None)  # the check's own gradebook, never the class's
    try:
        with tempfile.TemporaryDirectory(prefix="ch12-solutions-check-") as scratch:
            course = Path(scratch)
            (course / "nbgrader_config.py").write_text(CONFIG)
            shutil.copytree(Path(root) / "solutions" / commands.ASSIGNMENT, course / "solutions" / commands.ASSIGNMENT)
            commands.release(root=course)
            shutil.copytree(course / "solutions" / commands.ASSIGNMENT,
                            course / "submitted" / STUDENT / commands.ASSIGNMENT)
            autograde(root=course, progress=False, report=str(course / "report.csv"))
            return _short(course)
    finally:
        if class_gradebook is not None:
            os.environ[DB_URL_VARIABLE] = class_gradebook


def _short(course: Path) -> list[str]:
    found = []
    with Gradebook(db_url(course)) as gradebook:
        for notebook in gradebook.find_submission(commands.ASSIGNMENT, STUDENT).notebooks:
            said = _messages(course / "autograded" / STUDENT / commands.ASSIGNMENT / f"{notebook.name}.ipynb")
            for grade in notebook.grades:
                if grade.cell_type == "code" and (grade.auto_score or 0) < grade.max_score:
                    found.append(f"{notebook.name}/{grade.name}: the solution scored {grade.auto_score or 0:g} of "
                                 f"{grade.max_score:g}" + (f": {said[grade.name]}" if said.get(grade.name) else ""))
    return found


def _messages(path: Path) -> dict[str, str]:
    """{grade_id: the first line of the error the check's cell shows} in an autograded notebook."""
    try:
        nb = nbformat.read(path, as_version=4)
    except OSError:
        return {}
    return {cell.metadata.get("nbgrader", {}).get("grade_id", ""): str(output.get("evalue", "")).split("\n")[0][:300]
            for cell in nb.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) if output.get("output_type") == "error"}


def verified_release(root: Path) -> list[Path]:
    """The release of `root`, made only when its solutions earn every automatic point."""
    short = shortfalls(root)
    if short:
        raise SolutionsFail("the solutions lose points under the judge, so nothing was released:\n  "
                            + "\n  ".join(short))
    return commands.release(root=root)
