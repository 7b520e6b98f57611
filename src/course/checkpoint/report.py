"""Human-readable forms of a checkpoint run: summary lines, a table, and the evidence as JSON."""

from __future__ import annotations

import json

from course.checkpoint.evidence import CaseEvidence


def case_facts(case: CaseEvidence) -> list[str]:
    """The counted facts of one case, in the order a reader checks them."""
    facts = []
    if case.worker_exit is not None:
        facts.append(f"old worker exit {case.worker_exit}" + (f" ({case.worker_signal})" if case.worker_signal else ""))
    if case.generation is not None:
        facts.append(f"generation {case.generation} {case.work_status}")
    if case.supplier_orders is not None:
        facts.append(f"supplier orders {case.supplier_orders}, POST {case.supplier_posts}, GET {case.supplier_gets}")
    if case.model_calls is not None:
        facts.append(f"model calls {case.model_calls}")
    if case.stale_attempts:
        facts.append(f"stale writes refused {len(case.refused_boundaries)}/{len(case.stale_attempts)}")
    return facts


def case_line(case: CaseEvidence) -> str:
    verdict = "PASS" if case.passed else "FAIL"
    facts = case_facts(case)
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
    """The counted evidence as (row label, one value per case), for a table."""

    def each(value) -> list[str]:
        return [value(case) for case in checkpoint]

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    return [
        ("verdict", each(lambda c: "PASS" if c.passed else "FAIL")),
        ("old worker exit status (Popen.returncode)",
         each(lambda c: f"{c.worker_exit}" + (f" ({c.worker_signal})" if c.worker_signal else ""))),
        ("old worker state after SIGSTOP (/proc)", each(lambda c: c.worker_state_when_paused or "-")),
        ("competing claim while the lease was live", each(_competitor)),
        ("generation: old holder -> now", each(lambda c: f"{c.old_generation} -> {c.generation}")),
        ("work state, owner", each(lambda c: f"{c.work_status}, {c.owner}")),
        ("supplier orders (its ledger file)", each(lambda c: str(c.supplier_orders))),
        ("... carrying the original operation",
         each(lambda c: str(sum(op == c.operation for op in c.supplier_operations)) if c.operation else "-")),
        ("supplier POST / GET (its requests table)", each(lambda c: f"{c.supplier_posts} / {c.supplier_gets}")),
        ("local order right after the crash", each(lambda c: c.order_status_after_crash or "-")),
        ("model calls (NoNewReasoning) / reserved in the database",
         each(lambda c: f"{c.model_calls} / {c.model_calls_recorded}")),
        ("old holder's writes after expiry", each(lambda c: _attempts(c.expired_probe))),
        ("old holder's writes after the takeover", each(lambda c: _attempts(c.stale_attempts))),
        ("transcript rows per generation", each(lambda c: ", ".join(
            f"gen {g}: {n}" for g, n in c.transcript_rows.items()) or "none")),
        ("money reserved / spent (pence)", each(lambda c: f"{c.reserved_pence} / {c.spent_pence}")),
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
