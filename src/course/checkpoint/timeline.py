"""draw_timeline: one panel per case, one lane per process, drawn from recorded data only.

Lanes: the old worker, the replacement (the parent process) and the supplier. Bars are the
holdings: the old worker's lease from its claim to the row's `expires`, the replacement's
holding from its claim to its completion. Marks: kill, pause and resume (signals the parent
sent), the crash point (crash matrix), the old worker's write attempts (refused or accepted, as
it reported them), the supplier's requests (from its ledger), and the shop's events placed on
the lane of the generation that wrote them (from the events table). Nothing on the figure is
typed in by hand.

The figure is drawn on a matplotlib Figure with the Agg canvas, never through pyplot's global
backend, so it works headless and does not disturb a notebook's backend; in a notebook the
saved PNG is displayed.
"""

from __future__ import annotations

import io
import sys
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


LANES = {"old worker": 2, "replacement": 1, "supplier": 0}
COLOURS = {"old worker": "#c0504d", "replacement": "#4f81bd", "supplier": "#9bbb59"}
SIGNAL_MARKERS = {"kill": ("X", "SIGKILL"), "pause": ("s", "SIGSTOP"), "resume": ("^", "SIGCONT")}
FONT, SMALL = 10, 9  # points, at the figure's real size: readable at notebook width
EVENT_LABELS = {
    "assistant.work.claimed": "claimed",
    "assistant.order.proposed": "proposed",
    "assistant.order.sending": "sending",
    "assistant.order.lookup": "lookup",
    "assistant.order.settled": "settled",
    "assistant.work.finished": "finished",
}


def draw_timeline(evidence: Iterable[Any], path: str | Path | None = None, *, show: bool | None = None) -> Path | None:
    """Draw every case's timeline into one PNG at `path` (and return it); display it when in a
    notebook (`show=None`) or when asked. Without a path the PNG is only displayed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cases = [_as_evidence(case) for case in evidence]
    if not cases:
        raise ValueError("no evidence to draw")
    # Drawn at the width a notebook shows (about 9.5 in at 100 dpi), so text keeps its size.
    figure = Figure(figsize=(9.5, 3.4 * len(cases)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(cases), 1, squeeze=False)[:, 0]
    for ax, case in zip(axes, cases, strict=True):
        _panel(ax, case)
    axes[-1].set_xlabel("seconds since the parent told the old worker to claim (wall clock)", fontsize=FONT)
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png.getvalue())
    if show is None:
        show = "ipykernel" in sys.modules
    if show:
        from IPython.display import Image, display

        display(Image(data=png.getvalue(), format="png"))
    return path


def _panel(ax: Any, case: Any) -> None:
    """One case: its verdict as the title, then the holdings, the shop's events and the marks
    (signals, refused writes, supplier requests) on one clock that starts with the case."""
    origin = case.started_at or min((m["at"] for m in case.marks), default=0.0)

    def x(at: float) -> float:
        return at - origin

    _title(ax, case)
    right = max(_holdings(ax, case, x), _events(ax, case, x), _marks(ax, case, x))
    ax.set_xlim(-0.1, right + 0.9 * max(right, 1.0))
    ax.set_yticks(list(LANES.values()), list(LANES), fontsize=FONT)
    ax.tick_params(axis="x", labelsize=SMALL)
    ax.set_ylim(-0.75, 2.75)
    ax.grid(axis="x", alpha=0.3)


def _title(ax: Any, case: Any) -> None:
    verdict = "PASS" if case.passed else "FAIL"
    title = f"{case.case} - {case.title}: {verdict}\n" + textwrap.fill("; ".join(case.facts()), 95)
    if case.failures:
        title += "\n" + textwrap.fill(case.failures[0], 95, max_lines=3)
    ax.set_title(title, loc="left", fontsize=FONT, color="black" if case.passed else "#b00000")


def _holdings(ax: Any, case: Any, x: Callable[[float], float]) -> float:
    """Lease and holding bars, one per generation; returns the right-most time drawn."""
    right = 0.0
    # a holding too short to see (the replacement's pass takes milliseconds) is drawn this wide
    latest = [at for holding in case.leases for at in (holding.get("end"),) if at is not None]
    latest += [mark["at"] for mark in case.marks]
    shortest = 0.015 * max(max((x(at) for at in latest), default=1.0), 1.0)
    for holding in case.leases:
        start, end = holding.get("start"), holding.get("end")
        if start is None or end is None:
            continue
        lane, colour = LANES[holding["lane"]], COLOURS[holding["lane"]]
        ax.barh(lane, max(x(end) - x(start), shortest), left=x(start), height=0.42, color=colour, alpha=0.45,
                edgecolor=colour)
        if holding["kind"] == "lease":
            # short, at the bar's right end: a kill or pause mark near its start stays clear of the text
            ax.text(x(end) - 0.02 * shortest / 0.015, lane, f"gen. {holding.get('generation')} lease, "
                    f"{end - start:.2f} s", fontsize=SMALL, va="center", ha="right")
        else:
            ax.annotate(f"generation {holding.get('generation')} holding, {end - start:.2f} s",
                        (x(start) + max(x(end) - x(start), shortest), lane), xytext=(4, 7),
                        textcoords="offset points", fontsize=SMALL, color=colour)
        right = max(right, x(end))
    if case.lease_expires_at is not None:
        ax.axvline(x(case.lease_expires_at), color="grey", linestyle="--", linewidth=1)
        ax.text(x(case.lease_expires_at), -0.62, "lease expires ", fontsize=SMALL, color="grey", ha="right")
    return right


def _events(ax: Any, case: Any, x: Callable[[float], float]) -> float:
    """The shop's events (events table), on the lane of the generation that wrote them."""
    right = 0.0
    writers = {}
    if case.old_generation is not None:
        writers = {case.old_generation: "old worker", case.old_generation + 1: "replacement"}
    sequences: dict[str, list[tuple[float, str]]] = {"old worker": [], "replacement": []}
    for event in case.events:
        generation = event["payload"].get("generation")
        if generation not in writers or event["payload"].get("work") not in (None, case.work_id):
            continue
        if event["kind"].startswith("assistant.order.") and event["payload"].get("order") != case.operation:
            continue
        lane_name = writers[generation]
        ax.plot(x(event["created_at"]), LANES[lane_name], "o", color=COLOURS[lane_name], markersize=4)
        sequences[lane_name].append((x(event["created_at"]), EVENT_LABELS.get(event["kind"], event["kind"])))
        right = max(right, x(event["created_at"]))
    for lane_name, sequence in sequences.items():
        if sequence:
            anchor = sequence[0][0] if lane_name == "old worker" else sequence[-1][0]
            ax.annotate("events: " + " > ".join(label for _, label in sequence), (anchor, LANES[lane_name]),
                        xytext=(6 if lane_name == "replacement" else 0, -16), textcoords="offset points",
                        fontsize=SMALL, color=COLOURS[lane_name])
    return right


