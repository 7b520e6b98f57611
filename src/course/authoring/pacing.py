"""How long each notebook takes, estimated from what it asks of the learner, not guessed.

The basis is counted in the learner's release itself: the words to read (markdown, hints
included), the things to build (graded code answers; a larger one declares its minutes with a
`minutes-N` tag), the written answers, the predictions (code
cells tagged `prediction`) and the experiments to run and read (cells tagged `observation`). Each
notebook's heading and the README's table quote `estimate` (tests/test_pacing.py), and the guide's
session plan is rendered from it (course.authoring.guide).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

HEADING = '*Chapter 12, "Recover work after a process crash"'  # the line that quotes the estimate
WORDS_PER_MINUTE = 200  # careful reading of technical prose
MINUTES = {"build": 8, "written": 4, "prediction": 2, "observation": 2}  # per task (an experiment: run it, read it)
# A build bigger than a function of a few lines (05's worker pass) says how long it takes a newcomer:
# the tag `minutes-25` on its answer cell counts 25 minutes instead of 8.
MINUTES_TAG = "minutes-"


@dataclass(frozen=True)
class Pace:
    words: int
    build: int
    written: int
    prediction: int
    observation: int
    longer: int = 0  # minutes beyond MINUTES["build"] that larger builds declare (a `minutes-N` tag)

    @property
    def minutes(self) -> int:
        """Reading plus tasks, rounded up to five minutes."""
        total = self.words / WORDS_PER_MINUTE + self.longer + sum(MINUTES[kind] * getattr(self, kind) for kind in MINUTES)
        return math.ceil(total / 5) * 5

    @property
    def basis(self) -> str:
        """The counts, words to the nearest hundred (a reworded sentence need not change it)."""
        built = "to build" + (f" (+{self.longer} min for the larger)" if self.longer else "")
        counts = [(self.build, built), (self.written, "written"), (self.prediction, "to predict"),
                  (self.observation, "experiment" if self.observation == 1 else "experiments")]
        return ", ".join([f"{round(self.words, -2):,} words", *(f"{n} {what}" for n, what in counts)])

    def heading(self) -> str:
        """What a notebook's heading says: 'about 45 minutes (2,310 words, 2 to build, ...)'."""
        return f"about {self.minutes} minutes ({self.basis})"


def estimate(path: Path) -> Pace:
    cells = json.loads(Path(path).read_text())["cells"]

    def text(cell: dict) -> str:
        return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])

    def count(test) -> int:
        return sum(1 for cell in cells if test(cell, cell.get("metadata", {}).get("nbgrader", {}),
                                                cell.get("metadata", {}).get("tags", [])))

    return Pace(
        words=sum(len(re.findall(r"[A-Za-z0-9']+", line)) for c in cells if c["cell_type"] == "markdown"
                  for line in text(c).splitlines() if not line.startswith(HEADING)),
        build=count(lambda c, g, t: c["cell_type"] == "code" and bool(g.get("solution"))),
        written=count(lambda c, g, t: c["cell_type"] == "markdown" and bool(g.get("solution"))),
        prediction=count(lambda c, g, t: "prediction" in t),
        observation=count(lambda c, g, t: "observation" in t),
        longer=sum(max(0, int(tag.removeprefix(MINUTES_TAG)) - MINUTES["build"]) for c in cells
                   for tag in c.get("metadata", {}).get("tags", []) if re.fullmatch(MINUTES_TAG + r"\d+", tag)),
    )


RELEASE = Path(__file__).resolve().parents[3] / "notebooks" / "ch12"


def render(release: Path = RELEASE) -> str:
    """The guide's table: each notebook's estimate and its basis, then the total."""
    paces = {path.stem: estimate(path) for path in sorted(Path(release).glob("*.ipynb"))}
    total = sum(pace.minutes for pace in paces.values())
    rows = [f"| `{name}` | about {pace.minutes} min | {pace.basis} |" for name, pace in paces.items()]
    return "\n".join(["| Notebook | Time | Basis |", "| --- | --- | --- |", *rows,
                      f"| all {len(paces)} | about {total // 60} h {total % 60:02d} min | {WORDS_PER_MINUTE} words a "
                      f"minute; {', '.join(f'{m} min per {kind}' for kind, m in MINUTES.items())} |"])
