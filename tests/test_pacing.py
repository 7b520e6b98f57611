"""Each notebook's time is estimated from what it asks (course.authoring.pacing), and said the same way in
the notebook's heading, the README's table and the guide's session plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course.authoring.pacing import RELEASE, Pace, estimate

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(RELEASE.glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_heading_and_the_readme_quote_the_estimate(path):
    pace = estimate(path)
    first = "".join(json.loads(path.read_text())["cells"][0]["source"])
    assert pace.heading() in first, f"{path.name}'s first cell should say \"{pace.heading()}\" (course.authoring.pacing)"
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(f"| `{path.name}`"))
    assert row.rstrip().endswith(f"| ~{pace.minutes} min |"), f"the README's row for {path.name} should end ~{pace.minutes} min"


def test_the_guide_renders_the_same_estimates():
    guide = (ROOT / "docs" / "instructor-guide.md").read_text()
    for path in NOTEBOOKS:
        assert f"| `{path.stem}` | about {estimate(path).minutes} min |" in guide


def test_the_estimate_counts_reading_and_every_kind_of_task():
    reading = Pace(words=2000, build=0, written=0, prediction=0, observation=0)
    assert reading.minutes == 10  # 2,000 words at 200 a minute
    busier = Pace(words=2000, build=2, written=1, prediction=1, observation=3)  # 10 + 2*8 + 4 + 2 + 3*2 = 38 min
    assert busier.minutes == 40 and "2,000 words, 2 to build, 1 written, 1 to predict, 3 experiments" in busier.heading()
    capstone = Pace(words=2000, build=2, written=0, prediction=0, observation=0, longer=29)  # 10 + 16 + 29 = 55
    assert capstone.minutes == 55 and "2 to build (+29 min for the larger)" in capstone.heading()
    assert estimate(RELEASE / "05_checkpoint.ipynb").longer > 0  # the worker pass is no eight-minute build
    counted = estimate(RELEASE / "01_claims.ipynb")
    assert counted.build == 2 and counted.words > 1000
