"""Turn a learner's chapter-12 notebooks into an `Ownership` the real worker can run.

The checkpoint does not import notebooks. It reads `01_claims`, `02_fencing` and `03_recovery`
(nbformat 4 JSON) and executes, in cell order and in a fresh module: the cells tagged `setup`,
the six graded cells (found by their nbgrader `grade_id`) whole, and only the *definitions*
(imports, `def`, `class`, literal constants: `course.grading.definitions`) of the learner's
other cells, as the grader's checker does. So a helper the learner wrote in a cell of its own is
there when a graded function calls it, while the course's locked cells (observations, tests) and
every top-level statement of scratch work are ignored: a learner's experiments cannot change
what is graded. A name a graded function needs but that only a statement binds (`x = f()`)
is still missing; calling the function then raises a NameError that says so.

One module per notebook, not one for all three: each notebook is self-contained, and a later
notebook's `setup` cell may import the *reference* `claim` or `assert_current` (02_fencing
uses the reference `claim`). In a shared namespace that import would silently replace the
learner's function, and the checkpoint would grade the reference. Separate modules reproduce
what each function saw in the learner's own kernel.

A function still holding nbgrader's stub (`raise NotImplementedError()`) is not an error here:
calling it raises `NotImplementedYet`, whose message is "not implemented yet: write `<function>`
in <notebook> and run it".

Only saved code is judged. `versions` says which version of each graded definition is loaded
(the notebook and when it was saved) and, where a JupyterLab kernel ran it, whether the kernel
ran the same source (`course.kernel_runs`). With `require_saved`, a definition whose last run
in the learner's kernel is newer than the save and differs from it stops the load with "save
<notebook> first".
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import types
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course import kernel_runs
from course.checks import not_implemented
from course.grading.definitions import definitions_only
from sovereign_agent.ownership import REFERENCE, Ownership

REFERENCE_NAME = "reference"
RELEASE_VARIABLE = "COURSE_RELEASE"  # set by the grader: the release folder holding trusted setup cells

# notebook -> graded cells (grade_id) in the order they are executed, and the name each defines.
GRADED_CELLS: dict[str, tuple[tuple[str, str], ...]] = {
    "01_claims.ipynb": (("claim_dataclass", "Claim"), ("claim", "claim")),
    "02_fencing.ipynb": (("assert_current", "assert_current"), ("observe", "observe"), ("finish", "finish")),
    "03_recovery.ipynb": (("order_to_continue", "order_to_continue"),),
}
FUNCTIONS = ("claim", "assert_current", "observe", "finish", "order_to_continue")
NOTEBOOK_OF = {name: Path(notebook).stem for notebook, cells in GRADED_CELLS.items() for _, name in cells}


class LearnerCodeError(Exception):
    """The learner's notebooks cannot be turned into an implementation (missing, or raising)."""


class NotImplementedYet(NotImplementedError):
    """A learner function that is still nbgrader's stub."""

    def __init__(self, function: str) -> None:
        where = f"in {NOTEBOOK_OF[function]}" if function in NOTEBOOK_OF else "in its notebook"
        super().__init__(not_implemented(function, where))
        self.function = function


@dataclass(frozen=True)
class LearnerCell:
    notebook: str
    label: str  # "setup", the grade_id, or "definitions #N" for another learner cell
    source: str
    saved_at: float = 0.0  # the notebook file's modification time

    @property
    def helper(self) -> bool:
        """Definitions taken from a learner's other cell: it may fail to load without stopping the run."""
        return self.label.startswith("definitions ")


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
            "not hold, and the checkpoint judges only saved code. Save the notebook (File > Save), then run this "
            "cell again.")


@dataclass
class LoadedImplementation:
    """What `load_implementation` found; `ownership` is what the worker runs."""

    ownership: Ownership
    folder: Path | None
    missing: list[str] = field(default_factory=list)  # names still stubs at definition time
    modules: list[types.ModuleType] = field(default_factory=list)
    versions: list[Version] = field(default_factory=list)  # which saved version of each definition


def describe(implementation: str | Path) -> str:
    """A short, stable label for reports: 'reference' or the folder's absolute path."""
    if str(implementation) == REFERENCE_NAME:
        return REFERENCE_NAME
    return str(Path(implementation).expanduser().resolve())


def learner_cells(folder: str | Path) -> list[LearnerCell]:
    """The `setup` cells, the six graded cells and the definitions of the learner's other cells,
    notebook by notebook, in cell order."""
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise LearnerCodeError(f"no notebook folder at {folder}")
    cells: list[LearnerCell] = []
    for notebook, graded in GRADED_CELLS.items():
        path = folder / notebook
        if not path.is_file():
            raise LearnerCodeError(f"missing notebook: {path} (expected {', '.join(GRADED_CELLS)})")
        wanted = {grade_id for grade_id, _ in graded}
        found: set[str] = set()
        saved_at = path.stat().st_mtime
        trusted = _trusted_setup(notebook)
        cells.extend(LearnerCell(notebook, "setup", source, saved_at) for source in trusted or [])
        for number, cell in enumerate(_read_cells(path), start=1):
            if cell.get("cell_type") != "code":
                continue
            metadata = cell.get("metadata", {})
            nbgrader = metadata.get("nbgrader", {})
            grade_id = nbgrader.get("grade_id")
            if "setup" in metadata.get("tags", []):
                if trusted is None:
                    cells.append(LearnerCell(notebook, "setup", _text(cell.get("source", "")), saved_at))
            elif grade_id in wanted:
                if grade_id in found:
                    raise LearnerCodeError(f"{path} has two cells with grade_id {grade_id!r}")
                found.add(grade_id)
                cells.append(LearnerCell(notebook, grade_id, _text(cell.get("source", "")), saved_at))
            elif not nbgrader.get("locked"):  # the learner's own cell: its definitions only
                kept = definitions_only(_text(cell.get("source", "")))
                if kept:
                    cells.append(LearnerCell(notebook, f"definitions #{number}", kept, saved_at))
        for grade_id in sorted(wanted - found):
            raise LearnerCodeError(
                f"{path} has no code cell with nbgrader grade_id {grade_id!r}: "
                "restore the cell (or fetch a fresh copy of the notebook) and keep your code in it"
            )
    return cells


