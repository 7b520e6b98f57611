"""Judge a case's counted evidence: each broken expectation becomes one specific sentence.

The sentences say what was observed and which rule it breaks, e.g. "the old worker's
completion was accepted after generation 2 took over" or "the supplier holds 2 orders".
Every sentence ends by naming the learner function(s) to revisit, and the notebook that holds
them; a fact that no learner function decides says so. A function still holding its stub is
reported as "not implemented yet: write `<function>` in <notebook> and run it".
"""

from __future__ import annotations

from collections.abc import Callable

from course.checkpoint import blame
from course.checkpoint.cases import ACCEPTED_THEN_CRASH, ANSWER_LOST, KILLED, LIVE_STALE, PAUSED
from course.checkpoint.evidence import CaseEvidence
from course.lab.graded_cells import NOTEBOOK_OF

BOUNDARIES = {
    "transcript": "transcript observation",
    "completion": "completion",
    "supplier": "supplier execution",
}
STALE_BOUNDARIES = tuple(BOUNDARIES)
# the learner functions that decide each boundary's refusal, most specific first
BOUNDARY_FUNCTIONS = {
    "transcript": ("assert_current", "observe"),
    "completion": ("assert_current", "finish"),
    "supplier": ("assert_current",),
}
HARNESS = "not your code: the experiment itself went wrong; run the checkpoint again"


def revisit(*functions: str) -> str:
    """' (revisit `claim` in 01_claims)': the suffix every verdict sentence carries."""
    if not functions:
        return f" ({HARNESS})"
    named = [f"`{name}` in {NOTEBOOK_OF[name]}" if name in NOTEBOOK_OF else f"`{name}`" for name in functions]
    return " (revisit " + (named[0] if len(named) == 1 else ", then ".join(named)) + ")"


def experiment_failed(evidence: CaseEvidence) -> bool:
    """The case failed, and no sentence names a function of the learner's: the experiment itself
    went wrong (a signal that did not land, a machine too slow for the lease), so a run decides
    nothing about the learner's code and may be repeated."""
    learners = ("(revisit ", "not implemented yet", "save ")
    return bool(evidence.failures) and not any(word in sentence for sentence in evidence.failures for word in learners)


def judge(evidence: CaseEvidence) -> CaseEvidence:
    """Append an explanation to `evidence.failures` for every expectation the facts break."""
    if evidence.failures:
        # The case stopped (a stub, a refused step, a process that broke the protocol): that
        # sentence is the explanation; judging the half-run remainder would only add noise.
        return evidence
    if evidence.operation is None:
        evidence.failures.append("the old worker never reported a prepared order")
        return evidence
    say = _sayer(evidence)
    _judge_old_worker(evidence, say)
    if evidence.expiry_observed_at is None:
        return evidence  # the case stopped before the lease ran out; the reason is recorded
    # The old holder's accepted writes first: in the live and paused cases they are the cause, and
    # what the replacement then could not do follows from them.
    for part in (_judge_stale_writes, _judge_lease, _judge_replacement, _judge_supplier, _judge_records):
        part(evidence, say)
    if evidence.case == ACCEPTED_THEN_CRASH:
        _judge_accepted_then_crash(evidence)
    if evidence.case == ANSWER_LOST:
        _judge_answer_lost(evidence)
    return evidence


Say = Callable[..., None]


def _sayer(evidence: CaseEvidence) -> Say:
    """`say(sentence, *functions)`: record a failure, naming the functions to revisit (in the
    capstone, the steps of the learner's worker that decided the same facts: course.checkpoint.blame)."""
    def say(sentence: str, *functions: str) -> None:
        named = "(revisit" in sentence or sentence.startswith("not implemented yet")
        step = blame.revisit_text(functions, evidence) if functions else None
        suffix = f" (revisit {step})" if step else revisit(*functions)
        evidence.failures.append(sentence if named else sentence + suffix)
    return say


def _takeover(evidence: CaseEvidence) -> tuple[int | None, int | None]:
    """(the old worker's generation, the replacement's)."""
    old = evidence.old_generation
    return old, None if old is None else old + 1


