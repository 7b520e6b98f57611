"""The crash trial's invariants, judged from counted evidence only, one sentence per breach.

Each sentence names the invariant, the crash point and nemesis, what was counted, and the
learner function to revisit, e.g. "no write by an old generation after the takeover broke at
crash point claimed with SIGSTOP: generation 1 wrote 3 model-call rows, 5 transcript rows after
generation 2 took over; revisit assert_current." Which function is chosen from the evidence:
a model-call row or an order event from an old generation can only pass the fence itself
(the runtime calls the learner's assert_current for those); a late `finished` event points at
finish, a late transcript row at observe, each "or the assert_current it calls".
"""

from __future__ import annotations

import json
from typing import Any

from course.checkpoint import blame
from sovereign_agent.assistant_orders import UNCERTAIN

CONTINUED = ("APPROVED", "SENDING", "UNKNOWN", "CONFIRMED", "REJECTED")  # an order to continue, no reasoning
# Where the old worker's pass stands at each point (reference behaviour): the order's state,
# then the number of transcript rows, the supplier's orders, or the work's state.
LANDED: dict[str, dict[str, Any]] = {
    "claimed": {"orders": [], "transcript": 0},
    "observed-1": {"orders": [], "transcript": 1},
    "observed-2": {"orders": [], "transcript": 2},
    "observed-3": {"orders": [], "transcript": 3},
    "proposed": {"orders": ["DRAFT"], "transcript": 3},
    "observed-4": {"orders": ["APPROVED"], "transcript": 4},
    "observed-5": {"orders": ["APPROVED"], "transcript": 5},
    "approval-seen": {"orders": ["APPROVED"], "transcript": 5},
    "sending": {"orders": ["SENDING"], "supplier_orders": 0},
    "supplier-committed": {"orders": ["SENDING"], "supplier_orders": 1},
    "receipt-recorded": {"orders": ["CONFIRMED"], "status": "RUNNING"},
    "finished": {"orders": ["CONFIRMED"], "status": "DONE"},
}
# The learner function whose code decides the old worker's way to each point.
REACHED_BY = {"claimed": "claim", "proposed": "observe", "approval-seen": "order_to_continue",
              "sending": "assert_current", "supplier-committed": "assert_current",
              "receipt-recorded": "assert_current", "finished": "finish"}
TITLES = {
    "landed": "the crash landing at its point",
    "one-order": "exactly one supplier order",
    "money": "reserved + spent = the order's amount",
    "done": "DONE at the highest generation with the new holder's result",
    "no-stale-write": "no write by an old generation after the takeover",
    "no-new-reasoning": "no model call once an approved order existed",
    "lookup-first": "an uncertain order looked up before anything is resent",
    "nothing-running": "nothing left running",
}
INVARIANTS = tuple(TITLES)
BEFORE_ADMISSION = tuple(LANDED)[:tuple(LANDED).index("sending")]  # points whose old worker was never admitted
# A late completion or transcript row passed the learner's finish or observe, which call the
# learner's assert_current: the evidence cannot tell which of the two let it through.
OR_FENCE = "(or the assert_current it calls)"


def judge_trial(evidence: Any) -> Any:
    """Fill `evidence.invariants` (name, ok, sentence) and append each breach to `failures`."""
    where = f"crash point {evidence.point} with {evidence.nemesis}"
    results, checks = [], CHECKS
    if evidence.failures:  # the trial itself stopped: that sentence is the explanation
        evidence.failures[:] = [f"the trial at {where} stopped: {failure}" for failure in evidence.failures]
        results.append({"name": "ran", "ok": False, "sentence": evidence.failures[0]})
        checks = {"nothing-running": _nothing}
    for name, check in checks.items():
        breach = check(evidence)
        sentence = None
        if breach is not None:
            detail, function = breach
            function = blame.revisit_text((function,), evidence) or function
            sentence = f"{TITLES[name]} broke at {where}: {detail}; revisit {function}."
            evidence.failures.append(sentence)
        results.append({"name": name, "ok": breach is None, "sentence": sentence})
    evidence.invariants = results
    return evidence


def experiment_failed(trial: Any) -> bool:
    """The trial failed, and no sentence sends the learner to code of theirs: each says "not your
    code" or names nothing to revisit (the trial stopped, the machine too slow for its lease). Such
    a run decides nothing about the code under test and may be repeated."""
    return bool(trial.failures) and all("not your code" in sentence or "revisit" not in sentence
                                        for sentence in trial.failures)


def _landed(e: Any) -> tuple[str, str] | None:
    expected, seen = LANDED[e.point], e.at_crash
    wrong = {key: seen.get(key) for key, value in expected.items() if seen.get(key) != value}
    if not wrong:
        return None
    shown = ", ".join(f"{key} {value!r} (expected {expected[key]!r})" for key, value in wrong.items())
    function = REACHED_BY.get(e.point, "observe")
    return (f"at the nemesis the shop showed {shown}, so the old worker's pass did not get there as the reference "
            "does (or this machine was too slow for the lease)", function)


