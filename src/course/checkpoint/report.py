"""Human-readable forms of a checkpoint run: summary lines, a table, the evidence as JSON, and
what 05_checkpoint's run cell shows (`show_checkpoint`).

A run that could not reach the learner's code at all (a notebook not saved since the kernel ran
it, a function still a stub, a missing cell) is said once, in one message (`not_ready`): no table
of blanks, no empty timeline panels, and the checks below it point back to that message
(`could_not_run`) instead of repeating it.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from typing import Any

from course.checkpoint.evidence import CaseEvidence
from course.lab.graded_cells import NOTEBOOK_OF


def case_line(case: CaseEvidence) -> str:
    verdict = "PASS" if case.passed else "FAIL"
    facts = case.facts()
    if case.lease_waited_seconds is not None:
        facts.append(f"lease waited {case.lease_waited_seconds:.2f} s")
    if case.wall_seconds is not None:
        facts.append(f"wall {case.wall_seconds:.2f} s")
    if case.tries > 1:
        facts.append(f"run {case.tries} times: the experiment itself went wrong before")
    line = f"{case.case:<20} {verdict}  " + "; ".join(facts)
    return line + "".join(f"\n    - {failure}" for failure in case.failures)


def summary_lines(checkpoint) -> list[str]:  # a Checkpoint (not imported: run imports this module)
    versions = getattr(checkpoint, "versions", [])
    lines = ["Judged (the saved notebooks):", *(f"  {version.describe()}" for version in versions)] if versions else []
    lines += [case_line(case) for case in checkpoint]
    passed = sum(case.passed for case in checkpoint)
    waited = checkpoint.lease_waited_seconds
    ratio = checkpoint.ratio
    lines.append(
        f"{passed}/{len(checkpoint)} cases passed; wall time {checkpoint.wall_seconds:.2f} s, "
        f"real lease time waited {waited:.2f} s; wall time / real lease time waited = "
        + (f"{ratio:.2f}" if ratio is not None else "n/a (no lease ran out)")
    )
    return lines


def evidence_rows(checkpoint) -> list[tuple[str, list[str]]]:
    """The counted evidence as (row label, one value per case), for a table; a value nobody
    counted (the case stopped before it) reads "-", never "None"."""

    def each(value) -> list[str]:
        return [value(case) for case in checkpoint]

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    return [
        ("verdict", each(lambda c: "PASS" if c.passed else "FAIL")),
        ("old worker exit status (Popen.returncode)",
         each(lambda c: _v(c.worker_exit) + (f" ({c.worker_signal})" if c.worker_signal else ""))),
        ("old worker state after SIGSTOP (/proc)", each(lambda c: c.worker_state_when_paused or "-")),
        ("competing claim while the lease was live", each(_competitor)),
        ("generation: old holder -> now", each(lambda c: f"{_v(c.old_generation)} -> {_v(c.generation)}")),
        ("work state, owner", each(lambda c: f"{_v(c.work_status)}, {_v(c.owner)}")),
        ("supplier orders (its ledger file)", each(lambda c: _v(c.supplier_orders))),
        ("... carrying the original operation",
         each(lambda c: str(sum(op == c.operation for op in c.supplier_operations)) if c.operation else "-")),
        ("supplier POST / GET (its requests table)", each(lambda c: f"{_v(c.supplier_posts)} / {_v(c.supplier_gets)}")),
        ("local order right after the crash", each(lambda c: c.order_status_after_crash or "-")),
        ("model calls (NoNewReasoning) / reserved in the database",
         each(lambda c: f"{_v(c.model_calls)} / {_v(c.model_calls_recorded)}")),
        ("old holder's writes after expiry", each(lambda c: _attempts(c.expired_probe))),
        ("old holder's writes after the takeover", each(lambda c: _attempts(c.stale_attempts))),
        ("transcript rows per generation", each(lambda c: ", ".join(
            f"gen {g}: {n}" for g, n in c.transcript_rows.items()) or "none")),
        ("money reserved / spent (pence)", each(lambda c: f"{_v(c.reserved_pence)} / {_v(c.spent_pence)}")),
        ("later work taken after the settlement (event seq)", each(lambda c: "-" if not c.later_work else
         f"{c.later_work.get('settled_seq')} < {c.later_work.get('first_seq')}")),
        ("real lease time waited (s)", each(lambda c: seconds(c.lease_waited_seconds))),
        ("case wall time (s)", each(lambda c: seconds(c.wall_seconds))),
        ("explanation", each(lambda c: "; ".join(c.failures) or "-")),
    ]


def markdown_table(checkpoint) -> str:
    """The evidence as a Markdown table: one column per case."""
    header = "| evidence | " + " | ".join(case.case for case in checkpoint) + " |"
    rule = "|---|" + "---|" * len(checkpoint)
    rows = ["| " + label + " | " + " | ".join(v.replace("|", "/") for v in values) + " |"
            for label, values in evidence_rows(checkpoint)]
    return "\n".join([header, rule, *rows])


def _v(value: object) -> str:
    """A counted value as the table shows it: "-" where nothing was counted (the case stopped first)."""
    return "-" if value is None else str(value)


def _competitor(case: CaseEvidence) -> str:
    if case.competing_claim_lease_left is None and case.competing_claim is None:
        return "-"
    left = "-" if case.competing_claim_lease_left is None else f"{case.competing_claim_lease_left:.2f}"
    return ("None" if case.competing_claim is None else "TAKEN") + f" ({left} s left)"


def _attempts(attempts: list[dict]) -> str:
    if not attempts:
        return "-"
    return ", ".join(f"{a['boundary']} {a['outcome']}" for a in attempts)


def evidence_json(checkpoint) -> str:  # a Checkpoint
    """The evidence as JSON (a list, one object per case): one field per line, and one line per
    element of the longer lists (events, marks, requests), so it can be read as well as parsed."""
    cases = []
    for case in checkpoint.to_json():
        fields = []
        for key, value in case.items():
            if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
                items = ",\n".join(f"      {json.dumps(item, sort_keys=True)}" for item in value)
                fields.append(f"    {json.dumps(key)}: [\n{items}\n    ]")
            else:
                fields.append(f"    {json.dumps(key)}: {json.dumps(value, sort_keys=True)}")
        cases.append("  {\n" + ",\n".join(fields) + "\n  }")
    return "[\n" + ",\n".join(cases) + "\n]"


# --- what 05_checkpoint's run cell shows -------------------------------------------------------------

# What the learner predicts before each case (a literal in a cell tagged `prediction`, named
# `predicted_<case>`); `_observed` reads the same quantity from the case's counted evidence.
PREDICTED = {
    "killed": "supplier orders at the end",
    "live_stale": "late writes refused",
    "paused": "late writes refused",
    "accepted_then_crash": "the replacement's first request",
}

_told: set[str] = set()  # reasons this kernel has already given in full (a run refused, a case that could not run)


def _once(reason: str, full: str, short: str) -> str:
    """`full` the first time this kernel gives `reason`, `short` (a pointer to it) afterwards: the
    checks come before the run cells in 05, and each would otherwise repeat the same paragraph."""
    if reason in _told:
        return short
    _told.add(reason)
    return full


def _reason(failure: str) -> str:
    """The refusal itself, whichever case or trial carried it (a trial says where it stopped first)."""
    return failure.rsplit("could not be loaded: ", 1)[-1]


def not_ready(checkpoint) -> str | None:  # a Checkpoint
    """The one message for a run that could not reach the learner's code, or None when it did.

    Not ready: the notebooks could not be loaded (not saved since the kernel ran them, a cell
    missing or raising), one of the graded functions is still nbgrader's stub, or every case stopped
    before a replacement ran, for one and the same reason."""
    refused = getattr(checkpoint, "refused", None)
    if refused:
        return "The checkpoint did not run your code: " + _sentence(refused)
    missing = list(getattr(checkpoint, "missing", []))
    if missing:
        by_notebook: dict[str, list[str]] = {}
        for name in missing:
            by_notebook.setdefault(NOTEBOOK_OF.get(name, "its notebook"), []).append(f"`{name}`")
        where = "; ".join(f"{_and(names)} in {notebook}" for notebook, names in by_notebook.items())
        these, them = ("these are", "them") if len(missing) > 1 else ("this is", "it")
        saved = "your saved " + _and(sorted(by_notebook))
        each = "each notebook" if len(by_notebook) > 1 else "the notebook"
        return (f"The checkpoint has not run your code yet: it runs your own functions from {saved}, and {these} "
                f"not implemented yet: {where}. Write {them}, save {each} (File > Save), then run this cell again.")
    reasons = {case.failures[0] for case in checkpoint if case.failures}
    if checkpoint and all(case.replacement is None and case.failures for case in checkpoint) and len(reasons) == 1:
        return "The checkpoint could not run your code: " + _sentence(reasons.pop())
    return None


def could_not_run(case: CaseEvidence) -> str:
    """A check's sentence for a case that could not run the learner's code: a pointer to the message
    the run cell already showed in this kernel, else the reason itself."""
    said = "; ".join(case.failures) or "no failure recorded"
    return _once(_reason(said), f"The {case.case} case could not run: " + _sentence(said),
                 f"The {case.case} case could not run your code, for the reason given above.")


def explain(case: CaseEvidence) -> str:
    """The checkpoint's own sentences for a failed case or trial, ready for a test message."""
    return "; ".join(case.failures) or "no failure recorded"


