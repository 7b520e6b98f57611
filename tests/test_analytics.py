"""`course analytics` against a small class of the toy course (tests/test_grading_tools.build_course),
checked against the gradebook's own numbers, read here through nbgrader's API one grade at a time.

The toy course gets one more check, which reads `twice`, a name only a locked non-`setup` cell
defines: a grading error for a student whose answer does not define it too. Three students: right
(who defines `twice` as well), half right (and a manual override of the hidden check in the
gradebook, as formgrader would make, so one check has a partial score), and blank (the release's
answer cell as handed out).
"""

from __future__ import annotations

import base64
import csv
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner
from nbformat.v4 import new_code_cell

from conftest import assert_nothing_left, nbgrader_metadata
from course.cli import main
from course.grading.classes import analytics
from course.grading.nbgrader import commands
from course.grading.nbgrader.gradebook import DB_URL_VARIABLE, alembic_on_path
from test_grading_tools import COURSE_MADE, build_course, submit

ROOT = Path(__file__).resolve().parents[1]
RIGHT = "def double(x):\n    return 2 * x\n\ndef twice(x):\n    return 2 * x"
HALF = "def double(x):\n    return 2 * x if x < 10 else 0"
CHECKS = {"visible", "hidden", "uses_helper"}


def test_each_check_of_ch12_points_to_a_misconception_the_guide_names_or_to_none():
    """The checks' own metadata, read as analytics reads it; `course check-authoring` names a check
    that says nothing (tests/test_authoring_check.py)."""
    guide = (ROOT / analytics.GUIDE).read_text()
    assert f"\n## {analytics.SECTION}\n" in guide, "the guide's misconceptions section was renamed"
    assert analytics.anchor(analytics.SECTION) == "misconceptions-this-chapter-meets"
    pointed = analytics.misconceptions(ROOT / analytics.SOURCE / commands.ASSIGNMENT)
    assert len(pointed) >= 30, f"the graded checks of ch12: {sorted(pointed)}"
    named = analytics.named_in_guide(guide)
    assert set(pointed.values()) - {None} <= named, f"not named in the guide's section: {set(pointed.values()) - named}"
    assert pointed["05_checkpoint/test_continue_order"] == "Sent means done"
    assert pointed["01_claims/test_claim_selection"] is None
    assert len(set(pointed.values()) - {None}) >= 5, "the guide's misconceptions, each spotted by a check"


def run_analytics(root: Path):
    return CliRunner().invoke(main, ["analytics", "--root", str(root)], catch_exceptions=False)


def test_no_gradebook_or_nothing_graded_is_exit_2_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(DB_URL_VARIABLE, raising=False)
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # restored after the test:
    alembic_on_path()  # nbgrader makes a gradebook's schema with `alembic`, found on PATH
    absent = run_analytics(tmp_path)
    assert absent.exit_code == 2 and "no gradebook at" in absent.output, absent.output
    assert list(tmp_path.iterdir()) == [], "nothing made, not even an empty gradebook"

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        gb.add_assignment(commands.ASSIGNMENT)
    empty = run_analytics(tmp_path)
    assert empty.exit_code == 2 and "holds no graded submission of ch12" in empty.output, empty.output
    assert [p.name for p in tmp_path.iterdir()] == ["gradebook.db"], "no analytics/ and no part of a file"


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """The toy course with the `twice` check, released, three students autograded, one grade
    overridden by hand, then `course analytics` run on it."""
    from course.grading.classes.autograde import autograde

    root = tmp_path_factory.mktemp("analytics-class")
    build_course(root)
    source = root / "solutions" / commands.ASSIGNMENT / "toy.ipynb"
    nb = nbformat.read(source, as_version=4)
    nb.cells += [new_code_cell("def twice(x):\n    return 2 * x", metadata=nbgrader_metadata("helper", locked=True)),
                 new_code_cell(COURSE_MADE["reads_a_helper"],
                               metadata=nbgrader_metadata("uses_helper", grade=True, locked=True, points=1))]
    nb.cells[[c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells].index("hidden")].metadata["course"] = {
        "misconception": "Sent means done"}  # as an author marks a check (the guide's "Adding or changing an exercise")
    nbformat.write(nb, source)
    commands.release(root=root)
    submit(root, "right", RIGHT)
    submit(root, "half", HALF)
    (root / "submitted" / "blank" / commands.ASSIGNMENT).mkdir(parents=True)
    shutil.copy(root / "notebooks" / commands.ASSIGNMENT / "toy.ipynb",
                root / "submitted" / "blank" / commands.ASSIGNMENT)
    autograde(root=root, progress=False)

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:  # a grader's override in formgrader
        gb.find_grade("hidden", "toy", commands.ASSIGNMENT, "half").manual_score = 1.0
        gb.db.commit()
    done = run_analytics(root)
    assert done.exit_code == 0, done.output
    yield root, done.output
    assert_nothing_left(root)
    shutil.rmtree(root)


