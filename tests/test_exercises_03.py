"""03_recovery's graded exercises judge the decision, not one way of writing it.

Each exercise gets at least one correct answer written differently from the solution, which must
keep every point, and wrong answers (including the weaker solutions the notebook once had) that
must lose points. Verdicts come from the real checker with the hidden tests (tests/checked_answers.py).
The course's own experiments that the exercises rely on are checked directly: the delayed
completion is really delayed, and the forced approvals really overlap.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from checked_answers import verdicts

pytestmark = pytest.mark.slow

NOTEBOOK = "03_recovery.ipynb"
SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "ch12" / NOTEBOOK


def score(answer_cell: str, source: str, test_cell: str) -> dict:
    """The verdict of one graded test cell with one answer cell replaced (its message on one line)."""
    verdict = verdicts(NOTEBOOK, {answer_cell: source}, only={test_cell})[test_cell]
    return dict(verdict, message=" ".join(str(verdict.get("message", "")).split()))


# --- exercise 2, part A: predict the delayed completion -----------------------------------------

PREDICTION_REORDERED = '''
# My prediction (a literal, in my own order):
delayed_prediction = {
    "completion": "refused",   # the cancellation moved the generation on
    "order_after": "REVOKED",
    "reserved_after": 0,
    "status_after": "CANCELLED",
    "generation_after": 3,
    "held_generation": 2,
}
'''


def test_a_prediction_written_differently_keeps_its_points():
    verdict = score("delayed_prediction", PREDICTION_REORDERED, "test_delayed_prediction")
    assert verdict["passed"], verdict


@pytest.mark.parametrize("field, wrong", [
    ("completion", '"accepted"'),          # the late completion wins
    ("generation_after", "2"),             # cancelling does not move the generation
    ("reserved_after", "1100"),            # cancel keeps the unsent order's money
    ("order_after", '"APPROVED"'),         # cancel leaves the unsent order
])
def test_a_wrong_prediction_loses_the_points(field, wrong):
    import re

    source = re.sub(rf'"{field}": [^,\n]+', f'"{field}": {wrong}', PREDICTION_REORDERED)
    assert source != PREDICTION_REORDERED
    verdict = score("delayed_prediction", source, "test_delayed_prediction")
    assert not verdict["passed"] and field in verdict["message"], verdict


def _course_namespace(*grade_ids: str) -> dict:
    """The solution's setup cells, as the judge and the learner process run them, then the
    named cells of the solution (answers written as the model solution writes them)."""
    cells = json.loads(SOLUTION.read_text())["cells"]
    namespace: dict = {"__name__": "course_cells"}
    for cell in cells:
        if "setup" in cell["metadata"].get("tags", []):
            exec(compile("".join(cell["source"]), "<setup>", "exec"), namespace)
    for cell in cells:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") in grade_ids:
            exec(compile("".join(cell["source"]), "<solution>", "exec"), namespace)
    return namespace


def test_the_delayed_completion_is_really_delayed_and_released_after_the_cancellation():
    course = _course_namespace("cancel_while_delayed_experiment")
    db = course["fresh_shop"]()
    work_id = course["enqueue"](db, "phone:slow", "lucy", "Check the vanilla stock", subject="SKU-VANILLA")
    started = time.monotonic()
    measured = course["cancel_while_delayed"](db, work_id, delay=0.4)
    elapsed = time.monotonic() - started
    assert elapsed >= 0.4, f"the experiment took {elapsed:.2f} s: no real delay"
    assert measured["cancelled_first"] and measured["completion"] == "refused"
    assert (measured["status_after"], measured["generation_after"]) == ("CANCELLED", 2)


# --- exercise 2, part B: what recovery may do ----------------------------------------------------

DECISION_ANOTHER_WAY = '''
def recovery_action(order, work, receipt, *, now, supplier_timeout):
    """Outcome first; sending only when every admission rule that can still fail holds."""
    if receipt:
        return "record receipt"
    lease_left = work["expires"] - now
    may_send = not bool(work["cancelled"]) and order["approved_until"] > now and lease_left > supplier_timeout
    return "resend" if may_send else "keep reserved"
'''
CANCELLATION_FIRST = '''
def recovery_action(order, work, receipt, *, now, supplier_timeout):
    if work["cancelled"]:
        return "keep reserved"
    if receipt is not None:
        return "record receipt"
    return "resend" if order["approved_until"] > now and work["expires"] - now > supplier_timeout else "keep reserved"
'''
FOUND_NOTHING_MEANS_SEND = '''
def recovery_action(order, work, receipt, *, now, supplier_timeout):
    return "record receipt" if receipt is not None else "resend"
'''
LEASE_EQUAL_IS_ENOUGH = '''
def recovery_action(order, work, receipt, *, now, supplier_timeout):
    if receipt is not None:
        return "record receipt"
    if work["cancelled"] or order["approved_until"] <= now or work["expires"] - now < supplier_timeout:
        return "keep reserved"
    return "resend"
'''


def test_a_decision_written_differently_keeps_its_points():
    verdict = score("recovery_action", DECISION_ANOTHER_WAY, "test_recovery_action")
    assert verdict["passed"], verdict


@pytest.mark.parametrize("source, said", [
    (CANCELLATION_FIRST, "record receipt"),        # a cancelled order's outcome is never recorded
    (FOUND_NOTHING_MEANS_SEND, "keep reserved"),   # finding nothing is taken as authority to send
    (LEASE_EQUAL_IS_ENOUGH, "MORE time left"),     # the lease must exceed the supplier's timeout
])
def test_a_wrong_decision_loses_the_points(source, said):
    verdict = score("recovery_action", source, "test_recovery_action")
    assert not verdict["passed"] and said in verdict["message"], verdict


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
ALWAYS_REFUSES_ONE = RACE_ANOTHER_WAY.replace(
    "raced = forced_approvals(db.path, first, second)",
    "raced = {\"first\": forced_approvals(db.path, first, lambda own: None)[\"first\"],\n"
    "             \"second\": ValueError(\"no room\")}")


def test_a_race_written_differently_keeps_its_points():
    verdict = score("exercise_sessions_vs_spending", RACE_ANOTHER_WAY, "test_exercise_sessions_vs_spending")
    assert verdict["passed"], verdict


@pytest.mark.parametrize("source, said", [
    (SEQUENTIAL, "one after the other"),      # the old solution's weakness: no real race
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


# --- section 6: four questions -------------------------------------------------------------------


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
    """Section 6 as the text tells it: a killed process whose lease still holds chocolate, a live
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


