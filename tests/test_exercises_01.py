"""01_claims's graded answers, decided as autograde decides them (tests/checked_answers.py).

The chapter's own listings of `Claim` and `claim`, submitted as the answers, earn every point not
tagged `beyond-chapter` (01 asks for nothing beyond the chapter, so: every point). Each answer
written differently from the solution keeps every point; each plausible mistake loses the points
of the cell that names it, and that cell says what it observed, what it expected and why.
"""

from __future__ import annotations

import json

import pytest

from checked_answers import SOLUTIONS, _grade_id, failed, verdicts_at_once

pytestmark = pytest.mark.slow

NAME = "01_claims.ipynb"
CELLS = {"test_claim_dataclass", "test_claim_acquires", "test_claim_replacement", "test_claim_selection",
         "test_claim_validation", "test_claim_race"}


def grade(replace: dict[str, str]) -> dict[str, dict]:
    """Every graded cell of 01, with `replace` (grade_id -> source) as the learner's answers: from
    the module's one class of submissions (`graded`), graded together."""
    found = _graded[json.dumps(replace, sort_keys=True)]
    assert set(found) == CELLS, sorted(found)
    return found


_graded: dict[str, dict[str, dict]] = {}


@pytest.fixture(scope="module", autouse=True)
def graded():
    """Every submission the tests below grade, graded at once (as a class would be)."""
    answers = [CHAPTER, *({"claim_dataclass": a} for a in [*CLASSES_DIFFERENT, *CLASS_MISTAKES]), *CLAIMS_DIFFERENT,
               *({"claim": m[0]} for m in MISTAKES.values()), {"claim": RACY_CTE}]
    labels = {json.dumps(a, sort_keys=True): a for a in answers}
    _graded.update(verdicts_at_once(NAME, labels))
    yield
    _graded.clear()


def said(verdict: dict) -> str:
    """A verdict's message on one line (messages are wrapped for the Validate dialog)."""
    return " ".join(str(verdict.get("message", "")).split())


# The chapter's own listings ---------------------------------------------------------------------

# Verbatim from the chapter (listing 1's class, listing 2's function), with the imports each needs
# above it, as the chapter's first listing has them.
CHAPTER = {
    "claim_dataclass": '''from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    id: str
    session: str
    prompt: str
    generation: int
    owner: str
    epoch: str
    subject: str = ""
    role: str = "shop"
''',
    "claim": '''import math
import time

from sovereign_agent.database import Database
from sovereign_agent.events import append_event


def claim(
    db: Database,
    owner: str,
    *,
    now: float | None = None,
    ttl: float = 90,
    recovery_only: bool = False,
    control_only: bool = False,
    role: str = "shop",
    identifier: str = "",
) -> Claim | None:
    now = time.time() if now is None else now
    if not owner or not math.isfinite(now) or not math.isfinite(ttl) or not 0 < ttl <= 3600:
        raise ValueError("bounded claim lifetime required")
    with db.immediate() as connection:
        control = connection.execute(
            "SELECT epoch,paused FROM assistant_control WHERE id=1"
        ).fetchone()
        if control["paused"]:
            return None
        row = connection.execute(
            "SELECT w.* FROM assistant_work w WHERE w.role=? AND (?='' OR w.id=?) "
            "AND w.available_after<=? AND "
            "(?=0 OR w.control=1) AND "
            "((?=0 AND w.status='READY') OR (w.status='RUNNING' AND w.expires<=?) OR "
            "(?=1 AND w.status IN ('READY','BLOCKED','CANCELLED'))) AND "
            "(?=0 OR EXISTS (SELECT 1 FROM assistant_orders o WHERE o.work_id=w.id "
            "AND o.status IN ('SENDING','UNKNOWN'))) AND NOT EXISTS "
            "(SELECT 1 FROM assistant_work other WHERE other.session=w.session "
            "AND other.status='RUNNING' AND other.expires>?) "
            "ORDER BY w.control DESC,w.created,w.rowid LIMIT 1",
            (
                role,
                identifier,
                identifier,
                now,
                control_only,
                recovery_only,
                now,
                recovery_only,
                recovery_only,
                now,
            ),
        ).fetchone()
        if row is None:
            return None
        generation = row["generation"] + 1
        connection.execute(
            "UPDATE assistant_work SET status='RUNNING',generation=?,owner=?,expires=? WHERE id=?",
            (generation, owner, now + ttl, row["id"]),
        )
        append_event(db, "assistant.work.claimed", {"work": row["id"], "generation": generation})
        return Claim(
            row["id"],
            row["session"],
            row["prompt"],
            generation,
            owner,
            control["epoch"],
            row["subject"],
            row["role"],
        )
''',
}


