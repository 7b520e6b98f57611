"""`course analytics`: what the class got wrong, at a glance. nbgrader keeps one grade per graded
cell and per student, and shows no statistics across a class; this reads them back and writes:

- each automatically graded check's pass rate (full marks, partial, zero, over the students graded;
  a manual override in formgrader counts, as the gradebook holds it), worst first;
- the distribution of the students' total scores, as the gradebook holds them (written answers not
  graded yet count 0);
- the students whose check met a grading error or a limit, from what grading saw in each check's
  cell (course.grading.findings, stored in the autograded notebooks), so they can be graded again;
- the misconception of the instructor guide an often-failed check points to, as the check's own
  cell in the instructor's source says it (`METADATA` below; never guessed from a check's text);

As a CSV (one row per check), a figure (pass rates as bars, the scores as a histogram) and a page
holding both in `analytics/`, and a short summary. What it cannot say: a pass rate per hidden case.
A check is one grade in the gradebook, and the judge stops a check at its first failing case, so which of its
later cases a student would have failed is recorded nowhere; nothing here pretends otherwise.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from course.grading import findings as found
from course.grading.nbgrader.commands import ASSIGNMENT
from course.grading.nbgrader.gradebook import db_url, quiet_gradebook
from course.grading.printable import printable

GUIDE = "docs/instructor-guide.md"
SECTION = "Misconceptions this chapter meets"  # the guide's `## ` section the names below are from
SOURCE = "solutions"  # the course folder's nbgrader source (config: CourseDirectory.source_directory)
# A check's own cell says which misconception a failure there points to: its metadata
# {"course": {"misconception": NAME}}, NAME as the guide's section writes it in bold (without the
# bold's closing full stop or quotes), or null for a mistake of its own. `course check-authoring`
# refuses a graded check without it, or with a name the section does not hold.
METADATA = ("course", "misconception")
OFTEN_FAILED = 0.5  # a check at most half the class earned in full: a teaching matter, not one student's
LIMITS = ("timeouts", "output_limit", "process_limit", "memory_limit", "disk_limit")  # findings that are bounds
COLUMNS = ["notebook", "check", "max_score", "graded", "full", "partial", "zero", "pass_rate", "mean_score",
           "grading_errors", "limits", "misconception", "guide"]


class NoGrades(RuntimeError):
    """Nothing to read: no gradebook, no assignment in it, or no student graded yet."""


def anchor(heading: str) -> str:
    """A heading's anchor as GitHub and JupyterLab make it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@dataclass
class Check:
    """One automatically graded check over the class."""

    notebook: str
    name: str
    max_score: float
    scores: dict[str, float] = field(default_factory=dict)  # student -> score, as the gradebook holds it
    grading_errors: list[str] = field(default_factory=list)  # students whose check met one
    limits: list[tuple[str, str]] = field(default_factory=list)  # (student, finding)
    misconception: str | None = None  # as the check's cell in the source names it

    @property
    def key(self) -> str:
        return f"{self.notebook}/{self.name}"

    def count(self, kind: str) -> int:
        """Students with full marks, a partial score, or zero."""
        return sum(1 for score in self.scores.values() if _kind(score, self.max_score) == kind)

    @property
    def pass_rate(self) -> float:
        return self.count("full") / len(self.scores) if self.scores else 0.0

    @property
    def mean(self) -> float:
        return sum(self.scores.values()) / len(self.scores) if self.scores else 0.0

    @property
    def often_failed(self) -> bool:
        return self.pass_rate <= OFTEN_FAILED


def _kind(score: float, maximum: float) -> str:
    return "full" if score >= maximum - 1e-9 else "zero" if score <= 1e-9 else "partial"