def test_the_stale_holder_of_section_2_differs_from_its_replacement_only_by_generation():
    """03 section 2: the stale writes arrive while the replacement is RUNNING with a live lease under the
    same owner label; a fence blind to the generation would accept them, the runtime's refuses them."""
    import re

    cells = {c["id"]: "".join(c["source"]) for c in json.loads(SOLUTION.read_text())["cells"]}
    source = cells["d5ddc423"]
    stale_at = source.index("attempts = {")
    assert source.index("execute(replacement_db, new") > stale_at and source.index("finish(replacement_db") > stale_at
    course = _course_namespace()
    db = course["fresh_shop"]()
    work_id = course["enqueue"](db, "phone:vanilla", "lucy", "Restock vanilla", subject="SKU-VANILLA")
    old = course["claim"](db, "stock-worker", ttl=30)
    expiry = db.connection.execute("SELECT expires FROM assistant_work WHERE id=?", (work_id,)).fetchone()[0]
    new = course["claim"](db, "stock-worker", now=expiry, ttl=30)
    blind = db.connection.execute(
        "SELECT 1 FROM assistant_work WHERE id=? AND owner=? AND status='RUNNING' AND expires>? AND session=? "
        "AND prompt=? AND subject=?", (old.id, old.owner, time.time(), old.session, old.prompt, old.subject)).fetchone()
    assert blind is not None and (old.owner, old.epoch) == (new.owner, new.epoch) and old.generation != new.generation
    with pytest.raises(PermissionError):
        course["observe"](db, old, {"role": "assistant", "content": "late"})
    assert re.search(r"simulate the elapsed time", cells["58b8964d"]) and "skew" not in cells["58b8964d"]


