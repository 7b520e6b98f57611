"""A hidden part's failure is told in the course's words: a value marked `shown(...)` appears only
when it is made of words no hidden input can have shaped (course.grading.judge.messages)."""

from __future__ import annotations

import pytest

from course.checks import expect, shown
from course.grading.judge import check, messages

CHECK = '''seen = {"orders": orders, "money": money, "right": right, "wrong": wrong}
expect(right >= 0, "visible part")
### BEGIN HIDDEN TESTS
expect(seen["orders"] == ["CONFIRMED"] and seen["money"] == (0, 1500) and not wrong,
       f"the records show {shown(seen['orders'])} and {shown(seen['money'])}; {shown(seen['right'])} right; "
       f"your letter for {shown(' and '.join(wrong))} is wrong; prediction {shown(repr(prediction))}")
'''


def hidden_message(before: dict, **values) -> str:
    """The verdict of CHECK, failing in its hidden part with `values` as the learner's records."""
    job = {"check": CHECK, "hidden_from": 3, "answers": {}, "entered_hidden": True,
           "words": messages.atoms(list(before.values()))}
    namespace = {"expect": expect, "shown": shown, "prediction": before.get("prediction"), **values}
    with pytest.raises(AssertionError) as failed:
        exec(compile(check.marked(CHECK, 3).replace(f"{check.ENTER_HIDDEN}()", "pass"), messages.FILENAME, "exec"),
             namespace)
    return " ".join(messages.verdict(failed.value, job)["message"].split())  # unwrapped


def test_values_shaped_by_learner_code_in_a_hidden_part_show_as_an_ellipsis():
    said = hidden_message({}, orders=["W-2 secret owner"], money=(0, 987654), right=1234, wrong=["health"])
    assert "W-2 secret owner" not in said and "987654" not in said and "1234" not in said, said
    assert said.count(messages.ELIDED) >= 3, said


def test_the_check_s_own_literals_earlier_answers_small_counts_and_their_joins_are_shown():
    said = hidden_message({"four_answers": {"health": "A", "progress": "B"}, "prediction": "REVOKED"},
                          orders=["CONFIRMED", "UNKNOWN"], money=(1500, 0), right=5, wrong=["health", "progress"])
    assert "['CONFIRMED', '…']" in said, said  # a literal of the check, and a status it never names
    assert "(1500, 0)" in said and "5 right" in said, said
    assert "your letter for health and progress" in said and "prediction 'REVOKED'" in said, said


def test_the_marker_becomes_a_call_at_the_indent_of_the_code_it_opens_and_lines_stay():
    source = "for case in cases:\n    run(case)\n### BEGIN HIDDEN TESTS\n    hidden(case)\n"
    made = check.marked(source, 3)
    assert made.split("\n")[2] == f"    {check.ENTER_HIDDEN}()" and len(made.split("\n")) == len(source.split("\n"))
    compile(made, "<check>", "exec")


def test_a_failing_bare_assert_in_a_visible_part_shows_its_statement_as_a_kernel_would():
    source = 'claimed = {"generation": 1}\nassert claimed["generation"] == 2\nassert (\n    False\n), "two lines"\n'
    for code, wanted in ((source, 'the test\'s line 2 failed: assert claimed["generation"] == 2'),
                         (source.replace('== 2', '== 1'), "two lines\n(the test's line 3: assert (\n    False\n), \"two lines\")")):
        with pytest.raises(AssertionError) as failed:
            exec(compile(code, messages.FILENAME, "exec"), {})
        verdict = messages.verdict(failed.value, {"check": code, "hidden_from": None, "answers": {}})
        assert verdict["message"] == wanted and verdict["ename"] == "AssertionError", verdict