@dataclass
class ClassAnalytics:
    """The class, read once from the gradebook and the autograded notebooks: the CSV, the figure and
    the summary are views of it, so they cannot disagree."""

    checks: list[Check]  # worst first
    totals: dict[str, float]  # student -> total score, as the gradebook holds it
    max_score: float
    unread: list[str] = field(default_factory=list)  # students whose autograded notebooks were not found
    # student -> limits met outside any check's cell (running their own answers, e.g. a fork bomb)
    limits_elsewhere: dict[str, list[str]] = field(default_factory=dict)

    @property
    def bins(self) -> list[tuple[float, float, int]]:
        """The histogram of total scores: (low, high, students with low <= score < high), equal widths
        of a whole number of points, the last bin holding full marks (and any extra credit above)."""
        width = max(1, math.ceil(self.max_score / 10))
        edges = [width * i for i in range(int(self.max_score // width) + 2)]
        last = edges[-2]
        return [(low, high, sum(1 for score in self.totals.values() if low <= score and (score < high or low == last)))
                for low, high in zip(edges, edges[1:])]


def read_class(root: Path) -> ClassAnalytics:
    """The class's checks and totals from the gradebook, then what grading saw in each check's cell."""
    root = Path(root).resolve()
    url = db_url(root)
    if not _gradebook_present(url):
        raise NoGrades(f"no gradebook at {_shown(url)}: grade the class first (`course autograde`)")
    from nbgrader.api import Gradebook, MissingEntry

    quiet_gradebook()
    with Gradebook(url) as gradebook:
        try:
            assignment = gradebook.find_assignment(ASSIGNMENT)
        except MissingEntry:
            raise NoGrades(f"the gradebook at {_shown(url)} holds no assignment {ASSIGNMENT}: "
                           "nothing graded yet") from None
        checks, totals = _checks(assignment)
        maximum = assignment.max_score
    if not totals or not checks:
        raise NoGrades(f"the gradebook at {_shown(url)} holds no graded submission of {ASSIGNMENT} "
                       "(or no automatically graded check): nothing to analyse")
    unread, elsewhere = _add_findings(root, checks, sorted(totals))
    for key, name in misconceptions(root / SOURCE / ASSIGNMENT).items():
        if key in checks:
            checks[key].misconception = name
    ordered = sorted(checks.values(), key=lambda c: (c.pass_rate, c.mean / (c.max_score or 1), c.key))
    return ClassAnalytics(ordered, totals, maximum, unread, elsewhere)


def misconceptions(source: Path) -> dict[str, str | None]:
    """{"notebook/check": the misconception its cell names, or None} for the graded checks of the
    instructor's source notebooks (never a submission: a learner cannot move a check's pointer)."""
    import nbformat

    found_names: dict[str, str | None] = {}
    for path in sorted(Path(source).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            grading = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and grading.get("grade") and not grading.get("solution"):
                found_names[f"{path.stem}/{grading['grade_id']}"] = cell.metadata.get(METADATA[0], {}).get(METADATA[1])
    return found_names


def named_in_guide(guide: str) -> set[str]:
    """The misconceptions the guide's section names in bold."""
    section = guide.split(f"\n## {SECTION}\n", 1)[1].split("\n## ", 1)[0] if f"\n## {SECTION}\n" in guide else ""
    return {bold.strip().rstrip(".").strip('"') for bold in re.findall(r"\*\*(.+?)\*\*", section)}


def _gradebook_present(url: str) -> bool:
    """Whether the gradebook exists and has nbgrader's tables; opening a Gradebook would create it."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and not (parsed.database and Path(parsed.database).is_file()):
        return False
    engine = create_engine(url)
    try:
        return "assignment" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def _shown(url: str) -> str:
    """The gradebook's URL without a password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _checks(assignment) -> tuple[dict[str, Check], dict[str, float]]:
    """{key: Check} of the automatically graded cells (graded code cells that are not answers), and
    each student's total."""
    answers = {(notebook.name, cell.name) for notebook in assignment.notebooks for cell in notebook.solution_cells}
    checks: dict[str, Check] = {}
    totals: dict[str, float] = {}
    for submission in assignment.submissions:
        student = submission.student.id
        totals[student] = submission.score
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                if grade.cell_type != "code" or (notebook.name, grade.name) in answers:
                    continue
                check = checks.setdefault(f"{notebook.name}/{grade.name}",
                                          Check(notebook.name, grade.name, grade.max_score))
                check.scores[student] = grade.score
    return checks, totals


def _add_findings(root: Path, checks: dict[str, Check],
                  students: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Note, per check, the students whose check's cell shows a grading error or a limit; return the
    students whose autograded notebooks are missing (graded on another machine, or removed), and the
    limits each student met in cells that are no check (their own answers, run as written)."""
    import nbformat

    notebooks = sorted({check.notebook for check in checks.values()})
    unread, elsewhere = [], {}
    for student in students:
        folder = root / "autograded" / student / ASSIGNMENT
        paths = [folder / f"{notebook}.ipynb" for notebook in notebooks]
        if not all(path.is_file() for path in paths):
            unread.append(student)
        for path in filter(Path.is_file, paths):
            for cell in nbformat.read(path, as_version=4).cells:
                names = found.of_cell(cell)
                check = checks.get(f"{path.stem}/{cell.get('metadata', {}).get('nbgrader', {}).get('grade_id')}")
                if check is None:
                    met = [name for name in names if name in LIMITS and name not in elsewhere.get(student, [])]
                    if met:
                        elsewhere.setdefault(student, []).extend(met)
                    continue
                if "grading_error" in names:
                    check.grading_errors.append(student)
                check.limits.extend((student, name) for name in names if name in LIMITS)
    return unread, elsewhere


def rows(result: ClassAnalytics) -> list[dict]:
    """One row per check, worst first (the CSV)."""
    link = f"{GUIDE}#{anchor(SECTION)}"
    return [{"notebook": c.notebook, "check": c.name, "max_score": f"{c.max_score:g}", "graded": len(c.scores),
             "full": c.count("full"), "partial": c.count("partial"), "zero": c.count("zero"),
             "pass_rate": f"{c.pass_rate:.3f}", "mean_score": f"{c.mean:.3f}",
             "grading_errors": "; ".join(printable(s) for s in c.grading_errors),
             "limits": "; ".join(f"{printable(s)} ({found.SAID[name]})" for s, name in c.limits),
             "misconception": c.misconception or "", "guide": link if c.misconception else ""}
            for c in result.checks]


def figure(result: ClassAnalytics):
    """Each check's share of full marks, partial and zero as a bar (worst at the top, an often-failed
    check's misconception written on it), and the histogram of total scores."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    checks = result.checks
    fig = Figure(figsize=(14, max(4.0, 0.34 * len(checks) + 1.6)), layout="constrained")
    bars, histogram = fig.subplots(1, 2, width_ratios=[3, 2])
    shares = {kind: [c.count(kind) / len(c.scores) for c in checks] for kind in ("full", "partial", "zero")}
    left = [0.0] * len(checks)
    for kind, colour, label in (("full", "#2e7d32", "full marks"), ("partial", "#f9a825", "partial"),
                                ("zero", "#c62828", "zero")):
        bars.barh(range(len(checks)), shares[kind], left=left, color=colour, label=label)
        left = [a + b for a, b in zip(left, shares[kind])]
    labels = [c.key + (f"  ({len(c.grading_errors)} grading error{'s' * (len(c.grading_errors) != 1)})"
                       if c.grading_errors else "") for c in checks]
    bars.set_yticks(range(len(checks)), labels, fontsize=8)
    bars.invert_yaxis()
    for row, check in enumerate(checks):
        if check.often_failed and check.misconception:
            bars.text(0.01, row, f"misconception: {check.misconception}", va="center", fontsize=7,
                      bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0, "pad": 1})
    bars.set_xlim(0, 1)
    bars.xaxis.set_major_formatter(PercentFormatter(1.0))
    bars.set_title(f"{ASSIGNMENT}: each check, over the {len(result.totals)} students graded (worst first)")
    fig.legend(loc="outside lower left", ncols=3, fontsize=8)
    bins = result.bins
    histogram.bar([low for low, _, _ in bins], [count for _, _, count in bins], width=bins[0][1] - bins[0][0],
                  align="edge", color="#1565c0", edgecolor="white")
    histogram.set_xlabel(f"total score (of {result.max_score:g}; written answers not graded yet count 0)")
    histogram.set_ylabel("students")
    histogram.yaxis.set_major_locator(MaxNLocator(integer=True))
    histogram.set_title("Total scores")
    return fig


# The page holds only text escaped here and the figure as data: no script, no link out, and a
# policy that would stop either, should a student's id or a finding ever carry markup.
PAGE_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def page(result: ClassAnalytics, image: bytes) -> str:
    """One HTML file an instructor opens from formgrader's Lab (or any browser): the summary, the
    figure and the CSV's table."""
    def cells(values, tag="td") -> str:
        return "".join(f"<{tag}>{html.escape(str(value))}</{tag}>" for value in values)

    table = rows(result)
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{PAGE_POLICY}">',
        f"<title>{html.escape(ASSIGNMENT)}: the class at a glance</title>",
        "<style>body{font-family:sans-serif;margin:1.5em}img{max-width:100%}table{border-collapse:collapse;"
        "font-size:0.85em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}</style></head><body>",
        f"<h1>{html.escape(ASSIGNMENT)}: the class at a glance</h1>",
        "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in summary(result)) + "</ul>",
        f'<img alt="each check\'s pass rate, and the total scores" '
        f'src="data:image/png;base64,{base64.b64encode(image).decode()}">',
        f"<p>The misconceptions are those of the instructor guide's section <em>{html.escape(SECTION)}</em> "
        f"({html.escape(GUIDE)}).</p>",
        "<table><tr>" + cells(COLUMNS, "th") + "</tr>",
        *("<tr>" + cells(row[column] for column in COLUMNS) + "</tr>" for row in table),
        "</table></body></html>", ""])


def write(result: ClassAnalytics, folder: Path) -> tuple[Path, Path, Path]:
    """The CSV, the figure and the page in `folder`, each made whole in memory and then moved into
    place: a failure leaves the files of an earlier run as they were, and no part of a new one."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows(result))
    image = io.BytesIO()
    figure(result).savefig(image, format="png", dpi=110)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    made = {folder / f"{ASSIGNMENT}-checks.csv": text.getvalue().encode(),
            folder / f"{ASSIGNMENT}-checks.png": image.getvalue(),
            folder / f"{ASSIGNMENT}-checks.html": page(result, image.getvalue()).encode()}
    parts = {path: path.with_name(f".{path.name}.part-{os.getpid()}") for path in made}
    try:
        for path, data in made.items():
            parts[path].write_bytes(data)
        for path, part in parts.items():
            os.replace(part, path)
    finally:
        for part in parts.values():
            part.unlink(missing_ok=True)
    return tuple(made)


def analyse(root: Path, folder: Path | None = None) -> tuple[ClassAnalytics, tuple[Path, ...]]:
    """Read the class of `root` and write its CSV, figure and page (default: `root`/analytics)."""
    result = read_class(root)
    return result, write(result, Path(folder) if folder else Path(root) / "analytics")


def summary(result: ClassAnalytics, paths: tuple[Path, ...] = (), worst: int = 5) -> list[str]:
    """A few lines for the terminal: the scores, the worst checks, what to teach again, who to regrade."""
    totals = sorted(result.totals.values())
    lines = [f"{ASSIGNMENT}: {len(totals)} student(s) graded; total scores {totals[0]:g} to {totals[-1]:g} of "
             f"{result.max_score:g} (median {statistics.median(totals):g}).",
             "Students per total score: "
             + ", ".join(f"[{low:g}, {high:g}): {count}" for low, high, count in result.bins),
             f"Worst checks (full marks / partial / zero, of {len(totals)}):"]
    lines += [f"  {c.key}: {c.pass_rate:.0%} ({c.count('full')}/{c.count('partial')}/{c.count('zero')})"
              for c in result.checks[:worst]]
    taught = [c for c in result.checks if c.often_failed and c.misconception]
    if taught:
        lines.append(f"Often failed, and the misconception each points to ({GUIDE}#{anchor(SECTION)}):")
        lines += [f"  {c.key}: {c.misconception}" for c in taught]
    errors = [f"{c.key}: {', '.join(printable(s) for s in c.grading_errors)}"
              for c in result.checks if c.grading_errors]
    limits = [f"{c.key}: {', '.join(f'{printable(s)} ({found.SAID[n]})' for s, n in c.limits)}"
              for c in result.checks if c.limits]
    lines.append("Grading errors (not the student's mistake; grade them again): " + ("; ".join(errors) or "none"))
    lines.append("Limits met in checks: " + ("; ".join(limits) or "none"))
    lines.append("Limits met running the students' own cells: " + ("; ".join(
        f"{printable(s)} ({', '.join(found.SAID[n] for n in names)})"
        for s, names in sorted(result.limits_elsewhere.items())) or "none"))
    if result.unread:
        lines.append(f"Notebooks with no autograded copy (not submitted, or graded on another machine) for "
                     f"{len(result.unread)} student(s), whose grading errors and limits there are unknown: "
                     f"{', '.join(printable(s) for s in result.unread)}")
    lines.append("Pass rates per hidden case are not recorded: a check is one grade, "
                 "stopped at its first failing case.")
    lines += [f"Wrote {path}" for path in paths]
    return lines
