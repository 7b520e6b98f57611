"""What 06 shows of the schedule explorer: its figures, and one schedule drawn as two lanes.

    show_schedules("my functions")     # or "reference", "owner-only fence", "generation-blind fence"

The drawing shows a schedule as DSLabs' visual debugger shows a violating trace: the steps in
the order they ran (the x-axis is order, not time: time is injected and jumps only at "lease
expires"), holder A above, holder B below, the clock and the operator as lines across both
lanes. Each write says what the fence did with it; the first one it got wrong is the red cross.
Drawn on a matplotlib Figure with the Agg canvas, never through pyplot, so it works headless
and leaves a notebook's backend alone.
"""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path
from typing import Any

from course.lessons.interleavings import SAID, Exploration, explore_schedules, schedule_count
from course.lab.learner import LearnerCodeError, load_implementation
from course.lessons.wrong_fences import generation_blind, owner_only, reference_with_fence
from sovereign_agent.ownership import REFERENCE

LANES = {"A": 1, "B": 0}
FONT, SMALL = 10, 8
WRONG = {"owner-only fence": owner_only, "generation-blind fence": generation_blind}
CHOICES = ("my functions", "reference", *WRONG)


def functions(whose: str, folder: str | Path = ".") -> tuple[Any, list[dict[str, Any]]]:
    """The functions to explore, and the namespaces they read the wall clock from (your notebooks')."""
    if whose == "my functions":
        loaded = load_implementation(folder)
        return loaded.ownership, [module.__dict__ for module in loaded.modules]
    if whose not in CHOICES:
        raise ValueError(f"whose is one of {CHOICES}")
    return (REFERENCE if whose == "reference" else reference_with_fence(WRONG[whose])), []


def show_schedules(whose: str = "my functions", folder: str | Path = ".", *,
                   predicted: Any = None) -> Exploration | None:
    """Explore every schedule with `whose` functions ("my functions": your saved 01-02 notebooks in
    `folder`, loaded as 05 loads them); print the figures beside your prediction; draw the first
    violating schedule. A function still a stub is named in a sentence, not a traceback."""
    try:
        ownership, namespaces = functions(whose, folder)
        found = explore_schedules(ownership, namespaces=namespaces)
    except (NotImplementedError, LearnerCodeError) as missing:
        print(f"{missing}; or explore the reference: whose = \"reference\"")
        return None
    guess = "" if predicted is None else f" (you predicted {predicted})"
    print(f"{whose}: {found.schedules} of {schedule_count()} schedules run in {found.seconds:.1f} s; "
          f"{found.violating} break an invariant{guess}")
    for name, count in sorted(found.by_invariant.items()):
        print(f"  {name}: {count} schedules")
    if found.first is not None:
        print("first violating schedule:", found.first.line())
        draw_schedule(found.first)
    return found


def draw_schedule(run: Any, path: str | Path | None = None, *, show: bool | None = None) -> bytes:
    """Draw `run` (an interleavings.Run); write the PNG to `path` if given; display it in a
    notebook (`show=None`) or when asked. Returns the PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9.5, 3.2), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    for index, outcome in enumerate(run.outcomes, start=1):
        if outcome.step.actor in LANES:
            _holder_step(ax, index, outcome, index - 1 == run.marked)
        else:
            ax.axvline(index, color="grey", linestyle="--", linewidth=1)
            ax.text(index, 1.55, str(outcome.step), fontsize=SMALL, color="dimgrey", ha="center")
    verdict = run.violations[0] if run.violations else "every invariant held"
    ax.set_title(textwrap.fill(verdict, 100), loc="left", fontsize=FONT,
                 color="#b00000" if run.violations else "black")
    ax.set_yticks(list(LANES.values()), [f"holder {name}" for name in LANES], fontsize=FONT)
    ax.set_xticks(range(1, len(run.outcomes) + 1))
    ax.set_xlim(0.4, len(run.outcomes) + 0.6)
    ax.set_ylim(-0.7, 1.75)
    ax.set_xlabel("step of the schedule (order only; the clock jumps once, at 'lease expires')", fontsize=FONT)
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100)
    if path is not None:
        Path(path).write_bytes(png.getvalue())
    if show if show is not None else "ipykernel" in sys.modules:
        from IPython.display import Image, display

        display(Image(data=png.getvalue(), format="png"))
    return png.getvalue()


def _holder_step(ax: Any, x: int, outcome: Any, violating: bool) -> None:
    """One holder's step: a claim (circle), a write or finish (square), what happened beneath.
    Blue: done; grey: refused; light grey: nothing to do (no claim); red cross: the fence was wrong."""
    lane = LANES[outcome.step.actor]
    shape = "o" if outcome.step.action == "claim" else "s"
    if violating:
        shape, colour, size = "X", "#c00000", 16
    elif outcome.accepted is False:
        colour, size = "grey", 9
    elif outcome.generation is None:
        colour, size = "lightgrey", 9
    else:
        colour, size = "#4f81bd", 9
    ax.plot(x, lane, shape, color=colour, markersize=size)
    text = f"{SAID[outcome.step.action]}\n{textwrap.fill(outcome.text, 16)}"
    if violating:
        text += "\n" + textwrap.fill(f"but {outcome.why}", 24) if outcome.accepted else "\nbut it was current"
    ax.text(x, lane - 0.17, text, fontsize=SMALL, ha="center", va="top", color=colour if violating else "black")