def beyond_chapter() -> set[str]:
    """The graded cells of 01 tagged `beyond-chapter`: what 01 asks for beyond the chapter's listings."""
    notebook = json.loads((SOLUTIONS / NAME).read_text())
    return {_grade_id(c) for c in notebook["cells"] if "beyond-chapter" in c.get("metadata", {}).get("tags", [])}


def test_the_chapters_own_listings_earn_every_point_not_tagged_beyond_chapter():
    extra = beyond_chapter()
    assert extra == set()  # the chapter's claim validates its arguments: 01 asks nothing beyond it
    found = grade(CHAPTER)
    assert set(failed(found)) == extra, failed(found)


def test_the_listings_are_the_chapters_verbatim():
    """The answers above are the chapter's code, character for character (the book's listings file,
    when this machine has it)."""
    from pathlib import Path

    listings = Path(__file__).resolve().parents[2] / "shared" / "seed" / "ch12-listings.json"
    if not listings.exists():
        pytest.skip("the chapter's listings file is not on this machine")
    code = [listing["code"] for listing in json.loads(listings.read_text())["listings"]]
    body = CHAPTER["claim_dataclass"].split("\n\n\n", 1)[1]
    assert body in code[0]
    function = CHAPTER["claim"].split("\n\n\n", 1)[1]
    assert code[1].startswith(function)


# Claim, written differently ---------------------------------------------------------------------

# Slots, a docstring, a derived property (the judge mirrors the declaration, not the methods).
CLASS_SLOTS = '''
@dataclass(frozen=True, slots=True)
class Claim:
    """What a worker holds: the assignment's own fields, then the holding (generation, owner, epoch)."""

    id: str
    session: str
    prompt: str
    generation: int
    owner: str
    epoch: str
    subject: str = ""
    role: str = "shop"

    @property
    def holding(self) -> tuple[str, int]:
        return self.id, self.generation
'''

# The module spelled out, explicit field() defaults and flags, ordering, and a type check.
CLASS_FIELDS = '''
import dataclasses


@dataclasses.dataclass(frozen=True, eq=True, order=True)
class Claim:
    id: str
    session: str
    prompt: str
    generation: int
    owner: str
    epoch: str
    subject: str = dataclasses.field(default="")
    role: str = dataclasses.field(default="shop")

    def __post_init__(self):
        if not isinstance(self.generation, int) or self.generation < 0:
            raise TypeError(f"generation must be a whole number, not {self.generation!r}")
'''


CLASSES_DIFFERENT = [CLASS_SLOTS, CLASS_FIELDS]


@pytest.mark.parametrize("answer", CLASSES_DIFFERENT, ids=["slots", "field() defaults"])
def test_a_claim_class_written_differently_keeps_every_point(answer):
    assert failed(grade({"claim_dataclass": answer})) == {}


# Claim, wrong ----------------------------------------------------------------------------------

CLASS_NOT_FROZEN = CLASS_SLOTS.replace("@dataclass(frozen=True, slots=True)", "@dataclass(slots=True)")
# Wrong: claims compared by identity, so one rebuilt from the records is never equal to the held one.
CLASS_BY_IDENTITY = CLASS_SLOTS.replace("@dataclass(frozen=True, slots=True)", "@dataclass(frozen=True, eq=False)")
# Wrong: the role defaults to nothing, where Lucy's ordinary work is "shop".
CLASS_NO_ROLE_DEFAULT = CLASS_SLOTS.replace('role: str = "shop"', 'role: str = ""')
# Wrong: the generation takes no part in equality, so two holdings of one assignment look alike.
CLASS_GENERATION_NOT_COMPARED = CLASS_FIELDS.replace(
    "    generation: int\n", "    generation: int = dataclasses.field(compare=False)\n")


