"""A hidden part's failure is told in the course's words: a value marked `shown(...)` appears only
when it is made of words no hidden input can have shaped (course.grading.judge.messages)."""

from __future__ import annotations

import pytest

from course.lessons.checks import expect, shown
from course.grading.judge import messages

CHECK = '''seen = {"orders": orders, "money": money, "right": right, "wrong": wrong}
expect(right >= 0, "visible part")
### BEGIN HIDDEN TESTS
expect(seen["orders"] == ["CONFIRMED"] and seen["money"] == (0, 1500) and not wrong,
       f"the records show {shown(seen['orders'])} and {shown(seen['money'])}; {shown(seen['right'])} right; "
       f"your letter for {shown(' and '.join(wrong))} is wrong; prediction {shown(repr(prediction))}")
'''


def hidden_message(prediction=None, **values) -> dict:
    """The verdict of CHECK, failing in its hidden part with `values` as the learner's records."""
    job = {"check": CHECK, "hidden_from": 3, "answers": {}}
    namespace = {"expect": expect, "shown": shown, "prediction": prediction, **values}
    with pytest.raises(AssertionError) as failed:
        exec(compile(CHECK, messages.FILENAME, "exec"), namespace)
    verdict = messages.verdict(failed.value, job)
    return {**verdict, "message": " ".join(verdict["message"].split())}  # unwrapped


def test_values_shaped_by_learner_code_in_a_hidden_part_show_as_an_ellipsis():
    said = hidden_message(orders=["W-2 secret owner"], money=(0, 987654), right=1234, wrong=["health"])["message"]
    assert "W-2 secret owner" not in said and "987654" not in said and "1234" not in said, said
    assert said.count(messages.ELIDED) >= 3, said


def test_the_check_s_own_literals_small_counts_and_their_joins_are_shown_and_nothing_else():
    """A learner's earlier answer is elided too: in the hidden phase, another check's hidden input
    may have reached the learner process that made it."""
    said = hidden_message("REVOKED", orders=["CONFIRMED", "UNKNOWN"], money=(1500, 0), right=5,
                          wrong=["CONFIRMED", "UNKNOWN"])["message"]
    assert "['CONFIRMED', '…']" in said, said  # a literal of the check, and a status it never names
    assert "(1500, 0)" in said and "5 right" in said, said
    assert "your letter for … is wrong" in said and "prediction …" in said, said


def test_only_a_failure_before_the_hidden_part_that_lab_tells_in_more_words_is_told_again():
    """The grader then runs the visible part alone, in the visible phase, for Lab's message."""
    before = {"expect": expect, "shown": shown, "orders": [], "money": (0, 0), "right": -1, "wrong": [],
              "prediction": None}
    lab_words = dict(before, right=None)  # `right >= 0` raises TypeError: Lab shows its text
    told = {}
    for name, namespace in (("course words", before), ("lab words", lab_words)):
        with pytest.raises(Exception) as failed:
            exec(compile(CHECK, messages.FILENAME, "exec"), namespace)
        told[name] = messages.verdict(failed.value, {"check": CHECK, "hidden_from": 3, "answers": {}})
    assert told["course words"]["message"] == "visible part" and not told["course words"]["retell"], told
    assert told["lab words"]["message"] == "a hidden check stopped with TypeError" and told["lab words"]["retell"], told
    assert not hidden_message(orders=[], money=(0, 0), right=1, wrong=[])["retell"]


def test_a_failing_bare_assert_in_a_visible_part_shows_its_statement_as_a_kernel_would():
    source = 'claimed = {"generation": 1}\nassert claimed["generation"] == 2\nassert (\n    False\n), "two lines"\n'
    for code, wanted in ((source, 'the test\'s line 2 failed: assert claimed["generation"] == 2'),
                         (source.replace('== 2', '== 1'), "two lines\n(the test's line 3: assert (\n    False\n), \"two lines\")")):
        with pytest.raises(AssertionError) as failed:
            exec(compile(code, messages.FILENAME, "exec"), {})
        verdict = messages.verdict(failed.value, {"check": code, "hidden_from": None, "answers": {}})
        assert verdict["message"] == wanted and verdict["ename"] == "AssertionError", verdict
