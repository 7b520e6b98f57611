"""02_fencing's graded answers, decided as autograde decides them (tests/checked_answers.py).

A correct answer written differently from the solution keeps every point of its check; a wrong
one loses them. Covered: exercise 1 (reuse the owner label), exercise 3 (remove one fence from a
copy), the prediction of the admission's lease rule (`order_may_leave`), the model-call
reservation under the fence, and `observe`'s refusal of a message that is not a JSON object.
"""

from __future__ import annotations

import pytest

from checked_answers import failed, verdicts

pytestmark = pytest.mark.slow

NAME = "02_fencing.ipynb"


def grade(replace: dict[str, str], check: str) -> dict:
    """The verdict of one graded cell with `replace` (grade_id -> source) as the learner's answers."""
    return verdicts(NAME, replace, only={check})[check]


# Exercise 1 -------------------------------------------------------------------------------------

# A longer lease, a replacement a little after the expiry, `now` passed explicitly on the real
# clock, and the evidence read back from the records.
REUSE_LONGER_LEASE = '''
def reuse_owner_label(db, owner, prompt="Prepare the stock draft"):
    work_id = enqueue(db, "phone:reuse", "lucy", prompt)
    old = reference.claim(db, owner, ttl=45)
    lease_end = db.connection.execute("SELECT expires FROM assistant_work").fetchone()["expires"]
    new = reference.claim(db, owner, now=lease_end + 2.5, ttl=45)
    stale_refused = False
    try:
        finish(db, old, "DONE", "stale result", now=time.time())
    except PermissionError:
        stale_refused = True
    finish(db, new, "DONE", "current result")
    (stored,) = db.connection.execute("SELECT result FROM assistant_work WHERE id=?", (work_id,)).fetchone()
    return dict(old_generation=old.generation, new_generation=new.generation, same_owner=old.owner == new.owner,
                stale_refused=stale_refused, stored_result=stored)
'''

# The stale attempt through the runtime's own finish, which 02's grading replaces by a tripwire.
REUSE_RUNTIME_FINISH = REUSE_LONGER_LEASE.replace(
    'finish(db, old, "DONE", "stale result", now=time.time())', 'reference.finish(db, old, "DONE", "stale result")'
)

# Wrong: the stale completion is tried at the old lease's expiry, so expiry refuses it, not the generation.
REUSE_AT_EXPIRY = REUSE_LONGER_LEASE.replace(
    'finish(db, old, "DONE", "stale result", now=time.time())', 'finish(db, old, "DONE", "stale result", now=lease_end)'
)

# Wrong: never tries the stale completion and reports a refusal it did not observe.
REUSE_NEVER_TRIED = '''
def reuse_owner_label(db, owner, prompt="Prepare the stock draft"):
    enqueue(db, "phone:reuse", "lucy", prompt)
    old = reference.claim(db, owner, ttl=30)
    lease_end = db.connection.execute("SELECT expires FROM assistant_work").fetchone()[0]
    new = reference.claim(db, owner, now=lease_end, ttl=30)
    finish(db, new, "DONE", "current result")
    return {"old_generation": old.generation, "new_generation": new.generation, "same_owner": True,
            "stale_refused": True, "stored_result": "current result"}
'''

# Wrong: the replacement uses another label, so the exercise shows nothing about reused labels.
REUSE_OTHER_LABEL = REUSE_LONGER_LEASE.replace(
    "new = reference.claim(db, owner,", 'new = reference.claim(db, owner + "-2",'
)


@pytest.mark.parametrize("answer", [REUSE_LONGER_LEASE], ids=["longer lease"])
def test_exercise_1_written_differently_keeps_its_points(answer):
    verdict = grade({"exercise_reuse_owner_label": answer}, "test_exercise_reuse_owner_label")
    assert verdict["passed"], verdict


@pytest.mark.parametrize(
    "answer, said",
    [(REUSE_AT_EXPIRY, "at or after the old lease's expiry"),
     (REUSE_NEVER_TRIED, "No fence refused the old generation-1 claim"),
     (REUSE_OTHER_LABEL, "same_owner"),
     # 02's own answers are replaced by tripwires while 02 is graded: the exercise uses the learner's.
     (REUSE_RUNTIME_FINISH, "called the course's own `finish`")],
    ids=["tried at expiry", "never tried", "other label", "runtime finish"],
)
def test_exercise_1_wrong_answers_lose_the_points(answer, said):
    verdict = grade({"exercise_reuse_owner_label": answer}, "test_exercise_reuse_owner_label")
    assert not verdict["passed"] and said in " ".join(verdict["message"].split()), verdict


# Exercise 3 -------------------------------------------------------------------------------------

