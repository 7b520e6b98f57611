"""The answer-checking harness used by the exercise tests grades as autograde does."""

from __future__ import annotations

import pytest

from checked_answers import blank_answers, failed, verdicts

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["01_claims.ipynb", "02_fencing.ipynb", "03_leases.ipynb", "03b_unfenced.ipynb",
                                  "04_recovery.ipynb", "04b_cancel.ipynb", "07_review.ipynb", "07b_recall.ipynb"])
def test_the_solutions_pass_every_check_and_the_blank_answers_none(name):
    solved, blank = verdicts(name), verdicts(name, blank_answers(name))
    assert solved and failed(solved) == {}
    assert set(failed(blank)) == set(blank) == set(solved)


def test_a_data_answer_filled_in_with_the_stub_raise_kept_is_told_so_and_earns_nothing():
    # In Lab that cell stops with an error and its visible test says so; grading agrees.
    import json

    from checked_answers import SOLUTIONS, _grade_id

    solution = json.loads((SOLUTIONS / "07b_recall.ipynb").read_text())
    filled = next("".join(c["source"]) for c in solution["cells"] if _grade_id(c) == "vocabulary")
    found = verdicts("07b_recall.ipynb", {"vocabulary": filled + "\nraise NotImplementedError()"},
                     only={"test_vocabulary_format"})
    assert set(failed(found)) == {"test_vocabulary_format"}
    assert "still ends in `raise NotImplementedError()`" in found["test_vocabulary_format"]["message"], found
