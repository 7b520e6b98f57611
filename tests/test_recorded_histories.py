"""06's invariant over recorded runs: the recordings are real, a disguise keeps every verdict, and
the graded `money_conserved` keeps its points written differently and loses them for a plausible
mistake (through the real judge, hidden tests included: tests/checked_answers.py).
"""

from __future__ import annotations

import json
import random
import sys

import pytest

from checked_answers import verdicts_at_once
from course.checkpoint import history, recorded
from record_histories import RUNS, record

pytestmark = pytest.mark.slow

NOTEBOOK, TEST = "06_explore.ipynb", "test_money_conserved"


def verdicts(kept: dict) -> dict[str, bool]:
    return {name: bool(invariant(kept)) for name, invariant in history.INVARIANTS.items()}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="real processes, /proc, PR_SET_PDEATHSIG")
def test_each_recording_is_what_running_it_again_gives(tmp_path):
    """Every kept run, recorded again from real processes: new ids, the same verdict of each invariant."""
    kept = {recording.name: recording.history for recording in recorded.recordings()}
    assert sorted(kept) == sorted(RUNS), "the recordings and tests/record_histories.py's runs differ"
    for name in RUNS:
        again = record(name, tmp_path)
        assert verdicts(again) == verdicts(kept[name]), name
        assert {o["id"] for o in again["orders"]}.isdisjoint(o["id"] for o in kept[name]["orders"])
    flagged = {name for name, h in kept.items() if history.money_conserved(h)}
    assert flagged == {"releases-when-unknown", "rejects-when-unknown"}  # and six that hold, three of them tricky


def test_a_disguised_run_keeps_every_verdict_and_none_of_its_names():
    draw = random.Random(5)
    for recording in recorded.recordings():
        disguised = recorded.disguised(recording.history, draw)
        assert verdicts(disguised) == verdicts(recording.history), recording.name
        text = json.dumps(disguised)
        names = [*(w["id"] for w in recording.history["work"]), *(o["id"] for o in recording.history["orders"]),
                 *(e["payload"]["origin"] for e in recording.history["events"] if "origin" in e["payload"])]
        assert names and not any(name in text for name in names), recording.name
        assert disguised["events"][-1]["created_at"] != recording.history["events"][-1]["created_at"]


def test_an_unknown_recording_is_refused_by_name():
    with pytest.raises(LookupError, match="no recorded history named .'nope'."):
        recorded.recordings(["nope"])


WRITTEN_DIFFERENTLY = '''
def money_conserved(history):
    approved_ids, money_in = set(), 0
    for event in history["events"]:
        if event["kind"].endswith(".approved"):
            money_in += event["payload"]["amount"]
            approved_ids.add(event["payload"]["order"])
    back = sum(o["amount"] for o in history["orders"]
               if o["status"] in {"REVOKED", "REJECTED"} and o["id"] in approved_ids)
    account = history["account"]
    gap = money_in - (account["reserved_pence"] + account["spent_pence"] + back)
    return () if gap == 0 else (f"{gap} pence unaccounted for",)
'''
SOLUTION_BODY = '''
def money_conserved(history):
    approved = sum(e["payload"]["amount"] for e in history["events"] if e["kind"] == "assistant.order.approved")
    account = history["account"]
    {released}
    return [] if {total} == approved else ["the money does not add up"]
'''
# name -> (the answer, a phrase the first failed check's message holds)
WRONG = {
    "ignores_released": (SOLUTION_BODY.format(released="", total='account["reserved_pence"] + account["spent_pence"]'),
                         "REJECTED"),
    "counts_every_order": (SOLUTION_BODY.replace(
        'sum(e["payload"]["amount"] for e in history["events"] if e["kind"] == "assistant.order.approved")',
        'sum(o["amount"] for o in history["orders"])').format(
        released='released = sum(o["amount"] for o in history["orders"] if o["status"] in ("REJECTED", "REVOKED"))',
        total='account["reserved_pence"] + account["spent_pence"] + released'), "DRAFT"),
    "nothing_left_reserved": ('def money_conserved(history):\n    reserved = history["account"]["reserved_pence"]\n'
                              '    return [] if reserved == 0 else [f"{reserved} pence still reserved"]\n',
                              "gave the reservation back"),
    "returns_a_bool": ('def money_conserved(history):\n    a = history["account"]\n'
                       '    approved = sum(e["payload"]["amount"] for e in history["events"]\n'
                       '                   if e["kind"].endswith("approved"))\n'
                       '    return a["reserved_pence"] + a["spent_pence"] == approved\n',
                       "expected a list of violations"),
    "the_course_s_own": ("from course.checkpoint.history import money_conserved", "tripwire"),
}


@pytest.fixture(scope="module")
def graded():
    answers = {"right": None, "written_differently": WRITTEN_DIFFERENTLY,
               **{name: wrong for name, (wrong, _) in WRONG.items()}}
    return verdicts_at_once(NOTEBOOK, {name: {"money_conserved": answer} if answer else {}
                                       for name, answer in answers.items()}, only={TEST})


@pytest.mark.parametrize("name", ["right", "written_differently"])
def test_a_right_invariant_keeps_every_point(graded, name):
    assert graded[name][TEST]["passed"], graded[name][TEST]


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_plausible_wrong_invariant_loses_the_points_and_is_told_why(graded, name):
    verdict = graded[name][TEST]
    assert not verdict["passed"] and WRONG[name][1] in " ".join(str(verdict.get("message")).split()), verdict
