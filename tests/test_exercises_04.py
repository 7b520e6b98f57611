"""04_recovery's graded exercises judge the decision, not one way of writing it.

Every graded answer gets at least two correct answers written differently from the solution, which
must keep every point, and plausible wrong answers (including the weaker solutions the notebook once
had) that lose points in the cell that names the mistake. Verdicts come from the real checker with
the hidden tests (tests/checked_answers.py). Exercise 2 is built by the learner: a worker pass held at
a named point (course.lessons.holds), cancelled while held, released, then recovered; it is judged from the
records it leaves (the shop's rows and events, the supplier's ledger). The course's own experiments
that the exercises rely on are checked directly: the hold is forced without sleeping. 04 grades no
function the chapter lists, so it has no `beyond-chapter` cell (the chapter's listing 7, its NoNewReasoning probe, runs against 04's own). Issue 24: each stale write
and crash is predicted first (a literal, no points) and the prediction printed beside what happened;
the crash timeline has real seconds on its x-axis.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import checked_answers
from checked_answers import verdicts

pytestmark = pytest.mark.slow

NOTEBOOK, PART_2 = "04_recovery.ipynb", "04b_cancel.ipynb"  # section 1's answer; exercise 2's (in 04b)
SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "ch12" / NOTEBOOK


def score(answer_cell: str, source: str, test_cell: str) -> dict:
    return checked_answers.score(checked_answers.home(answer_cell), answer_cell, source, test_cell)


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
    """04's setup (04b's, for exercise 2's cells: it loads the saved 04's `order_to_continue`) and `grade_ids`."""
    return checked_answers.course_namespace(checked_answers.home(grade_ids) if grade_ids else NOTEBOOK, *grade_ids)


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


def test_the_stale_holder_of_section_2_differs_from_its_replacement_only_by_generation():
    """04 section 2: the stale writes arrive while the replacement is RUNNING with a live lease under the
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
    from course.lessons.checks import ORDER_STATES, order_in_state
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
    course = _course_namespace("cancel_while_delayed_experiment", "cancel_while_held")
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


# --- the chapter's listings and 04 ---------------------------------------------------------------

LISTINGS = Path(__file__).resolve().parents[2] / "shared" / "seed" / "ch12-listings.json"


def test_the_chapters_own_listings_earn_every_point_not_tagged_beyond_chapter():
    """The chapter's listings define Claim, claim, assert_current, observe and finish (graded in 01 and 02);
    none of 04's answers is one of them, so 04 has no listing to submit and no cell tagged beyond-chapter:
    every point of 04 is earned by its own answers, here the solution's, through the real grader."""
    import ast

    if not LISTINGS.exists():
        pytest.skip(f"chapter listings not found at {LISTINGS}")
    listed = {node.name for entry in json.loads(LISTINGS.read_text())["listings"]
              for node in ast.parse(entry["code"]).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    cells = [c for name in (NOTEBOOK, PART_2) for c in json.loads((SOLUTION.parent / name).read_text())["cells"]]
    answers = {node.name for c in cells if c["cell_type"] == "code" and c["metadata"].get("nbgrader", {}).get("solution")
               for node in ast.parse("".join(c["source"])).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert listed == {"Claim", "claim", "assert_current", "observe", "finish"}
    assert answers and not listed & answers, listed & answers
    assert not [c for c in cells if "beyond-chapter" in c["metadata"].get("tags", [])]
    probe = _course_namespace()["NoNewReasoning"]()  # listing 7, as the chapter writes it
    with pytest.raises(AssertionError):
        probe.complete([], [])
    from checked_answers import failed

    assert failed(verdicts(NOTEBOOK)) == {} and failed(verdicts(PART_2)) == {}


# --- issue 24: predictions before each stale write and each crash; a timeline in real seconds -------


def test_each_prediction_is_a_literal_that_earns_nothing_and_is_printed_beside_what_happened(tmp_path, monkeypatch):
    import contextlib
    import io

    monkeypatch.chdir(tmp_path)  # where the prediction is kept (.predictions.jsonl)
    assert checked_answers.predictions(NOTEBOOK) == ["predicted_stale", "predicted_crash", "predicted_delivery"]
    assert checked_answers.predictions(PART_2) == ["predicted_money"]  # delivery: tests/test_observations_alone.py
    code = [c for c in json.loads(SOLUTION.read_text())["cells"] if c["cell_type"] == "code"]
    course = _course_namespace()
    course["predicted_stale"] = {"observe": "refused", "finish": "accepted", "execute": "refused"}
    stale = next(c for c in code if c["metadata"].get("nbgrader", {}).get("grade_id") == "observe_live_stale_holder")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile("".join(stale["source"]), "<stale>", "exec"), course)
    said = " ".join(printed.getvalue().split())
    assert "Stale finish: refused (worker claim expired or superseded)" in said, said
    assert ("You predicted {'observe': 'refused', 'finish': 'accepted', 'execute': 'refused'}; the run showed "
            "{'observe': 'refused', 'finish': 'refused', 'execute': 'refused'}: not what you predicted (for 'finish')"
            ) in said, said
    (kept,) = [json.loads(line) for line in (tmp_path / ".predictions.jsonl").read_text().splitlines()]
    assert (kept["name"], kept["held"]) == ("predicted_stale", False), kept


def test_the_timeline_has_real_seconds_on_its_x_axis(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.chdir(tmp_path)  # where the prediction is kept (.predictions.jsonl)
    course = _course_namespace()
    course["predicted_crash"] = {"POST": 1, "GET": 1, "first pass": "vanilla"}  # the experiment waits for it
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