def require_run(case: CaseEvidence) -> None:
    """Stop a check with one sentence when the case could not run the learner's code at all (a
    stub, an unsaved notebook, a missing cell): the later checks would only add noise."""
    from course.lessons.checks import expect

    expect(case.replacement is not None or not case.failures, could_not_run(case))


def prediction_lines(checkpoint, predicted: Mapping[str, Any]) -> list[str]:  # a Checkpoint
    """'killed  supplier orders at the end: you predicted 1; its ledger holds 1 (as predicted)', one per case."""
    from course.lessons.checks import WIDTH

    lines = []
    for case in checkpoint:
        if case.case not in PREDICTED:
            continue
        guess = predicted.get(case.case)
        value, seen = _observed(case)
        said = "nothing yet" if guess is None else repr(guess)
        verdict = ""
        if guess is not None and value is not None:
            same = str(guess).strip().upper() == str(value).upper()
            verdict = " (as predicted)" if same else " (not as predicted)"
        line = f"  {case.case:<20} {PREDICTED[case.case]}: you predicted {said}; {seen}{verdict}"
        lines.append(textwrap.fill(line, WIDTH, subsequent_indent=" " * 23, break_on_hyphens=False))
    return ["Your predictions beside what happened:", *lines] if lines else []


def show_checkpoint(checkpoint, predicted: Mapping[str, Any] | None = None) -> None:  # a Checkpoint
    """What 05_checkpoint's run cell shows. Not ready: the one message, nothing else. Ready: the
    predictions beside what happened, the summary, the table and the timeline of the cases that ran."""
    from IPython.display import Markdown, display

    from course.lessons.checks import wrap

    message = not_ready(checkpoint)
    if message is not None:
        print(wrap(_once(getattr(checkpoint, "refused", None) or message, message,
                         "The checkpoint did not run your code, for the reason given above.")))
        return
    lines = prediction_lines(checkpoint, predicted or {})
    print("\n".join([*lines, *([""] if lines else []), *summary_lines(checkpoint)]))
    display(Markdown(markdown_table(checkpoint)))
    drawn = [case for case in checkpoint if drawable(case)]
    if drawn:
        from course.checkpoint.timeline import draw_timeline

        draw_timeline(drawn, show=True)


