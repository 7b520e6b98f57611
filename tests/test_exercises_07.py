"""07_review's graded answers judge the decision, not one way of writing it.

Exercise 4 (two sessions, one account) keeps its points written differently and loses them when
its race is not raced, its turns are not finished or a refusal is decided without asking the
account; the forced approvals it relies on really overlap. The four answers and the vocabulary keep
full marks however the dict is built, and a single green light (or a confused pair of terms) loses
the points without the key being shown. Section 1's situation is staged as its text tells it, and so
is its second round's, where the first table's letters carried over, or a running process taken for
progress, lose the points.
Verdicts come from the real checker with the hidden tests (tests/checked_answers.py).
"""

from __future__ import annotations


import pytest

import checked_answers
from checked_answers import verdicts

pytestmark = pytest.mark.slow

NOTEBOOK = "07_review.ipynb"


def score(answer_cell: str, source: str, test_cell: str) -> dict:
    return checked_answers.score(checked_answers.home(answer_cell), answer_cell, source, test_cell)


def _course_namespace(*grade_ids: str) -> dict:
    return checked_answers.course_namespace(NOTEBOOK, *grade_ids)


# --- exercise 4: two sessions, one account ------------------------------------------------------

RACE_ANOTHER_WAY = '''
def race_two_sessions(db, policy, admit):
    """Strawberry races first this time, other labels and amounts, and the turns end BLOCKED."""
    plans = [("van", "SKU-STRAWBERRY", 4), ("counter", "SKU-VANILLA", 7)]  # 1100 and 1750: each fits, not both
    held, orders = [], []
    for session, sku, quantity in plans:
        work_id = enqueue(db, f"call:{session}:{sku}", session, f"Please restock {sku}", subject=sku)
        held.append(claim(db, f"{session}-assistant", identifier=work_id, ttl=45))
    for work, (_, sku, quantity) in zip(held, plans):
        orders.append(propose(db, work, sku, quantity, target=SUPPLIER_IDENTITY))
    digests = {o: d for o, d in db.connection.execute("SELECT id, digest FROM assistant_orders")}
    first, second = (lambda own, o=o: admit(own, o, digests[o], actor="lucy", policy=policy,
                                             expires=time.time() + 120) for o in orders)
    raced = forced_approvals(db.path, first, second)
    refused = {}
    for order_id, outcome in zip(orders, (raced["first"], raced["second"])):
        if isinstance(outcome, Exception):
            refused[order_id] = repr(outcome)
    for work, order_id in zip(held, orders):
        finish(db, work, "BLOCKED", "waiting for room on the account" if order_id in refused else "approved")
    return {"claims": held, "approved": [o for o in orders if o not in refused], "refused": refused}
'''
SEQUENTIAL = RACE_ANOTHER_WAY.replace(
    "raced = forced_approvals(db.path, first, second)",
    "raced = {}\n    for key, approval in ((\"first\", first), (\"second\", second)):\n"
    "        try:\n            raced[key] = approval(db)\n        except Exception as error:\n"
    "            raced[key] = error")
NEVER_FINISHED = RACE_ANOTHER_WAY.replace(
    'finish(db, work, "BLOCKED", "waiting for room on the account" if order_id in refused else "approved")', "pass")
SLEEPS_OUT = RACE_ANOTHER_WAY.replace(  # the second approval waits out Lab's half second: the race never happens
    "raced = forced_approvals(db.path, first, second)",
    "raced = forced_approvals(db.path, first, lambda own: time.sleep(1.0) or second(own))")
ALWAYS_REFUSES_ONE = RACE_ANOTHER_WAY.replace(
    "raced = forced_approvals(db.path, first, second)",
    "raced = {\"first\": forced_approvals(db.path, first, lambda own: None)[\"first\"],\n"
    "             \"second\": ValueError(\"no room\")}")


def test_a_race_written_differently_keeps_its_points():
    verdict = score("exercise_sessions_vs_spending", RACE_ANOTHER_WAY, "test_exercise_sessions_vs_spending")
    assert verdict["passed"], verdict