def _marks(ax: Any, case: Any, x: Callable[[float], float]) -> float:
    """Signals, write attempts, supplier requests, crash points and claims, each as its own mark."""
    right = 0.0
    attempts: dict[str, list[tuple[str, bool]]] = {}  # phase: [(label, refused)]
    requests: dict[str, int] = {}  # supplier requests labelled so far, per method: each label a line further out
    for mark in case.marks:
        lane = LANES.get(mark["lane"])
        if lane is None or x(mark["at"]) < -0.05:  # start-up happened while the previous case waited
            continue
        right = max(right, x(mark["at"]))
        _mark(ax, mark, x(mark["at"]), lane, attempts, requests)
    for phase, labels in attempts.items():
        times = [m["at"] for m in case.marks
                 if "outcome" in m and m["what"].startswith("after expiry") == (phase == "after expiry")]
        refused = sum(was_refused for _, was_refused in labels)
        summary = f"{phase}, {refused} of {len(labels)} refused:\n" + ", ".join(label for label, _ in labels)
        ax.annotate(summary, (x(max(times)), LANES["old worker"]),
                    xytext=(8, 6 if phase == "after takeover" else -8), textcoords="offset points", fontsize=SMALL,
                    va="bottom" if phase == "after takeover" else "top")
    return right


def _mark(ax: Any, mark: dict, at: float, lane: float, attempts: dict[str, list[tuple[str, bool]]],
          requests: dict[str, int]) -> None:
    what = mark["what"]
    if what in SIGNAL_MARKERS:
        marker, label = SIGNAL_MARKERS[what]
        ax.plot(at, lane, marker, color="black", markersize=9)
        # left of its mark: the write attempts that follow a signal are labelled to their right
        ax.annotate(label, (at, lane), xytext=(-6, 9), textcoords="offset points", fontsize=SMALL, ha="right")
    elif "outcome" in mark:  # a write attempt: summarised per phase by _marks
        refused = mark["outcome"] == "refused"
        ax.plot(at, lane, "x" if refused else "*", color="black" if refused else "#b00000", markersize=8)
        phase = "after expiry" if what.startswith("after expiry") else "after takeover"
        attempts.setdefault(phase, []).append(
            (mark["boundary"] if refused else f"{mark['boundary']} {mark['outcome'].upper()}", refused))
    elif "method" in mark:
        post = mark["method"] == "POST"
        ax.plot(at, lane, "D" if post else "o", color=COLOURS["supplier"], markersize=7)
        label = f"order committed (POST {mark['status']})" if post else f"lookup (GET {mark['status']})"
        before = requests[mark["method"]] = requests.get(mark["method"], 0) + 1
        step = 11 * (before - 1)  # a second request moments later: its label a line above (POST) or below (GET)
        ax.annotate(label, (at, lane), xytext=(6, 6 + step if post else -15 - step), textcoords="offset points",
                    fontsize=SMALL)
    elif "crash_point" in mark:  # the crash matrix: where the old worker stopped itself
        ax.axvline(at, color="#b00000", linestyle=":", linewidth=1.5)
        ax.plot(at, lane, "P", color="#b00000", markersize=10)
        ax.annotate(f"crash point: {mark['crash_point']}", (at, lane), xytext=(6, 21),
                    textcoords="offset points", fontsize=SMALL, color="#b00000", fontweight="bold")
    elif what.startswith("competing claim"):
        ax.plot(at, lane, "v", color="black", markersize=6)
        ax.annotate(what, (at, lane), xytext=(6, 6), textcoords="offset points", fontsize=SMALL)
    elif what in ("later assignment queued", "second pass (later work)"):
        ax.plot(at, lane, ">", color=COLOURS["replacement"], markersize=6)
        # queued: below, to the right; the second pass: above, to the left (the holding's label is
        # above, to the right)
        below = what == "later assignment queued"
        ax.annotate(what, (at, lane), xytext=(6, -16) if below else (-6, 6), textcoords="offset points",
                    fontsize=SMALL, ha="left" if below else "right")


def _as_evidence(case: Any) -> Any:
    """CaseEvidence objects as they are; dicts (evidence read back from JSON) rebuilt."""
    if not isinstance(case, dict):
        return case
    from dataclasses import fields

    from course.checkpoint.evidence import CaseEvidence

    names = {f.name for f in fields(CaseEvidence)}
    return CaseEvidence(**{key: value for key, value in case.items() if key in names})
