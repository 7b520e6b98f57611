"""The crash explorer for JupyterLab: choose a crash point and a nemesis, run one real trial, see it.

    from course.checkpoint.explorer import explore
    explore()      # in notebooks/ch12/06_explore.ipynb: "my functions" are the notebooks beside it

"Run" runs one trial of the crash matrix (real worker and supplier processes, a real lease)
and draws its timeline with the crash point marked, the counted evidence and the invariants
beside it. "Run all points" runs the whole matrix and fills the pass/fail grid as each trial
ends. The handlers run in the kernel's own thread, so the kernel is busy while a run lasts
(about 3 s for one trial, 15-20 s for all); every wait is bounded and every process is
stopped before a handler returns.
"""

from __future__ import annotations

import html
import tempfile
from pathlib import Path
from typing import Any

from course.checkpoint.crashpoints import POINTS
from course.checkpoint.matrix import figures, matrix_specs, run_matrix
from course.checkpoint.timeline import draw_timeline
from course.checkpoint.trial import NEMESES, TrialSpec

MINE, REFERENCE = "my functions", "reference"
UNFENCED, COURSE_RULE, MY_RULE = "unfenced", "the course's rule", "my admit_generation"
PASS_STYLE = "background:#d9ead3;color:#274e13"
FAIL_STYLE = "background:#f4cccc;color:#990000"


def explore(folder: str | Path | None = None, *, lease_seconds: float = 2.0) -> Any:
    """Build and display the explorer; `folder` holds your 01, 02 and 04 notebooks (default: here)."""
    from IPython.display import display

    explorer = Explorer(Path(folder) if folder is not None else Path.cwd(), lease_seconds)
    display(explorer.widget)
    return explorer