@pytest.mark.parametrize("source, said", [
    (SEQUENTIAL, "one after the other"),      # the old solution's weakness: no real race
    (SLEEPS_OUT, "one after the other"),      # the same, through forced_approvals (the judge's clock decides)
    (NEVER_FINISHED, "never finished"),       # ... and turns left holding their work
    (ALWAYS_REFUSES_ONE, "admit"),            # a refusal decided without asking the account
])
def test_a_race_that_does_not_race_finish_or_ask_loses_the_points(source, said):
    assert source != RACE_ANOTHER_WAY
    verdict = score("exercise_sessions_vs_spending", source, "test_exercise_sessions_vs_spending")
    assert not verdict["passed"] and said in verdict["message"], verdict


def test_forced_approvals_really_overlap_and_only_the_account_transaction_holds():
    course = _course_namespace("session_lock_approval", "exercise_sessions_vs_spending")
    outcomes = {}
    for name in ("approve_check_then_reserve", "approve"):
        db = course["fresh_shop"]()
        evidence = course["race_two_sessions"](db, course["POLICY"], course[name])
        outcomes[name] = (len(evidence["approved"]), list(evidence["refused"].values()), course["money"](db))
    naive, sound = outcomes["approve_check_then_reserve"], outcomes["approve"]
    assert naive[0] == 1 and "CHECK constraint failed" in naive[1][0], naive  # both decided "fits"
    assert sound[0] == 1 and sound[1][0].startswith("OrderRefused") and sound[2][0] == 1500, sound


# --- section 1: four questions -------------------------------------------------------------------


def test_the_four_answers_key_keeps_full_marks():
    right = '''four_answers = dict(health="A", progress="C", cancellation="E", external="G")'''
    assert score("four_answers", right, "test_four_answers")["passed"]


@pytest.mark.parametrize("question, wrong", [
    ("health", "B"),     # a restarted process taken for a safe replacement
    ("progress", "D"),   # a live holder, and a running process, taken for progress
    ("external", "H"),   # DONE work taken for a settled order
])
def test_a_single_green_light_loses_the_points(question, wrong):
    answers = dict(health="A", progress="C", cancellation="E", external="G") | {question: wrong}
    verdict = score("four_answers", f"four_answers = {answers!r}", "test_four_answers")
    said = verdict["message"]  # hidden: which answer is wrong, never the key
    assert not verdict["passed"] and f"your letter for {question} is not the one" in said, verdict
    assert "(A)" not in said and "(C)" not in said


def test_the_four_questions_situation_stages_each_disagreement():
    """Section 1 as the text tells it: a killed process whose lease still holds chocolate, a live
    process that wrote nothing, DONE work with an UNKNOWN order; a restarted worker cannot claim."""
    from conftest import assert_nothing_left

    course = _course_namespace("four_questions_situation")
    db = course["fresh_shop"]()
    with course["start_supplier"](db.path.parent / "supplier.sqlite", drop_first_response=True) as supplier:
        exit_status = course["four_questions_situation"](db, supplier)
        report = course["status_report"](db, supplier=supplier.client())
    assert exit_status == -9
    processes = {p["owner"]: p for p in report["health"]["processes"]}
    assert processes["chocolate-worker"]["running"] is False and processes["chocolate-worker"]["lease_seconds_left"] > 20
    assert processes["counter-worker"]["running"] is True
    assert any("chocolate-worker" in item and "is not running, yet its lease runs" in item
               for item in report["health"]["attention"])  # where the closing summary says a killed worker shows
    assert [h["transcript_rows"] for h in report["progress"]["live_holders"]] == [0, 0]
    assert report["progress"]["attention"] == []  # nothing expired: the report's progress alarm stays quiet
    assert [u["work_status"] for u in report["external"]["uncertain"]] == ["DONE"]
    chocolate = db.connection.execute("SELECT id FROM assistant_work WHERE subject='SKU-CHOCOLATE'").fetchone()[0]
    assert course["claim"](db, "chocolate-worker", identifier=chocolate) is None
    assert_nothing_left(db.path.parent)


