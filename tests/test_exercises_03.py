"""03_recovery's graded exercises judge the decision, not one way of writing it.

Every graded answer gets at least two correct answers written differently from the solution, which
must keep every point, and plausible wrong answers (including the weaker solutions the notebook once
had) that lose points in the cell that names the mistake. Verdicts come from the real checker with
the hidden tests (tests/checked_answers.py). Exercise 2 is built by the learner: a worker pass held at
a named point (course.holds), cancelled while held, released, then recovered; it is judged from the
records it leaves (the shop's rows and events, the supplier's ledger). The course's own experiments
that the exercises rely on are checked directly: the hold is forced without sleeping, and the forced
approvals really overlap. 03 grades no function the chapter lists, so it has no `beyond-chapter` cell
(the chapter's listing 7, its NoNewReasoning probe, runs against 03's own). Issue 24: each stale write
and crash is predicted first (a literal, no points) and the prediction printed beside what happened;
the crash timeline has real seconds on its x-axis.
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


# --- exercise 2, part A: build the held experiment (cancel while held, then release) --------------

# A named operator, and recovery through the worker's own pass (run_once begins with reconcile_once).
HELD_ANOTHER_WAY = '''
def cancel_while_held(db, work_id, supplier, point):
    def operator_cancels():
        return cancel(db, work_id)

    hold = Hold(point, operator_cancels)
    client = SupplierClient(supplier, timeout=3.0)
    record = {"held": False, "completion": "accepted"}
    try:
        run_once(db, OfflineShopModel(), owner="held-worker", policy=POLICY, supplier=hold.supplier(client),
                 ownership=hold.ownership(Ownership(order_to_continue=order_to_continue)))
    except PermissionError as refusal:
        record["completion"] = "refused"
    record["held"] = hold.fired
    record["recovery"] = run_once(db, NoNewReasoning(), owner="recovery-worker", supplier=client, policy=POLICY,
                                  ownership=Ownership(order_to_continue=order_to_continue))["status"]
    return record
'''

# Recovery passes until nothing uncertain is eligible (bounded), a fresh client each time.
HELD_UNTIL_IDLE = '''
def cancel_while_held(db: Database, work_id: str, supplier: str, point: str) -> dict:
    seam = Ownership(order_to_continue=order_to_continue)
    hold = Hold(point, while_held=lambda: cancel(db, work_id))
    completion = "accepted"
    try:
        run_once(db, OfflineShopModel(), supplier=hold.supplier(SupplierClient(supplier)), policy=POLICY,
                 ownership=hold.ownership(seam))
    except PermissionError:
        completion = "refused"
    statuses = []
    for _ in range(3):
        statuses.append(reconcile_once(db, SupplierClient(supplier), policy=POLICY, ownership=seam)["status"])
        if statuses[-1] == "IDLE":
            break
    return {"held": hold.fired, "completion": completion, "recovery": statuses[0]}
'''

# The cancel comes after the pass has been released: the completion lands first.
CANCEL_AFTER_RELEASE = '''
def cancel_while_held(db, work_id, supplier, point):
    client, mine = SupplierClient(supplier), Ownership(order_to_continue=order_to_continue)
    hold = Hold(point, lambda: None)
    try:
        run_once(db, OfflineShopModel(), supplier=hold.supplier(client), policy=POLICY, ownership=hold.ownership(mine))
        completion = "accepted"
    except PermissionError:
        completion = "refused"
    cancel(db, work_id)
    recovery = reconcile_once(db, client, policy=POLICY, ownership=mine)
    return {"held": hold.fired, "completion": completion, "recovery": recovery["status"]}
'''

# Cancelling is taken to settle everything: no recovery pass, so nobody asks the supplier.
NO_RECOVERY = '''
def cancel_while_held(db, work_id, supplier, point):
    mine = Ownership(order_to_continue=order_to_continue)
    hold = Hold(point, lambda: cancel(db, work_id))
    try:
        run_once(db, OfflineShopModel(), supplier=hold.supplier(SupplierClient(supplier)), policy=POLICY,
                 ownership=hold.ownership(mine))
        completion = "accepted"
    except PermissionError:
        completion = "refused"
    return {"held": hold.fired, "completion": completion, "recovery": "not needed: the work is cancelled"}
'''

# "Cancelled" written into the row behind the operator's path: no generation moved, nothing revoked.
EDITS_THE_ROW = NO_RECOVERY.replace(
    "hold = Hold(point, lambda: cancel(db, work_id))",
    "hold = Hold(point, lambda: db.connection.execute(\"UPDATE assistant_work SET status='CANCELLED', cancelled=1 "
    "WHERE id=?\", (work_id,)))").replace(
    '"recovery": "not needed: the work is cancelled"', '"recovery": reconcile_once(db, SupplierClient(supplier), policy=POLICY, ownership=mine)["status"]')


@pytest.mark.parametrize("source", [HELD_ANOTHER_WAY, HELD_UNTIL_IDLE], ids=["run_once recovers", "until idle"])
def test_a_held_experiment_written_differently_keeps_its_points(source):
    verdict = score("cancel_while_held", source, "test_cancel_while_held")
    assert verdict["passed"], verdict


@pytest.mark.parametrize("source, said", [
    (CANCEL_AFTER_RELEASE, "completion was written"),   # not while held: nothing was tested
    (NO_RECOVERY, "looked up by the recovery pass"),     # the supplier's yes is never discovered
    (EDITS_THE_ROW, "no cancellation of the assignment"),  # behind the operator's path
], ids=["cancel after release", "no recovery", "edits the row"])
def test_a_held_experiment_with_a_plausible_mistake_loses_the_points(source, said):
    verdict = score("cancel_while_held", source, "test_cancel_while_held")
    assert not verdict["passed"] and said in verdict["message"], verdict


def test_the_hold_is_forced_at_its_point_and_the_records_follow_cancels_rules():
    """No sleep: each point is reached in the same thread; the records are the runtime's."""
    course = _course_namespace("order_to_continue", "cancel_while_delayed_experiment", "cancel_while_held")
    started = time.monotonic()
    seen = {point: course["held_experiment"](course["cancel_while_held"], point)[1]
            for point in ("completion", "accepted", "lost")}
    assert time.monotonic() - started < 10
    assert (seen["completion"]["orders"], seen["completion"]["money"], seen["completion"]["generation"]) == (
        ["REVOKED"], (0, 0), 2)
    accepted, lost = seen["accepted"], seen["lost"]
    assert (accepted["orders"], accepted["money"], accepted["posts"], accepted["gets"]) == (["CONFIRMED"], (0, 1500), 1, 1)
    assert accepted["ledger"] == accepted["order_ids"] and accepted["settled_by"] == [4] and accepted["held_generation"] == 2
    assert (lost["orders"], lost["money"], lost["posts"], lost["gets"], lost["ledger"]) == (["SENDING"], (1500, 0), 0, 1, [])


