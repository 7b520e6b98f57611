"""Decide one graded cell, in a fresh process that learner code shares with nothing else.

    python -I -m course.grading.checker < job.json     (the grader runs it inside the sandbox)

The job (JSON on standard input) carries the course's own cells, taken from the release and the
gradebook, never from the submission; the learner's cells, of which only definitions are kept;
and the check itself, hidden part included, compiled by the grader (its hidden lines never
enter the sandbox as text). The namespace is rebuilt in this order:

1. the course's cells (`setup` cells whole, other course cells' definitions);
2. the learner's definitions;
3. the course's names bound again, so a learner definition cannot replace `expect` or a fixture;
   learner functions wrapped so that what they return must be plain data;
4. a snapshot of everything the check relies on, then the check itself;
5. the snapshot compared (after the definitions loaded, and after the check): any change is
   "tampering detected", whatever the check said.

The answer is one JSON object written to the file descriptor the grader reads; everything the
learner's code prints goes nowhere. `os._exit` follows, so no learner `atexit` handler runs.
"""

from __future__ import annotations

import base64
import builtins
import functools
import io
import json
import marshal
import os
import sys
import traceback
import types
from typing import Any

from course.grading.definitions import bound_names, definitions_only
from course.grading.integrity import Dishonest, Snapshot, check_class, honest

MESSAGE_LIMIT = 1500
# Imported before the snapshot, so a learner cannot patch one of them before it is first used.
PRELOAD = (
    "course.checks", "course.learner", "course.checkpoint.run", "course.checkpoint.cases",
    "course.checkpoint.evidence", "course.checkpoint.verdict", "course.checkpoint.report",
    "sovereign_agent.assistant_work", "sovereign_agent.assistant_orders", "sovereign_agent.ownership",
    "sovereign_agent.status", "reference_organizations.store.assistant", "reference_organizations.store.supplier",
)
LEARNER_FILE = "<your cell {label}>"


class TamperingDetected(Exception):
    """Something the check relies on changed while learner code ran."""


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """The verdict for one graded cell: {'passed', 'ename', 'message', 'tampering'}."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    course_values = _load_course(job["course_cells"], namespace)
    from course import checks

    calls = {"expect": 0}
    genuine_expect = checks.expect

    def expect(condition: object, message: str) -> None:
        calls["expect"] += 1
        genuine_expect(condition, message)

    course_values["expect"] = expect
    snapshot = Snapshot.take()
    learner, stubs, broken = _load_learner(job["learner_cells"], namespace)
    tampering = snapshot.changes()  # while the definitions loaded (builtins and hooks are put back)
    _bind(namespace, course_values, learner, job.get("answers", []))
    check = marshal.loads(base64.b64decode(job.pop("check")))
    try:
        exec(check, namespace)
        verdict = {"passed": True, "ename": "", "message": ""}
    except Dishonest as error:  # a value or class built to fool comparisons
        tampering.append(str(error))
        verdict = {"passed": False}
    except BaseException as error:  # the learner's code may raise anything, SystemExit included
        verdict = {"passed": False, **describe(error, stubs, broken)}
    tampering += snapshot.changes()
    if namespace.get("expect") is not expect:
        tampering.append("the check's `expect` was rebound")
    if verdict["passed"] and calls["expect"] < job["expect_calls"]:
        tampering.append(f"`expect` saw {calls['expect']} of the check's calls")
    if tampering:
        verdict = {
            "passed": False, "ename": "TamperingDetected",
            "message": "tampering detected: " + "; ".join(sorted(set(tampering))[:5]),
        }
    verdict["tampering"] = bool(tampering)
    return verdict


def _load_course(cells: list[dict[str, Any]], namespace: dict[str, Any]) -> dict[str, Any]:
    """Run the course's cells (setup whole, others' definitions); return the names they bound."""
    course_names: set[str] = set()
    for cell in cells:
        source = cell["source"] if cell["whole"] else definitions_only(cell["source"], drawing=False)
        course_names |= bound_names(source)
        exec(compile(source, f"<course cell {cell['label']}>", "exec"), namespace)
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    return {name: namespace[name] for name in course_names if name in namespace}


def _load_learner(cells: list[dict[str, Any]], namespace: dict[str, Any]) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """Run the definitions of the learner's cells: (what they bound, stub cells, broken cells)."""
    stubs: list[str] = []
    broken: dict[str, str] = {}
    learner: dict[str, Any] = {}
    for cell in cells:
        source = definitions_only(cell["source"])
        before = dict(namespace)
        try:
            exec(compile(source, LEARNER_FILE.format(label=cell["label"]), "exec"), namespace)
        except NotImplementedError:  # nbgrader's stub inside a class body
            stubs.append(cell["label"])
        except Exception as error:  # a failing import or decorator: that cell defines less
            broken[cell["label"]] = f"{type(error).__name__}: {str(error)[:200]}"
        learner.update({k: v for k, v in namespace.items() if k not in before or before[k] is not v})
    return learner, stubs, broken


