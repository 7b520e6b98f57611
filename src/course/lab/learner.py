"""A learner's notebooks, run as written: the one definition of what a learner process runs.

`notebook_cells` lists what runs, in order: the notebook's `setup` cells (at grading, taken from
the release, COURSE_RELEASE, not from the submission), then every code cell the learner owns (the
answer cells and any cell they added), whole, top-level statements included. The course's other
cells (observations, tests) do not run: they are the course's, and decide nothing here.
`run_cells` runs them in one module, each with a time limit, and keeps what each printed and how
it ended, as a kernel would. The checkpoint's worker processes (`load_implementation`) and the
grader's learner process (course.grading.learner.process) both run a notebook this way.

`load_implementation` runs `01_claims`, `02_fencing` and `04_recovery`, one module each (a later
notebook's `setup` may import the reference `claim`, which must not replace the learner's), and
returns the five functions a worker calls. A function still holding nbgrader's stub raises
`NotImplementedYet` ("not implemented yet: write `<function>` in <notebook> and run it").

Only saved code is judged. `versions` says which version of each graded definition is loaded (the
notebook and when it was saved) and, where a JupyterLab kernel ran it, whether the kernel ran the
same source (`course.lab.kernel_runs`). With `require_saved`, a definition whose last run in the
learner's kernel is newer than the save and differs from it stops the load ("save <notebook> first").
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import json
import os
import signal
import sys
import threading
import time
import traceback
import types
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course.lab import kernel_runs
from course.lessons.checks import is_stub, not_implemented
from course.grading import findings
from course.lab.graded_cells import FENCES, FUNCTIONS, GRADED_CELLS, NOTEBOOK_OF, WORKER
from reference_organizations.store.assistant import run_once
from sovereign_agent.ownership import REFERENCE, Ownership

REFERENCE_NAME = "reference"
RELEASE_VARIABLE = "COURSE_RELEASE"  # set by the grader: the release folder holding trusted setup cells
CELL_SECONDS = 120.0  # a cell's time limit (nbgrader's Execute.timeout in nbgrader_config)
OUTPUT_LIMIT = 256 * 1024  # characters of one cell's output that are kept
MESSAGE_LIMIT = 2000  # characters of an error's message, and of each line of its traceback, that are kept
TRACEBACK_LINES = 40  # the last lines of a cell's traceback that are kept

class LearnerCodeError(Exception):
    """The learner's notebooks cannot be turned into an implementation (missing, or raising)."""


class NotImplementedYet(NotImplementedError):
    """A learner function that is still nbgrader's stub."""

    def __init__(self, function: str) -> None:
        where = f"in {NOTEBOOK_OF[function]}" if function in NOTEBOOK_OF else "in its notebook"
        super().__init__(not_implemented(function, where))
        self.function = function


class CellTimeout(KeyboardInterrupt):
    """A cell ran past its time limit (what a kernel interrupt raises, under a name of its own)."""


class OutputLimit(KeyboardInterrupt):
    """A cell printed more than OUTPUT_LIMIT characters: it is interrupted, as a grading kernel was."""


@dataclass(frozen=True)
class LearnerCell:
    notebook: str
    label: str  # "setup", the grade_id of an answer cell, or "#N" for a cell the learner added
    source: str
    saved_at: float = 0.0  # the notebook file's modification time
    index: int | None = None  # position in the notebook (None: a setup cell taken from the release)
    cell_id: str = ""  # the notebook's own cell id (nbformat 4.5), to put outputs back where they belong


@dataclass
class CellRun:
    """How one cell ended: what it printed and, if it raised, the error as a kernel shows it; and
    what grading saw in it (course.grading.findings), decided here from classes and errnos."""

    label: str
    index: int | None
    cell_id: str = ""
    output: str = ""
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.ename)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "index": self.index, "id": self.cell_id, "output": self.output, "ename": self.ename,
                "evalue": self.evalue, "traceback": self.traceback, "findings": self.findings}


