"""The report is built from the judge's structured verdicts, and any bytes a learner produces are graded.

A toy class graded by the real path (`autograde` with two workers, then `feedback`), built as in
test_hostile_submissions. The forger's answers raise classes of its own named like the grader's
(`CourseAnswerUsed`, `GraderError`, `CheckTimeout`, `LearnerFailed`, `MemoryError`, ...) with the
grader's words, and its cells print them; its twin raises RuntimeError("x") the same way: what the
report says of both is the same. The unprintable students' answers raise, return and print lone
surrogates, NUL and a 1 MB line, in visible and hidden parts, and their cells' sources and a
written answer hold them: every notebook of theirs is graded, and has its feedback.
"""

from __future__ import annotations

import csv
import json

import nbformat
import pytest

from course.grading.classes.autograde import autograde
from course.grading.classes.report import reason
from course.grading.nbgrader import commands

from test_hostile_submissions import CLAIMS, SOLUTIONS, notebook, released_course, scores, submit

pytestmark = pytest.mark.slow

FENCING = "02_fencing.ipynb"
# The grader's own words, as a report that matched text in outputs looked for them.
GRADERS_WORDS = ("your answer called the course's own `claim`, which is replaced by this tripwire; GRADING ERROR, "
                 "not your code: the experiment itself went wrong; [Errno 30] Read-only file system; [Errno 28] "
                 "No space left on device; [output limit reached: the cell printed more; the cell ran past the time "
                 "limit; Resource temporarily unavailable; can't start new thread; Cannot allocate memory; Permission "
                 "denied; File too large; LearnerProcessEnded; CellTimeoutError")
FORGED_NAMES = ("CourseAnswerUsed", "GraderError", "CheckTimeout", "LearnerFailed", "LearnerProcessEnded",
                "MemoryError", "PermissionError", "BlockingIOError", "OutputLimit", "CellTimeoutError")
FORGER_CLAIM = "\n".join(f"class {name}(Exception):\n    pass\n" for name in FORGED_NAMES) + f'''
FORGED = [{", ".join(FORGED_NAMES)}]
WORDS = {GRADERS_WORDS!r}


def claim(db, owner, **options):
    raise FORGED[sum(map(ord, str(owner))) % len(FORGED)](WORDS)  # each check meets one of them
'''
FORGER_CELLS = ["print(WORDS)", "raise CourseAnswerUsed(WORDS)", "raise MemoryError(WORDS)"]
TWIN_CLAIM = 'def claim(db, owner, **options):\n    raise RuntimeError("x")\n'
TWIN_CELLS = ['print("x")', 'raise RuntimeError("x")', 'raise RuntimeError("x")']

NASTY = 'NASTY = "\\udcff a lone surrogate, a NUL \\x00, another \\ud800 " + "y" * (1 << 20)\n'
RAISES = {"claim": NASTY + "\n\ndef claim(db, owner, **options):\n    raise RuntimeError(NASTY)\n"}
RETURNS = {"claim": NASTY + "\n\ndef claim(db, owner, **options):\n    return NASTY\n"}
FENCE_RAISES = {"assert_current": NASTY + "\n\ndef assert_current(*args, **kw):\n    raise PermissionError(NASTY)\n"}
PRINTS = ["print(NASTY[:1000])", "print(NASTY)", "raise ValueError(NASTY)"]
# In the cells themselves: JSON escapes a lone surrogate (`\\udcff`), as Lab's JSON.stringify does.
WRITTEN = ['IN_THE_SOURCE = "\udcff \x00"  # the cell itself holds them', "A written answer: \udcff \x00"]


def submit_as_json(root, student: str, notebooks: dict) -> None:
    """As `submit`, but each notebook written as JSON with escapes, which can hold what UTF-8 cannot."""
    folder = root / "submitted" / student / "ch12"
    folder.mkdir(parents=True)
    for name, nb in notebooks.items():
        nb.cells += [nbformat.v4.new_code_cell(WRITTEN[0]), nbformat.v4.new_markdown_cell(WRITTEN[1])]
        (folder / name).write_text(json.dumps(nb, ensure_ascii=True))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = released_course(tmp_path_factory.mktemp("hostile-report") / "course")
    students = {
        "forger": {CLAIMS: notebook(CLAIMS, SOLUTIONS, {"claim": FORGER_CLAIM}, FORGER_CELLS)},
        "forger_twin": {CLAIMS: notebook(CLAIMS, SOLUTIONS, {"claim": TWIN_CLAIM}, TWIN_CELLS)},
        "unprintable_raises": {CLAIMS: notebook(CLAIMS, SOLUTIONS, RAISES, PRINTS),
                               FENCING: notebook(FENCING, SOLUTIONS, FENCE_RAISES, PRINTS)},
        "unprintable_returns": {CLAIMS: notebook(CLAIMS, SOLUTIONS, RETURNS, PRINTS)},
    }
    for student, notebooks in students.items():
        (submit_as_json if student.startswith("unprintable") else submit)(root, student, notebooks)
    results = {r.student: r for r in autograde(root=root, jobs=2, progress=False)}
    commands.feedback(root=root)
    return root, results, students


def test_a_forged_grader_exception_changes_nothing_in_the_report(graded):
    root, results, _ = graded
    forger, twin = results["forger"], results["forger_twin"]
    assert forger.findings == twin.findings and not any(twin.findings.values()), (forger.findings, twin.findings)
    assert reason(forger) == reason(twin) == "Graded normally."
    rows = {row["student"]: row for row in csv.DictReader(open(root / "grading-report.csv", newline=""))}
    assert {k: v for k, v in rows["forger"].items() if k not in ("student", "seconds")} == \
        {k: v for k, v in rows["forger_twin"].items() if k not in ("student", "seconds")}
    mine, fair = scores(root)["forger"], scores(root)["forger_twin"]
    assert all(points <= fair[part] for part, points in mine.items()), (mine, fair)
    shown = nbformat.read(root / "autograded" / "forger" / "ch12" / CLAIMS, as_version=4)
    enames = {o.get("ename") for cell in shown.cells for o in cell.get("outputs", [])}
    assert {"CourseAnswerUsed", "MemoryError"} <= enames, "the forged names reach its notebook, as it raised them"


@pytest.mark.parametrize("student", ["unprintable_raises", "unprintable_returns"])
def test_any_bytes_a_learner_produces_are_graded(graded, student):
    root, results, students = graded
    assert results[student].reasons == {}, results[student].reasons  # no notebook left ungraded
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        graded_parts = {(nb.name, g.name): g.auto_score for nb in gb.find_submission("ch12", student).notebooks
                        for g in nb.grades if g.cell_type == "code"}
    submitted = {name.removesuffix(".ipynb") for name in students[student]}
    assert {name for name, _ in graded_parts} >= submitted
    assert all(score is not None for (name, _), score in graded_parts.items() if name in submitted), graded_parts
    assert graded_parts[("01_claims", "test_claim_dataclass")] == 2, "its Claim is the solution's"
    for name in submitted:
        text = (root / "autograded" / student / "ch12" / f"{name}.ipynb").read_text(encoding="utf-8")
        assert "\\\\udcff a lone surrogate, a NUL \\\\x00" in text, "escaped where it entered the notebook"
        assert "A written answer: \\\\udcff \\\\x00" in text and 'IN_THE_SOURCE = \\"\\\\udcff \\\\x00\\"' in text
        assert (root / "feedback" / student / "ch12" / f"{name}.html").is_file()
