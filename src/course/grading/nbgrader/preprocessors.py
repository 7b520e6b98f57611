"""nbgrader preprocessors that move grading out of the learner's reach (wired in config.py).

Sanitize: `VerifyGradebook` (the gradebook still matches the release), `PrintableNotebook` (any
string a submission holds can be written), nbgrader's OverwriteCells, `StripHiddenTests` (no
autograded notebook holds a hidden region). Autograde: `StartChecks` (the judge decides each
graded cell), `DecideByJudge` (verdicts become the cells' outputs, which SaveAutoGrades,
formgrader and feedback read; no kernel runs).
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import DeduplicateIds, NbGraderPreprocessor
from nbgrader.utils import compute_checksum
from traitlets import Integer

from course.grading import findings
from course.grading.judge import checks
from course.grading.printable import printable
from course.grading.sandbox.bubblewrap import sandbox_disabled
from course.lab.learner import MESSAGE_LIMIT, OUTPUT_LIMIT, TRACEBACK_LINES

UNSANDBOXED = "UNSANDBOXED"


def _course(preprocessor, resources) -> tuple[CourseDirectory, str, str, str]:
    """(course directory, assignment, student, notebook) of the notebook being graded."""
    grading = resources["nbgrader"]
    return CourseDirectory(config=preprocessor.config), grading["assignment"], grading["student"], grading["notebook"]


def submitted_folder(preprocessor, resources) -> Path:
    coursedir, assignment, student, _ = _course(preprocessor, resources)
    return Path(coursedir.format_path(coursedir.submitted_directory, student, assignment))


def release_folder(preprocessor, resources) -> Path:
    coursedir, assignment, _, _ = _course(preprocessor, resources)
    folder = Path(coursedir.format_path(coursedir.release_directory, ".", assignment))
    if not folder.is_dir():
        raise FileNotFoundError(f"the release {folder} is missing: run `make release` (it is the grader's trusted copy)")
    return folder


class ForgetDuplicateIds(DeduplicateIds):
    """nbgrader's DeduplicateIds, but a duplicate loses its nbgrader metadata entirely: nbgrader leaves
    `{}`, on which OverwriteCells fails and the notebook scores 0 (a copied test cell is an honest
    accident in JupyterLab).
    """

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.get("metadata", {}).get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


class PrintableNotebook(NbGraderPreprocessor):
    """Before nbgrader first writes the submission: every string in it (sources, written answers,
    metadata) printable (course.grading.printable). A submitted notebook's JSON may hold a lone
    surrogate, which nbgrader cannot write: the notebook would go ungraded. The learner process
    runs the submitted notebook itself, unchanged."""

    def preprocess(self, nb, resources):
        return _printable_tree(nb), resources


def _printable_tree(node):
    if isinstance(node, dict):
        return NotebookNode({printable(key): _printable_tree(value) for key, value in node.items()})
    if isinstance(node, list):
        return [_printable_tree(item) for item in node]
    return printable(node) if isinstance(node, str) else node


class StripHiddenTests(NbGraderPreprocessor):
    """After OverwriteCells restored them: hidden regions out again, so neither the autograded
    notebook nor the feedback HTML rendered from it holds one."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and checks.BEGIN_HIDDEN in cell.source:
            cell.source = checks.hide_region(cell.source)
        return cell, resources


OBSERVATION_NOT_RERUN = ("[not re-run at grading: an observation (the course's own experiment) decides no points; "
                         "you saw its output in your own notebook]\n")

def decided_outside(cell) -> bool:
    """A graded test cell: the judge decides it, and its verdict replaces its outputs."""
    grading = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(grading.get("grade")) and not grading.get("solution")


def learners_code(cell) -> bool:
    """A code cell the learner wrote: an answer cell, or one they added (nothing of theirs is locked)."""
    grading = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and (bool(grading.get("solution")) or not grading.get("locked"))


def observation(cell) -> bool:
    """A cell tagged `observation`: one of the course's experiments for the learner to watch (real
    processes, real leases, a whole checkpoint run). It decides nothing; re-running it for every
    student costs most of a notebook's grading time (about 20 of 25 s per submission)."""
    return cell.get("cell_type") == "code" and "observation" in cell.get("metadata", {}).get("tags", [])


