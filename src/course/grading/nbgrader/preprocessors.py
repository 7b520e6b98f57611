"""nbgrader preprocessors that keep grading out of the learner's reach (wired in config.py).

Autograde, step by step, for each notebook of a submission:

1. sanitize: nbgrader restores the locked cells from the gradebook; `StripHiddenTests` then
   replaces the hidden regions by a placeholder line, so the kernel never receives them;
2. `SandboxedExecute`: the kernel runs what the learner saw (their cells and the visible tests)
   inside the student's sandbox, with a bound on each cell's output;
3. `StartChecks` (before the kernel starts) and `DecideOutsideKernel` (after it ends): each
   graded test cell is decided by its own fresh, sandboxed checker (course.grading.checker),
   running side by side with the kernel; its verdict replaces the cell's outputs, so nbgrader's
   SaveAutoGrades, the gradebook, formgrader and feedback read the checker's decision;
4. `VerifyGradebook`: before anything is recorded, the gradebook's copy of the assignment must
   still match the release (sources, checksums, points, total).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import DeduplicateIds, Execute, NbGraderPreprocessor
from nbgrader.utils import compute_checksum
from traitlets import Integer

from course.grading import jobs
from course.grading.nbgrader.feedback import BEGIN, hide_region
from course.grading.sandbox.kernel import SandboxedKernelManager, without_debugger
from course.grading.sandbox.bubblewrap import WORKDIR, Sandbox, ensure_available, sandbox_disabled

UNSANDBOXED = "UNSANDBOXED"
KERNEL_DIED = "the kernel died (killed or crashed) while running this cell; later cells were not run"
KERNEL_UNRESPONSIVE = "the kernel stopped answering after this cell ran past the time limit; later cells were not run"
KERNEL_GARBLED = "the kernel stopped answering properly while running this cell; later cells were not run"


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
    """nbgrader's DeduplicateIds, except that a duplicate loses its nbgrader metadata entirely.

    nbgrader leaves `{}` behind, and OverwriteCells then reads a grade_id from it and fails: the
    whole notebook scores 0. A learner who copies a test cell in JupyterLab copies its metadata
    too, so this is an honest accident, not only an attack. The copy that keeps the id is restored
    from the gradebook like any locked cell; the other is left as one of the learner's own cells."""

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.get("metadata", {}).get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


class StripHiddenTests(NbGraderPreprocessor):
    """After OverwriteCells restored them: hidden regions out again, a placeholder line in their place."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and BEGIN in cell.source:
            cell.source = hide_region(cell.source)
        return cell, resources


OBSERVATION_NOT_RERUN = ("[not re-run at grading: an observation (the course's own experiment) decides no points; "
                         "you saw its output in your own notebook]\n")

COURSE_ONLY_NOT_RUN = ("[not run at grading: this notebook holds no code of yours (its code cells are the course's "
                       "own), so running it could not change a grade]\n")


def decided_outside(cell) -> bool:
    """A graded test cell: its own checker decides it and its verdict replaces its outputs, so
    running it in the learner's kernel as well would only repeat the work for outputs nobody keeps."""
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


