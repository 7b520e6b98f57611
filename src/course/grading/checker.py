"""Decide one graded cell, in a fresh process that learner code shares with nothing else.

The check server (course.grading.checkserver) forks one per check and calls `main`, with the
job on standard input: the check's key (see course.grading.seal) on the first line, then JSON.
The job carries the course's own cells, taken from the release and the
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

The seal is armed just before step 2, and steps 2-5 run in a thread of their own (`work`). The
answer is one sealed line on the descriptor the grader reads (standard output as started);
everything the learner's code prints goes nowhere. `os._exit` follows, so no learner `atexit`
handler runs.
"""

from __future__ import annotations

import _thread
import base64
import builtins
import dis
import functools
import io
import json
import marshal
import os
import sys
import types
from typing import Any, Callable

from course.grading.definitions import definitions_only
from course.grading import seal
from course.grading.integrity import Dishonest, check_class, frozen, honest, snapshot

MESSAGE_LIMIT = 1500
# Imported before the snapshot, so a learner cannot patch one of them before it is first used.
PRELOAD = (
    "course.checks", "course.learner", "course.checkpoint.run", "course.checkpoint.cases",
    "course.checkpoint.evidence", "course.checkpoint.verdict", "course.checkpoint.report",
    "sovereign_agent.assistant_work", "sovereign_agent.assistant_orders", "sovereign_agent.ownership",
    "sovereign_agent.status", "reference_organizations.store.assistant", "reference_organizations.store.supplier",
)
LEARNER_FILE = "<your cell {label}>"
STUB = "course_stub"  # set on a NotImplementedError by the learner function it came out of


class TamperingDetected(Exception):
    """Something the check relies on changed while learner code ran."""