@dataclass(frozen=True)
class Version:
    """Which version of a graded definition is judged: the saved one, and what the kernel ran."""

    name: str
    notebook: str
    saved_at: float
    ran_at: float | None = None  # last run in the learner's JupyterLab kernel, if recorded
    same_as_run: bool | None = None  # did that run use the saved source? None: no record

    @property
    def unsaved(self) -> bool:
        """The kernel ran a source the saved notebook does not hold, after the last save."""
        return self.same_as_run is False and self.ran_at is not None and self.ran_at > self.saved_at

    def describe(self) -> str:
        line = f"{self.name}: {self.notebook}, saved {_clock(self.saved_at)}"
        if self.same_as_run is None:
            return line + " (no run recorded in a JupyterLab kernel)"
        if self.same_as_run:
            return line + f"; your kernel last ran this same source at {_clock(self.ran_at)}"
        if self.unsaved:
            return line + f"; your kernel ran a DIFFERENT, unsaved source at {_clock(self.ran_at)}"
        return line + f"; saved after your kernel last ran it ({_clock(self.ran_at)}): the saved source is judged"


def _clock(at: float | None) -> str:
    return "?" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def versions(cells: list[LearnerCell], folder: Path) -> list[Version]:
    """One Version per graded definition found in `cells`."""
    found = []
    for cell in cells:
        for grade_id, name in GRADED_CELLS.get(cell.notebook, ()):
            if grade_id != cell.label:
                continue
            run = kernel_runs.read(folder / cell.notebook).get(name)
            if run is None:
                found.append(Version(name, cell.notebook, cell.saved_at))
            else:
                same = run.get("fingerprint") == kernel_runs.fingerprint(cell.source)
                found.append(Version(name, cell.notebook, cell.saved_at, run.get("ran_at"), same))
    return found


def unsaved_message(stale: list[Version]) -> str:
    """'save 02_fencing first: ...' for the definitions whose kernel version is not saved."""
    notebooks = sorted({Path(v.notebook).stem for v in stale})
    names = ", ".join(f"`{v.name}` (run {_clock(v.ran_at)}, {v.notebook} saved {_clock(v.saved_at)})" for v in stale)
    return (f"save {' and '.join(notebooks)} first: your kernel ran {names} from a source the saved notebook does "
            "not hold, and only saved code runs here, as when your instructor grades. Save the notebook (File > Save), "
            "then run this cell again.")


# --- which cells ---------------------------------------------------------------------------------

def notebook_cells(folder: str | Path, notebook: str) -> list[LearnerCell]:
    """What a learner process runs of one notebook: setup cells, then the learner's own cells."""
    path = Path(folder).expanduser().resolve() / notebook
    if not path.is_file():
        raise LearnerCodeError(f"missing notebook: {path}")
    saved_at = path.stat().st_mtime
    own = _read_cells(path)
    trusted = _trusted_setup(notebook)
    setup = trusted if trusted is not None else [_text(c.get("source", "")) for c in own if _is_setup(c)]
    cells = [LearnerCell(notebook, "setup", source, saved_at) for source in setup]
    for index, cell in enumerate(own):
        if cell.get("cell_type") != "code" or _is_setup(cell):
            continue
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if nbgrader.get("solution") or not nbgrader.get("locked"):
            label = nbgrader.get("grade_id") if nbgrader.get("solution") else f"#{index + 1}"
            cells.append(LearnerCell(notebook, label or f"#{index + 1}", _text(cell.get("source", "")), saved_at, index,
                                     str(cell.get("id", ""))))
    return cells


def _is_setup(cell: dict[str, Any]) -> bool:
    return cell.get("cell_type") == "code" and "setup" in cell.get("metadata", {}).get("tags", [])


def _trusted_setup(notebook: str) -> list[str] | None:
    """While grading, `setup` cells come from the release (COURSE_RELEASE), not the submission:
    a submission may have edited them."""
    release = os.environ.get(RELEASE_VARIABLE)
    if not release:
        return None
    return [_text(c.get("source", "")) for c in _read_cells(Path(release) / notebook) if _is_setup(c)]