def _judge_old_worker(evidence: CaseEvidence, say: Say) -> None:
    """The operating system's view: killed, stopped, or alive until told to exit."""
    if evidence.case in (KILLED, ACCEPTED_THEN_CRASH) and evidence.worker_exit != -9:
        say(f"the old worker's exit status was {evidence.worker_exit}, not -9: it was not killed by SIGKILL")
    if evidence.case == PAUSED and evidence.worker_state_when_paused not in ("T", "t"):
        say(f"the old worker was not stopped by SIGSTOP (its /proc state was {evidence.worker_state_when_paused!r})")
    if evidence.case in (LIVE_STALE, PAUSED) and evidence.replacement is not None and evidence.worker_exit != 0:
        say(f"the old worker should have stayed alive and exited cleanly when told; its exit status was "
            f"{evidence.worker_exit}")


def _judge_lease(evidence: CaseEvidence, say: Say) -> None:
    """The lease as asked for, and the expired (not yet replaced) holder's writes (live_stale)."""
    if evidence.lease_waited_seconds is not None and evidence.lease_waited_seconds > evidence.lease_seconds + 0.05:
        say(f"the claim's lease in the row lasts {evidence.lease_waited_seconds:.2f} s, longer than the "
            f"{evidence.lease_seconds} s asked for (ttl)")
    for attempt in evidence.expired_probe:
        if attempt["outcome"] != "refused":
            say(_stale_sentence(attempt, "after its lease expired (before any replacement): expiry alone "
                                         "must end its authority"), "assert_current")


def _judge_replacement(evidence: CaseEvidence, say: Say) -> None:
    """The replacement continued from the records, without the model, and finished the work."""
    old, new = _takeover(evidence)
    replacement = evidence.replacement or {}
    if "error" in replacement:
        if evidence.model_calls:
            say(f"the replacement called the model ({evidence.model_calls} call(s)): recovery must continue "
                "the recorded, approved order without new reasoning", "order_to_continue")
        else:
            say(f"the replacement's pass failed: {replacement['error']}", "claim", "order_to_continue")
    elif evidence.model_calls:
        say(f"the replacement called the model {evidence.model_calls} time(s); the recorded order was enough",
            "order_to_continue")
    if evidence.model_calls_recorded:
        say(f"the database recorded {evidence.model_calls_recorded} model call(s) reserved after the takeover; "
            "recovery should reserve none", "order_to_continue")
    if evidence.generation != new:
        say(f"the assignment is at generation {evidence.generation} after the takeover; expected {new} "
            f"(the old worker held {old}, the replacement adds exactly one)", "claim")
    if evidence.owner != replacement.get("owner"):
        say(f"the assignment's owner is {evidence.owner!r}, not the replacement {replacement.get('owner')!r}", "claim")
    if evidence.work_status != "DONE":
        detail = replacement.get("result") or replacement.get("error") or replacement.get("status")
        say(f"the assignment is {evidence.work_status} after the replacement's pass, not DONE ({detail})", "finish", "order_to_continue")
    if evidence.work_result and "stale result" in evidence.work_result:
        say("the stored work result is the old worker's stale result, not the replacement's receipt", "assert_current", "finish")


def _judge_supplier(evidence: CaseEvidence, say: Say) -> None:
    """The supplier's own ledger: one order, the original operation, sent once."""
    if evidence.supplier_orders != 1:
        say(f"the supplier holds {evidence.supplier_orders} orders; exactly 1 was approved", "order_to_continue", "assert_current")
    if evidence.supplier_operations and evidence.supplier_operations != [evidence.operation]:
        say(f"the supplier's orders carry operation(s) {evidence.supplier_operations}, not only the original "
            f"operation {evidence.operation}", "order_to_continue")
    if evidence.supplier_posts is not None and evidence.supplier_posts != 1:
        say(f"the supplier received {evidence.supplier_posts} order requests (POST); the order should be sent "
            "exactly once" + (" and then only looked up" if evidence.case == ACCEPTED_THEN_CRASH else ""),
            "order_to_continue")
    if evidence.order_status != "CONFIRMED":
        say(f"the shop records the order as {evidence.order_status}, not CONFIRMED", "order_to_continue")