def gradebook_numbers(root: Path) -> tuple[dict[str, dict[str, tuple[float, float]]], dict[str, float]]:
    """{check: {student: (score, max_score)}} and {student: total}, as nbgrader's API gives them."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        students = [s.id for s in gb.students]
        scores = {check: {s: (gb.find_grade(check, "toy", commands.ASSIGNMENT, s).score,
                              gb.find_grade(check, "toy", commands.ASSIGNMENT, s).max_score) for s in students}
                  for check in CHECKS}
        totals = {s: gb.find_submission(commands.ASSIGNMENT, s).score for s in students}
    return scores, totals


def checks_csv(root: Path) -> list[dict[str, str]]:
    with open(root / "analytics" / "ch12-checks.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_the_csv_has_each_check_s_pass_rate_as_the_gradebook_holds_it_worst_first(graded_class):
    root, _ = graded_class
    rows = checks_csv(root)
    scores, totals = gradebook_numbers(root)
    assert sorted(totals) == ["blank", "half", "right"]
    assert [row["check"] for row in rows if row["notebook"] == "toy"] == [row["check"] for row in rows]
    assert {row["check"] for row in rows} == CHECKS, "the written answer `why` is graded by hand, not a check"
    for row in rows:
        held = scores[row["check"]].values()
        kinds = {"full": sum(s >= m for s, m in held), "zero": sum(s == 0 for s, m in held)}
        kinds["partial"] = len(held) - kinds["full"] - kinds["zero"]
        assert {kind: int(row[kind]) for kind in kinds} == kinds, row
        assert int(row["graded"]) == 3 and float(row["pass_rate"]) == pytest.approx(kinds["full"] / 3, abs=1e-3)
    by_check = {row["check"]: row for row in rows}
    assert (by_check["hidden"]["full"], by_check["hidden"]["partial"]) == ("1", "1"), "the override: a partial score"
    assert by_check["visible"]["pass_rate"] == "0.667", "right and half pass the visible check, blank does not"
    assert [float(row["pass_rate"]) for row in rows] == sorted(float(row["pass_rate"]) for row in rows)
    assert rows[-1]["check"] == "visible"


@pytest.mark.slow
def test_the_histogram_counts_the_gradebook_s_totals(graded_class):
    root, output = graded_class
    _, totals = gradebook_numbers(root)
    assert totals == {"right": 4.0, "half": 2.0, "blank": 0.0}  # 1 + 2 + 1; 1 + 1 by hand; nothing
    result = analytics.read_class(root)
    assert result.totals == totals and result.max_score == 5
    assert sum(count for _, _, count in result.bins) == len(totals)
    for low, high, count in result.bins:
        assert count == sum(1 for total in totals.values() if low <= total < high), (low, high, result.bins)
    shown = next(line for line in output.splitlines() if line.startswith("Students per total score: "))
    assert shown.endswith(", ".join(f"[{low:g}, {high:g}): {count}" for low, high, count in result.bins))


@pytest.mark.slow
def test_a_grading_error_is_attributed_to_the_student_who_met_it(graded_class):
    root, output = graded_class
    rows = {row["check"]: row for row in checks_csv(root)}
    assert rows["uses_helper"]["grading_errors"] == "half", rows["uses_helper"]
    assert all(rows[check]["grading_errors"] == "" for check in ("visible", "hidden"))
    with open(root / "grading-report.csv", newline="") as handle:  # autograde's own report agrees, per student
        report = {row["student"]: row["grading_error"] for row in csv.DictReader(handle)}
    assert report == {"blank": "0", "half": "1", "right": "0"}
    assert "Grading errors (not the student's mistake; grade them again): toy/uses_helper: half" in output
    assert all(row["limits"] == "" for row in rows.values())
    assert {check: (row["misconception"], row["guide"]) for check, row in rows.items()} == {
        "hidden": ("Sent means done", f"{analytics.GUIDE}#misconceptions-this-chapter-meets"),
        "visible": ("", ""), "uses_helper": ("", "")}, "the misconception is the one the check's own cell names"
    assert "  toy/hidden: Sent means done" in output, "the hidden check, failed by two of three, is taught again"


@pytest.mark.slow
def test_the_figure_is_a_png_and_the_page_holds_it_with_the_table(graded_class):
    from PIL import Image

    root, output = graded_class
    folder = root / "analytics"
    assert sorted(p.name for p in folder.iterdir()) == ["ch12-checks.csv", "ch12-checks.html", "ch12-checks.png"]
    png = folder / "ch12-checks.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    with Image.open(png) as image:
        assert image.format == "PNG" and image.width >= 1000 and image.height >= 400
    assert f"Wrote {png}" in output and "per hidden case are not recorded" in output
    page = (folder / "ch12-checks.html").read_text()
    assert base64.b64encode(png.read_bytes()).decode() in page, "the page holds the figure itself, as data"
    table = re.findall(r"<tr>(.*?)</tr>", page)
    assert len(table) == 1 + len(checks_csv(root)), "a header, then a row a check"
    assert [re.findall(r"<td>(.*?)</td>", row)[:2] for row in table[1:]] == [
        [row["notebook"], row["check"]] for row in checks_csv(root)], "the page's table is the CSV's, in its order"
    assert "<script" not in page and "Content-Security-Policy" in page


def test_the_page_escapes_whatever_a_student_id_or_a_finding_carries():
    """A student's id (a folder name a learner may choose on a laptop course) with markup is text."""
    hostile = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    check = analytics.Check("toy", "visible", 1.0, scores={hostile: 0.0}, grading_errors=[hostile],
                            misconception="Sent means done")
    page = analytics.page(analytics.ClassAnalytics([check], {hostile: 0.0}, 1.0), b"\x89PNG")
    assert page.count("<script") == 0 and page.count("<img ") == 1, "one element of the page's own: the figure"
    escaped = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&lt;script&gt;"
    assert page.count(escaped) == 2, "in the summary and the table"