def run_job(job: dict[str, Any], arm: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The verdict for one graded cell: {'passed', 'ename', 'message', 'tampering'}.

    From the first learner line on, what decides the verdict is held in this frame's locals, in
    defaults (which the seal refuses to replace) or in closures (unreachable: the seal refuses
    frames and the collector's lists; a rewritten one is reported), never in a global or a
    builtin that learner code could rebind."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    course_values = _load_course(job["course_cells"], namespace)
    from course import checks

    calls: list[bool] = []
    course_values["expect"] = _counted(checks.expect, calls)
    check = marshal.loads(base64.b64decode(job.pop("check")))
    own = _stored_names(check)  # the check may rebind a fixture itself; learner code may not
    load, bind, freeze, changes, explain, run = _load_learner, _bind, frozen, snapshot(), describe, exec
    wanted, count, dishonest, anything, ordered, unique, text = job["expect_calls"], len, Dishonest, BaseException, sorted, set, str
    is_a, function = isinstance, types.FunctionType
    arm()  # the seal, from here on: learner code is next
    learner, stubs, broken = load(job["learner_cells"], namespace)
    tampering = changes()  # while the definitions loaded (builtins are put back)
    bind(namespace, course_values, learner, job.get("answers", []))
    rewritten = freeze([value for name, value in namespace.items()  # the course's functions and the guards
                        if (name in course_values or name in learner) and is_a(value, function)])
    try:
        run(check, namespace)
        passed, ename, message = True, "", ""
    except dishonest as error:  # a value or class built to fool comparisons
        passed, ename, message = False, "", ""
        tampering += [text(error)]
    except anything as error:  # the learner's code may raise anything, SystemExit included
        said = explain(error, stubs, broken)
        passed, ename, message = False, said["ename"], said["message"]
    try:
        tampering += changes()
        tampering += rewritten()
    except anything:  # a learner object in a course module that fails to be looked at
        tampering += ["a course module holds an object that cannot be inspected"]
    tampering += [f"the check's `{name}` was rebound" for name, value in course_values.items()
                  if name not in own and namespace.get(name) is not value]
    if passed and count(calls) < wanted:
        tampering += [f"`expect` saw {count(calls)} of the check's calls"]
    if tampering:
        passed, ename = False, "TamperingDetected"
        message = "tampering detected: " + "; ".join(ordered(unique(tampering))[:5])
    return {"passed": passed, "ename": ename, "message": message, "tampering": tampering != []}


def _counted(genuine: Callable[[object, str], None], calls: list[bool]) -> Callable[[object, str], None]:
    """The check's `expect`: the course's own, counting its calls. What it calls is a default, not
    a closure cell: learner code that reaches it can read its defaults but not replace them."""

    def expect(condition: object, message: str, _genuine=genuine, _calls=calls) -> None:
        _calls.append(True)
        _genuine(condition, message)

    return expect


def _stored_names(code: types.CodeType) -> frozenset[str]:
    """Names the check's own code binds or deletes at module level (or declares global)."""
    stores = {"STORE_NAME", "STORE_GLOBAL", "DELETE_NAME", "DELETE_GLOBAL"}
    names = {i.argval for i in dis.get_instructions(code) if i.opname in stores}
    for inner in code.co_consts:
        if isinstance(inner, types.CodeType):
            names |= {i.argval for i in dis.get_instructions(inner) if i.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")}
    return frozenset(names)


def _load_course(cells: list[dict[str, Any]], namespace: dict[str, Any]) -> dict[str, Any]:
    """Run the course's cells as the grader prepared them (setup whole, others' definitions:
    jobs.course_code); return the names they bound."""
    course_names: set[str] = set()
    for cell in cells:
        course_names.update(cell["names"])
        exec(compile(cell["source"], f"<course cell {cell['label']}>", "exec"), namespace)
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    return {name: namespace[name] for name in course_names if name in namespace}


def _load_learner(cells: list[dict[str, Any]], namespace: dict[str, Any]) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """Run the definitions of the learner's cells: (what they bound, stub cells, broken cells).

    It starts before any learner line; what it uses after the first cell is bound here."""
    copy, build, run, strip, stub, failed, kind, text = dict, compile, exec, definitions_only, NotImplementedError, Exception, type, str
    stubs: list[str] = []
    broken: dict[str, str] = {}
    learner: dict[str, Any] = {}
    for cell in cells:
        source = strip(cell["source"])
        before = copy(namespace)
        try:
            run(build(source, LEARNER_FILE.format(label=cell["label"]), "exec"), namespace)
        except stub:  # nbgrader's stub inside a class body
            stubs.append(cell["label"])
        except failed as error:  # a failing import or decorator: that cell defines less
            broken[cell["label"]] = f"{kind(error).__name__}: {text(error)[:200]}"
        learner.update({k: v for k, v in namespace.items() if k not in before or before[k] is not v})
    return learner, stubs, broken


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


def guard(name: str, value: Any, refuse_class=check_class, plain=honest, dishonest=Dishonest, is_a=isinstance,
          function=types.FunctionType, wraps=functools.wraps, stub=NotImplementedError, read=getattr, mark=setattr,
          refuse=_refuse) -> Any:
    """Learner functions must return plain data; learner classes must compare honestly.

    It runs after learner code has: what it uses are defaults, bound when this module loaded."""
    if is_a(value, type):
        try:
            refuse_class(value)
        except dishonest as why:
            return refuse(name, f"{why}; the grader only accepts classes that compare like plain data")
        return value
    if not is_a(value, function):
        return value

    @wraps(value)
    def plain_results(*args: Any, **kwargs: Any) -> Any:
        try:
            result = value(*args, **kwargs)
        except stub as error:  # the innermost learner function names the stub
            if not read(error, STUB, ""):
                mark(error, STUB, name)
            raise
        try:
            plain(result)
        except dishonest as why:
            raise dishonest(f"{name} returned {why}; the grader accepts plain data (str, int, "
                            "float, bool, None, lists, tuples, dicts, dataclasses)") from None
        return result

    return plain_results


def _bind(namespace: dict[str, Any], course: dict[str, Any], learner: dict[str, Any], answers: list[str],
          guarded=guard, ours=_from_the_course, refuse=_refuse) -> None:
    """The course's names win; the learner's own are guarded; an answer that is the course's
    own object is refused. It runs after learner code has: what it calls are defaults."""
    namespace.update(course)
    for name, value in learner.items():
        if name not in course:
            namespace[name] = guarded(name, value)
    for name in answers:
        if ours(learner.get(name)):
            namespace[name] = refuse(name, f"`{name}` is the course's own implementation, imported, not yours")


def describe(error: BaseException, stubs: list[str] = (), broken: dict[str, str] | None = None) -> dict[str, str]:
    """Type and a bounded message: never a traceback, never learner source lines."""
    if isinstance(error, NameError) and broken and getattr(error, "name", None):
        where = "; ".join(f"your cell {label!r} stopped with {why}" for label, why in broken.items())
        return {"ename": "NameError", "message": f"`{error.name}` is not defined: {where}"[:MESSAGE_LIMIT]}
    if isinstance(error, NameError) and stubs and getattr(error, "name", None):
        return {"ename": "NotImplementedError",
                "message": f"not implemented yet: write `{error.name}` in its cell ({', '.join(stubs)}) and run it"}
    if isinstance(error, NotImplementedError):
        name = getattr(error, STUB, "")
        name = name if isinstance(name, str) else ""
        return {"ename": "NotImplementedError",
                "message": f"not implemented yet: write `{name}` in its cell above and run it" if name
                else "not implemented yet: a function this check calls still raises NotImplementedError"}
    try:
        message = str(error)
    except BaseException:  # a learner __str__ that raises
        message = "(its message could not be shown)"
    return {"ename": type(error).__name__, "message": message[:MESSAGE_LIMIT]}


class Discard(io.TextIOBase):
    """Where learner prints go while a check runs: nowhere, at no memory cost."""

    def write(self, text: str) -> int:
        return len(text)


def main() -> None:
    """Read the key and the job, arm the seal, run the check in a thread of its own."""
    verdict_fd = os.dup(1)
    page = seal.read_key(0)
    job = json.loads(os.fdopen(0, "rb").read())
    sink = os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    sys.stdout = sys.stderr = Discard()
    roots = tuple(sorted({os.path.join(p, "") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *_installed())}))
    arm = functools.partial(seal.arm, page, verdict_fd, work.__code__, roots)
    del page
    wait = _thread.allocate_lock()
    wait.acquire()
    _thread.start_new_thread(work, (job, arm))  # not the main thread: learner code cannot set a signal handler
    while True:  # `work` ends the process
        try:
            wait.acquire()
        except BaseException:  # _thread.interrupt_main from learner code
            pass


def work(job: dict[str, Any], arm: Callable[[], None]) -> None:
    """The bottom of the check's thread: the only caller the seal accepts for `report`.

    Everything it uses after the check is bound before any learner line runs."""
    report, end, text, flat = seal.report, os._exit, str.encode, str.replace
    try:
        verdict = run_job(job, arm)
    except BaseException as error:  # the course cells themselves failed: report, do not hang
        verdict = {"passed": False, "tampering": False, "ename": "GraderError",
                   "message": f"the checker could not run: {type(error).__name__}: {str(error)[:300]}"}
    try:
        passed, tampering = verdict["passed"] is True, verdict["tampering"] is True
        ename = flat(text(verdict["ename"], "utf-8", "replace").decode(), "\n", " ")
        message = text(verdict["message"], "utf-8", "replace").decode()
        report("%d %d\n%s\n%s" % (passed, tampering, ename, message))
    finally:
        end(0)


def _installed() -> list[str]:
    """Where the course and its dependencies are installed (read-only in the sandbox)."""
    import course
    import sovereign_agent

    return [os.path.dirname(os.path.dirname(m.__file__)) for m in (course, sovereign_agent)]


if __name__ == "__main__":
    main()