def show_matrix(result) -> None:  # a MatrixResult
    """What a crash-matrix cell shows: the one message when it could not run the learner's code, else
    the grid, the figures and the first failing trials' sentences."""
    from course.checkpoint.matrix import figures, table
    from course.lessons.checks import wrap

    message = not_ready(result)
    if message is not None:
        print(wrap(_once(getattr(result, "refused", None) or message, message,
                         "The crash matrix did not run your code, for the reason given above.")))
        return
    print(table(result))
    print(figures(result))
    for trial in [trial for trial in result if not trial.passed][:3]:
        print(wrap(f"- {trial.point}, {trial.nemesis}: " + "; ".join(trial.failures)))


def drawable(case: CaseEvidence) -> bool:
    """Whether a case recorded anything a timeline panel can show (a holding, a mark, an event)."""
    return bool(case.leases or case.marks or case.events)


def _observed(case: CaseEvidence) -> tuple[Any, str]:
    """(the value a prediction is compared with, the observation in words) for one case."""
    if case.case == "killed":
        if case.supplier_orders is None:
            return None, "not counted (the case stopped first)"
        return case.supplier_orders, f"its ledger holds {case.supplier_orders}"
    if case.case in ("live_stale", "paused"):
        if not case.stale_attempts:
            return None, "no late write was tried (the case stopped first)"
        refused = len(case.refused_boundaries)
        tried = ", ".join(a["boundary"] if a["outcome"] == "refused" else f"{a['boundary']} {a['outcome'].upper()}"
                          for a in case.stale_attempts)
        return refused, f"{refused} of {len(case.stale_attempts)} ({tried})"
    requests = [r for r in case.supplier_requests if r.get("operation") is not None]
    first_post = next((i for i, r in enumerate(requests) if r["method"] == "POST"), None)
    if first_post is None:
        return None, "the old worker's order never reached the supplier"
    later = requests[first_post + 1:]
    if not later:
        return "none", "none: it sent nothing"
    kind = {"GET": "a lookup", "POST": "the order again"}.get(later[0]["method"], "a request")
    then = "and nothing more" if len(later) == 1 else f"then {len(later) - 1} more request(s)"
    return later[0]["method"], f"{later[0]['method']}, {kind}, {then}"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _sentence(text: str) -> str:
    """`text` ending in exactly one full stop."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."
