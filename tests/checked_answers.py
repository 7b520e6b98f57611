"""Grade answers the way `course autograde` decides points, without nbgrader or a kernel.

`verdicts(name, replace)` builds the real checker jobs for one notebook: the release's cells, the
solutions' full sources (hidden tests included), and as the learner's cells the solution's answers
with `replace` (grade_id -> source) swapped in. Each job runs in its own sandboxed checker, as
in grading. Tests use it to show that a correct answer written differently keeps its points and
that a wrong one loses them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from course.grading import jobs

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "ch12"
RELEASE = ROOT / "notebooks" / "ch12"


def _grade_id(cell: dict) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def verdicts(name: str, replace: dict[str, str] | None = None, only: set[str] | None = None,
             timeout: float = 120) -> dict[str, dict]:
    """{test grade_id: verdict} for notebook `name` with the solution's answers, `replace`d."""
    replace = dict(replace or {})
    solution = json.loads((SOLUTIONS / name).read_text())
    release = json.loads((RELEASE / name).read_text())
    full = {_grade_id(c): jobs.cell_text(c["source"]) for c in solution["cells"] if _grade_id(c)}
    cells = jobs.course_cells(release, full)
    unknown = set(replace) - {c.grade_id for c in cells if c.solution}
    assert not unknown, f"not answer cells of {name}: {sorted(unknown)}"
    submission = []
    for cell in solution["cells"]:
        cell = dict(cell)
        if _grade_id(cell) in replace:
            cell["source"] = replace[_grade_id(cell)]
        submission.append(cell)
    checks = [c for c in jobs.autograded(cells) if only is None or c.grade_id in only]
    built = [jobs.build_job(name.removesuffix(".ipynb"), check, cells, submission) for check in checks]
    with tempfile.TemporaryDirectory(prefix="ch12-answers-") as folder:
        submitted = Path(folder)
        for path in SOLUTIONS.glob("*.ipynb"):  # 04 grades the notebooks beside it
            shutil.copy(path, submitted / path.name)
        notebook = dict(solution, cells=submission)
        (submitted / name).write_text(json.dumps(notebook))
        return jobs.run_checks(built, submitted, RELEASE, timeout=timeout)


def failed(found: dict[str, dict]) -> dict[str, str]:
    """The checks that did not pass, with what they said."""
    return {cell: f"{v.get('ename')}: {v.get('message')}" for cell, v in found.items() if not v["passed"]}


def blank_answers(name: str) -> dict[str, str]:
    """The release's answer cells as a learner first sees them (stubs)."""
    release = json.loads((RELEASE / name).read_text())
    return {_grade_id(c): jobs.cell_text(c["source"]) for c in release["cells"]
            if c["cell_type"] == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")}
