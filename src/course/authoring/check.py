"""Before any student is graded: what in the solutions would break under the course's judge.

A test cell is not graded in the notebook's kernel. The judge runs it (course.grading.judge) in a
namespace of the `setup` cells plus the learner's names, asked of a learner process that runs only
the setup cells and the learner's own cells (course.lab.learner.notebook_cells); what it passes to a
learner's function crosses a wire that takes plain data, dataclasses, databases and callables
(course.grading.wire). A check that passes in a kernel can therefore fail at grading, and a
correct solution lose its points. `check` reads the sources (it runs no cell) and names, per
notebook and cell, what would break: a name only a cell the judge never runs defines, an argument
the wire refuses, a test that does not start with `require_written` or does not end by saying it
passed, an answer name another cell rebinds, a check that does not say which misconception of
the guide it points to (what `course analytics` reads), a task that gives no minutes, and a
generated part of the instructor guide that `python -m course.authoring.guide` would change.
Reading sources, it sees what they say, not what they compute: each finder's docstring says what
it cannot see (`refused_arguments` above all).

It does not tell whether the committed release (notebooks/) is stale: the one way to know is to
generate it with nbgrader (`make release`; tests/test_course_notebooks.py compares the two), which
takes tens of seconds and a course folder of its own.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import collections
import datetime
import decimal
import fractions
import io
import json
import symtable
import threading
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from course.grading import wire
from course.grading.judge.check import free_names
from course.grading.judge.checks import CourseCell, answers, autograded, build_job, course_cells, hide_region
from course.lab.learner import LearnerCodeError, notebook_cells

BUILTINS = frozenset(dir(builtins))

# Kinds a check may build that the wire refuses, each with a harmless sample: a kind counts only
# while wire.encode refuses its sample (tests/test_authoring_check.py asks the wire about each).
NON_CROSSING: dict[str, Callable[[], Any]] = {
    "types.SimpleNamespace": types.SimpleNamespace, "argparse.Namespace": argparse.Namespace,
    "builtins.object": object, "builtins.range": lambda: range(0), "builtins.iter": lambda: iter(()),
    "builtins.map": lambda: map(str, ()), "builtins.filter": lambda: filter(None, ()), "builtins.zip": zip,
    "builtins.enumerate": lambda: enumerate(()), "builtins.reversed": lambda: reversed(()),
    "collections.deque": collections.deque, "datetime.datetime": lambda: datetime.datetime(2000, 1, 1),
    "datetime.datetime.now": datetime.datetime.now, "datetime.date": lambda: datetime.date(2000, 1, 1),
    "datetime.date.today": datetime.date.today, "datetime.timedelta": datetime.timedelta,
    "decimal.Decimal": decimal.Decimal, "fractions.Fraction": fractions.Fraction, "io.StringIO": io.StringIO,
    "io.BytesIO": io.BytesIO, "threading.Event": threading.Event, "threading.Lock": threading.Lock,
}
GENERATOR = "a generator expression"


class BadInput(ValueError):
    """The folder cannot be checked at all (no notebook, or one that is not a notebook)."""


@dataclass(frozen=True)
class Finding:
    notebook: str
    cell: str  # the cell's grade_id, "cell N" for one without, or the guide's part
    text: str  # what breaks, and what the author can do about it

    def __str__(self) -> str:
        return f"{self.notebook} {self.cell}: {self.text}"


def check(solutions: Path, guide: Path | None = None) -> list[Finding]:
    """Every finding for the notebooks in `solutions`, then for `guide`'s generated parts (default:
    docs/instructor-guide.md). Raises BadInput before looking at anything if a notebook is unreadable."""
    paths = sorted(Path(solutions).glob("*.ipynb"))
    if not paths:
        raise BadInput(f"{solutions} holds no notebook (*.ipynb)")
    notebooks = {path: read(path) for path in paths}
    found = [finding for path, cells in notebooks.items() for finding in notebook_findings(path, cells)]
    return found + unplaced_checks(paths, guide) + unestimated_tasks(paths) + stale_guide(Path(solutions), guide)


def read(path: Path) -> list[CourseCell]:
    """A solutions notebook's cells as the judge reads a release's (judge.checks.course_cells)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if document.get("nbformat") != 4:
            raise ValueError(f"nbformat {document.get('nbformat')!r}, not 4")
        return course_cells(document, {})
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, KeyError, TypeError) as error:
        raise BadInput(f"{path} is not a readable Jupyter notebook: {error}") from None


