"""The answer-checking harness used by the exercise tests grades as autograde does."""

from __future__ import annotations

import pytest

from checked_answers import blank_answers, failed, verdicts

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["01_claims.ipynb", "02_fencing.ipynb", "03_recovery.ipynb"])
def test_the_solutions_pass_every_check_and_the_blank_answers_none(name):
    solved, blank = verdicts(name), verdicts(name, blank_answers(name))
    assert solved and failed(solved) == {}
    assert set(failed(blank)) == set(blank) == set(solved)
