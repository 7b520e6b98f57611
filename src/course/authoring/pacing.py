"""How long each notebook takes a newcomer: the author's estimate for each task, plus the reading.

Every task cell (an answer to build or to write, a prediction, an experiment to run and read)
carries in its metadata how many minutes a careful newcomer spends on it, `{"course": {"minutes":
N}}`, decided cell by cell by whoever writes it: a ten-predicate `claim` with a recovery sub-query
is not a five-line fence, and an experiment whose figure must be read takes longer than a printed
row. Reading is the one figure computed: the markdown's words at 150 a minute (technical prose read
beside code). `course check-authoring` names a task cell without its minutes. Each notebook's
heading and the README's table quote `estimate` (tests/test_pacing.py), and the guide's session plan
is rendered from it (course.authoring.guide), with the sittings a notebook needs.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

HEADING = '*Chapter 12, "Recover work after a process crash"'  # the line that quotes the estimate
WORDS_PER_MINUTE = 150  # a newcomer reading technical prose beside code
SITTING = 75  # minutes: a notebook longer than this takes two sittings (the guide's session plan)
METADATA = ("course", "minutes")
KINDS = {"build": ("to build", "to build"), "written": ("written", "written"),
         "prediction": ("to predict", "to predict"), "observation": ("experiment", "experiments")}


class Unestimated(ValueError):
    """A task cell says nothing of its minutes: the estimate would be a guess."""


def task_kind(cell: dict) -> str | None:
    """Which task a cell is, if any: an answer to build (code) or to write (markdown), a prediction,
    an experiment (cells tagged `prediction`, `observation`)."""
    grading = cell.get("metadata", {}).get("nbgrader", {})
    tags = cell.get("metadata", {}).get("tags", [])
    if grading.get("solution"):
        return "build" if cell["cell_type"] == "code" else "written"
    return "prediction" if "prediction" in tags else "observation" if "observation" in tags else None


def minutes_of(cell: dict) -> int | None:
    """The author's minutes for a task cell, or None when it gives none (or not a whole number > 0)."""
    given = cell.get("metadata", {}).get(METADATA[0], {})
    value = given.get(METADATA[1]) if isinstance(given, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class Pace:
    words: int
    tasks: tuple[tuple[str, int, int], ...]  # (kind, how many, the minutes their cells give), in KINDS' order

    @property
    def reading(self) -> int:
        return round(self.words / WORDS_PER_MINUTE)

    @property
    def minutes(self) -> int:
        """Reading plus every task's minutes, rounded up to five minutes."""
        return math.ceil((self.words / WORDS_PER_MINUTE + sum(m for _, _, m in self.tasks)) / 5) * 5

    @property
    def sittings(self) -> int:
        return math.ceil(self.minutes / SITTING)

    @property
    def basis(self) -> str:
        """Words to the nearest hundred (a reworded sentence need not change it), then each kind of task."""
        parts = [f"{round(self.words, -2):,} words to read, {self.reading} min"]
        for kind, count, minutes in self.tasks:
            if not count:
                continue
            one, many = KINDS[kind]
            parts.append(f"{count} {one if count == 1 else many}, {minutes} min")
        return "; ".join(parts)

    def heading(self) -> str:
        """What a notebook's heading says: 'about 90 minutes (1,900 words to read, 13 min; 2 to build, ...)'."""
        return f"about {self.minutes} minutes ({self.basis})"


def estimate(path: Path) -> Pace:
    cells = json.loads(Path(path).read_text())["cells"]
    missing = [cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
               for index, cell in enumerate(cells) if task_kind(cell) and minutes_of(cell) is None]
    if missing:
        raise Unestimated(f"{Path(path).name}: no minutes on the task cell(s) {', '.join(missing)} "
                          f'(metadata {{"{METADATA[0]}": {{"{METADATA[1]}": N}}}})')

    def text(cell: dict) -> str:
        return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])

    words = sum(len(re.findall(r"[A-Za-z0-9']+", line)) for c in cells if c["cell_type"] == "markdown"
                for line in text(c).splitlines() if not line.startswith(HEADING))
    tasks = tuple((kind, sum(1 for c in cells if task_kind(c) == kind),
                   sum(minutes_of(c) for c in cells if task_kind(c) == kind)) for kind in KINDS)
    return Pace(words=words, tasks=tasks)


RELEASE = Path(__file__).resolve().parents[3] / "notebooks" / "ch12"


def render(release: Path = RELEASE) -> str:
    """The guide's table: each notebook's estimate, its sittings and its basis, then the total."""
    paces = {path.stem: estimate(path) for path in sorted(Path(release).glob("*.ipynb"))}
    total = sum(pace.minutes for pace in paces.values())
    rows = [f"| `{name}` | about {pace.minutes} min | {pace.sittings} | {pace.basis} |" for name, pace in paces.items()]
    return "\n".join(["| Notebook | Time | Sittings | Basis |", "| --- | --- | --- | --- |", *rows,
                      f"| all {len(paces)} | about {total // 60} h {total % 60:02d} min | "
                      f"{sum(pace.sittings for pace in paces.values())} | {WORDS_PER_MINUTE} words a minute; each "
                      f"task's minutes from its cell; a sitting up to {SITTING} min |"])
