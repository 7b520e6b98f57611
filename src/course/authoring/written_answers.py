"""The manually graded questions, their model answers and rubrics, gathered for the instructor guide.

They are written once, in the solution cells of `solutions/ch12/`, beside the question. The guide
shows the same text as one of its generated parts (`course.authoring.guide`: `python -m course.authoring.guide`
rewrites it, and a test fails when the two drift apart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat


REPO_ROOT = Path(__file__).resolve().parents[3]
SOLUTIONS = REPO_ROOT / "solutions" / "ch12"
SOLUTION_MARKERS = re.compile(r"^### (BEGIN|END) SOLUTION\s*$", re.M)


@dataclass(frozen=True)
class WrittenAnswer:
    notebook: str
    grade_id: str
    points: float
    question: str
    answer: str


def written_answers(solutions: Path = SOLUTIONS) -> list[WrittenAnswer]:
    """Every manually graded markdown cell, with the question from the markdown cell above it."""
    found = []
    for path in sorted(solutions.glob("*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        for before, cell in zip([None, *cells], cells):
            grading = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "markdown" and grading.get("solution") and grading.get("grade"):
                question = before.source.strip().split("\n\n")[-1] if before is not None else ""
                answer = SOLUTION_MARKERS.sub("", cell.source).strip()
                found.append(WrittenAnswer(path.name, grading["grade_id"], grading["points"], question, answer))
    return found


def render(answers: list[WrittenAnswer]) -> str:
    """The guide's part: one heading per question, then the question, model answer and rubric."""
    return "\n\n".join(
        f"### `{item.grade_id}` ({item.notebook}, {item.points:g} pts)\n\n{item.question}\n\n{item.answer}"
        for item in answers
    )


def render_all() -> str:
    return render(written_answers())