class Explorer:
    """The widgets and their two actions (kept as attributes so a test can drive them)."""

    def __init__(self, folder: Path, lease_seconds: float) -> None:
        import ipywidgets as widgets

        self.folder, self.lease = folder, lease_seconds
        self.point = widgets.Dropdown(options=[(f"{name}: {text}", name) for name, text in POINTS.items()],
                                      description="crash point", layout=widgets.Layout(width="560px"),
                                      style={"description_width": "90px"})
        self.nemesis = widgets.ToggleButtons(options=list(NEMESES), description="nemesis",
                                             style={"description_width": "90px"})
        self.whose = widgets.ToggleButtons(options=[MINE, REFERENCE], description="functions",
                                           style={"description_width": "90px"})
        self.fence = widgets.ToggleButtons(options=[UNFENCED, COURSE_RULE, MY_RULE], description="supplier",
                                           style={"description_width": "90px", "button_width": "auto"})
        self.run_one = widgets.Button(description="Run", button_style="primary", icon="play")
        self.run_all = widgets.Button(description="Run all points", icon="th")
        self.status = widgets.HTML("Choose a crash point and a nemesis, then press Run.")
        # Hidden until a trial has drawn one: an image without bytes shows as a broken image.
        self.picture = widgets.Image(format="png", layout=widgets.Layout(width="760px", display="none"))
        self.evidence = widgets.HTML(layout=widgets.Layout(width="420px"))
        self.cells = {(point, nemesis): widgets.HTML("<span title='not run'>&middot;</span>",
                                                     layout=widgets.Layout(width="90px"))
                      for point in POINTS for nemesis in NEMESES}
        header = [widgets.HTML("<b>crash point</b>")] + [widgets.HTML(f"<b>{n}</b>") for n in NEMESES]
        rows = [item for point in POINTS
                for item in [widgets.HTML(point), *(self.cells[(point, n)] for n in NEMESES)]]
        self.grid = widgets.GridBox(header + rows, layout=widgets.Layout(
            grid_template_columns="170px 90px 90px", grid_gap="2px 8px"))
        self.run_one.on_click(lambda _: self.run_trial())
        self.run_all.on_click(lambda _: self.run_everything())
        self.widget = widgets.VBox([
            widgets.VBox([self.point, self.nemesis, self.whose, self.fence]),
            widgets.HBox([self.run_one, self.run_all]),
            self.status,
            widgets.HBox([self.picture, self.evidence], layout=widgets.Layout(align_items="flex-start")),
            self.grid,
        ], layout=widgets.Layout(width="100%"))

    def implementation(self) -> str:
        return "reference" if self.whose.value == REFERENCE else str(self.folder)

    def supplier_fence(self) -> Any:
        """What fences the trials' supplier: nothing, the course's rule, or the learner's own
        `admit_generation` from this kernel (a LookupError until it is written and run)."""
        if self.fence.value == UNFENCED:
            return None
        if self.fence.value == COURSE_RULE:
            return "reference"
        import __main__

        from course.lessons.checks import is_stub

        rule = getattr(__main__, "admit_generation", None)
        if rule is None or is_stub(rule):
            raise LookupError("write and run admit_generation (above) first, or choose the course's rule")
        return rule

    def run_trial(self) -> Any:
        """One real trial at the chosen point and nemesis; draw it and list its evidence."""
        spec = TrialSpec(self.point.value, self.nemesis.value)
        fence = self._fence_or_say_why()
        if fence is False:
            return None
        self._busy(f"Running one trial: {spec.point} with {spec.nemesis} ({self.whose.value}) ...")
        try:
            (trial,) = run_matrix([spec], self.implementation(), lease_seconds=self.lease, supplier_fence=fence)
            with tempfile.TemporaryDirectory(prefix="ch12-explore-") as scratch:
                png = draw_timeline([trial], Path(scratch) / "timeline.png", show=False)
                self.picture.value = png.read_bytes()
                self.picture.layout.display = None
            self.evidence.value = evidence_html(trial)
            self._show(trial)
            self.status.value = (f"<b>{'PASS' if trial.passed else 'FAIL'}</b>: {html.escape(spec.point)} with "
                                 f"{spec.nemesis}, {trial.wall_seconds:.1f} s")
            return trial
        finally:
            self._idle()

    def run_everything(self) -> Any:
        """Every point x nemesis, side by side; each grid cell fills in as its trial ends."""
        fence = self._fence_or_say_why()
        if fence is False:
            return None
        for cell in self.cells.values():
            cell.value = "<span title='running'>&hellip;</span>"
        # the detail panel shows one trial: an earlier one beside the new grid would contradict it
        self.picture.layout.display = "none"
        self.evidence.value = ("Every point's verdict fills the grid below. To see one trial's timeline and "
                               "evidence, choose its point and nemesis and press Run.")
        self._busy(f"Running all {len(self.cells)} trials ({self.whose.value}) ...")
        try:
            result = run_matrix(matrix_specs(), self.implementation(), lease_seconds=self.lease,
                                on_result=self._show, supplier_fence=fence)
            self.status.value = html.escape(figures(result))
            return result
        finally:
            self._idle()

    def _fence_or_say_why(self) -> Any:
        """The supplier's fence for the next run, or False (and the status says why not)."""
        try:
            return self.supplier_fence()
        except LookupError as missing:
            self.status.value = html.escape(str(missing))
            return False

    def _show(self, trial: Any) -> None:
        cell = self.cells.get((trial.point, trial.nemesis))
        if cell is not None:
            tip = html.escape("; ".join(trial.failures) or "every invariant held", quote=True)
            style, word = (PASS_STYLE, "PASS") if trial.passed else (FAIL_STYLE, "FAIL")
            cell.value = f"<span style='{style};padding:0 6px' title=\"{tip}\">{word}</span>"

    def _busy(self, text: str) -> None:
        self.status.value = html.escape(text)
        self.run_one.disabled = self.run_all.disabled = True

    def _idle(self) -> None:
        self.run_one.disabled = self.run_all.disabled = False


def evidence_html(trial: Any) -> str:
    """The trial's invariants (held or broken, with the sentence) and its counted facts."""
    rows = []
    for invariant in trial.invariants:
        mark = "&#10004;" if invariant["ok"] else "&#10008;"
        colour = "#274e13" if invariant["ok"] else "#990000"
        text = html.escape(invariant["sentence"] or invariant["name"])
        rows.append(f"<li style='color:{colour}'>{mark} {text}</li>")
    crash, takeover = trial.at_crash, trial.takeover
    facts = trial.facts() + [
        f"at the crash: order {crash.get('orders')}, transcript rows {crash.get('transcript')}, "
        f"supplier orders {crash.get('supplier_orders')}",
        f"at the takeover: generation {takeover.get('generation')}, order {takeover.get('order_status')}",
        f"money reserved/spent {trial.reserved_pence}/{trial.spent_pence} pence (order {trial.order_amount})",
        f"transcript rows per generation {trial.transcript_rows}",
    ]
    listed = "".join(f"<li>{html.escape(fact)}</li>" for fact in facts)
    return (f"<div class='ch12-evidence'><b>invariants</b><ul style='padding-left:16px'>{''.join(rows)}</ul>"
            f"<b>evidence (counted)</b><ul style='padding-left:16px'>{listed}</ul></div>")