# Another lease, a stale response of two messages with other words, rows counted in Python.
STALE_TWO_MESSAGES = '''
def release_stale_response(db, write):
    work_id = enqueue(db, "phone:stale", "lucy", "Prepare the stock draft")
    old = reference.claim(db, "old-worker", ttl=60)
    lease_end = db.connection.execute("SELECT expires FROM assistant_work").fetchone()[0]
    new = reference.claim(db, "new-worker", now=lease_end, ttl=60)

    def refused(action):
        try:
            action()
        except PermissionError:
            return True
        return False

    stale_observation_refused = refused(lambda: [
        write(db, old, {"role": "assistant", "content": text}) for text in ("late reply", "and a late afterthought")
    ])
    stale_completion_refused = refused(lambda: finish(db, old, "DONE", "stale result"))
    observe(db, new, {"role": "assistant", "content": "the replacement's reply"})
    finish(db, new, "DONE", "current result")
    counts = {}
    rows = db.connection.execute("SELECT generation FROM assistant_transcript WHERE work_id=?", (work_id,))
    for (generation,) in rows:
        counts[generation] = counts.get(generation, 0) + 1
    return {"rows_by_generation": counts, "stale_observation_refused": stale_observation_refused,
            "stale_completion_refused": stale_completion_refused,
            "stored_result": db.connection.execute("SELECT result FROM assistant_work").fetchone()[0]}
'''

# Wrong: the stale response goes through the fenced observe, whatever writer is being tested.
STALE_IGNORES_WRITER = STALE_TWO_MESSAGES.replace("write(db, old,", "observe(db, old,")

# Wrong: the replacement never finishes, so no current result is stored.
STALE_NO_REPLACEMENT_FINISH = STALE_TWO_MESSAGES.replace('    finish(db, new, "DONE", "current result")\n', "")


def test_exercise_3_written_differently_keeps_its_points():
    answer = {"exercise_stale_response_experiment": STALE_TWO_MESSAGES}
    verdict = grade(answer, "test_exercise_stale_response_experiment")
    assert verdict["passed"], verdict


@pytest.mark.parametrize(
    "answer", [STALE_IGNORES_WRITER, STALE_NO_REPLACEMENT_FINISH], ids=["ignores writer", "no finish"]
)
def test_exercise_3_wrong_answers_lose_the_points(answer):
    verdict = grade({"exercise_stale_response_experiment": answer}, "test_exercise_stale_response_experiment")
    assert not verdict["passed"] and verdict["ename"] == "CheckFailed", verdict


# The lease rule, predicted --------------------------------------------------------------------

FITS_DIFFERENTLY = '''
def order_may_leave(lease_left, supplier_timeout):
    return not lease_left - supplier_timeout <= 0
'''
AT_THE_BOUNDARY_TOO = '''
def order_may_leave(lease_left, supplier_timeout):
    return lease_left >= supplier_timeout
'''
ALWAYS = '''
def order_may_leave(lease_left, supplier_timeout):
    return True
'''


def test_the_lease_rule_written_differently_keeps_its_points_and_wrong_ones_lose_them():
    assert grade({"order_may_leave": FITS_DIFFERENTLY}, "test_order_may_leave")["passed"]
    boundary = grade({"order_may_leave": AT_THE_BOUNDARY_TOO}, "test_order_may_leave")
    assert not boundary["passed"]
    said = " ".join(boundary["message"].split())
    assert "With 1.0 s of lease left and a 1.0 s supplier timeout you predicted sent" in said
    always = grade({"order_may_leave": ALWAYS}, "test_order_may_leave")
    assert not always["passed"] and "With 1.0 s of lease left" in " ".join(always["message"].split())


# The model-call reservation -------------------------------------------------------------------

OWNER_ONLY = '''
def assert_current(connection, work, now=None):
    """Wrong on purpose: trusts the owner label and nothing else."""
    held = connection.execute("SELECT 1 FROM assistant_work WHERE id=? AND owner=?", (work.id, work.owner)).fetchone()
    if held is None:
        raise PermissionError("not the owner")
'''


def test_a_fence_that_trusts_the_label_lets_a_stale_holder_spend_a_model_call():
    verdict = grade({"assert_current": OWNER_ONLY}, "test_stale_holder_spends_no_model_call")
    assert not verdict["passed"]
    said = " ".join(verdict["message"].split())
    assert said.startswith("After a takeover (same label)") and "compare the generation" in said, said


# observe: a transcript message is a JSON object ----------------------------------------------

# The solution's observe before issue 14: it wrote any JSON value, where the runtime refuses.
OBSERVE_ANY_JSON = '''
def observe(db, work, message):
    encoded = json.dumps(message, allow_nan=False)
    with db.immediate() as connection:
        assert_current(connection, work)
        connection.execute(
            "INSERT INTO assistant_transcript(work_id, generation, message) VALUES (?, ?, ?)",
            (work.id, work.generation, encoded),
        )
'''


def test_an_observe_that_accepts_a_bare_string_loses_its_points():
    verdict = grade({"observe": OBSERVE_ANY_JSON}, "test_observe")
    assert not verdict["passed"]
    said = " ".join(verdict["message"].split())  # a hidden check: its own words, not the values of its case
    assert "expected ValueError and no row: a transcript message is a JSON object (a dict)" in said, said
    assert "a bare string" not in said


def test_the_solution_scores_every_check_of_02():
    assert failed(verdicts(NAME)) == {}