def notebook_findings(path: Path, cells: list[CourseCell]) -> list[Finding]:
    """One notebook's findings: its answer names, then each graded test cell."""
    try:
        names = answers(cells)
    except SyntaxError as error:
        where = next((c.grade_id for c in cells if c.solution and parsed(c.visible_source) is None), "?")
        return [Finding(path.name, where, f"this answer cell does not parse ({error.msg}, line {error.lineno}), so "
                        "the judge cannot tell the learner's names: nothing else of this notebook was checked")]
    bound = [bindings(c.source) if c.cell_type == "code" else set() for c in cells]
    try:
        at_grading = set().union(*(bindings(c.source) for c in notebook_cells(path.parent, path.name)))
    except LearnerCodeError as error:
        raise BadInput(str(error)) from None
    found = collisions(path.name, cells, bound, names)
    for check in autograded(cells):
        found += cell_findings(path.name, build_job(path.stem, check, cells), cells, bound, at_grading)
    return found


def cell_findings(notebook: str, job: dict, cells: list[CourseCell], bound: list[set[str]],
                  at_grading: set[str]) -> list[Finding]:
    """What breaks in one graded test cell (`job`: as the judge receives it, judge.checks.build_job)."""
    tree, cell = parsed(job["check"]), job["cell"]
    if tree is None:
        return [Finding(notebook, cell, "this test cell does not parse as Python: the judge cannot run it")]
    read_names = reads(job["check"]) - bindings(job["check"]) - BUILTINS
    found = [Finding(notebook, cell, text) for text in unbound(read_names - at_grading, cells, bound)]
    found += [Finding(notebook, cell, text) for text in unwritten(job["check"], read_names & set(job["answers"]))]
    found += [Finding(notebook, cell, text) for text in silent(job["check"])]
    setup, functions = [item["source"] for item in job["setup"]], learner_functions(cells)
    found += [Finding(notebook, cell, text) for text in refused_arguments(job["check"], functions, setup)]
    return found


# --- names -----------------------------------------------------------------------------------------

