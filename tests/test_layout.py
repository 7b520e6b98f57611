"""The house's joins: the runtime's schema stays private to the runtime, and functions stay short."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# SQL that names one of the runtime's tables: assistant_work, assistant_orders, ...
# (SQL keywords in capitals, as this project writes them: `from x import y` is not SQL.)
RUNTIME_SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|FROM|INTO|JOIN)\b[^;]*\bassistant_\w+", re.S)
# The checkpoint's evidence counter reads the records independently, on purpose: it must not
# trust the runtime it is judging.
INDEPENDENT_READERS = {"course/checkpoint/evidence.py", "course/checkpoint/history.py"}  # checkers read for themselves


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


def _layout_map() -> dict[str, set[str]]:
    """The README's code map: {folder: the entries named under it}."""
    readme = (SRC.parent / "README.md").read_text()
    block = readme.split("## How the code is laid out", 1)[1].split("```", 2)[1]
    found: dict[str, set[str]] = {}
    folder = None
    for line in block.splitlines():
        if line and not line.startswith(" "):
            folder = line.split()[0].rstrip("/")
            found[folder] = set()
        elif line.strip() and folder is not None:
            names = line.strip().split("   ")[0].split()
            found[folder].update(name.rstrip("/") for name in names if name.endswith((".py", "/")))
    return found


def test_the_readme_layout_map_matches_the_tree():
    mapped = _layout_map()
    root = SRC.parent
    for folder, names in mapped.items():
        if folder == "my-work/ch12":  # a learner's copy, made by `make lab`, never committed
            continue
        assert (root / folder).exists(), f"the README names {folder}/, which does not exist"
        for name in names:
            assert (root / folder / name).exists(), f"the README names {folder}/{name}, which does not exist"
    for package in ("src/sovereign_agent", "src/reference_organizations", "src/reference_organizations/store",
                    "src/course", "src/course/lessons", "src/course/lab", "src/course/authoring"):
        if package not in mapped:
            continue
        present = {p.name for p in (root / package).iterdir()
                   if (p.suffix == ".py" and p.name != "__init__.py") or (p.is_dir() and (p / "__init__.py").exists())}
        named = mapped[package] | {name.split("/")[0] for folder, names in mapped.items()
                                   if folder.startswith(package + "/") for name in [folder[len(package) + 1:]]}
        assert present <= named, f"{package}: the README's map lacks {sorted(present - named)}"


def test_no_function_is_longer_than_60_lines():
    long = [f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted(SRC.rglob("*.py")) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60]
    assert long == [], "split these into the steps they take:\n" + "\n".join(long)


PACKAGES = ("sovereign_agent", "reference_organizations", "course")


def _module_name(path: Path, root: Path = SRC) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """{module: the project's modules it imports}, at any depth of its code (a function's own
    import included: a circle through a lazy import is a circle of the design all the same)."""
    modules = {_module_name(path, root): path for path in root.rglob("*.py")
               if path.relative_to(root).parts[0] in PACKAGES}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names)
        graph[name] = {target for target in found if target in modules and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_project_imports_itself_in_a_circle():
    found = circles(import_graph())
    assert found == [], "break these import circles (each group imports itself back):\n" + "\n".join(map(str, found))


def test_the_circle_finder_sees_a_circle_through_a_lazy_import(tmp_path):
    package = tmp_path / "course"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from course import b\n")
    (package / "b.py").write_text("def later():\n    from course.c import x\n")
    (package / "c.py").write_text("from . import a\nx = 1\n")
    (package / "d.py").write_text("import course.a\n")
    assert circles(import_graph(tmp_path)) == [["course.a", "course.b", "course.c"]]

