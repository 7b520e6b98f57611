"""A topic longer than a sitting is two notebooks (01 and 01b, 03 and 03b, 04 and 04b, 05 and 05b, 07 and
07b), and a second part that needs the learner's own code runs their saved first part
(`course.lab.learner.saved_definitions`): in Lab as saved (an unsaved change stops it), at grading as
submitted, and in the judge never at all (the learner process's names are bound instead)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import checked_answers
from course.lab import kernel_runs
from course.lab.learner import RELEASE_VARIABLE, LearnerCodeError, NotImplementedYet, saved_definitions
from sovereign_agent.assistant_work import enqueue
from course.lessons.checks import fresh_shop

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS, RELEASE = ROOT / "solutions" / "ch12", ROOT / "notebooks" / "ch12"


def test_each_second_part_follows_its_first_and_names_it():
    for second in sorted(RELEASE.glob("0[1-7]b_*.ipynb")):
        first = [p.name for p in RELEASE.glob(f"{second.name[:2]}_*.ipynb")]
        assert len(first) == 1, (second.name, first)
        closing = "".join(json.loads((RELEASE / first[0]).read_text())["cells"][-1]["source"])
        assert f"`{second.stem}`" in closing, f"{first[0]}'s last cell should send the learner to {second.stem}"


def test_a_second_part_runs_the_learners_saved_claim(tmp_path, monkeypatch):
    monkeypatch.delenv(RELEASE_VARIABLE, raising=False)
    shutil.copy(SOLUTIONS / "01_claims.ipynb", tmp_path)
    Claim, claim = saved_definitions("01_claims.ipynb", "Claim", "claim", folder=tmp_path)
    db = fresh_shop()
    enqueue(db, "phone:1", "lucy", "Restock vanilla")
    held = claim(db, "worker", ttl=30)
    assert isinstance(held, Claim) and held.generation == 1
    assert Claim.__module__ != "sovereign_agent.assistant_work", "the learner's own class, not the runtime's"


def test_a_stub_says_where_to_write_it_and_an_unsaved_change_stops_the_load(tmp_path, monkeypatch):
    monkeypatch.delenv(RELEASE_VARIABLE, raising=False)
    shutil.copy(RELEASE / "01_claims.ipynb", tmp_path)
    (_, claim) = saved_definitions("01_claims.ipynb", "Claim", "claim", folder=tmp_path)
    with pytest.raises(NotImplementedYet, match="01_claims"):
        claim(fresh_shop(), "worker")

    shutil.copy(SOLUTIONS / "01_claims.ipynb", tmp_path)
    notebook = tmp_path / "01_claims.ipynb"
    kernel_runs.record(notebook, "def claim(db, owner, **options):\n    return None", {"claim"},
                       at=notebook.stat().st_mtime + 60)
    with pytest.raises(LearnerCodeError, match="save 01_claims first"):
        saved_definitions("01_claims.ipynb", "claim", folder=tmp_path)
    monkeypatch.setenv(RELEASE_VARIABLE, str(RELEASE))  # grading: the submission as submitted
    (claim,) = saved_definitions("01_claims.ipynb", "claim", folder=tmp_path)
    assert callable(claim)


@pytest.mark.slow
def test_at_grading_04b_runs_the_submitted_04_and_a_missing_one_costs_only_its_checks():
    """Through the real judge: 04b's held experiment continues orders with the learner's saved
    `order_to_continue`; the judge binds it from the learner process (it never loads learner code)."""
    found = checked_answers.verdicts("04b_cancel.ipynb", only={"test_cancel_while_held", "test_recovery_action"})
    assert checked_answers.failed(found) == {}
    without = checked_answers.verdicts("04b_cancel.ipynb", only={"test_cancel_while_held", "test_recovery_action"},
                                       missing={"04_recovery.ipynb"})
    assert without["test_recovery_action"]["passed"], "an answer that needs nothing of 04 keeps its points"
    lost = without["test_cancel_while_held"]
    assert not lost["passed"] and "04_recovery" in lost["message"], lost


def test_a_notebook_with_checks_has_answers_of_its_own():
    """nbgrader grades a notebook never handed in from its release copy: a check there that grades another
    notebook's saved answers would earn points for work not handed in. So a check lives with its answer."""
    for path in sorted(RELEASE.glob("*.ipynb")):
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        grading = [c["metadata"].get("nbgrader", {}) for c in cells]
        checks = [g["grade_id"] for g in grading if g.get("grade") and not g.get("solution")]
        answers = [g["grade_id"] for g in grading if g.get("solution")]
        assert answers or not checks, f"{path.name} has checks {checks} and no answer of its own"