class SandboxedExecute(Execute):
    """nbgrader's Execute, with the kernel inside the student's sandbox and outputs bounded.
    Graded test cells and observation cells are not run here (see `decided_outside`, `observation`)."""

    max_output_bytes = Integer(1024 * 1024, help="Output one cell may produce before it is interrupted.").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._scratch = None
        self._kernel_lost = False
        self._output_sizes: dict[int, int] = {}
        if not any(learners_code(cell) for cell in nb.cells):
            return self._course_only(nb), resources
        if sandbox_disabled():
            return super().preprocess(nb, resources, km)
        ensure_available()
        self._scratch = tempfile.mkdtemp(prefix="ch12-kernel-")
        submitted = submitted_folder(self, resources)
        self._sandbox = Sandbox(files={f"{WORKDIR}/{p.name}": str(p) for p in sorted(submitted.glob("*.ipynb"))},
                                tmpfs=without_debugger())
        try:
            with self._sandbox.bounded():
                return super().preprocess(nb, resources, km)
        finally:
            shutil.rmtree(self._scratch, ignore_errors=True)

    @staticmethod
    def _course_only(nb):
        """A notebook with none of the learner's code (after OverwriteCells restored the locked
        cells, every cell is the course's): no kernel, since running it could decide nothing."""
        for cell in nb.cells:
            if cell.cell_type == "code" and not decided_outside(cell):
                cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=COURSE_ONLY_NOT_RUN)]
        return nb

    def preprocess_cell(self, cell, resources, index):
        """A kernel that died or stopped answering costs the rest of the run, not the grade.

        Points are decided by the checkers from the learner's definitions; a top-level statement
        that kills or hangs the kernel is recorded in its cell (the report reads it) and the
        remaining cells are left unexecuted.
        """
        if self._kernel_lost or decided_outside(cell):
            return cell, resources
        if observation(cell):
            cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=OBSERVATION_NOT_RERUN)]
            return cell, resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except Exception as error:  # dead, unresponsive, or speaking garbage: the learner's code controls it
            self._kernel_lost = True
            why = {DeadKernelError: KERNEL_DIED, CellTimeoutError: KERNEL_UNRESPONSIVE}.get(type(error), KERNEL_UNRESPONSIVE)
            if isinstance(error, RuntimeError) and "Timeout" not in str(error) or isinstance(error, ValueError):
                why = KERNEL_GARBLED
            cell.outputs.append(NotebookNode(output_type="error", ename=type(error).__name__, evalue=why,
                                             traceback=[f"{type(error).__name__}: {why}"]))
            return cell, resources

    def create_kernel_manager(self):
        if self._scratch is None:
            return super().create_kernel_manager()
        self.km = SandboxedKernelManager(
            kernel_name=self.kernel_name or "python3", config=self.config, sandbox=self._sandbox, scratch=self._scratch)
        return self.km

    def process_message(self, msg, cell, cell_index):
        if msg.get("msg_type") in {"stream", "display_data", "execute_result", "error", "update_display_data"}:
            size = len(json.dumps(msg.get("content", {})))
            total = self._output_sizes[cell_index] = self._output_sizes.get(cell_index, 0) + size
            if total > self.max_output_bytes:
                if total - size <= self.max_output_bytes:  # the first message over the limit
                    cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=(
                        f"\n[output limit reached: this cell printed more than {self.max_output_bytes} bytes; "
                        "the grader interrupted it]\n")))
                    asyncio.ensure_future(self.km.interrupt_kernel())
                return None
        return super().process_message(msg, cell, cell_index)


class StartChecks(NbGraderPreprocessor):
    """Start each graded test cell's checker now, so the checks run while the kernel does."""

    timeout = Integer(60, help="Seconds one check may take.").tag(config=True)

    def preprocess(self, nb, resources):
        _, assignment, _, notebook = _course(self, resources)
        submitted = submitted_folder(self, resources)
        started = PRESTARTED.pop((submitted.resolve(), notebook), None)
        if started is None:
            with Gradebook(resources["nbgrader"]["db_url"]) as gb:
                sources = {c.name: c.source for c in gb.find_notebook(notebook, assignment).source_cells}
            started = jobs.notebook_checks(notebook, release_folder(self, resources), sources,
                                           [dict(cell) for cell in nb.cells], submitted, self.timeout)
        resources.setdefault("course", {})["pending"] = started
        return nb, resources


# Checks a grading unit started for all of a student's notebooks at once, before nbgrader reaches
# each one (course.grading.classes.unit): {(submitted folder, notebook): (pending checks, their sources)}.
PRESTARTED: dict[tuple[Path, str], tuple[jobs.PendingChecks, dict[str, str]]] = {}


class DecideOutsideKernel(NbGraderPreprocessor):
    """Replace each graded test cell's outputs with the verdict of its own checker process."""

    def preprocess(self, nb, resources):
        pending, sources = resources["course"].pop("pending")
        verdicts = pending.results()
        for cell in nb.cells:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if cell.cell_type == "code" and grade_id in verdicts:
                cell.outputs = verdict_outputs(verdicts[grade_id], sources[grade_id])
        resources["course"]["verdicts"] = verdicts
        return nb, resources


def verdict_outputs(verdict: dict, check_source: str) -> list[NotebookNode]:
    """A passed check shows nothing; a failed one its type and its own (redacted) message."""
    notes = [] if not sandbox_disabled() else [NotebookNode(
        output_type="stream", name="stdout", text=f"[{UNSANDBOXED}: graded without the sandbox, by instructor decision]\n")]
    if verdict.get("passed"):
        return notes
    ename = str(verdict.get("ename") or "CheckFailed")[:80]
    message = jobs.redact(str(verdict.get("message") or ""), check_source)[: jobs.RESULT_LIMIT // 8]
    return [*notes, NotebookNode(output_type="error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])]


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
                for cell in jobs.course_cells(json.loads(path.read_text()), {}) if cell.graded)
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
        released = jobs.split_hidden(jobs.cell_text(raw["source"]))[0]
        if expected is not None and cell.source != expected or jobs.split_hidden(cell.source)[0] != released:
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
            found[meta["grade_id"]] = jobs.cell_text(cell["source"])
    return found
