"""Each notebook's time is the reading plus the minutes its author gives each task
(course.authoring.pacing), said the same way in the notebook's heading, the README's table and the
guide's session plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course.authoring.pacing import RELEASE, SITTING, Unestimated, estimate

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
        pace = estimate(path)
        assert f"| `{path.stem}` | about {pace.minutes} min | {pace.sittings} |" in guide


def notebook(tmp_path: Path, cells: list) -> Path:
    import nbformat

    path = tmp_path / "n.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return path


def task(kind: str, minutes: int | None, grade_id: str = "x"):
    import nbformat

    meta = {} if minutes is None else {"course": {"minutes": minutes}}
    if kind == "build":
        return nbformat.v4.new_code_cell("", metadata={**meta, "nbgrader": {"solution": True, "grade_id": grade_id}})
    if kind == "written":
        return nbformat.v4.new_markdown_cell("", metadata={**meta,
                                                           "nbgrader": {"solution": True, "grade_id": grade_id}})
    return nbformat.v4.new_code_cell("", metadata={**meta, "tags": [kind]})


def test_the_estimate_is_the_reading_plus_each_task_cell_s_own_minutes(tmp_path):
    import nbformat

    words = nbformat.v4.new_markdown_cell(" ".join(["lease"] * 1500))  # 10 min at 150 a minute
    path = notebook(tmp_path, [words, task("build", 25), task("build", 10), task("written", 5),
                               task("prediction", 2), task("observation", 4)])
    pace = estimate(path)
    assert pace.minutes == 60 and pace.sittings == 1  # 10 + 35 + 5 + 2 + 4 = 56, to the next five
    assert pace.heading() == ("about 60 minutes (1,500 words to read, 10 min; 2 to build, 35 min; 1 written, 5 min; "
                              "1 to predict, 2 min; 1 experiment, 4 min)")


def test_a_task_that_gives_no_minutes_is_refused_by_name(tmp_path):
    path = notebook(tmp_path, [task("build", 25, "claim"), task("build", None, "finish"), task("observation", 0)])
    with pytest.raises(Unestimated, match=r"finish, cell 2"):
        estimate(path)


def test_the_course_s_tasks_are_no_longer_equal_in_time():
    """The capstone's worker pass is not an eight-minute build, and every notebook asks more than reading."""
    tasks = estimate(RELEASE / "05_checkpoint.ipynb").tasks
    capstone = {kind: (count, minutes) for kind, count, minutes in tasks}
    assert capstone["build"] == (2, 55)
    for path in NOTEBOOKS:
        pace = estimate(path)
        assert pace.minutes >= 2 * pace.reading and pace.sittings == -(-pace.minutes // SITTING)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebook_fits_one_sitting(path):
    """A topic that needs longer is cut at a section's heading into a second notebook, `NNb_...`."""
    pace = estimate(path)
    assert pace.sittings == 1, f"{path.name} takes about {pace.minutes} min, over one sitting ({SITTING} min): split it"