def test_order_to_continue_in_the_solution_follows_the_runtime():
    from course.checks import ORDER_STATES, order_in_state
    from sovereign_agent.assistant_orders import order_to_continue as runtime

    course = _course_namespace("order_to_continue")
    for older in ORDER_STATES:
        for newer in ("APPROVED", "CONFIRMED"):
            db, held, _ = order_in_state(older)
            course["approved_order"](db, held, "SKU-VANILLA", 2)
            if newer == "CONFIRMED":
                newest = db.connection.execute("SELECT id FROM assistant_orders ORDER BY rowid DESC").fetchone()[0]
                course["execute"](db, held, newest, course["ScriptedSupplier"]("ACCEPTED"), policy=course["POLICY"])
            assert course["order_to_continue"](db, held) == runtime(db, held), (older, newer)


# --- order_to_continue: the ordering rule, and a decision that only reads -------------------------

CONTINUE_IN_PYTHON = '''
PENDING = {"SENDING": 0, "UNKNOWN": 0, "APPROVED": 1}


def order_to_continue(db, work):
    """Ranked in Python: pending orders (uncertain first) oldest first, else the newest settled one."""
    rows = db.connection.execute(
        "SELECT id, status, created, rowid AS n FROM assistant_orders WHERE work_id = ?", (work.id,)).fetchall()
    pending = sorted((PENDING[r["status"]], r["created"], r["n"], r["id"]) for r in rows if r["status"] in PENDING)
    if pending:
        return pending[0][-1]
    settled = sorted((r["created"], r["n"], r["id"]) for r in rows if r["status"] in ("CONFIRMED", "REJECTED"))
    return settled[-1][-1] if settled else None
'''
OLDEST_PAST_DRAFT = '''
def order_to_continue(db, work):
    row = db.connection.execute(
        "SELECT id FROM assistant_orders WHERE work_id = ? AND status NOT IN ('DRAFT', 'REVOKED') "
        "ORDER BY created, rowid LIMIT 1", (work.id,)).fetchone()
    return None if row is None else row["id"]
'''
PENDING_THEN_OLDEST_SETTLED = CONTINUE_IN_PYTHON.replace("return settled[-1][-1]", "return settled[0][-1]")
LOGS_ITS_DECISION = CONTINUE_IN_PYTHON.replace(
    '    if pending:\n        return pending[0][-1]',
    '    if pending:\n        from sovereign_agent.events import append_event\n'
    '        with db.immediate():\n'
    '            append_event(db, "assistant.recovery.decided", {"work": work.id, "order": pending[0][-1]})\n'
    '        return pending[0][-1]')


def test_order_to_continue_written_differently_keeps_its_points():
    verdict = score("order_to_continue", CONTINUE_IN_PYTHON, "test_order_to_continue")
    assert verdict["passed"], verdict


@pytest.mark.parametrize("source, said", [
    (OLDEST_PAST_DRAFT, "whatever its age"),              # no uncertain-first rule
    (PENDING_THEN_OLDEST_SETTLED, "most recent outcome"),  # settled orders oldest first
    (LOGS_ITS_DECISION, "must only read"),                 # a read-only decision that writes
])
def test_order_to_continue_mistakes_lose_the_points(source, said):
    assert source != CONTINUE_IN_PYTHON
    verdict = score("order_to_continue", source, "test_order_to_continue")
    assert not verdict["passed"] and said in verdict["message"], verdict