def _one_order(e: Any) -> tuple[str, str] | None:
    if e.supplier_orders != 1 or e.supplier_operations != [e.operation]:
        return (f"the supplier's ledger holds {e.supplier_orders} order(s) {e.supplier_operations}, the shop's order "
                f"is {e.operation}", _stale_function(e) or "order_to_continue")
    if e.point in BEFORE_ADMISSION and (e.supplier_posts or 0) > 1:  # it stopped before any fence let it send
        return (f"the supplier received {e.supplier_posts} order requests (POST) for one operation; the old worker "
                "stopped before its order was admitted, so after the takeover only the replacement may send it",
                "assert_current")
    return None


def _money(e: Any) -> tuple[str, str] | None:
    if (e.reserved_pence, e.spent_pence) == (0, e.order_amount):
        return None
    return (f"reserved {e.reserved_pence} + spent {e.spent_pence} pence, the order's amount is {e.order_amount} "
            "(all of it spent, nothing still reserved)", _stale_function(e) or "order_to_continue")


def _done(e: Any) -> tuple[str, str] | None:
    claimed = [ev["payload"]["generation"] for ev in e.events if ev["kind"] == "assistant.work.claimed"]
    finished = [ev["payload"] for ev in e.events if ev["kind"] == "assistant.work.finished"]
    highest = max(claimed, default=None)
    last = finished[-1] if finished else {}
    try:
        result = json.loads(e.work_result or "")
    except ValueError:
        result = {}
    receipt = result.get("receipt") if isinstance(result, dict) else None
    if e.generation != highest:
        return f"the work is at generation {e.generation}, but generation {highest} was claimed", "claim"
    if last.get("generation") != highest:
        return (f"the last completion came from generation {last.get('generation')} ({last.get('status')}), not "
                f"generation {highest}", f"finish {OR_FENCE}")
    if e.work_status != "DONE":
        return f"the work is {e.work_status} ({(e.work_result or '')[:80]})", "order_to_continue"
    if not isinstance(receipt, dict) or result.get("order") != e.operation or receipt.get("status") != "ACCEPTED":
        return f"the stored result does not carry the supplier's receipt for {e.operation}", "finish"
    return None


def _no_stale_write(e: Any) -> tuple[str, str] | None:
    stale = e.takeover.get("stale_rows") or {}
    counted = {what: n for what, n in stale.items() if n}
    after, final = e.after_replacement, {"status": e.work_status, "generation": e.generation, "owner": e.owner}
    changed = [key for key in final if after and after.get(key) != final[key]]
    if not counted and not changed:
        return None
    parts = [f"{n} {what}" for what, n in counted.items()]
    parts += [f"the work row's {key} changed to {final[key]!r} after the replacement finished" for key in changed]
    old = e.takeover.get("generation")
    return (f"generation {old} wrote " + ", ".join(parts) + f" after generation {e.generation} took over",
            _stale_function(e) or "finish")


def _stale_function(e: Any) -> str | None:
    stale = e.takeover.get("stale_rows") or {}
    if stale.get("model-call rows") or stale.get("order events") or stale.get("claim events"):
        return "assert_current"
    if stale.get("finished events"):
        return f"finish {OR_FENCE}"
    if stale.get("transcript rows"):
        return f"observe {OR_FENCE}"
    return None


def _no_new_reasoning(e: Any) -> tuple[str, str] | None:
    status = e.takeover.get("order_status")
    if status not in CONTINUED or not (e.model_calls or e.model_calls_recorded):
        return None
    return (f"the order was {status} at the takeover, yet the replacement called the model {e.model_calls} time(s) "
            f"({e.model_calls_recorded} model-call row(s) recorded)", "order_to_continue")


def _lookup_first(e: Any) -> tuple[str, str] | None:
    if e.takeover.get("order_status") not in UNCERTAIN:
        return None
    later = [r for r in e.supplier_requests if r["operation"] == e.operation and r["at"] >= e.takeover["at"]]
    if later and later[0]["method"] == "GET":
        return None
    first = later[0]["method"] if later else "nothing"
    return (f"the order was {e.takeover['order_status']} at the takeover and the supplier's first request after it "
            f"was {first}, not a lookup (GET)", "order_to_continue")


def _nothing(e: Any) -> tuple[str, str] | None:
    if not e.left_running:
        return None
    return f"processes {e.left_running} outlived the trial", "the course's trial harness (not your code)"


CHECKS = {
    "landed": _landed,
    "one-order": _one_order,
    "money": _money,
    "done": _done,
    "no-stale-write": _no_stale_write,
    "no-new-reasoning": _no_new_reasoning,
    "lookup-first": _lookup_first,
    "nothing-running": _nothing,
}