def _read_cells(path: Path) -> list[dict[str, Any]]:
    """A notebook's cells in nbformat 4 structure (read as JSON: importing nbformat costs seconds)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise LearnerCodeError(f"cannot read {path}: {error}") from None
    if not isinstance(document, dict) or "nbformat" not in document:
        raise LearnerCodeError(f"{path} is not a Jupyter notebook")
    if document["nbformat"] != 4:
        import nbformat

        try:
            document = nbformat.reads(json.dumps(document), as_version=4)
        except Exception as error:  # nbformat raises several kinds for unconvertible files
            raise LearnerCodeError(f"cannot convert {path} to notebook format 4: {error}") from None
    cells = document.get("cells")
    if not isinstance(cells, list):
        raise LearnerCodeError(f"{path} has no list of cells")
    return [cell for cell in cells if isinstance(cell, dict)]


def _text(source: str | list[str]) -> str:
    """Cell sources are stored as one string or as a list of lines."""
    return source if isinstance(source, str) else "".join(source)


# --- running them --------------------------------------------------------------------------------

def fresh_module(notebook: str) -> types.ModuleType:
    """A new module registered in sys.modules, so dataclasses can find it, marked as the learner's
    (course.grading.wire looks a learner's class up among such modules)."""
    name = f"course_learner_{Path(notebook).stem}_{uuid.uuid4().hex[:8]}"
    module = types.ModuleType(name, f"the learner's cells of {notebook}")
    module.__dict__.update(__builtins__=__builtins__, __course_learner__=True, display=_display)
    sys.modules[name] = module
    return module


def run_cells(cells: list[LearnerCell], module: types.ModuleType, seconds: float = CELL_SECONDS) -> list[CellRun]:
    """Run each cell as written, in order, in `module`; a failing cell is recorded and the next runs
    (as nbgrader does). Each cell gets `seconds` (enforced where a signal can be: the main thread)."""
    return [_run_cell(cell, module.__dict__, seconds) for cell in cells]


def _run_cell(cell: LearnerCell, namespace: dict[str, Any], seconds: float) -> CellRun:
    run = CellRun(cell.label, cell.index, cell.cell_id)
    buffer = _Bounded()
    found: set[str] = set()
    filename = f"<{cell.notebook}, cell {cell.label!r}>"
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer), _time_limit(seconds):
            body, last = _compile(cell.source, filename, namespace)
            exec(body, namespace)
            if last is not None:
                value = eval(last, namespace)
                if value is not None:
                    print(repr(value))
    except BaseException as error:  # the learner's cell may raise anything, SystemExit included
        if isinstance(error, CellTimeout):
            run.ename, run.evalue = "CellTimeoutError", f"the cell ran past the time limit ({seconds:g} s) and was interrupted"
            found.add("timeouts")
        elif isinstance(error, OutputLimit):
            run.ename, run.evalue = "OutputLimit", f"[output limit reached: the cell printed more than {OUTPUT_LIMIT} characters and was interrupted]"
            found.add("output_limit")
        else:
            run.ename, run.evalue = type(error).__name__, _message(error)
            found |= findings.of_error(error)
        lines = traceback.format_exception_only(type(error), error) if isinstance(error, SyntaxError) else \
            traceback.format_exception(type(error), error, error.__traceback__.tb_next if error.__traceback__ else None)
        run.traceback = [line[:MESSAGE_LIMIT] for line in lines[-TRACEBACK_LINES:]]
    run.output = buffer.text()
    run.findings = sorted(found | findings.seen())  # seen: writes refused while it ran, caught or not
    return run


def _compile(source: str, filename: str, namespace: dict[str, Any]) -> tuple[types.CodeType, types.CodeType | None]:
    """The cell's statements, and its last expression apart (a kernel displays its value).
    IPython syntax (%magic, !shell) is translated by IPython when the cell is not plain Python."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError:
        if not any(line.lstrip().startswith(("%", "!")) for line in source.splitlines()):
            raise
        from IPython.core.inputtransformer2 import TransformerManager
        from IPython.core.interactiveshell import InteractiveShell

        namespace.setdefault("get_ipython", InteractiveShell.instance)
        tree = ast.parse(TransformerManager().transform_cell(source), filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = compile(ast.Expression(tree.body.pop().value), filename, "eval")
    return compile(tree, filename, "exec"), last


@contextlib.contextmanager
def _time_limit(seconds: float):
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise CellTimeout()

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Bounded(io.TextIOBase):
    """A cell's output, kept up to OUTPUT_LIMIT characters."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0

    def write(self, text: str) -> int:
        if self.size + len(text) > OUTPUT_LIMIT:
            self.parts.append(text[: OUTPUT_LIMIT - self.size])
            self.size = OUTPUT_LIMIT
            raise OutputLimit()
        self.parts.append(text)
        self.size += len(text)
        return len(text)

    def text(self) -> str:
        return "".join(self.parts)