CLASS_MISTAKE_PHRASES = {
    CLASS_NOT_FROZEN: "Setting held.generation = 2 succeeded; expected dataclasses.FrozenInstanceError",
    CLASS_BY_IDENTITY: "Two claims with identical fields compare unequal",
    CLASS_NO_ROLE_DEFAULT: "expected '' and 'shop'",
    CLASS_GENERATION_NOT_COMPARED: "Claims for generation 1 and generation 2 of the same assignment compare equal",
}
CLASS_MISTAKES = list(CLASS_MISTAKE_PHRASES)


@pytest.mark.parametrize("answer, phrase", CLASS_MISTAKE_PHRASES.items(),
                         ids=["not frozen", "compared by identity", "no role default", "generation not compared"])
def test_a_wrong_claim_class_loses_the_points_of_its_own_cell_only(answer, phrase):
    found = grade({"claim_dataclass": answer})
    assert set(failed(found)) == {"test_claim_dataclass"}, failed(found)
    assert phrase in said(found["test_claim_dataclass"]), found["test_claim_dataclass"]


# claim, written differently ---------------------------------------------------------------------

# One statement picks and takes the work: CTEs name the live sessions and the uncertain orders,
# UPDATE ... RETURNING hands back the row; still inside one write transaction with the event.
CLAIM_CTE_RETURNING = '''
def claim(db, owner, *, now=None, ttl=90, recovery_only=False, control_only=False, role="shop", identifier=""):
    now = time.time() if now is None else now
    if owner == "" or math.isnan(now) or math.isinf(now) or not 0 < ttl <= 3600:
        raise ValueError("a claim needs an owner label and a finite lease of at most an hour")
    with db.immediate() as connection:
        epoch, paused = connection.execute("SELECT epoch, paused FROM assistant_control WHERE id=1").fetchone()
        if paused:
            return None
        taken = connection.execute(
            """
            WITH live AS (
                SELECT session FROM assistant_work WHERE status = 'RUNNING' AND expires > :now
            ), uncertain AS (
                SELECT work_id FROM assistant_orders WHERE status IN ('SENDING', 'UNKNOWN')
            ), chosen AS (
                SELECT id FROM assistant_work
                 WHERE role = :role AND :identifier IN ('', id) AND available_after <= :now
                   AND (control = 1 OR NOT :control_only)
                   AND CASE WHEN :recovery_only
                            THEN (status IN ('READY', 'BLOCKED', 'CANCELLED')
                                  OR (status = 'RUNNING' AND expires <= :now))
                                 AND id IN (SELECT work_id FROM uncertain)
                            ELSE status = 'READY' OR (status = 'RUNNING' AND expires <= :now)
                       END
                   AND session NOT IN (SELECT session FROM live)
                 ORDER BY control DESC, created, rowid
                 LIMIT 1
            )
            UPDATE assistant_work
               SET status = 'RUNNING', generation = generation + 1, owner = :owner, expires = :now + :ttl
             WHERE id = (SELECT id FROM chosen)
            RETURNING id, session, prompt, generation, subject, role
            """,
            {"now": now, "ttl": ttl, "owner": owner, "role": role, "identifier": identifier,
             "control_only": bool(control_only), "recovery_only": bool(recovery_only)},
        ).fetchall()
        if not taken:
            return None
        (row,) = taken
        append_event(db, "assistant.work.claimed", {"work": row["id"], "generation": row["generation"]})
        return Claim(row["id"], row["session"], row["prompt"], row["generation"], owner, epoch,
                     subject=row["subject"], role=row["role"])
'''