def parsed(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:  # IPython syntax (a magic), or a mistake
        return None


def bindings(source: str) -> set[str]:
    """Every name a cell binds at its top level: assignments, loop and `with` targets, imports,
    functions, classes, and what a function declares `global` and assigns. (A cell that does not
    parse binds nothing here.)"""
    if parsed(source) is None:
        return set()
    table = symtable.symtable(source, "<cell>", "exec")
    found = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    tables = list(table.get_children())
    while tables:
        inner = tables.pop()
        found |= {s.get_name() for s in inner.get_symbols() if s.is_declared_global() and s.is_assigned()}
        tables += inner.get_children()
    return found


def reads(source: str) -> set[str]:
    """The global names a cell reads, its functions and comprehensions included: those the judge asks
    for (judge.check.free_names), less attribute names, which free_names cannot tell from names."""
    table, found, tables = symtable.symtable(source, "<cell>", "exec"), set(), []
    found |= {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    tables += table.get_children()
    while tables:
        inner = tables.pop()
        found |= {s.get_name() for s in inner.get_symbols() if s.is_referenced() and s.is_global()}
        tables += inner.get_children()
    return found & free_names(compile(source, "<cell>", "exec"))


def label(cells: list[CourseCell], index: int) -> str:
    return cells[index].grade_id or f"cell {index + 1}"


def unbound(missing: set[str], cells: list[CourseCell], bound: list[set[str]]) -> list[str]:
    """Names a test reads that nothing at grading binds: neither a `setup` cell, nor a cell the
    learner process runs, nor the test itself. In a kernel that ran the cell binding one, the test passes.
    (A name bound by `from m import *` or through `globals()[...]` counts as bound by no cell; one an
    answer cell binds counts as bound, even inside its solution region, which the learner's lacks.)"""
    said = []
    for name in sorted(missing):
        where = [f"`{label(cells, i)}`" for i, names in enumerate(bound) if name in names]
        if where:
            said.append(f"reads `{name}`, which only {', '.join(where)} defines, a cell the judge never runs: it "
                        "passes in a kernel and is a NameError at grading (a check sees the `setup` cells and the "
                        f"learner's names). Tag that cell `setup`, or define `{name}` in this test cell.")
        else:
            said.append(f"reads `{name}`, which no cell of the notebook defines: a NameError at grading. Define it "
                        "in a `setup` cell or in this test cell.")
    return said


def unwritten(source: str, answered: set[str]) -> list[str]:
    """A test that reads answers must start with `require_written(globals(), <each of them>)`, so that
    a blank answer fails with "not implemented yet: write ..." rather than with whatever its stub
    raises first. A cell whose code is all hidden (07's vocabulary points) runs nothing in a kernel,
    and at grading an answer whose cell did not run to its end is bound to a placeholder that says
    why (judge.messages.unwritten): it needs none."""
    visible = parsed(hide_region(source, None))
    if not answered or visible is None or not visible.body:
        return []
    first = next((node for node in visible.body if not isinstance(node, (ast.Import, ast.ImportFrom))), None)
    call = first.value if isinstance(first, ast.Expr) and isinstance(first.value, ast.Call) else None
    if call is None or dotted(call.func) not in ("require_written", "checks.require_written"):
        wanted = ", ".join(json.dumps(name) for name in sorted(answered))
        return [f"does not start with `require_written(globals(), {wanted})`: "
                "without it a blank answer fails with whatever its stub raises first, not with \"not implemented "
                "yet: write ...\". Add it as the test's first statement."]
    named = {arg.value for arg in call.args if isinstance(arg, ast.Constant)}
    missing = sorted(answered - named)
    return [f"its `require_written(...)` does not name {', '.join(f'`{n}`' for n in missing)}, which it reads: "
            "name every answer the test reads, or a blank answer's message is vague."] if missing else []


def silent(source: str) -> list[str]:
    """A test whose visible part passes must say so: its last statement is `passed("what it
    established")`, or `checked_when_graded(...)` where what it checks in a kernel is not yet the
    points. A cell whose code is all hidden runs nothing in a kernel (its comment says what waits)."""
    visible = parsed(hide_region(source, None))
    if visible is None or not visible.body:
        return []
    last = visible.body[-1]
    call = last.value if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) else None
    if call is not None and dotted(call.func).rpartition(".")[2] in ("passed", "checked_when_graded"):
        return []
    return ["does not end in `passed(\"what it established\")`: a learner whose answer passes sees nothing, and "
            "cannot tell a pass from a cell that did not run. End it with `passed(...)` (course.lessons.checks), or with "
            "`checked_when_graded(...)` when the rest waits for grading."]


def collisions(notebook: str, cells: list[CourseCell], bound: list[set[str]], names: dict[str, str]) -> list[Finding]:
    """An answer name that another cell binds at its top level (a loop variable, say): running that
    cell replaces the learner's answer in the kernel, and a test binding it replaces the judge's."""
    return [Finding(notebook, label(cells, i), f"binds `{name}` at its top level, the name of the answer of cell "
                    f"`{names[name]}`: running this cell replaces the learner's `{name}`, and a test run after it "
                    "checks something else. Rename one of them.")
            for i, cell_names in enumerate(bound) for name in sorted(cell_names & set(names))
            if cells[i].grade_id != names[name]]


# --- arguments -----------------------------------------------------------------------------------

def learner_functions(cells: list[CourseCell]) -> set[str]:
    """Answer names that are functions: a call to one crosses the wire (a learner's class is
    mirrored in the judge, and building one crosses nothing)."""
    return {node.name for cell in cells if cell.cell_type == "code" and cell.solution
            for node in (parsed(cell.visible_source) or ast.Module(body=[])).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def refused_arguments(source: str, functions: set[str], setup: list[str]) -> list[str]:
    """Arguments a test passes to a learner's function that the wire refuses (NotPlainData: the
    correct solution loses the points). What the source shows only: an argument that is a call of
    a kind in NON_CROSSING, a generator expression, a list, tuple, set or dict literal holding one, or
    a name the test or a setup cell assigns only such a call. It cannot see what a function returns
    (`fresh_shop()` is a database, which crosses; a helper may return anything), an instance of a
    class of the notebook's or of a library not listed, what course code passes to the learner's
    function it is handed (race_claims(..., claim)), nor what a learner's function returns."""
    trees = list(filter(None, map(parsed, [source, *setup])))
    imports, assigned = imported(trees), assignments(trees)
    said = []
    for node in ast.walk(trees[0]):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions:
            for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
                kind = non_crossing(argument, imports, assigned)
                if kind:
                    said.append(f"passes {kind} to the learner's `{node.func.id}` (the cell's line {node.lineno}): "
                                "it passes in a kernel, and at grading the wire refuses it (NotPlainData), so a "
                                "correct solution loses the points. Pass plain data (numbers, strings, lists, "
                                "dicts), a dataclass, a database or a function instead.")
    return said


def non_crossing(node: ast.AST, imports: dict[str, str], assigned: dict[str, list[ast.AST]], depth: int = 0) -> str:
    """The kind of value `node` makes, when it is one the wire refuses; else ''."""
    if depth > 5:
        return ""
    if isinstance(node, ast.GeneratorExp):
        return GENERATOR
    if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
        items = [*node.keys, *node.values] if isinstance(node, ast.Dict) else node.elts
        return next((kind for item in items if item is not None
                     for kind in [non_crossing(item, imports, assigned, depth + 1)] if kind), "")
    if isinstance(node, ast.Name) and assigned.get(node.id):
        kinds = {non_crossing(value, imports, assigned, depth + 1) for value in assigned[node.id]}
        return f"`{node.id}` ({kinds.pop()})" if len(kinds) == 1 and "" not in kinds else ""
    if isinstance(node, ast.Call):
        name = resolved(node.func, imports)
        if name in NON_CROSSING and refused(NON_CROSSING[name]()):
            return f"a `{name.removeprefix('builtins.')}(...)`"
    return ""


def dotted(node: ast.AST) -> str:
    """`a.b.c` for a name or attribute chain; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def resolved(node: ast.AST, imports: dict[str, str]) -> str:
    """The full dotted name a callee stands for, through the cells' imports (a builtin as builtins.x)."""
    head, _, rest = dotted(node).partition(".")
    if head in imports:
        return ".".join(filter(None, [imports[head], rest]))
    return f"builtins.{dotted(node)}" if head in BUILTINS else ""


def imported(trees: list[ast.Module]) -> dict[str, str]:
    """{name an import of these cells binds: the dotted name it stands for}."""
    found = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update({alias.asname or alias.name.split(".")[0]: alias.name if alias.asname
                              else alias.name.split(".")[0] for alias in node.names})
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
    return found


def assignments(trees: list[ast.Module]) -> dict[str, list[ast.AST]]:
    """{name: every value a plain `name = value` of these cells gives it}."""
    found: dict[str, list[ast.AST]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                found.setdefault(node.targets[0].id, []).append(node.value)
    return found


class _Callbacks:
    """Stands in for the wire's peer: with one, a callable crosses (as a handle to call back)."""

    def export(self, value: Any) -> dict[str, Any]:
        return {"$": "fn"}


def refused(value: Any) -> bool:
    """Whether the wire refuses `value` as an argument (course.grading.wire.encode)."""
    try:
        wire.encode(value, _Callbacks())  # type: ignore[arg-type]
    except wire.NotPlainData:
        return True
    return False


# --- the guide --------------------------------------------------------------------------------------

def unplaced_checks(paths: list[Path], guide: Path | None = None) -> list[Finding]:
    """Each graded check says which misconception of the guide a failure there points to, or that it
    points to none (`course analytics` reads it from the check's own metadata)."""
    from course.authoring import guide as generated
    from course.grading.classes import analytics

    guide = Path(guide or generated.GUIDE)
    named = analytics.named_in_guide(guide.read_text(encoding="utf-8")) if guide.is_file() else None
    key, field_name = analytics.METADATA
    found = []
    for path in paths:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            metadata = cell.get("metadata", {}) if isinstance(cell.get("metadata"), dict) else {}
            grading = metadata.get("nbgrader", {})
            if cell.get("cell_type") != "code" or not grading.get("grade") or grading.get("solution"):
                continue
            said = metadata.get(key, {}) if isinstance(metadata.get(key), dict) else {}
            if field_name not in said:
                found.append(Finding(path.name, grading.get("grade_id", "?"), (
                    f'this check does not say which misconception a failure here points to: add {{"{key}": '
                    f'{{"{field_name}": NAME}}}} to its metadata, NAME as the guide\'s "{analytics.SECTION}" '
                    "writes it in bold, or null for a mistake of its own (course analytics reads it)")))
            elif said[field_name] is not None and named is not None and said[field_name] not in named:
                found.append(Finding(path.name, grading.get("grade_id", "?"), (
                    f"this check points to the misconception {said[field_name]!r}, which the guide's "
                    f'"{analytics.SECTION}" does not name in bold (it names: {", ".join(sorted(named))})')))
    return found


def unestimated_tasks(paths: list[Path]) -> list[Finding]:
    """Each task cell gives the minutes a newcomer spends on it (course.authoring.pacing): without
    them the notebook's time would be a guess."""
    from course.authoring import pacing

    found = []
    for path in paths:
        for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if (kind := pacing.task_kind(cell)) and pacing.minutes_of(cell) is None:
                where = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
                found.append(Finding(path.name, where, (
                    f'this {kind} task gives no minutes: add {{"{pacing.METADATA[0]}": {{"{pacing.METADATA[1]}": N}}}} '
                    "to its metadata, N the whole minutes a careful newcomer spends on it (the notebook's time "
                    "is their sum plus the reading)")))
    return found


def stale_guide(solutions: Path, guide: Path | None = None) -> list[Finding]:
    """Each generated part of the guide that `python -m course.authoring.guide` would change, the written
    answers rendered from `solutions` (course.authoring.guide)."""
    from course.authoring import guide as generated

    guide = Path(guide or generated.GUIDE)
    found = []
    for name, render in generated.rendered(solutions).items():
        try:
            current = generated.section(name, guide)
        except ValueError:
            current = None
        if current != render():
            said = "is missing" if current is None else "differs from what the course renders now"
            found.append(Finding(guide.name, name, f"the generated part `{name}` {said}: run `python -m "
                                 "course.authoring.guide` and commit the guide (tests/test_instructor_guide.py fails until then)."))
    return found