def _display(*values: Any) -> None:
    """`display` outside a kernel: the values' text."""
    for value in values:
        print(repr(value))


def _message(error: BaseException) -> str:
    try:
        return str(error)[:MESSAGE_LIMIT]
    except Exception:  # a learner __str__ that raises
        return "(its message could not be shown)"


# --- the checkpoint's implementation -------------------------------------------------------------

@dataclass
class LoadedImplementation:
    """What `load_implementation` found: `ownership` (the fences) and `run_once` (the worker pass)."""

    ownership: Ownership
    folder: Path | None
    run_once: Callable[..., Any] = run_once
    missing: list[str] = field(default_factory=list)  # names still stubs at definition time
    modules: list[types.ModuleType] = field(default_factory=list)
    versions: list[Version] = field(default_factory=list)  # which saved version of each definition
    runs: list[CellRun] = field(default_factory=list)  # how each cell ended


def describe(implementation: str | Path, worker: str | Path = REFERENCE_NAME) -> str:
    """A short, stable label for reports: 'reference' or the folder's absolute path (and the worker's, if not the same)."""
    def label(source: str | Path) -> str:
        return REFERENCE_NAME if str(source) == REFERENCE_NAME else str(Path(source).expanduser().resolve())

    fences, pass_ = label(implementation), label(worker)
    return fences if pass_ in (fences, REFERENCE_NAME) else (
        f"worker {pass_}" if fences == REFERENCE_NAME else f"fences {fences}, worker {pass_}")


def load_implementation(implementation: str | Path, *, worker: str | Path = REFERENCE_NAME,
                        require_saved: bool = False, seconds: float = CELL_SECONDS) -> LoadedImplementation:
    """The fences from `implementation` and the worker pass from `worker`: each `"reference"` or a
    folder holding the learner's notebooks (01, 02, 04 for the fences; 05 for the pass), run as written.

    A graded cell that raised without defining its name stops the load with the cell's own error;
    one that still holds the stub makes that function `NotImplementedYet`.
    `require_saved`: raise LearnerCodeError ("save <notebook> first") when a learner's kernel ran
    a graded definition that the saved notebook does not hold.
    """
    loaded = LoadedImplementation(REFERENCE, None)
    parts = [(source, notebooks) for source, notebooks in ((implementation, FENCES), (worker, (WORKER,)))
             if str(source) != REFERENCE_NAME]
    defined: dict[str, Any] = {}
    for source, notebooks in parts:
        loaded.folder = loaded.folder or Path(source).expanduser().resolve()
        defined |= _load_notebooks(Path(source).expanduser().resolve(), notebooks, loaded, require_saved, seconds)
    if str(implementation) != REFERENCE_NAME:
        loaded.ownership = Ownership(**{name: _guarded(name, defined.get(name), loaded.missing) for name in FUNCTIONS})
    if str(worker) != REFERENCE_NAME:
        loaded.run_once = _guarded("run_once", defined.get("run_once"), loaded.missing)
    return loaded


def saved_definitions(notebook: str, *names: str, folder: str | Path = ".") -> tuple[Any, ...]:
    """`names`, the graded definitions of one saved notebook beside this one, run as written: a
    later part reuses the learner's own code (01b_expiry runs 01_claims' `Claim` and `claim`). A
    class comes as defined; a function still holding the stub raises NotImplementedYet when called;
    in Lab, a definition the kernel ran but did not save stops the load ("save 01_claims first"); at
    grading (COURSE_RELEASE set) the submission is judged as submitted."""
    loaded = LoadedImplementation(REFERENCE, None)
    require_saved = RELEASE_VARIABLE not in os.environ
    defined = _load_notebooks(Path(folder).expanduser().resolve(), (notebook,), loaded, require_saved, CELL_SECONDS)
    return tuple(defined[name] if isinstance(defined.get(name), type) and name not in loaded.missing
                 else _guarded(name, defined.get(name), loaded.missing) for name in names)


