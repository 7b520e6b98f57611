"""Grade answers the way `course autograde` decides points, without nbgrader.

`verdicts(name, replace)` builds the real checks of one notebook (the release's cells, the
solutions' full sources, hidden tests included) and runs them through the real judge, learner
processes and sandboxes, against a submission made of the solution with `replace` (grade_id ->
source) swapped into its answer cells, and `extra` cells of the learner's own appended. Tests use
it to show that a correct answer written differently keeps its points and that a wrong one (or a
hostile one) loses them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from course.grading.judge import checks

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "ch12"
RELEASE = ROOT / "notebooks" / "ch12"


def _grade_id(cell: dict) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def submission(name: str, replace: dict[str, str] | None = None, extra: list[str] = ()) -> dict:
    """The solution notebook `name` with answer cells replaced and learner cells added at the end."""
    replace = dict(replace or {})
    solution = json.loads((SOLUTIONS / name).read_text())
    answer_ids = {_grade_id(c) for c in solution["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    unknown = set(replace) - answer_ids
    assert not unknown, f"not answer cells of {name}: {sorted(unknown)}"
    cells = []
    for cell in solution["cells"]:
        cell = dict(cell)
        if _grade_id(cell) in replace:
            cell["source"] = replace[_grade_id(cell)]
        cells.append(cell)
    for number, source in enumerate(extra):
        cells.append({"cell_type": "code", "id": f"extra-{number}", "metadata": {}, "execution_count": None,
                      "outputs": [], "source": source})
    return dict(solution, cells=cells)


def verdicts(name: str, replace: dict[str, str] | None = None, only: set[str] | None = None,
             timeout: float = 120, extra: list[str] = (), missing: set[str] = frozenset()) -> dict[str, dict]:
    """{test grade_id: verdict} for notebook `name` with the solution's answers, `replace`d (and the
    notebooks `missing` left out of the submission)."""
    return verdicts_at_once(name, {"": replace or {}}, only, timeout, extra, missing)[""]


def verdicts_at_once(name: str, submissions: dict[str, dict[str, str]], only: set[str] | None = None,
                     timeout: float = 120, extra: list[str] = (),
                     missing: set[str] = frozenset()) -> dict[str, dict[str, dict]]:
    """`verdicts` of several submissions ({label: replace}) of notebook `name`, all their checks
    started together, as a class is graded: they overlap, and the whole takes far less time."""
    solution = json.loads((SOLUTIONS / name).read_text())
    full = {_grade_id(c): checks.cell_text(c["source"]) for c in solution["cells"] if _grade_id(c)}
    jobs = checks.notebook_jobs(name.removesuffix(".ipynb"), RELEASE, full)
    jobs = [job for job in jobs if only is None or job["cell"] in only]
    with tempfile.TemporaryDirectory(prefix="ch12-answers-") as folder:
        pending = {}
        for number, (label, replace) in enumerate(submissions.items()):
            submitted = Path(folder) / str(number)
            submitted.mkdir()
            for path in SOLUTIONS.glob("*.ipynb"):  # 05 grades the notebooks beside it, 01b and 04b run 01's and 04's
                if path.name not in missing:
                    shutil.copy(path, submitted / path.name)
            (submitted / name).write_text(json.dumps(submission(name, replace, extra)))
            pending[label] = checks.start_checks({name: jobs}, submitted, RELEASE, timeout)[name]
        return {label: checks_of.results() for label, checks_of in pending.items()}


def failed(found: dict[str, dict]) -> dict[str, str]:
    """The checks that did not pass, with what they said."""
    return {cell: f"{v.get('ename')}: {v.get('message')}" for cell, v in found.items() if not v["passed"]}


def blank_answers(name: str) -> dict[str, str]:
    """The release's answer cells as a learner first sees them (stubs)."""
    release = json.loads((RELEASE / name).read_text())
    return {_grade_id(c): checks.cell_text(c["source"]) for c in release["cells"]
            if c["cell_type"] == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def score(name: str, answer_cell: str, source: str, test_cell: str) -> dict:
    """The verdict of one graded test cell of `name` with one answer cell replaced (its message on one line)."""
    verdict = verdicts(name, {answer_cell: source}, only={test_cell})[test_cell]
    return dict(verdict, message=" ".join(str(verdict.get("message", "")).split()))


def course_namespace(name: str, *grade_ids: str) -> dict:
    """The solution's setup cells of `name`, as the judge and the learner process run them, then the
    named cells of the solution (answers written as the model solution writes them)."""
    import contextlib

    cells = json.loads((SOLUTIONS / name).read_text())["cells"]
    namespace: dict = {"__name__": "course_cells"}
    with contextlib.chdir(SOLUTIONS):  # a second part's setup loads the saved first part beside it (04b: 04's)
        for cell in cells:
            if "setup" in cell["metadata"].get("tags", []):
                exec(compile("".join(cell["source"]), "<setup>", "exec"), namespace)
    for cell in cells:
        if _grade_id(cell) in grade_ids:
            exec(compile("".join(cell["source"]), "<solution>", "exec"), namespace)
    return namespace


def predictions(name: str) -> list[str]:
    """The names of `name`'s prediction cells, in order, once each is checked to be a literal that
    earns nothing and that the experiment right after it waits for (its first statement binds it)
    and prints beside what happened (course.lessons.predictions.compared)."""
    import ast

    code = [c for c in json.loads((SOLUTIONS / name).read_text())["cells"] if c["cell_type"] == "code"]
    names = []
    for cell in (c for c in code if "prediction" in c["metadata"].get("tags", [])):
        (statement,) = ast.parse("".join(cell["source"])).body
        ast.literal_eval(statement.value)  # a literal, nothing computed
        assert not cell["metadata"].get("nbgrader", {}).get("grade")
        after = code[code.index(cell) + 1]
        assert "observation" in after["metadata"].get("tags", []), "the experiment follows its prediction"
        names.append(statement.targets[0].id)
        source = "".join(after["source"])
        assert f'bound("{names[-1]}", globals())' in source and f'compared("{names[-1]}", ' in source, names[-1]
    return names


def home(grade_ids) -> str:
    """The solution notebook that holds these cells (each grade id is unique to one notebook here)."""
    wanted = {grade_ids} if isinstance(grade_ids, str) else set(grade_ids)
    found = {path.name for path in SOLUTIONS.glob("*.ipynb")
             for cell in json.loads(path.read_text())["cells"] if _grade_id(cell) in wanted}
    assert len(found) == 1, (sorted(wanted), found)
    return found.pop()