# The candidates read inside the transaction and filtered in Python, BEGIN IMMEDIATE written out
# by hand, a compare-and-set UPDATE, the Claim built by keyword.
CLAIM_IN_PYTHON = '''
ORDINARY, RECOVERABLE = {"READY"}, {"READY", "BLOCKED", "CANCELLED"}


def finite(value, name):
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, not {value!r}")
    return value


def claim(db, owner, *, now=None, ttl=90, recovery_only=False, control_only=False, role="shop", identifier=""):
    if not owner:
        raise ValueError("an owner label is required")
    now = finite(time.time() if now is None else now, "now")
    if not 0 < finite(ttl, "ttl") <= 3600:
        raise ValueError("a lease lasts more than 0 and at most 3600 seconds")
    connection = db.connection
    connection.execute("BEGIN IMMEDIATE")  # the write lock before the first read
    try:
        control = connection.execute("SELECT epoch, paused FROM assistant_control WHERE id = 1").fetchone()
        rows = [] if control["paused"] else connection.execute(
            "SELECT * FROM assistant_work ORDER BY control DESC, created, rowid").fetchall()
        busy = {r["session"] for r in rows if r["status"] == "RUNNING" and r["expires"] > now}
        uncertain = {work for (work,) in connection.execute(
            "SELECT work_id FROM assistant_orders WHERE status IN ('SENDING', 'UNKNOWN')")}
        chosen = None
        for r in rows:
            expired = r["status"] == "RUNNING" and r["expires"] <= now
            if recovery_only:
                eligible = (expired or r["status"] in RECOVERABLE) and r["id"] in uncertain
            else:
                eligible = expired or r["status"] in ORDINARY
            if (eligible and r["role"] == role and identifier in ("", r["id"]) and r["available_after"] <= now
                    and (r["control"] or not control_only) and r["session"] not in busy):
                chosen = r
                break
        if chosen is None:
            connection.commit()
            return None
        generation = chosen["generation"] + 1
        changed = connection.execute(
            "UPDATE assistant_work SET status='RUNNING', generation=?, owner=?, expires=? WHERE id=? AND generation=?",
            (generation, owner, now + ttl, chosen["id"], chosen["generation"])).rowcount
        if changed != 1:
            raise RuntimeError("the chosen row changed under the write lock")
        append_event(db, "assistant.work.claimed", {"work": chosen["id"], "generation": generation, "owner": owner})
        connection.commit()
    except BaseException:
        connection.rollback()
        raise
    return Claim(id=chosen["id"], session=chosen["session"], prompt=chosen["prompt"], generation=generation,
                 owner=owner, epoch=control["epoch"], subject=chosen["subject"], role=chosen["role"])
'''


CLAIMS_DIFFERENT = [
    {"claim": CLAIM_CTE_RETURNING},
    {"claim": CLAIM_IN_PYTHON},
    {"claim": CLAIM_IN_PYTHON, "claim_dataclass": CLASS_FIELDS},
]


@pytest.mark.parametrize("answer", CLAIMS_DIFFERENT, ids=["CTE and RETURNING", "filtered in Python", "filtered in Python, field() class"])
def test_a_claim_written_differently_keeps_every_point(answer):
    assert failed(grade(answer)) == {}


# claim, wrong ----------------------------------------------------------------------------------