class StartChecks(NbGraderPreprocessor):
    """Start the graded test cells' checks (the judge decides them; see DecideByJudge): at the first
    notebook of a student, those of every notebook submitted, in one judge sandbox, longest first,
    so that checks that wait on real leases overlap; a later notebook picks up its own."""

    timeout = Integer(60, help="Seconds one check may take (after its learner process has run the cells).").tag(config=True)
    cell_timeout = Integer(120, help="Seconds each of the learner's cells may run in a learner process.").tag(config=True)

    def preprocess(self, nb, resources):
        coursedir, assignment, _, notebook = _course(self, resources)
        submitted = submitted_folder(self, resources).resolve()
        if (submitted, notebook) not in checks.STARTED:
            release = release_folder(self, resources)
            source = Path(coursedir.format_path(coursedir.source_directory, ".", assignment))
            others = {path.stem for path in submitted.glob("*.ipynb")} - {notebook}
            built = {}
            with Gradebook(resources["nbgrader"]["db_url"]) as gb:
                for name in [notebook, *sorted(n for n in others if (submitted, n) not in checks.STARTED)]:
                    try:  # another notebook's checks start only from a gradebook VerifyGradebook would accept
                        if name == notebook or not gradebook_problems(gb, assignment, name, release, source):
                            sources = {c.name: c.source for c in gb.find_notebook(name, assignment).source_cells}
                            built[name] = checks.notebook_jobs(name, release, sources)
                    except Exception:
                        if name == notebook:
                            raise
            for name, pending in checks.start_checks(built, submitted, release, self.timeout, self.cell_timeout).items():
                checks.STARTED[(submitted, name)] = pending
        resources.setdefault("course", {})["pending"] = checks.STARTED.pop((submitted, notebook))
        return nb, resources


class DecideByJudge(NbGraderPreprocessor):
    """Each graded test cell gets its verdict; each of the learner's cells, how it ended in the
    learner process (its output and error, as a kernel would show them). Each code cell's metadata
    gets what grading saw in it (course.grading.findings), which the report counts: the judge's
    findings for a test cell, the learner process's for a learner's cell (about itself only)."""

    def preprocess(self, nb, resources):
        pending = resources["course"].pop("pending")
        verdicts = pending.results()
        runs = _runs_by_cell(pending.report() or [])
        for cell in nb.cells:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            findings.mark(cell, [])  # a submitted cell's own metadata decides nothing
            if cell.cell_type != "code":
                continue
            if grade_id in verdicts and decided_outside(cell):
                cell.outputs = verdict_outputs(verdicts[grade_id])
                findings.mark(cell, verdicts[grade_id].get("findings"), unsandboxed=sandbox_disabled())
            elif observation(cell):
                cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=OBSERVATION_NOT_RERUN)]
            elif learners_code(cell):
                run = runs.get(cell.get("id")) or runs.get(grade_id) or runs.get(cell.source)
                cell.outputs = _outputs(run) if run is not None else [
                    NotebookNode(output_type="stream", name="stdout", text=NOT_RUN)]
                findings.mark(cell, (run or {}).get("findings"))
        return nb, resources


NOT_RUN = "[not run at grading: no check of this notebook needed your cells]\n"


def _runs_by_cell(report: list) -> dict[str, dict]:
    """The learner process's report, findable by cell id, by grade_id and by source (an entry that
    is not a cell's report, which a learner process could send, is skipped)."""
    found = {}
    for run in report:
        for key in (run.get("id"), run.get("label"), run.get("source")) if isinstance(run, dict) else ():
            if key:
                found.setdefault(str(key), run)
    return found


def _outputs(run: dict) -> list[NotebookNode]:
    """What a learner's cell printed and raised in the learner process, as printable text."""
    outputs = []
    if run.get("output"):
        outputs.append(NotebookNode(output_type="stream", name="stdout", text=printable(run["output"], OUTPUT_LIMIT)))
    if run.get("ename"):
        lines = run.get("traceback") if isinstance(run.get("traceback"), list) else []
        outputs.append(NotebookNode(output_type="error", ename=printable(run["ename"], 80),
                                    evalue=printable(run.get("evalue", ""), MESSAGE_LIMIT),
                                    traceback=[printable(line, MESSAGE_LIMIT) for line in lines[-TRACEBACK_LINES:]]))
    return outputs


