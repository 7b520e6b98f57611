"""The house's joins: the runtime's schema stays private to the runtime, and functions stay short."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# SQL that names one of the runtime's tables: assistant_work, assistant_orders, ...
RUNTIME_SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|FROM|INTO|JOIN)\b[^;]*\bassistant_\w+", re.I | re.S)
# The checkpoint's evidence counter reads the records independently, on purpose: it must not
# trust the runtime it is judging.
INDEPENDENT_READERS = {"course/checkpoint/evidence.py"}


def _strings(tree: ast.AST) -> list[ast.Constant]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_course_or_shop_module_runs_sql_against_a_runtime_table():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith("sovereign_agent/") or relative in INDEPENDENT_READERS:
            continue
        for node in _strings(ast.parse(path.read_text())):
            if RUNTIME_SQL.search(node.value):
                offenders.append(f"{relative}:{node.lineno}: {node.value[:70]!r}")
    assert offenders == [], "ask sovereign_agent.records instead:\n" + "\n".join(offenders)


def test_the_scan_would_see_raw_runtime_sql():
    caught = [node.value for node in _strings(ast.parse(
        'def f(db):\n    """Reads assistant_work."""\n'
        '    return db.execute("SELECT expires FROM assistant_work WHERE id=?", (1,))\n'))
        if RUNTIME_SQL.search(node.value)]
    assert caught == ["SELECT expires FROM assistant_work WHERE id=?"]