def _bind(namespace: dict[str, Any], course: dict[str, Any], learner: dict[str, Any], answers: list[str]) -> None:
    """The course's names win; the learner's own are guarded; an answer that is the course's
    own object is refused."""
    namespace.update(course)
    for name, value in learner.items():
        if name not in course:
            namespace[name] = guard(name, value)
    for name in answers:
        if _from_the_course(learner.get(name)):
            namespace[name] = _refuse(name, f"`{name}` is the course's own implementation, imported, not yours")


def guard(name: str, value: Any) -> Any:
    """Learner functions must return plain data; learner classes must compare honestly."""
    if isinstance(value, type):
        try:
            check_class(value)
        except Dishonest as why:
            return _refuse(name, f"{why}; the grader only accepts classes that compare like plain data")
        return value
    if not isinstance(value, types.FunctionType):
        return value

    @functools.wraps(value)
    def plain_results(*args: Any, **kwargs: Any) -> Any:
        result = value(*args, **kwargs)
        try:
            honest(result)
        except Dishonest as why:
            raise Dishonest(f"{name} returned {why}; the grader accepts plain data (str, int, "
                            "float, bool, None, lists, tuples, dicts, dataclasses)") from None
        return result

    return plain_results


def _from_the_course(value: Any) -> bool:
    """An answer that is the reference runtime's (or the course's) own object, imported under the name."""
    module = getattr(value, "__module__", None)
    return isinstance(module, str) and module.split(".")[0] in ("sovereign_agent", "reference_organizations", "course")


def _refuse(name: str, why: str) -> Any:
    """Stands in for a learner name the grader will not use: any call says why."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise Dishonest(why)

    refused.__name__ = name
    return refused


def describe(error: BaseException, stubs: list[str] = (), broken: dict[str, str] | None = None) -> dict[str, str]:
    """Type and a bounded message: never a traceback, never learner source lines."""
    if isinstance(error, NameError) and broken and getattr(error, "name", None):
        where = "; ".join(f"your cell {label!r} stopped with {why}" for label, why in broken.items())
        return {"ename": "NameError", "message": f"`{error.name}` is not defined: {where}"[:MESSAGE_LIMIT]}
    if isinstance(error, NameError) and stubs and getattr(error, "name", None):
        return {"ename": "NotImplementedError",
                "message": f"not implemented yet: write `{error.name}` in its cell ({', '.join(stubs)}) and run it"}
    if isinstance(error, NotImplementedError):
        name = _stub_name(error)
        return {"ename": "NotImplementedError",
                "message": f"not implemented yet: write `{name}` in its cell above and run it" if name
                else "not implemented yet: a function this check calls still raises NotImplementedError"}
    try:
        message = str(error)
    except BaseException:  # a learner __str__ that raises
        message = "(its message could not be shown)"
    return {"ename": type(error).__name__, "message": message[:MESSAGE_LIMIT]}


def _stub_name(error: BaseException) -> str:
    """The learner function whose stub raised (innermost learner frame)."""
    found = ""
    for frame, _ in traceback.walk_tb(error.__traceback__):
        if frame.f_code.co_filename.startswith("<your cell"):
            found = frame.f_code.co_name
    return "" if found == "<module>" else found


class Discard(io.TextIOBase):
    """Where learner prints go while a check runs: nowhere, at no memory cost."""

    def write(self, text: str) -> int:
        return len(text)


def main() -> None:
    result_fd = os.dup(1)
    job = json.loads(sys.stdin.read())
    sink = os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    sys.stdout = sys.stderr = Discard()
    try:
        verdict = run_job(job)
    except BaseException as error:  # the course cells themselves failed: report, do not hang
        verdict = {"passed": False, "tampering": False, "ename": "GraderError",
                   "message": f"the checker could not run: {type(error).__name__}: {str(error)[:300]}"}
    os.write(result_fd, json.dumps(verdict).encode())
    os._exit(0)


if __name__ == "__main__":
    main()