def _trusted_setup(notebook: str) -> list[str] | None:
    """While grading, `setup` cells come from the release (COURSE_RELEASE), not the submission:
    a submission may have edited them, and they run before the learner's functions."""
    release = os.environ.get(RELEASE_VARIABLE)
    if not release:
        return None
    cells = _read_cells(Path(release) / notebook)
    return [_text(c.get("source", "")) for c in cells
            if c.get("cell_type") == "code" and "setup" in c.get("metadata", {}).get("tags", [])]


def _read_cells(path: Path) -> list[dict[str, Any]]:
    """A notebook's cells in nbformat 4 structure.

    Version 4 files (everything Jupyter has written since 2015) are read as the JSON they are:
    importing nbformat costs seconds here (jsonschema compiles format grammars at import), and
    every worker process would pay it. Older formats go through nbformat's converter.
    """
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


def load_implementation(implementation: str | Path, *, require_saved: bool = False) -> LoadedImplementation:
    """`"reference"` or a folder holding the learner's three notebooks.

    `require_saved`: raise LearnerCodeError ("save <notebook> first") when a learner's kernel
    ran a graded definition that the saved notebook does not hold.
    """
    if str(implementation) == REFERENCE_NAME:
        return LoadedImplementation(REFERENCE, None)
    folder = Path(implementation).expanduser().resolve()
    cells = learner_cells(folder)
    judged = versions(cells, folder)
    stale = [version for version in judged if version.unsaved]
    if require_saved and stale:
        raise LearnerCodeError(unsaved_message(stale))
    modules: dict[str, types.ModuleType] = {}
    missing: list[str] = []
    defined: dict[str, Any] = {}
    for cell in cells:
        module = modules.get(cell.notebook)
        if module is None:
            module = modules[cell.notebook] = _fresh_module(cell.notebook)
        where = f"{cell.notebook}, cell {cell.label!r}"
        try:
            exec(compile(cell.source, f"<{where}>", "exec"), module.__dict__)
        except NotImplementedError:
            # A stub at definition time (nbgrader's stub inside a class body does this).
            missing.extend(name for grade_id, name in GRADED_CELLS[cell.notebook] if grade_id == cell.label)
            continue
        except Exception as error:
            if cell.helper:  # a failing import or decorator in another cell: that cell defines less
                continue
            raise LearnerCodeError(f"{where} raised {type(error).__name__}: {error}") from error
        for grade_id, name in GRADED_CELLS[cell.notebook]:
            if grade_id == cell.label:
                if name not in module.__dict__:
                    raise LearnerCodeError(f"{where} does not define {name!r}")
                # Captured now: a later cell rebinding the name cannot swap the graded object.
                defined[name] = module.__dict__[name]
    functions = {name: _guarded(name, defined.get(name), missing) for name in FUNCTIONS}
    return LoadedImplementation(Ownership(**functions), folder, missing, list(modules.values()), judged)


def load_ownership(folder: str | Path) -> Ownership:
    """The learner's `claim`, `assert_current`, `observe`, `finish` and `order_to_continue`.

    `"reference"` returns the reference runtime (`sovereign_agent.ownership.REFERENCE`).
    Raises LearnerCodeError for a missing notebook or cell, or a cell that fails to run.
    """
    return load_implementation(folder).ownership


def _fresh_module(notebook: str) -> types.ModuleType:
    """A new module registered in sys.modules, so dataclasses (and pickling) can find it."""
    name = f"course_learner_{Path(notebook).stem}_{uuid.uuid4().hex[:8]}"
    module = types.ModuleType(name, f"graded cells of {notebook}")
    module.__dict__["__builtins__"] = __builtins__
    sys.modules[name] = module
    return module


def _guarded(name: str, function: Callable[..., Any] | None, missing: list[str]) -> Callable[..., Any]:
    """Call the learner's function; a stub says which function is missing instead of crashing."""
    if function is None or not callable(function):

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
            # `claim` builds a Claim: if that class is still a stub, name it rather than the
            # NameError it causes.
            if error.name in missing:
                raise NotImplementedYet(error.name) from None
            raise NameError(
                f"{error}: `{function.__name__}` needs `{error.name}`, which the checkpoint did not find. It runs "
                "your notebooks' setup cells, your graded cells, and only the definitions (import, def, class, "
                f"a literal constant) of your other cells; give `{error.name}` one of those forms, in a cell "
                "of the same notebook, and save it.",
                name=error.name,
            ) from None

    return call


def _innermost_stub(error: BaseException, default: str) -> str:
    """The graded function that actually raised: `observe` may be fine and call a stub
    `assert_current`; the learner should be sent to the stub."""
    graded = {name for cells in GRADED_CELLS.values() for _, name in cells}
    found = default
    traceback = error.__traceback__
    while traceback is not None:
        code = traceback.tb_frame.f_code
        # Cells are compiled as "<01_claims.ipynb, cell 'claim'>": a frame of the learner's own code.
        notebook = code.co_filename[1:].split(",", 1)[0] if code.co_filename.startswith("<") else ""
        if notebook in GRADED_CELLS and code.co_name in graded:
            found = code.co_name
        traceback = traceback.tb_next
    return found