def _judge_records(evidence: CaseEvidence, say: Say) -> None:
    """Money and the transcript, counted with SQL."""
    if (evidence.reserved_pence, evidence.spent_pence) != (0, evidence.order_amount):
        say(f"money reserved/spent is {evidence.reserved_pence}/{evidence.spent_pence} pence; expected "
            f"0/{evidence.order_amount} (the one approved order, paid once)", "order_to_continue")
    old, _ = _takeover(evidence)
    stale_rows = evidence.transcript_rows.get(str(old), 0)
    if stale_rows and evidence.case != ANSWER_LOST:  # there, generation 1 was no stale holder
        say(f"the transcript holds {stale_rows} row(s) written by generation {old}, the stale holder", "assert_current", "observe")


def _judge_stale_writes(evidence: CaseEvidence, say: Say) -> None:
    """The old holder's writes after the takeover (live and paused cases): every one refused."""
    if evidence.case not in (LIVE_STALE, PAUSED):
        return
    _, new = _takeover(evidence)
    seen = {attempt["boundary"]: attempt for attempt in evidence.stale_attempts}
    for boundary in STALE_BOUNDARIES:
        attempt = seen.get(boundary)
        if attempt is None:
            say(f"the old worker never reported its {BOUNDARIES[boundary]} attempt")
        elif attempt["outcome"] != "refused":
            say(_stale_sentence(attempt, f"after generation {new} took over"), *BOUNDARY_FUNCTIONS[boundary])


def _judge_accepted_then_crash(evidence: CaseEvidence) -> None:
    say = _sayer(evidence)

    if evidence.order_status_after_crash != "SENDING":
        say(f"the crash did not land between the supplier's commit and the local receipt: the local order was "
            f"{evidence.order_status_after_crash} right after the kill, not SENDING")
    if evidence.supplier_orders_at_crash != 1:
        say(f"the supplier held {evidence.supplier_orders_at_crash} orders at the crash; the experiment needs "
            "the order committed remotely before the kill")
    if evidence.supplier_gets != 1:
        say(f"the supplier answered {evidence.supplier_gets} lookups (GET); the replacement should discover the "
            "uncertain operation with exactly one lookup before anything else", "order_to_continue")
    _judge_later(evidence, say)


def _judge_answer_lost(evidence: CaseEvidence) -> None:
    """The pass that met OutcomeUnknown left the order to a later pass, its money still reserved."""
    say, lost = _sayer(evidence), evidence.after_lost_answer or {}
    if lost.get("order_status") not in ("SENDING", "UNKNOWN"):
        say(f"when the supplier's answer was lost, the pass left the order {lost.get('order_status')}; the "
            "supplier may hold it, so it must stay SENDING or UNKNOWN for a later pass to look up", "finish")
    if lost.get("status") == "DONE":
        say("the pass that lost the supplier's answer finished the assignment DONE: no recovery pass takes DONE "
            "work, so its order would never be reconciled and its money would stay reserved", "finish")
    if lost.get("reserved_pence") != evidence.order_amount:
        say(f"after the lost answer {lost.get('reserved_pence')} pence were reserved; the order's "
            f"{evidence.order_amount} must stay reserved until its fate is known", "finish")
    _judge_later(evidence, say)


def _judge_later(evidence: CaseEvidence, say: Say) -> None:
    """Recovery first: the uncertain order settled before the later assignment was touched."""
    later = evidence.later_work or {}
    settled, first = later.get("settled_seq"), later.get("first_seq")
    if settled is None:
        say("the events table shows no settlement of the original order", "order_to_continue")
    elif first is None:
        say("the later assignment was never taken after the uncertain order was settled", "claim")
    elif first < settled:
        say(f"the later assignment was taken (event {first}, {later.get('first_kind')}) before the uncertain "
            f"order was settled (event {settled})", "claim")


def _stale_sentence(attempt: dict, when: str) -> str:
    name = BOUNDARIES.get(attempt["boundary"], attempt["boundary"])
    outcome = attempt["outcome"]
    if outcome == "accepted":
        return f"the old worker's {name} was accepted {when}"
    if outcome == "not implemented":
        return attempt["error"]
    if outcome == "refused by order rules":
        return (f"the old worker's {name} was stopped by the order rules ({attempt['error']}), not by the "
                f"ownership fence, {when}")
    return f"the old worker's {name} failed with {attempt.get('error')} instead of PermissionError {when}"