# --- exercise 2, part A: the prediction, compared with the course's own held experiment ------------

PREDICTION_ONE_LINE = ("delayed_prediction = {'held_generation': 2, 'completion': 'refused', 'status_after': 'CANCELLED', "
                       "'generation_after': 3, 'order_after': 'REVOKED', 'reserved_after': 0}\n")


def test_a_prediction_on_one_line_keeps_its_points():
    assert score("delayed_prediction", PREDICTION_ONE_LINE, "test_delayed_prediction")["passed"]


def test_the_course_experiment_behind_the_prediction_holds_without_sleeping():
    course = _course_namespace()
    db = course["fresh_shop"]()
    work_id = course["enqueue"](db, "phone:slow", "lucy", "Check the vanilla stock", subject="SKU-VANILLA")
    started = time.monotonic()
    measured = course["held_completion"](db, work_id)
    assert time.monotonic() - started < 2
    assert measured["cancelled_while_held"] and measured["completion"] == "refused"
    assert (measured["status_after"], measured["generation_after"]) == ("CANCELLED", 2)


# --- the other graded answers: a second correct way each, and the vocabulary -----------------------

CONTINUE_TWO_QUERIES = '''
def order_to_continue(db, work):
    """Pending first (uncertain before approved, oldest first); otherwise the newest settled order."""
    pending = db.connection.execute(
        "SELECT id FROM assistant_orders WHERE work_id=? AND status IN ('SENDING','UNKNOWN','APPROVED') "
        "ORDER BY status = 'APPROVED', created, rowid LIMIT 1", (work.id,)).fetchone()
    if pending is not None:
        return pending[0]
    settled = db.connection.execute(
        "SELECT id FROM assistant_orders WHERE work_id=? AND status IN ('CONFIRMED','REJECTED') "
        "ORDER BY created DESC, rowid DESC LIMIT 1", (work.id,)).fetchone()
    return settled[0] if settled else None
'''


def test_order_to_continue_in_two_queries_keeps_its_points():
    assert score("order_to_continue", CONTINUE_TWO_QUERIES, "test_order_to_continue")["passed"]


