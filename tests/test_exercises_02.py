"""02_fencing's and 03_leases's graded answers, decided as autograde decides them (tests/checked_answers.py).

A correct answer written differently from the solution keeps every point of its check; a wrong
one loses them. Covered (03_leases uses the runtime's fences, 02 the learner's): exercise 1 (reuse the owner label), exercise 3 (remove one fence from a
copy), the prediction of the admission's lease rule (`order_may_leave`), the model-call
reservation under the fence, and `observe`'s refusal of a message that is not a JSON object; the
chapter's own listings of `assert_current`, `observe` and `finish` as answers (every point not
tagged `beyond-chapter`); fences written differently (full marks) and plausibly wrong (the cell
that names the mistake fails).
"""

from __future__ import annotations

import json

import pytest

from checked_answers import SOLUTIONS, _grade_id, failed, home, verdicts

pytestmark = pytest.mark.slow

NAME = "02_fencing.ipynb"


def grade(replace: dict[str, str], check: str) -> dict:
    """The verdict of one graded cell with `replace` (grade_id -> source) as the learner's answers."""
    return verdicts(home(check), replace, only={check})[check]


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

# Also right: the stale completion tried at the old lease's expiry. The row then holds the replacement's
# live lease, RUNNING, under the same label: the generation alone refuses it.
REUSE_AT_EXPIRY = REUSE_LONGER_LEASE.replace(
    'finish(db, old, "DONE", "stale result", now=time.time())', 'finish(db, old, "DONE", "stale result", now=lease_end)'
)

# Also right: the stale completion through the runtime's own fenced `reference.finish`, not the name `finish`.
REUSE_THROUGH_THE_RUNTIME = REUSE_LONGER_LEASE.replace(
    'finish(db, old, "DONE", "stale result", now=time.time())', 'reference.finish(db, old, "DONE", "stale result")'
)
assert "reference.finish(db, old" in REUSE_THROUGH_THE_RUNTIME

# Wrong: the stale completion is tried after the replacement finished, so the DONE status refuses it
# too, and the exercise no longer shows that the generation alone tells the two holders apart.
REUSE_AFTER_REPLACEMENT_FINISHED = '''
def reuse_owner_label(db, owner, prompt="Prepare the stock draft"):
    work_id = enqueue(db, "phone:reuse", "lucy", prompt)
    old = reference.claim(db, owner, ttl=30)
    lease_end = db.connection.execute("SELECT expires FROM assistant_work").fetchone()[0]
    new = reference.claim(db, owner, now=lease_end, ttl=30)
    finish(db, new, "DONE", "current result")
    try:
        finish(db, old, "DONE", "stale result")
        stale_refused = False
    except PermissionError:
        stale_refused = True
    stored = db.connection.execute("SELECT result FROM assistant_work WHERE id=?", (work_id,)).fetchone()[0]
    return {"old_generation": old.generation, "new_generation": new.generation, "same_owner": old.owner == new.owner,
            "stale_refused": stale_refused, "stored_result": stored}
'''

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


@pytest.mark.parametrize("answer", [REUSE_LONGER_LEASE, REUSE_AT_EXPIRY, REUSE_THROUGH_THE_RUNTIME],
                         ids=["longer lease", "at the first expiry", "through reference.finish"])
def test_exercise_1_written_differently_keeps_its_points(answer):
    verdict = grade({"exercise_reuse_owner_label": answer}, "test_exercise_reuse_owner_label")
    assert verdict["passed"], verdict