def verdict_outputs(verdict: dict) -> list[NotebookNode]:
    """A passed check shows nothing; a failed one the judge's ename and message (as printable text:
    a visible part's message may hold the learner's values)."""
    notes = [] if not sandbox_disabled() else [NotebookNode(
        output_type="stream", name="stdout", text=f"[{UNSANDBOXED}: graded without the sandbox, by instructor decision]\n")]
    if verdict.get("passed"):
        return notes
    ename = printable(verdict.get("ename") or "CheckFailed", 80)
    message = printable(verdict.get("message") or "")
    return [*notes, NotebookNode(output_type="error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])]


NOT_GRADED_YET = ("**Not graded yet.** Your instructor grades this answer by hand. Until then it counts as 0 of its "
                  "{points:g} {unit}, here and in the total at the top; the total rises when it is graded.\n\n")


class MarkUngraded(NbGraderPreprocessor):
    """Feedback: an answer still waiting for manual grading says so, instead of standing there as a 0."""

    def preprocess(self, nb, resources):
        grading = resources["nbgrader"]
        with Gradebook(grading["db_url"]) as gb:
            waiting = {g.name: g.max_score for g in gb.find_submission_notebook(
                grading["notebook"], grading["assignment"], grading["student"]).grades
                if g.needs_manual_grade and g.manual_score is None}
        for cell in nb.cells:
            points = waiting.get(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"))
            if points is not None and cell.cell_type == "markdown":
                unit = "point" if points == 1 else "points"
                cell.source = NOT_GRADED_YET.format(points=points, unit=unit) + cell.source
        return nb, resources


class WrapLongLines(NbGraderPreprocessor):
    """Feedback: a check's note, an output or a traceback wraps at the page's edge instead of running
    off it (nbconvert shows them as preformatted text, which never wraps). Runs after nbconvert's
    CSSHTMLHeaderPreprocessor, whose styles the feedback template inlines."""

    CSS = "div.output_area pre, div.output_subarea pre { white-space: pre-wrap; overflow-wrap: anywhere; }"

    def preprocess(self, nb, resources):
        resources.setdefault("inlining", {}).setdefault("css", []).append(self.CSS)
        return nb, resources


class GradebookMismatch(RuntimeError):
    """The gradebook no longer holds the assignment the release was made from."""


class VerifyGradebook(NbGraderPreprocessor):
    """Refuse to record grades against a gradebook whose assignment was changed."""

    def preprocess(self, nb, resources):
        coursedir, assignment, _, notebook = _course(self, resources)
        release = release_folder(self, resources)
        source = Path(coursedir.format_path(coursedir.source_directory, ".", assignment))
        with Gradebook(resources["nbgrader"]["db_url"]) as gb:
            problems = gradebook_problems(gb, assignment, notebook, release, source)
        if problems:
            raise GradebookMismatch(
                f"the gradebook's copy of {assignment}/{notebook} does not match the release, so no grade was "
                f"recorded: {'; '.join(problems[:5])}. Re-create it with `nbgrader generate_assignment {assignment} "
                "--force` from solutions/ and autograde again.")
        return nb, resources


def gradebook_problems(gb, assignment: str, notebook: str, release: Path, source: Path) -> list[str]:
    """Differences between the gradebook and the release (and the solutions, when present)."""
    problems = []
    total = sum(cell.points for path in sorted(release.glob("*.ipynb"))
                for cell in checks.course_cells(json.loads(path.read_text()), {}) if cell.graded)
    recorded = gb.find_assignment(assignment).max_score
    if abs(recorded - total) > 1e-9:
        problems.append(f"the assignment is worth {recorded:g} points in the gradebook, {total:g} in the release")
    stored = {c.name: c for c in gb.find_notebook(notebook, assignment).source_cells}
    graded = {c.name: c.max_score for c in gb.find_notebook(notebook, assignment).grade_cells}
    release_nb = json.loads((release / f"{notebook}.ipynb").read_text())
    solutions = _solution_sources(source / f"{notebook}.ipynb")
    for raw in release_nb["cells"]:
        meta = raw.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id")
        if not grade_id or not (meta.get("locked") or meta.get("grade") or meta.get("solution")):
            continue
        cell = stored.get(grade_id)
        if cell is None:
            problems.append(f"cell {grade_id!r} is missing")
            continue
        expected = solutions.get(grade_id) if meta.get("locked") and grade_id in solutions else None
        released = checks.hide_region(checks.cell_text(raw["source"]), None)
        if expected is not None and cell.source != expected or checks.hide_region(cell.source, None) != released:
            problems.append(f"cell {grade_id!r} has other source")
        node = nbformat.from_dict(raw)
        node.source = cell.source
        if cell.checksum != compute_checksum(node):
            problems.append(f"cell {grade_id!r} has a checksum that does not match its source")
        if meta.get("grade") and abs(graded.get(grade_id, -1) - float(meta.get("points", 0))) > 1e-9:
            problems.append(f"cell {grade_id!r} is worth {graded.get(grade_id)} points, {meta.get('points')} in the release")
    return problems


def _solution_sources(path: Path) -> dict[str, str]:
    """Locked cells of the instructor's source notebook, when it is at hand."""
    if not path.is_file():
        return {}
    found = {}
    for cell in json.loads(path.read_text())["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("locked") and meta.get("grade_id"):
            found[meta["grade_id"]] = checks.cell_text(cell["source"])
    return found
