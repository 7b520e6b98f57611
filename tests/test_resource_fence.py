"""Fencing at the resource (06): the supplier keeps the highest generation per work item.

The supplier's fence is opt-in: without it every existing caller is served as before (the tokens
are only recorded). With it, a rule decides each order, run by the supplier (`reference`) or by
the process that started it (a relay), which is how a learner's rule, or the grader's proxy for
it, is used. The `sending` window is measured from the supplier's ledger, and the graded rule is
judged by the real grader: two correct ways keep the points, plausible mistakes lose them.
"""

from __future__ import annotations

import http.client
import json
import sqlite3
from pathlib import Path

import pytest

from reference_organizations.store.supplier import start_supplier
from reference_organizations.store.supplier.fence import admit_generation
from sovereign_agent.suppliers import OutcomeUnknown, SupplierRefused

NOTEBOOK = "06_explore.ipynb"
TEST_CELL = "test_admit_generation"


def proposal(quantity: int = 6) -> dict[str, object]:
    return {"sku": "SKU-VANILLA", "quantity": quantity, "unit_pence": 250, "supplier": "lucy-wholesale", "currency": "GBP"}


def op(number: int) -> str:
    return f"{number:032x}"


def send(client, steps):
    """Each (work, generation, operation number) as a fenced order: 'accepted' or 'refused'."""
    answers = []
    for work, generation, number in steps:
        try:
            client.fenced(work, generation).order(op(number), proposal())
            answers.append("accepted")
        except SupplierRefused as refusal:
            answers.append("refused" if "HTTP 412" in str(refusal) else str(refusal))
    return answers


STEPS = [("W", 1, 1), ("W", 1, 1), ("W", 2, 2), ("W", 1, 3), ("W", 10, 4), ("W", 9, 5), ("V", 1, 6)]
EXPECTED = ["accepted", "accepted", "accepted", "refused", "accepted", "refused", "accepted"]


@pytest.mark.parametrize("fence", ["reference", admit_generation], ids=["in-the-supplier", "relayed"])
def test_a_fenced_supplier_refuses_a_generation_below_the_highest_per_work_item(tmp_path, fence):
    with start_supplier(tmp_path / "supplier.sqlite", fence=fence) as supplier:
        assert send(supplier.client(), STEPS) == EXPECTED
        tokens = [(t["work_id"], t["generation"], t["admitted"]) for t in supplier.tokens()]
        orders = {o["operation"] for o in supplier.orders()}
        statuses = [r["status"] for r in supplier.requests("POST")]
    assert tokens == [(w, g, int(a == "accepted")) for (w, g, _), a in zip(STEPS, EXPECTED)]
    assert orders == {op(1), op(2), op(4), op(6)}  # a refused order stores nothing
    assert statuses == [201, 200, 201, 412, 201, 412, 201]
    with sqlite3.connect(tmp_path / "supplier.sqlite") as ledger:
        assert dict(ledger.execute("SELECT work_id, generation FROM fence")) == {"W": 10, "V": 1}


def test_without_a_fence_every_order_is_served_as_before_and_tokens_are_only_recorded(tmp_path):
    with start_supplier(tmp_path / "supplier.sqlite") as supplier:
        assert send(supplier.client(), STEPS) == ["accepted"] * len(STEPS)
        supplier.client().order(op(99), proposal())  # an order without a token, as every existing caller sends
        assert [t["admitted"] for t in supplier.tokens()] == [1] * len(STEPS)
        assert len(supplier.orders()) == 7