@pytest.mark.parametrize(
    "answer, said",
    [(REUSE_AFTER_REPLACEMENT_FINISHED, "not while the replacement held the work"),
     (REUSE_NEVER_TRIED, "No fence refused the old generation-1 claim"),
     (REUSE_OTHER_LABEL, "same_owner")],
    ids=["after the replacement finished", "never tried", "other label"],
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


# Wrong: reports a refused stale completion it never attempted.
STALE_COMPLETION_NEVER_TRIED = STALE_TWO_MESSAGES.replace(
    'stale_completion_refused = refused(lambda: finish(db, old, "DONE", "stale result"))',
    "stale_completion_refused = True")


# Also right: the stale completion through the runtime's `reference.finish`.
STALE_THROUGH_THE_RUNTIME = STALE_TWO_MESSAGES.replace(
    'refused(lambda: finish(db, old, "DONE", "stale result"))',
    'refused(lambda: reference.finish(db, old, "DONE", "stale result"))')
assert "reference.finish(db, old" in STALE_THROUGH_THE_RUNTIME

# Another shape: a helper that tries an action, the counts read with GROUP BY, `now` passed explicitly.
STALE_WITH_A_HELPER = '''
def attempt(action, *args, **options):
    try:
        action(*args, **options)
    except PermissionError:
        return True
    return False


def release_stale_response(db, write):
    work_id = enqueue(db, "phone:stale", "lucy", "Prepare the stock draft")
    old = reference.claim(db, "old-worker", ttl=20)
    (expires,) = db.connection.execute("SELECT expires FROM assistant_work WHERE id=?", (work_id,)).fetchone()
    new = reference.claim(db, "new-worker", now=expires, ttl=20)
    report = {
        "stale_observation_refused": attempt(write, db, old, {"role": "assistant", "content": "stale answer"}),
        "stale_completion_refused": attempt(finish, db, old, "DONE", "stale result", now=time.time()),
    }
    observe(db, new, {"role": "assistant", "content": "current answer"})
    finish(db, new, "DONE", "current result")
    report["rows_by_generation"] = {g: n for g, n in db.connection.execute(
        "SELECT generation, count(*) FROM assistant_transcript GROUP BY generation")}
    report["stored_result"] = db.connection.execute("SELECT result FROM assistant_work").fetchone()[0]
    return report
'''


@pytest.mark.parametrize("answer", [STALE_TWO_MESSAGES, STALE_WITH_A_HELPER, STALE_THROUGH_THE_RUNTIME],
                         ids=["two messages", "a helper", "through reference.finish"])
def test_exercise_3_written_differently_keeps_its_points(answer):
    verdict = grade({"exercise_stale_response_experiment": answer}, "test_exercise_stale_response_experiment")
    assert verdict["passed"], verdict


@pytest.mark.parametrize(
    "answer", [STALE_IGNORES_WRITER, STALE_NO_REPLACEMENT_FINISH, STALE_COMPLETION_NEVER_TRIED],
    ids=["ignores writer", "no finish", "completion never tried"],
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


FITS_BY_COMPARISON = '''
def order_may_leave(lease_left: float, supplier_timeout: float) -> bool:
    wait_fits = supplier_timeout < lease_left
    return bool(wait_fits)
'''


def test_the_lease_rule_written_differently_keeps_its_points_and_wrong_ones_lose_them():
    assert grade({"order_may_leave": FITS_DIFFERENTLY}, "test_order_may_leave")["passed"]
    assert grade({"order_may_leave": FITS_BY_COMPARISON}, "test_order_may_leave")["passed"]
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


def test_an_observe_that_accepts_a_bare_string_loses_only_the_beyond_chapter_point():
    found = verdicts(NAME, {"observe": OBSERVE_ANY_JSON}, only={"test_observe", "test_observe_refuses_non_dict"})
    assert found["test_observe"]["passed"], found  # the concept's points do not depend on the detail
    said = " ".join(found["test_observe_refuses_non_dict"]["message"].split())
    assert "expected ValueError and no row: a transcript message is a JSON object (a dict)" in said, said


def test_the_beyond_chapter_check_of_observe_has_hidden_cases_told_in_the_courses_words():
    refuses_strings_only = OBSERVE_ANY_JSON.replace(
        "    encoded =", "    if isinstance(message, str):\n        raise ValueError('a string')\n    encoded =")
    verdict = grade({"observe": refuses_strings_only}, "test_observe_refuses_non_dict")
    said = " ".join(verdict["message"].split())
    assert not verdict["passed"] and "a transcript message is a JSON object (a dict)" in said, verdict
    assert "['a', 'list']" not in said, said  # a hidden case's values stay hidden


# The chapter's own listings, and the fences written differently or wrongly ---------------------

# The chapter's listings of assert_current, observe and finish, verbatim. The notebook's namespace
# has no `Claim` or `Any`: the two lines above each listing bind them, as the chapter's imports do.
PREAMBLE = "from typing import Any\nClaim = reference.Claim\n\n"
CHAPTER = {
    "assert_current": PREAMBLE + '''def assert_current(connection: sqlite3.Connection, work: Claim, now: float | None = None) -> None:
    now = time.time() if now is None else now
    control = connection.execute("SELECT epoch,paused FROM assistant_control WHERE id=1").fetchone()
    location = connection.execute("PRAGMA database_list").fetchone()[2]
    try:
        current_epoch = Path(location).with_suffix(".authority").read_text()
    except OSError:
        raise PermissionError("authority marker is unavailable") from None
    if (
        not control
        or control["paused"]
        or current_epoch != control["epoch"]
        or work.epoch != current_epoch
    ):
        raise PermissionError("runtime paused or replaced by restore")
    row = connection.execute(
        "SELECT 1 FROM assistant_work WHERE id=? AND owner=? AND generation=? "
        "AND status='RUNNING' AND expires>? AND subject=? AND role=? AND session=? AND prompt=?",
        (
            work.id,
            work.owner,
            work.generation,
            now,
            work.subject,
            work.role,
            work.session,
            work.prompt,
        ),
    ).fetchone()
    if row is None:
        raise PermissionError("worker claim expired or superseded")
    if work.role == "research":
        contract = connection.execute(
            "SELECT d.deadline,p.cancelled FROM assistant_delegations d "
            "JOIN assistant_work p ON p.id=d.parent_id WHERE d.work_id=?",
            (work.id,),
        ).fetchone()
        if contract is None or contract["deadline"] <= now or contract["cancelled"]:
            raise PermissionError("delegation expired or parent cancelled")
''',
    "observe": PREAMBLE + '''def observe(db: Database, work: Claim, message: dict[str, Any]) -> None:
    with db.immediate() as connection:
        assert_current(connection, work)
        connection.execute(
            "INSERT INTO assistant_transcript(work_id,generation,message) VALUES (?,?,?)",
            (work.id, work.generation, json.dumps(message, allow_nan=False)),
        )

''',
    "finish": PREAMBLE + '''def finish(
    db: Database, work: Claim, status: str, result: str, *, now: float | None = None
) -> None:
    if status not in {"DONE", "BLOCKED", "CANCELLED"}:
        raise ValueError("invalid terminal work state")
    with db.immediate() as connection:
        assert_current(connection, work, now)
        connection.execute(
            "UPDATE assistant_work SET status=?,result=?,expires=NULL,available_after=? WHERE id=?",
            (
                status,
                result,
                (time.time() if now is None else now)
                + (min(60, 2 ** min(work.generation, 6)) if status == "BLOCKED" else 0),
                work.id,
            ),
        )
        append_event(
            db,
            "assistant.work.finished",
            {"work": work.id, "status": status, "generation": work.generation},
        )
''',
}


def beyond_chapter() -> set[str]:
    """The graded cells of 02 tagged `beyond-chapter`: what 02 asks for beyond the chapter's listings."""
    notebook = json.loads((SOLUTIONS / NAME).read_text())
    return {_grade_id(c) for c in notebook["cells"] if "beyond-chapter" in c.get("metadata", {}).get("tags", [])}


def test_the_chapters_own_listings_earn_every_point_not_tagged_beyond_chapter():
    extra = beyond_chapter()
    assert extra == {"test_observe_refuses_non_dict"}
    found = verdicts(NAME, CHAPTER)
    assert set(failed(found)) == extra, failed(found)  # the chapter's observe encodes any JSON value
    said = " ".join(found["test_observe_refuses_non_dict"]["message"].split())
    assert "a transcript message is a JSON object (a dict)" in said, said


# Checked once before the transaction, and again inside it: safe, so full marks, the forced
# interleaving included (its first check arms the harness, and the one inside refuses).
OBSERVE_CHECKS_TWICE = '''
def observe(db, work, message):
    if type(message) is not dict:
        raise ValueError("not a JSON object")
    assert_current(db.connection, work)  # early: a stale holder stops before encoding anything
    with db.immediate() as connection:
        assert_current(connection, work)  # the check that counts, in the write's transaction
        connection.execute("INSERT INTO assistant_transcript(work_id, generation, message) VALUES (?, ?, ?)",
                           (work.id, work.generation, json.dumps(message, allow_nan=False, ensure_ascii=False)))
'''

FINISH_CHECKS_TWICE = '''
DELAYS = {"DONE": lambda generation: 0, "CANCELLED": lambda generation: 0,
          "BLOCKED": lambda generation: min(60, 2 ** min(generation, 6))}


def finish(db, work, status, result, *, now=None):
    if status not in DELAYS:
        raise ValueError(status)
    when = time.time() if now is None else now
    assert_current(db.connection, work, when)
    with db.immediate() as connection:
        assert_current(connection, work, when)
        connection.execute("UPDATE assistant_work SET status=?, result=?, expires=NULL, available_after=? WHERE id=?",
                           (status, result, when + DELAYS[status](work.generation), work.id))
        append_event(db, "assistant.work.finished", {"work": work.id, "status": status, "generation": work.generation})
'''

# Reads the row and the control, and compares in Python.
ASSERT_CURRENT_IN_PYTHON = '''
def assert_current(connection, work, now=None):
    now = time.time() if now is None else now
    (_, _, file, *_) = connection.execute("PRAGMA database_list").fetchone()
    try:
        marker = Path(file).with_suffix(".authority").read_text()
    except OSError as error:
        raise PermissionError("no authority marker") from error
    control = connection.execute("SELECT epoch, paused FROM assistant_control WHERE id=1").fetchone()
    if control is None or control[1] or {marker, control[0], work.epoch} != {marker}:
        raise PermissionError("authority")
    row = connection.execute("SELECT * FROM assistant_work WHERE id=?", (work.id,)).fetchone()
    fields = ("owner", "generation", "session", "prompt", "subject", "role")
    if (row is None or row["status"] != "RUNNING" or row["expires"] is None or not row["expires"] > now
            or any(row[name] != getattr(work, name) for name in fields)):
        raise PermissionError("not the current holder")
    if work.role == "research":
        contract = connection.execute("SELECT deadline, parent_id FROM assistant_delegations WHERE work_id=?",
                                      (work.id,)).fetchone()
        if contract is None or not contract[0] > now:
            raise PermissionError("no live delegation")
        (cancelled,) = connection.execute("SELECT cancelled FROM assistant_work WHERE id=?", (contract[1],)).fetchone()
        if cancelled:
            raise PermissionError("parent cancelled")
'''


@pytest.mark.parametrize("answer", [
    {"observe": OBSERVE_CHECKS_TWICE, "finish": FINISH_CHECKS_TWICE},
    {"assert_current": ASSERT_CURRENT_IN_PYTHON},
    {**CHAPTER, "observe": OBSERVE_CHECKS_TWICE},
], ids=["checks twice", "compared in Python", "chapter, with the dict check"])
def test_fences_written_differently_keep_every_point(answer):
    assert failed(verdicts(NAME, answer)) == {}


# Wrong: owner, status and expiry, but not the generation.
GENERATION_BLIND = '''
def assert_current(connection, work, now=None):
    now = time.time() if now is None else now
    held = connection.execute("SELECT 1 FROM assistant_work WHERE id=? AND owner=? AND status='RUNNING' AND expires>?",
                              (work.id, work.owner, now)).fetchone()
    if held is None:
        raise PermissionError("not the holder")
'''
# Wrong: a holding is still current at the instant its lease ends.
NOT_STRICT = CHAPTER["assert_current"].replace("AND expires>? ", "AND expires>=? ")
# Wrong: checks in one transaction and writes in another.
OBSERVE_CHECK_OUTSIDE = '''
def observe(db, work, message):
    if not isinstance(message, dict):
        raise ValueError("not a JSON object")
    assert_current(db.connection, work)
    with db.immediate() as connection:
        connection.execute("INSERT INTO assistant_transcript(work_id, generation, message) VALUES (?, ?, ?)",
                           (work.id, work.generation, json.dumps(message, allow_nan=False)))
'''
# Wrong: no fence at all.
OBSERVE_UNFENCED = OBSERVE_CHECK_OUTSIDE.replace("    assert_current(db.connection, work)\n", "")
# Wrong: the fence reads the real clock, whatever `now` the caller gave.
FINISH_WITHOUT_NOW = CHAPTER["finish"].replace("assert_current(connection, work, now)", "assert_current(connection, work)")
# Wrong: checks in one transaction and writes in another.
FINISH_CHECK_OUTSIDE = FINISH_CHECKS_TWICE.replace("        assert_current(connection, work, when)\n", "")
# Wrong: the event is written after the completion commits.
FINISH_EVENT_AFTER = CHAPTER["finish"].replace("        append_event(\n", "    append_event(\n")


@pytest.mark.parametrize("answer, cell, said", [
    ({"assert_current": GENERATION_BLIND}, "test_assert_current", "compare the generation with the row"),
    ({"assert_current": GENERATION_BLIND}, "test_stale_holder_spends_no_model_call", "compare the generation"),
    ({"assert_current": GENERATION_BLIND}, "test_observe", "compare the generation, not only the owner label"),
    ({"assert_current": NOT_STRICT}, "test_assert_current", "At now == expires the holder was accepted"),
    ({"observe": OBSERVE_CHECK_OUTSIDE}, "test_fences_inside_the_transaction", "committed after generation 2 had taken over"),
    ({"observe": OBSERVE_UNFENCED}, "test_observe", "a stale message must not become a row"),
    ({"finish": FINISH_WITHOUT_NOW}, "test_finish", "pass `now` through to the fence"),
    ({"finish": FINISH_CHECK_OUTSIDE}, "test_fences_inside_the_transaction", "check ownership inside the UPDATE's transaction"),
    ({"finish": FINISH_EVENT_AFTER}, "test_finish", "append the event inside the same transaction"),
], ids=["generation-blind", "generation-blind, model call", "generation-blind, observe", "expiry not strict",
        "observe checks outside", "observe unfenced", "finish without now", "finish checks outside",
        "event after commit"])
def test_a_plausible_mistake_loses_the_points_of_the_cell_that_names_it(answer, cell, said):
    verdict = grade(answer, cell)
    assert not verdict["passed"] and said in " ".join(verdict["message"].split()), verdict


# Exercise 3's copy without the fence ---------------------------------------------------------

UNFENCED_COPY_OWN_WORDS = '''
def observe_without_fence(db, work, message):
    if type(message) is not dict:
        raise ValueError("a transcript message is a JSON object")
    row = (work.id, work.generation, json.dumps(message, allow_nan=False, ensure_ascii=False))
    with db.immediate() as connection:
        connection.executemany("INSERT INTO assistant_transcript(work_id, generation, message) VALUES (?, ?, ?)", [row])
'''
# The chapter's observe with its fence removed: no dict check, as in the chapter.
UNFENCED_CHAPTER_COPY = '''
def observe_without_fence(db, work, message):
    with db.immediate() as connection:
        connection.execute(
            "INSERT INTO assistant_transcript(work_id,generation,message) VALUES (?,?,?)",
            (work.id, work.generation, json.dumps(message, allow_nan=False)),
        )
'''
# Wrong: the fence is still there.
UNFENCED_STILL_FENCED = UNFENCED_COPY_OWN_WORDS.replace(
    "    with db.immediate() as connection:\n", "    with db.immediate() as connection:\n        assert_current(connection, work)\n")
# Wrong: the JSON check went with the fence.
UNFENCED_NAN_ALLOWED = UNFENCED_COPY_OWN_WORDS.replace("allow_nan=False, ", "")
# Wrong: the dict check went with the fence, though the runtime's observe, which 03_leases uses, has it.
UNFENCED_DICT_CHECK_DROPPED = UNFENCED_CHAPTER_COPY


@pytest.mark.parametrize("answer", [
    {"exercise_unfenced_observe": UNFENCED_COPY_OWN_WORDS},
    {"exercise_unfenced_observe": UNFENCED_COPY_OWN_WORDS.replace("type(message) is not dict", "not isinstance(message, dict)")},
], ids=["own words", "isinstance"])
def test_exercise_3_copy_written_differently_keeps_its_points(answer):
    assert grade(answer, "test_exercise_unfenced_observe")["passed"]


@pytest.mark.parametrize("answer, said", [
    (UNFENCED_STILL_FENCED, "this copy deliberately has no current-holder check"),
    (UNFENCED_NAN_ALLOWED, "only the fence was to be removed, not the JSON check"),
    (UNFENCED_DICT_CHECK_DROPPED, "only the fence was to be removed, not the message checks"),
], ids=["still fenced", "NaN allowed", "dict check dropped"])
def test_exercise_3_copy_wrong_answers_lose_the_points(answer, said):
    verdict = grade({"exercise_unfenced_observe": answer}, "test_exercise_unfenced_observe")
    assert not verdict["passed"] and said in " ".join(verdict["message"].split()), verdict


def test_the_solution_scores_every_check_of_02():
    assert failed(verdicts(NAME)) == {}