def _load_notebooks(folder: Path, notebooks: tuple[str, ...], loaded: LoadedImplementation, require_saved: bool,
                    seconds: float) -> dict[str, Any]:
    """Run each notebook's cells in a module of its own (a later notebook's `setup` may import the
    reference `claim`, which must not replace the learner's); the graded names they defined."""
    if not folder.is_dir():
        raise LearnerCodeError(f"no notebook folder at {folder}")
    cells = {notebook: notebook_cells(folder, notebook) for notebook in notebooks}
    for notebook in notebooks:
        present = {cell.label for cell in cells[notebook]}
        for grade_id, _ in GRADED_CELLS[notebook]:
            if grade_id not in present:
                raise LearnerCodeError(
                    f"{folder / notebook} has no code cell with nbgrader grade_id {grade_id!r}: restore the "
                    "cell (or fetch a fresh copy of the notebook) and keep your code in it")
    judged = versions([c for found in cells.values() for c in found], folder)
    stale = [version for version in judged if version.unsaved]
    if require_saved and stale:
        raise LearnerCodeError(unsaved_message(stale))
    loaded.versions += judged
    defined: dict[str, Any] = {}
    with _loading():
        for notebook in notebooks:
            defined |= _run_notebook(notebook, cells[notebook], loaded, seconds)
    return defined


def _run_notebook(notebook: str, cells: list[LearnerCell], loaded: LoadedImplementation,
                  seconds: float) -> dict[str, Any]:
    """One notebook's cells in a module of its own; the graded names they defined, as defined."""
    defined: dict[str, Any] = {}
    module = fresh_module(notebook)
    loaded.modules.append(module)
    graded = dict(GRADED_CELLS[notebook])
    for cell in cells:
        (run,) = run_cells([cell], module, seconds)
        loaded.runs.append(run)
        name = graded.get(cell.label)
        if name is None:
            continue
        if run.ename == "NotImplementedError" or (name in module.__dict__ and is_stub(module.__dict__[name])):
            loaded.missing.append(name)
        elif name not in module.__dict__:
            raise LearnerCodeError(f"{notebook}, cell {cell.label!r} raised {run.ename}: {run.evalue}"
                                   if run.failed else f"{notebook}, cell {cell.label!r} does not define {name!r}")
        # Captured now: a later cell rebinding the name cannot swap the graded object.
        defined[name] = module.__dict__.get(name)
    return defined


_LOADING = threading.local()


@contextlib.contextmanager
def _loading() -> Any:
    _LOADING.depth = getattr(_LOADING, "depth", 0) + 1
    try:
        yield
    finally:
        _LOADING.depth -= 1


def refuse_while_loading(what: str) -> None:
    """A cell of a notebook being loaded (05's, whose pass the checkpoint runs) that starts the
    checkpoint or the matrix would start them again in every worker: it is refused at once."""
    if getattr(_LOADING, "depth", 0):
        raise LearnerCodeError(f"{what} does not run while your notebooks are loaded for it: a cell of yours calls it "
                               "(keep such calls out of 05_checkpoint's own cells, or run them in a scratch notebook)")


def load_ownership(folder: str | Path) -> Ownership:
    """The learner's `claim`, `assert_current`, `observe`, `finish` and `order_to_continue`."""
    return load_implementation(folder).ownership


def _guarded(name: str, function: Callable[..., Any] | None, missing: list[str]) -> Callable[..., Any]:
    """Call the learner's function; a stub says which function is missing instead of crashing."""
    if function is None or not callable(function) or name in missing:

        def absent(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedYet(name)

        absent.__name__ = name
        return absent

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except NotImplementedYet:
            raise
        except NotImplementedError as error:
            raise NotImplementedYet(_innermost_stub(error, name)) from None
        except NameError as error:
            # `claim` builds a Claim: if that class is still a stub, name it rather than the NameError.
            if error.name in missing:
                raise NotImplementedYet(error.name) from None
            raise

    return call


def _innermost_stub(error: BaseException, default: str) -> str:
    """The graded function that actually raised: `observe` may be fine and call a stub
    `assert_current`; the learner should be sent to the stub."""
    graded = {name for cells in GRADED_CELLS.values() for _, name in cells}
    found = default
    trace = error.__traceback__
    while trace is not None:
        code = trace.tb_frame.f_code
        # Cells are compiled as "<01_claims.ipynb, cell 'claim'>": a frame of the learner's own code.
        notebook = code.co_filename[1:].split(",", 1)[0] if code.co_filename.startswith("<") else ""
        if notebook in GRADED_CELLS and code.co_name in graded:
            found = code.co_name
        trace = trace.tb_next
    return found