RACE_WITH_PARTIALS = '''
import functools


def race_two_sessions(db, policy, admit):
    plans = {"counter": ("SKU-VANILLA", 6), "van": ("SKU-STRAWBERRY", 5)}  # 1500 and 1375: not both in 2500
    held = {s: claim(db, f"{s}-worker", identifier=enqueue(db, f"phone:{s}", f"lucy-{s}", f"Restock {sku}", subject=sku))
            for s, (sku, _) in plans.items()}
    orders = {s: propose(db, held[s], sku, n, target=SUPPLIER_IDENTITY) for s, (sku, n) in plans.items()}

    def approval(order_id, own):
        digest = own.connection.execute("SELECT digest FROM assistant_orders WHERE id=?", (order_id,)).fetchone()[0]
        return admit(own, order_id, digest, actor="lucy", policy=policy, expires=time.time() + 300)

    raced = forced_approvals(db.path, functools.partial(approval, orders["counter"]),
                             functools.partial(approval, orders["van"]))
    outcome = {orders["counter"]: raced["first"], orders["van"]: raced["second"]}
    refused = {o: str(r) for o, r in outcome.items() if isinstance(r, BaseException)}
    for s in plans:
        finish(db, held[s], "DONE", "refused: " + refused[orders[s]] if orders[s] in refused else "approved")
    return {"claims": list(held.values()), "approved": [o for o in outcome if o not in refused], "refused": refused}
'''


def test_a_race_with_partials_and_other_amounts_keeps_its_points():
    assert score("exercise_sessions_vs_spending", RACE_WITH_PARTIALS, "test_exercise_sessions_vs_spending")["passed"]


def test_the_four_answers_built_from_a_string_keep_full_marks():
    built = 'four_answers = dict(zip(["health", "progress", "cancellation", "external"], "ACEG"))'
    assert score("four_answers", built, "test_four_answers")["passed"]


VOCABULARY_KEY = {"claim": "E", "lease": "C", "generation": "H", "fence": "A",
                  "liveness": "G", "progress": "D", "recovery": "B", "reconciliation": "F"}


def vocabulary_verdicts(source: str) -> dict:
    cells = {"test_vocabulary_format", "test_vocabulary_most", "test_vocabulary_all"}
    return {cell: v["passed"] for cell, v in verdicts("07b_recall.ipynb", {"vocabulary": source}, only=cells).items()}


@pytest.mark.parametrize("source", [
    "vocabulary = " + repr(dict(reversed(list(VOCABULARY_KEY.items())))),      # another order
    "vocabulary = {term: letter for term, letter in zip(['fence', 'recovery', 'lease', 'progress', 'claim', "
    "'reconciliation', 'liveness', 'generation'], 'ABCDEFGH')}",               # built from the definitions' order
], ids=["reordered", "comprehension"])
def test_the_vocabulary_written_differently_keeps_every_point(source):
    assert vocabulary_verdicts(source) == dict.fromkeys(
        ("test_vocabulary_format", "test_vocabulary_most", "test_vocabulary_all"), True)


@pytest.mark.parametrize("swaps, kept", [
    ([("liveness", "progress")], {"test_vocabulary_format", "test_vocabulary_most"}),        # 6 of 8
    ([("liveness", "progress"), ("recovery", "reconciliation")], {"test_vocabulary_format"}),  # 4 of 8
], ids=["liveness for progress", "and recovery for reconciliation"])
def test_a_vocabulary_that_confuses_the_pairs_loses_points(swaps, kept):
    answer = dict(VOCABULARY_KEY)
    for a, b in swaps:
        answer[a], answer[b] = answer[b], answer[a]
    found = vocabulary_verdicts(f"vocabulary = {answer!r}")
    assert {cell for cell, passed in found.items() if passed} == kept, found