SOLUTION_CLAIM = "".join(  # the solution's cell as a learner would hand it in: without nbgrader's markers
    line for c in json.loads((SOLUTIONS / NAME).read_text())["cells"] if _grade_id(c) == "claim"
    for line in c["source"] if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def solution_with(old: str, new: str) -> str:
    """The solution's `claim` with one passage changed: a mistake, exactly where it is made."""
    assert SOLUTION_CLAIM.count(old) == 1, old
    return SOLUTION_CLAIM.replace(old, new)


CHAPTER_CLAIM = CHAPTER["claim"]


def chapter_with(old: str, new: str) -> str:
    """The chapter's `claim` with one passage changed."""
    assert CHAPTER_CLAIM.count(old) == 1, old
    return CHAPTER_CLAIM.replace(old, new)


# Read, let go of the database, then write: the naive claim's gap, with every other rule kept (the
# solution's body, its reads outside any transaction and its write and event in a second one).
NO_TRANSACTION = solution_with("""    with db.immediate() as connection:
        control = connection.execute(""", """    connection = db.connection  # the read: no write lock held
    if True:
        control = connection.execute(""").replace("""        generation = row["generation"] + 1
        connection.execute(""", """        generation = row["generation"] + 1
        with db.immediate():  # the write: a second transaction
          connection.execute(""").replace("""        append_event(
            db,""", """          append_event(
            db,""")
# A transaction, but a deferred one: it reads as a reader and must become a writer later.
DEFERRED = chapter_with("    with db.immediate() as connection:\n", """\
    db.connection.execute("BEGIN")  # deferred: a reader until its first write
    with db.connection as connection:
""")
# No one-live-holder-per-session rule.
SESSION_BLIND = solution_with("""
               AND NOT EXISTS (
                    SELECT 1 FROM assistant_work AS other
                     WHERE other.session = w.session AND other.status = 'RUNNING'
                       AND other.expires > :now)""", "")
# The generation moves only when the label changes: a reused label would continue the old holding.
BUMP_ON_NEW_LABEL = chapter_with('generation = row["generation"] + 1',
                                 'generation = row["generation"] + (row["owner"] != owner)')
# The row's generation is bumped in SQL, but the claim returned carries the one read before.
STALE_GENERATION_RETURNED = chapter_with(
    '''        generation = row["generation"] + 1
        connection.execute(
            "UPDATE assistant_work SET status='RUNNING',generation=?,owner=?,expires=? WHERE id=?",
            (generation, owner, now + ttl, row["id"]),''',
    '''        generation = row["generation"]
        connection.execute(
            "UPDATE assistant_work SET status='RUNNING',generation=generation+1,owner=?,expires=? WHERE id=?",
            (owner, now + ttl, row["id"]),''')
# Eligible when nobody holds it now, whatever its status: finished, blocked and cancelled work too.
NOT_LIVE_IS_ELIGIBLE = chapter_with("((?=0 AND w.status='READY') OR", "((?=0 AND w.status<>'RUNNING') OR")
# The lease still holds at its expiry (<, where the rule is <=).
EXPIRY_STRICT = chapter_with("(w.status='RUNNING' AND w.expires<=?)", "(w.status='RUNNING' AND w.expires<?)")
# The lease read from the real clock, whatever `now` the caller injected.
LEASE_ON_REAL_CLOCK = chapter_with("(generation, owner, now + ttl, row[\"id\"])",
                                   "(generation, owner, time.time() + ttl, row[\"id\"])")
# The event appended after the claim committed.
EVENT_AFTER_COMMIT = chapter_with(
    '''        append_event(db, "assistant.work.claimed", {"work": row["id"], "generation": generation})
        return Claim(''',
    '''    append_event(db, "assistant.work.claimed", {"work": row["id"], "generation": generation})
    return Claim(''').replace('''            row["role"],
        )''', '''            row["role"],
    )''')
# Operator commands not first: oldest first only.
NO_CONTROL_PRIORITY = chapter_with("ORDER BY w.control DESC,w.created,w.rowid", "ORDER BY w.created,w.rowid")
# No retry delay.
NO_RETRY_DELAY = solution_with("               AND w.available_after <= :now\n", "")
# A paused runtime still hands out work.
IGNORES_PAUSE = chapter_with('''        if control["paused"]:
            return None
''', "")
# Recovery passes see only READY work, not the BLOCKED or CANCELLED work whose order is in doubt.
RECOVERY_READY_ONLY = chapter_with("w.status IN ('READY','BLOCKED','CANCELLED')", "w.status='READY'")
# The role is not looked at.
ROLE_BLIND = solution_with("WHERE w.role = :role\n               AND (", "WHERE (")
# ttl range checked, but not whether now is finite.
NOW_NOT_CHECKED = chapter_with("not owner or not math.isfinite(now) or", "not owner or")
# The longest lease refused: 0 < ttl < 3600.
HOUR_EXCLUDED = chapter_with("not 0 < ttl <= 3600", "not 0 < ttl < 3600")
# The hour's bound written in whole seconds: 0 < ttl < 3601 lets 3600.5 through.
HOUR_IN_WHOLE_SECONDS = chapter_with("not 0 < ttl <= 3600", "not 0 < ttl < 3601")
# The lease checked, but not the owner label.
OWNER_NOT_CHECKED = chapter_with("if not owner or not math.isfinite(now)", "if not math.isfinite(now)")


MISTAKES = {
    "no transaction": (NO_TRANSACTION, {"test_claim_race"}, "test_claim_race",
                       "Two workers raced for one assignment and both got a claim"),
    "deferred transaction": (DEFERRED, {"test_claim_race"}, "test_claim_race", "began as a reader (a plain BEGIN)"),
    "session blind": (SESSION_BLIND, {"test_claim_acquires", "test_claim_replacement", "test_claim_selection"},
                      "test_claim_acquires", "the second belongs to the same session"),
    "bump on a new label only": (BUMP_ON_NEW_LABEL, {"test_claim_replacement"}, "test_claim_replacement",
                                 "a reused label is still a new holding"),
    # Every cell that reads a claim's generation sees it; the first to check names it.
    "stale generation returned": (STALE_GENERATION_RETURNED, CELLS - {"test_claim_dataclass"}, "test_claim_acquires",
                                  "claim returned a Claim whose generation is 0, expected 1"),
    "not live is eligible": (NOT_LIVE_IS_ELIGIBLE, {"test_claim_replacement"}, "test_claim_replacement",
                             "only READY or expired RUNNING work is ordinary work"),
    "expiry strict": (EXPIRY_STRICT, {"test_claim_replacement", "test_claim_race"}, "test_claim_replacement",
                      "expires <= now makes a RUNNING row claimable again"),
    "lease on the real clock": (LEASE_ON_REAL_CLOCK, {"test_claim_replacement", "test_claim_race"},
                                "test_claim_replacement",
                                "from the `now` the caller passed (here injected), not from the real clock"),
    "event after commit": (EVENT_AFTER_COMMIT, {"test_claim_acquires"}, "test_claim_acquires",
                           "append the event inside the claim's transaction"),
    "no operator priority": (NO_CONTROL_PRIORITY, {"test_claim_acquires"}, "test_claim_acquires",
                             "expected ORDER BY control DESC, created, rowid"),
    "no retry delay": (NO_RETRY_DELAY, {"test_claim_replacement"}, "test_claim_replacement",
                       "Half a second before available_after, claim returned"),
    "ignores pause": (IGNORES_PAUSE, {"test_claim_selection"}, "test_claim_selection", "A paused runtime handed out"),
    "recovery sees READY only": (RECOVERY_READY_ONLY, {"test_claim_selection"}, "test_claim_selection",
                                 "expected the BLOCKED work with an UNKNOWN order"),
    "role blind": (ROLE_BLIND, {"test_claim_selection"}, "test_claim_selection", "expected the research assignment"),
    "now not checked": (NOW_NOT_CHECKED, {"test_claim_validation"}, "test_claim_validation",
                        "expected ValueError: now and ttl must be finite numbers"),
    "an hour refused": (HOUR_EXCLUDED, {"test_claim_validation"}, "test_claim_validation",
                        "an hour is the longest allowed lease"),
    "an hour in whole seconds": (HOUR_IN_WHOLE_SECONDS, {"test_claim_validation"}, "test_claim_validation",
                                 "half a second over the hour is outside 0 < ttl <= 3600"),
    "owner not checked": (OWNER_NOT_CHECKED, {"test_claim_validation"}, "test_claim_validation",
                          "claim(owner='', ttl=30) did not raise ValueError"),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_a_plausible_mistake_in_claim_loses_the_points_of_the_cell_that_names_it(name):
    answer, failing, cell, phrase = MISTAKES[name]
    found = grade({"claim": answer})
    assert set(failed(found)) == failing, failed(found)
    assert not found[cell]["passed"] and phrase in said(found[cell]), found[cell]
    assert found["test_claim_dataclass"]["passed"], found  # a mistake in claim costs nothing of Claim's


# A read written as a CTE (`WITH ... SELECT`) is a read too: the forced race releases worker B
# after it, so this read-then-write claim, which lets two workers win, loses the race's points.
RACY_CTE = NO_TRANSACTION.replace('''            """
            SELECT w.* FROM assistant_work AS w''', '''            """
            WITH live AS (SELECT session FROM assistant_work WHERE status = 'RUNNING' AND expires > :now)
            SELECT w.* FROM assistant_work AS w''').replace("""               AND NOT EXISTS (
                    SELECT 1 FROM assistant_work AS other
                     WHERE other.session = w.session AND other.status = 'RUNNING'
                       AND other.expires > :now)""", "               AND w.session NOT IN (SELECT session FROM live)")


def test_a_read_then_write_claim_whose_read_is_a_cte_loses_the_race():
    if not ("WITH live AS" in RACY_CTE and "with db.immediate():  # the write" in RACY_CTE):
        pytest.fail("RACY_CTE no longer reads with a CTE and writes in a second transaction")
    compile(RACY_CTE, "RACY_CTE", "exec")
    verdict = grade({"claim": RACY_CTE})["test_claim_race"]
    assert not verdict["passed"] and "both got a claim" in said(verdict), verdict
