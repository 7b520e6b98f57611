"""Keep what a cell defines, drop what it does.

A graded check is run against the learner's *definitions* (imports, functions, classes, constant
assignments), never against their top-level statements: an experiment, a print or a hook
installed at the top of a cell is not part of the answer, and must not run where points are
decided. Definitions still run code (decorators, default values, class bodies), which is why the
checker runs in the sandbox and verifies its own helpers afterwards.
"""

from __future__ import annotations

import ast
import functools

DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# What only draws. A check never draws, and importing pyplot costs about 0.6 s of a checker's
# 0.9 s: the course's own cells are loaded without these imports where points are decided.
DRAWING = ("matplotlib", "IPython.display", "ipywidgets")


def definitions_only(source: str, *, drawing: bool = True) -> str:
    """The definitions of a cell's source, as source; '' when the cell does not parse.

    IPython syntax (`%magic`, `!shell`) makes a cell unparsable as Python: such a cell
    contributes nothing, as it would not import in a module either. With `drawing=False`,
    imports of the DRAWING modules are left out too.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    kept = [node for node in tree.body if is_definition(node) and (drawing or not draws(node))]
    return ast.unparse(ast.Module(body=kept, type_ignores=[])) if kept else ""


def draws(node: ast.stmt) -> bool:
    """An import of a module that only draws (see DRAWING)."""
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        modules = [node.module or ""]
    else:
        return False
    return all(any(module == top or module.startswith(top + ".") for top in DRAWING) for module in modules)


def is_definition(node: ast.stmt) -> bool:
    if isinstance(node, DEFINITIONS):
        return True
    if isinstance(node, ast.Assign):
        return all(isinstance(t, ast.Name) for t in node.targets) and is_constant(node.value)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and (node.value is None or is_constant(node.value))
    return False


def is_constant(node: ast.expr) -> bool:
    """A literal (numbers, strings, tuples, lists, dicts, sets of literals, frozenset())."""
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


@functools.lru_cache(maxsize=512)
def _top_level(source: str) -> tuple[ast.stmt, ...]:
    """A cell's top-level statements; none for a cell that does not parse. Cached: a notebook's
    jobs ask the same questions of the same cells (28 jobs by some 20 course cells a student);
    callers only read the nodes."""
    try:
        return tuple(ast.parse(source).body)
    except (SyntaxError, ValueError):
        return ()


def imported_modules(source: str) -> set[str]:
    """Modules a cell imports at top level (relative and drawing imports left out)."""
    found: set[str] = set()
    for node in _top_level(source):
        if isinstance(node, ast.Import) and not draws(node):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and not draws(node):
            found.add(node.module)
    return found


def bound_names(source: str) -> set[str]:
    """Top-level names a cell binds (what the course's own cells define)."""
    names: set[str] = set()
    for node in _top_level(source):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def defined_names(source: str) -> set[str]:
    """Names a cell defines with `def` or `class` at the top level (what an answer cell asks for)."""
    return {node.name for node in _top_level(source)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def straight_line_calls(source: str, function: str) -> int:
    """How many `function(...)` calls a cell makes for certain: top-level statements only.

    The checker compares this with the calls its own helper saw; fewer means the helper was
    bypassed while the check ran.
    """
    count = 0
    for node in _top_level(source):  # the same checks for every student: parsed once per worker
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            if isinstance(call.func, ast.Name) and call.func.id == function:
                count += 1
    return count
