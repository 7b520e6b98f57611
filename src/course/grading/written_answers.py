"""The manually graded questions, their model answers and rubrics, gathered for the instructor guide.

They are written once, in the solution cells of `solutions/ch12/`, beside the question. The guide
shows the same text between two markers; `python -m course.grading.written_answers` rewrites that
part of the guide, and a test fails when the two drift apart.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[3]
SOLUTIONS = REPO_ROOT / "solutions" / "ch12"
GUIDE = REPO_ROOT / "docs" / "instructor-guide.md"
START, END = "<!-- written-answers:start -->", "<!-- written-answers:end -->"
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
    parts = [START]
    for item in answers:
        parts.append(f"### `{item.grade_id}` ({item.notebook}, {item.points:g} pts)\n\n{item.question}\n\n{item.answer}")
    parts.append(END)
    return "\n\n".join(parts)


def guide_section(guide: Path = GUIDE) -> str:
    text = guide.read_text()
    return text[text.index(START) : text.index(END) + len(END)]


def update_guide(guide: Path = GUIDE, solutions: Path = SOLUTIONS) -> None:
    guide.write_text(guide.read_text().replace(guide_section(guide), render(written_answers(solutions))))


if __name__ == "__main__":
    update_guide()
    sys.exit(0)