DECISION_AS_RULES = '''
def recovery_action(order, work, receipt, *, now, supplier_timeout):
    if receipt is not None:
        return "record receipt"
    blockers = [
        bool(work["cancelled"]),
        order["approved_until"] is None or not order["approved_until"] > now,
        not work["expires"] - now > supplier_timeout,
    ]
    return "keep reserved" if any(blockers) else "resend"
'''


def test_recovery_action_as_a_list_of_blockers_keeps_its_points():
    assert score("recovery_action", DECISION_AS_RULES, "test_recovery_action")["passed"]


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
    return {cell: v["passed"] for cell, v in verdicts(NOTEBOOK, {"vocabulary": source}, only=cells).items()}


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


# --- the chapter's listings and 03 ---------------------------------------------------------------

LISTINGS = Path(__file__).resolve().parents[2] / "shared" / "seed" / "ch12-listings.json"


def test_the_chapters_own_listings_earn_every_point_not_tagged_beyond_chapter():
    """The chapter's listings define Claim, claim, assert_current, observe and finish (graded in 01 and 02);
    none of 03's answers is one of them, so 03 has no listing to submit and no cell tagged beyond-chapter:
    every point of 03 is earned by its own answers, here the solution's, through the real grader."""
    import ast

    if not LISTINGS.exists():
        pytest.skip(f"chapter listings not found at {LISTINGS}")
    listed = {node.name for entry in json.loads(LISTINGS.read_text())["listings"]
              for node in ast.parse(entry["code"]).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    cells = json.loads(SOLUTION.read_text())["cells"]
    answers = {node.name for c in cells if c["cell_type"] == "code" and c["metadata"].get("nbgrader", {}).get("solution")
               for node in ast.parse("".join(c["source"])).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert listed == {"Claim", "claim", "assert_current", "observe", "finish"}
    assert answers and not listed & answers, listed & answers
    assert not [c for c in cells if "beyond-chapter" in c["metadata"].get("tags", [])]
    probe = _course_namespace()["NoNewReasoning"]()  # listing 7, as the chapter writes it
    with pytest.raises(AssertionError):
        probe.complete([], [])
    from checked_answers import failed

    assert failed(verdicts(NOTEBOOK)) == {}


# --- issue 24: predictions before each stale write and each crash; a timeline in real seconds -------


def test_each_prediction_is_a_literal_that_earns_nothing_and_is_printed_beside_what_happened():
    import ast
    import contextlib
    import io

    cells = json.loads(SOLUTION.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    predictions = [c for c in code if "prediction" in c["metadata"].get("tags", [])]
    names = []
    for cell in predictions:
        (statement,) = ast.parse("".join(cell["source"])).body
        ast.literal_eval(statement.value)  # a literal, nothing computed
        assert not cell["metadata"].get("nbgrader", {}).get("grade")
        after = code[code.index(cell) + 1]
        assert "observation" in after["metadata"].get("tags", []), "the experiment follows its prediction"
        name = statement.targets[0].id
        assert name in "".join(after["source"]) and "you predicted" in "".join(after["source"]), name
        names.append(name)
    assert names == ["predicted_stale", "predicted_crash", "predicted_restart", "predicted_money"]
    course = _course_namespace()
    course["predicted_stale"] = {"observe": "refused", "finish": "accepted", "execute": "refused"}
    stale = next(c for c in code if c["metadata"].get("nbgrader", {}).get("grade_id") == "observe_live_stale_holder")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile("".join(stale["source"]), "<stale>", "exec"), course)
    said = printed.getvalue()
    assert "Stale finish: refused (worker claim expired or superseded) | you predicted: accepted" in said, said


def test_the_timeline_has_real_seconds_on_its_x_axis():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    course = _course_namespace()
    cells = {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"])
             for c in json.loads(SOLUTION.read_text())["cells"]}
    exec(compile(cells["observe_crash_after_acceptance"], "<crash>", "exec"), course)
    shown_figure = []
    course_show, plt.show = plt.show, lambda: shown_figure.append(plt.gcf())
    try:
        exec(compile(cells["timeline_figure"], "<timeline>", "exec"), course)
    finally:
        plt.show = course_show
    (axes,) = shown_figure[0].axes
    xs = sorted(x for line in axes.get_lines() for x in line.get_xdata() if len(line.get_xdata()) == 1)
    points = course["points"]
    assert xs == pytest.approx(sorted(t - points[0][0] for t, _, _ in points))  # seconds, not step numbers
    assert "seconds" in axes.get_xlabel() and xs[-1] > 1.5  # the 2 s lease really passed before recovery
    lease = [line for line in axes.get_lines() if line.get_linestyle() == "--"][0].get_xdata()[0]
    assert lease == pytest.approx(course["lease_end"] - points[0][0])
    plt.close("all")