# --- predicted first -----------------------------------------------------------------------------


def test_the_prediction_is_a_literal_printed_beside_what_happened():
    assert checked_answers.predictions(NOTEBOOK) == ["predicted_restart"]


# --- section 1, second round: another situation, the same four questions ---------------------------

SECOND_KEY = dict(health="D", progress="F", cancellation="H", external="B")
SECOND_SUBMISSIONS = {
    "solution": {},
    "zipped": {"second_answers": 'second_answers = dict(zip(["health", "progress", "cancellation", "external"], "DFHB"))'},
    "first_table_again": {"second_answers": f"second_answers = {dict(health='A', progress='C', cancellation='E', external='G')!r}"},
    "live_process_is_progress": {"second_answers": f"second_answers = {SECOND_KEY | {'progress': 'A'}!r}"},
}


@pytest.fixture(scope="module")
def second_verdicts() -> dict:
    """test_second_answers' verdict for each of SECOND_SUBMISSIONS, graded together as a class is."""
    found = checked_answers.verdicts_at_once(NOTEBOOK, SECOND_SUBMISSIONS, only={"test_second_answers"})
    return {label: dict(v["test_second_answers"], message=" ".join(str(v["test_second_answers"].get("message", "")).split()))
            for label, v in found.items()}


def test_the_second_answers_are_worth_two_points():
    import json

    cells = json.loads((checked_answers.RELEASE / NOTEBOOK).read_text())["cells"]
    (test,) = [c for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == "test_second_answers"]
    assert test["metadata"]["nbgrader"]["points"] == 2 and test["metadata"]["nbgrader"]["grade"]


@pytest.mark.parametrize("label", ["solution", "zipped"])
def test_the_second_answers_keep_full_marks_however_written(second_verdicts, label):
    assert second_verdicts[label]["passed"], second_verdicts[label]


@pytest.mark.parametrize("label, question", [
    ("first_table_again", "health"),          # the first situation's letters carried over: wrong for every question
    ("live_process_is_progress", "progress"),  # a running process taken for progress
])
def test_a_carried_over_or_green_light_answer_loses_the_points(second_verdicts, label, question):
    verdict = second_verdicts[label]
    said = verdict["message"]  # hidden: which question is wrong and what the report showed, never the key
    assert not verdict["passed"] and f"your letter for {question} is not the one" in said, verdict
    assert "GRADING ERROR" not in said and not any(f"({k})" in said or f"'{k}'" in said or f'"{k}"' in said
                                                   for k in SECOND_KEY.values()), said


def test_the_second_situation_stages_what_its_text_says():
    """The next morning as told: vanilla CONFIRMED by a lookup (no second order), chocolate's live
    process holding an expired lease with nothing written, strawberry cancelled with its order UNKNOWN."""
    from conftest import assert_nothing_left

    course = _course_namespace("second_situation")
    db = course["fresh_shop"]()
    with course["start_supplier"](db.path.parent / "supplier.sqlite", drop_first_response=True) as supplier:
        ids = course["second_situation"](db, supplier)
        report = course["status_report"](db, supplier=supplier.client())
        assert [r["method"] for r in supplier.requests() if r["operation"]] == ["POST", "GET"]
        assert len(supplier.orders()) == 1
    (held,) = report["health"]["processes"]
    assert (held["work"], held["running"]) == (ids["chocolate"], True) and held["lease_seconds_left"] < 0
    assert any("is running, but its lease ran out" in item for item in report["health"]["attention"])
    assert report["progress"]["live_holders"] == [] and report["progress"]["attention"]  # the expired holder
    assert [u["work"] for u in report["cancellation"]["uncertain"]] == [ids["strawberry"]]
    assert report["external"]["money"]["reserved_pence"] == 825 and report["external"]["money"]["spent_pence"] == 1500
    assert course["claim"](db, "another-worker", identifier=ids["chocolate"]) is not None  # the expired lease is free
    assert_nothing_left(db.path.parent)
