"""Parts of the instructor guide that are generated from the course itself, so they cannot drift.

Each part sits between `<!-- NAME:start -->` and `<!-- NAME:end -->` in docs/instructor-guide.md.
`python -m course.authoring.guide` rewrites every part; tests/test_instructor_guide.py fails when a part
differs from what the code renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[3]
GUIDE = REPO_ROOT / "docs" / "instructor-guide.md"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def wrap(name: str, body: str) -> str:
    start, end = markers(name)
    return f"{start}\n\n{body.strip()}\n\n{end}"


def section(name: str, guide: Path = GUIDE) -> str:
    """The part called `name` as the guide holds it now, markers included."""
    text = guide.read_text()
    start, end = markers(name)
    return text[text.index(start): text.index(end) + len(end)]


def rendered(solutions: Path | None = None) -> dict[str, Callable[[], str]]:
    """Every generated part, by name, markers included: what the guide should hold. (The parts'
    modules render their text; the guide alone knows where it goes.) `solutions`: where the written
    answers come from (default solutions/ch12; `course check-authoring` checks a folder given)."""
    from course.checkpoint.evidence_table import render as evidence_table
    from course.authoring.pacing import render as pacing
    from course.authoring.written_answers import SOLUTIONS, written_answers
    from course.authoring.written_answers import render as answers_part

    parts = {"written-answers": lambda: answers_part(written_answers(solutions or SOLUTIONS)),
             "checkpoint-evidence": evidence_table, "pacing": pacing}
    return {name: (lambda name=name, render=render: wrap(name, render())) for name, render in parts.items()}


def update(guide: Path = GUIDE) -> None:
    text = guide.read_text()
    for name, render in rendered().items():
        text = text.replace(section(name, guide), render())
    guide.write_text(text)


if __name__ == "__main__":
    update()