def raw_post(endpoint: str, headers: dict[str, str]) -> tuple[int, str]:
    port = int(endpoint.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("POST", f"/orders/{op(7)}", body=json.dumps(proposal()).encode(),
                           headers={"Content-Type": "application/json", **headers})
        response = connection.getresponse()
        return response.status, json.loads(response.read())["error"]
    finally:
        connection.close()


def test_a_fenced_supplier_requires_one_well_formed_token(tmp_path):
    with start_supplier(tmp_path / "supplier.sqlite", fence="reference") as supplier:
        assert raw_post(supplier.endpoint, {})[0] == 428
        for bad in ({"Fencing-Work": "W"}, {"Fencing-Work": "W", "Fencing-Generation": "-1"},
                    {"Fencing-Work": "W w", "Fencing-Generation": "1"}, {"Fencing-Work": "W", "Fencing-Generation": "1.5"}):
            assert raw_post(supplier.endpoint, bad)[0] == 400, bad
        assert supplier.orders() == [] and supplier.tokens() == []
    with pytest.raises(ValueError):
        supplier.client().fenced("W", -1)
    with pytest.raises(ValueError):
        supplier.client().fenced("", 1)


def test_a_rule_that_cannot_answer_leaves_the_outcome_unknown_and_stores_nothing(tmp_path):
    def broken(ledger, work_id, generation):
        raise RuntimeError("no answer")

    with start_supplier(tmp_path / "supplier.sqlite", fence=broken) as supplier:
        with pytest.raises(OutcomeUnknown):
            supplier.client().fenced("W", 1).order(op(1), proposal())
        assert supplier.orders() == [] and supplier.relay.errors == ["RuntimeError: no answer"]
    assert not Path(supplier.relay.path).exists()  # the relay's socket goes with the supplier


def test_a_rule_gets_the_ledger_in_autocommit_mode_with_rows_by_name(tmp_path):
    seen = []

    def looking(ledger, work_id, generation):
        seen.append((ledger.isolation_level, ledger.row_factory is sqlite3.Row,
                     ledger.execute("PRAGMA database_list").fetchone()[2]))
        return admit_generation(ledger, work_id, generation)

    with start_supplier(tmp_path / "supplier.sqlite", fence=looking) as supplier:
        send(supplier.client(), [("W", 1, 1)])
    assert seen == [(None, True, str((tmp_path / "supplier.sqlite").resolve()))]


def test_the_sending_window_is_open_without_the_fence_and_closed_with_it():
    from course.lessons.resource_fence import run_window

    before, after = run_window(None), run_window("reference")
    for trial in (before, after):
        assert trial.error == "" and trial.state_when_stopped == "T"
        assert (trial.old_generation, trial.new_generation) == (1, 2)
        assert trial.stale_requests == 1 and trial.supplier_orders == 1 and trial.posts == 2
        assert trial.order_status == "CONFIRMED"
    assert before.stale_admitted == 1 and before.old_holder["supplier"].startswith("answered")
    assert after.stale_admitted == 0 and "412" in after.old_holder["supplier"]


# --- the graded cell, through the real grader --------------------------------------------------

HEAD = "def admit_generation(ledger, work_id, generation):\n"
ONE_STATEMENT = HEAD + '''    changed = ledger.execute(
        "INSERT INTO fence (work_id, generation) VALUES (?, ?) ON CONFLICT (work_id) DO UPDATE "
        "SET generation = excluded.generation WHERE excluded.generation >= fence.generation",
        (work_id, generation)).rowcount
    return changed == 1
'''
CONDITIONAL_WRITE = HEAD + '''    ledger.execute("INSERT OR IGNORE INTO fence VALUES (?, 0)", (work_id,))
    return ledger.execute("UPDATE fence SET generation = ? WHERE work_id = ? AND generation <= ?",
                          (generation, work_id, generation)).rowcount == 1
'''


def _locked(compare: str, record: str = "INSERT OR REPLACE INTO fence VALUES (?, ?)", select: str = "SELECT generation "
            "FROM fence WHERE work_id = ?", key: str = "(work_id,)", begin: str = "BEGIN IMMEDIATE") -> str:
    return HEAD + f'''    ledger.execute("{begin}")
    try:
        row = ledger.execute("{select}", {key}).fetchone()
        if row is not None and row[0] is not None and {compare}:
            ledger.execute("ROLLBACK")
            return False
        ledger.execute("{record}", (work_id, generation))
        ledger.execute("COMMIT")
        return True
    except BaseException:
        if ledger.in_transaction:
            ledger.execute("ROLLBACK")
        raise
'''


RACY = HEAD + '''    row = ledger.execute("SELECT generation FROM fence WHERE work_id = ?", (work_id,)).fetchone()
    if row is not None and row[0] > generation:
        return False
    ledger.execute("{record}", (work_id, generation))
    return True
'''

MISTAKES = {
    # refuses the same holder's resend: ">=" where ">" was meant
    "refuses an equal generation": _locked("row[0] >= generation"),
    # checks but never records: the old holder's late order passes
    "never records": HEAD + '''    row = ledger.execute("SELECT generation FROM fence WHERE work_id = ?", (work_id,)).fetchone()
    return row is None or row[0] <= generation
''',
    # records the first generation only
    "keeps the first generation": _locked("row[0] > generation", record="INSERT OR IGNORE INTO fence VALUES (?, ?)"),
    # compares as text: '9' > '10'
    "compares as text": _locked("str(row[0]) > str(generation)"),
    # one highest for the whole supplier, not per work item
    "per supplier": _locked("row[0] > generation", select="SELECT max(generation) FROM fence", key="()"),
    # check, then record in another transaction
    "check then record, replacing": RACY.replace("{record}", "INSERT OR REPLACE INTO fence VALUES (?, ?)"),
    "check then record, keeping the maximum": RACY.replace(
        "{record}", "INSERT INTO fence VALUES (?, ?) ON CONFLICT (work_id) DO UPDATE SET generation = "
        "max(generation, excluded.generation)"),
    # a reader's transaction that becomes a writer later
    "plain BEGIN": _locked("row[0] > generation", begin="BEGIN"),
    # check, then record, under a lock of this process only: another worker's process has its own
    "a lock of its own process": "import threading\n\nLOCK = threading.Lock()\n\n\n" + HEAD + '''    with LOCK:
        row = ledger.execute("SELECT generation FROM fence WHERE work_id = ?", (work_id,)).fetchone()
        if row is not None and row[0] > generation:
            return False
        ledger.execute("INSERT OR REPLACE INTO fence VALUES (?, ?)", (work_id, generation))
        return True
''',
}


def _verdict(source: str | None) -> dict:
    from checked_answers import verdicts

    replace = None if source is None else {"admit_generation": source}
    return verdicts(NOTEBOOK, replace, only={TEST_CELL})[TEST_CELL]


# Its answer to generation 1 reaches the judge well after its commit, as on a loaded machine (the rival,
# generation 2, returns first): who returned first says nothing about who decided first.
SLOW_TO_ANSWER = "import time\n\n" + _locked("row[0] > generation").replace(
    '        ledger.execute("COMMIT")\n        return True', '        ledger.execute("COMMIT")\n'
    '        time.sleep(0.6 if generation == 1 else 0)\n        return True')

NOT_IN_THE_JUDGE = "import sys\n\n" + ONE_STATEMENT.replace(HEAD, HEAD + """    if any(name.startswith("course.grading.judge") for name in sys.modules):
        raise RuntimeError("this rule is running inside the judge")
""")


@pytest.mark.slow
@pytest.mark.parametrize("source", [None, ONE_STATEMENT, CONDITIONAL_WRITE, SLOW_TO_ANSWER, NOT_IN_THE_JUDGE],
                         ids=["the solution", "one statement", "a conditional write", "slow to answer", "run outside the judge"])
def test_a_correct_rule_written_another_way_keeps_full_marks(source):
    verdict = _verdict(source)
    assert verdict["passed"], verdict


WHY = {  # the check that catches each mistake, by the words of its message
    "refuses an equal generation": "an equal generation is the same holder",
    "never records": "frozen old holder waking up",
    "keeps the first generation": "frozen old holder waking up",
    "compares as text": "compared as numbers",
    "per supplier": "PER WORK ITEM",
    "check then record, replacing": "its check and its record were separate steps",
    "check then record, keeping the maximum": "its check and its record were separate steps",
    "plain BEGIN": "not end in an error",
    "a lock of its own process": "its check and its record were separate steps",
}


@pytest.mark.slow
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_plausible_mistake_loses_the_points(mistake):
    verdict = _verdict(MISTAKES[mistake])
    assert not verdict["passed"], f"{mistake} kept its points"
    assert verdict["ename"] == "CheckFailed" and WHY[mistake] in " ".join(verdict["message"].split()), verdict


@pytest.mark.slow
def test_the_stub_loses_the_points_and_says_what_to_write():
    from checked_answers import blank_answers

    verdict = _verdict(blank_answers(NOTEBOOK)["admit_generation"])
    assert not verdict["passed"] and "admit_generation" in verdict["message"], verdict


# Hostile: admits every order, and rewrites the ledger it was handed so that the tokens read as a
# fence's would (lower generations refused) and the orders of old holders are gone.
FORGER = HEAD + '''    ledger.execute("UPDATE tokens SET admitted = 0 WHERE generation < (SELECT max(generation) FROM tokens AS t "
                   "WHERE t.work_id = tokens.work_id)")
    ledger.execute("INSERT OR REPLACE INTO fence VALUES (?, max(?, coalesce((SELECT generation FROM fence "
                   "WHERE work_id = ?), 0)))", (work_id, generation, work_id))
    return True
'''


@pytest.mark.slow
def test_a_rule_that_forges_the_ledger_it_is_handed_earns_nothing():
    verdict = _verdict(FORGER)
    assert not verdict["passed"], "a rule that admits everything and rewrites the ledger kept its points"
