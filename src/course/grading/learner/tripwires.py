"""The course's own answers, replaced by tripwires in the learner's sandbox while it is graded.

For each answer the notebook grades (`ANSWERS`), the runtime module is copied with that function
or class replaced by one that raises `CourseAnswerUsed`, compiled, and bound over the original
source and bytecode in the sandbox: no other copy is left to import, alias, wrap, subclass or
load. The chapter's source pasted into the answer cell is not stopped: it is the answer written.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import py_compile
import threading
from pathlib import Path

from course.grading.sandbox import private

# answer name -> the runtime module that holds the course's own
ANSWERS = {
    "Claim": "sovereign_agent.assistant_work",
    "claim": "sovereign_agent.assistant_work",
    "assert_current": "sovereign_agent.assistant_work",
    "observe": "sovereign_agent.assistant_work",
    "finish": "sovereign_agent.assistant_work",
    "order_to_continue": "sovereign_agent.assistant_orders",
    "admit_generation": "reference_organizations.store.supplier.fence",
    "continue_order": "reference_organizations.store.assistant",
    "run_once": "reference_organizations.store.assistant",
    "money_conserved": "course.checkpoint.history",
}
# What a checkpoint worker runs of 01, 02 and 04 (the `implementation`): the five functions; the course's own
# Claim stays, as the checkpoint's harness builds records with it.
IMPLEMENTATION = frozenset({"claim", "assert_current", "observe", "finish", "order_to_continue"})
WORKER_PASS = frozenset({"continue_order", "run_once"})  # what it runs of 05 (`--worker`)


def of_worker(argv: list[str]) -> frozenset[str]:
    """The answers a checkpoint worker's process loads from the submission, by its arguments: the
    fences (`--implementation .`), the pass (`--worker .`), or both. The rest is the course's."""
    loads = {option for option, value in zip(argv, argv[1:]) if value != "reference"}
    return (IMPLEMENTATION if "--implementation" in loads else frozenset()) | (
        WORKER_PASS if "--worker" in loads else frozenset())
HELPER = "_course_tripwire"


class CourseAnswerUsed(RuntimeError):
    """An answer reached the course's own implementation."""


def tripped(name: str) -> CourseAnswerUsed:
    return CourseAnswerUsed(
        f"your answer called the course's own `{name}`, which is replaced by this tripwire while your notebook "
        f"is graded: use your own `{name}` (write it first, in its cell, if you have not).")


_building = threading.Lock()  # CPython 3.11's ast is not safe to use from two threads at once


def overlays(answers: frozenset[str]) -> dict[str, str]:
    """{original file: tripwired copy} for the runtime modules holding any of `answers`: each
    module's source, and its bytecode where the original has some on disk."""
    found: dict[str, str] = {}
    with _building:
        for module in sorted({ANSWERS[name] for name in answers if name in ANSWERS}):
            names = frozenset(name for name in answers if ANSWERS.get(name) == module)
            found.update(_overlay(module, names, _cache()))
    return found


@functools.lru_cache(maxsize=16)
def _overlay(module: str, names: frozenset[str], cache: Path) -> dict[str, str]:
    spec = importlib.util.find_spec(module)
    source = Path(spec.origin)
    text = tripwired_source(source.read_text(), names)
    folder = cache / hashlib.sha256((str(source) + text).encode()).hexdigest()[:16]
    folder.mkdir(exist_ok=True)
    copy = folder / source.name
    if not copy.exists():
        copy.write_text(text)
    found = {str(source): str(copy)}
    for cached in sorted((source.parent / "__pycache__").glob(f"{source.stem}.*.pyc")):
        compiled = folder / cached.name
        if not compiled.exists():
            py_compile.compile(str(copy), cfile=str(compiled), dfile=str(source), doraise=True,
                               optimize=_optimization(cached.name))
        found[str(cached)] = str(compiled)
    return found


def _optimization(name: str) -> int:
    return 2 if ".opt-2." in name else 1 if ".opt-1." in name else 0


def _cache() -> Path:
    """The copies' folder, in the grading process's private one (the sandbox binds them read-only)."""
    path = private.folder() / "tripwires"
    path.mkdir(exist_ok=True)
    return path


def tripwired_source(source: str, names: frozenset[str]) -> str:
    """`source` with each top-level function or class in `names` replaced by a tripwire."""
    tree = ast.parse(source)
    missing = set(names) - {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    if missing:
        raise LookupError(f"the runtime no longer defines {sorted(missing)} where ANSWERS says")
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            node.body = [*_docstring(node), _raise(node.name)]
            node.decorator_list = []
        elif isinstance(node, ast.ClassDef) and node.name in names:
            tree.body[index] = ast.parse(
                f"class {node.name}:\n"
                f"    '''A tripwire: the course's own {node.name} is not available while this notebook is graded.'''\n"
                f"    def __new__(cls, *args, **kwargs):\n        raise {HELPER}({node.name!r})\n"
                f"    def __init_subclass__(cls, **kwargs):\n        raise {HELPER}({node.name!r})\n").body[0]
    tree.body.append(ast.parse(f"from course.grading.learner.tripwires import tripped as {HELPER}").body[0])
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _docstring(node: ast.FunctionDef) -> list[ast.stmt]:
    first = node.body[0] if node.body else None
    return [first] if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) else []


def _raise(name: str) -> ast.stmt:
    return ast.parse(f"raise {HELPER}({name!r})").body[0]
