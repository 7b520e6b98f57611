"""What a failed check tells the learner, and in whose words.

A check without a hidden part, or a check's visible part run alone, fails as in Lab: the check's
message, or what the learner's code raised. A check run with its hidden part is told in the
course's words only: the failing call's message as the check writes it, each value elided unless
marked `shown(...)`; what the learner's code raised there is named by its type.
"""

from __future__ import annotations

import ast
import functools
import re
import types
from typing import Any

from course.lessons.checks import CheckFailed, kept_the_stub_line, not_implemented, wrap
from course.grading import wire

FILENAME = "<check>"
LIMIT = 1500  # characters of a message that reach the notebook
ELIDED = "…"


def verdict(error: BaseException, job: dict[str, Any]) -> dict[str, Any]:
    """A failed check's verdict. A check with a hidden part runs whole in the hidden phase
    (course.grading.judge.phases), so any failure of it is told in the course's words. `retell`:
    it failed before that part, and Lab would tell it in more than the course's words (the grader
    then has the visible part run alone, in the visible phase, to tell it so)."""
    hidden_from = job.get("hidden_from")
    if hidden_from is None:
        return {**_told(error, job, False), "retell": False}
    told = _told(error, job, True)
    return {**told, "retell": _before_hidden_part(error, hidden_from) and _told(error, job, False) != told}


def _told(error: BaseException, job: dict[str, Any], hidden: bool) -> dict[str, Any]:
    answers = set(job.get("answers", {}))
    if isinstance(error, AssertionError) and not getattr(error, "remote", False):  # the check's own (expect)
        source = job["check"]
        message = _template(error, source) if hidden else _as_in_lab(error, source)
        return _failed("CheckFailed" if isinstance(error, CheckFailed) else type(error).__name__, message)
    if isinstance(error, NotImplementedError):
        stub = str(getattr(error, "stub", "") or "")
        return _failed("NotImplementedError", not_implemented(stub) if stub in answers else
                       "not implemented yet: a function this check calls still raises NotImplementedError")
    if isinstance(error, wire.PeerGone):
        return _failed("LearnerProcessEnded", "the process running your notebook ended while the check ran (your "
                       "code exited, was killed or crashed); the check could not finish")
    from course.grading.learner.tripwires import CourseAnswerUsed

    if isinstance(error, CourseAnswerUsed) and getattr(error, "remote", False):
        return _failed("CourseAnswerUsed", str(error) if not hidden else
                       "your answer called the course's own implementation, which is replaced by a tripwire while "
                       "you are graded: write it yourself")
    name = type(error).__name__
    if isinstance(error, NameError) and getattr(error, "name", None) in answers:
        return _failed("NotImplementedError", not_implemented(error.name))
    if (made := course_made(error, answers)) is not None:
        return _failed("GraderError", f"grading error: the check {made}; the course's mistake, not your answer's "
                       "(your instructor grades this again)")
    if getattr(error, "remote", False):
        told = f"your code raised {name}" + ("" if hidden else f": {_text(error)}")
        return _failed(name, told + (" (in a hidden check)" if hidden else ""))
    return _failed(name, f"a hidden check stopped with {name}" if hidden else _text(error))


def course_made(error: BaseException, answers: set[str]) -> str | None:
    """What the check itself got wrong, when that stopped it (a correct answer would fail too): a
    name it reads that grading does not define (only a cell that is not `setup` does, in Lab), or
    an argument it passes that cannot cross to the learner process. None otherwise."""
    if getattr(error, "remote", False):
        return None  # the learner's code raised it
    if isinstance(error, NameError) and error.name and error.name not in answers:
        return f"reads `{error.name}`, which no `setup` cell and no answer of yours defines"
    if isinstance(error, wire.NotPlainData):
        return f"passed your function a value that cannot reach the process running your notebook ({_text(error)})"
    return None


def _failed(ename: str, message: str) -> dict[str, Any]:
    return {"passed": False, "ename": ename[:80], "message": message[:LIMIT]}


def _text(error: BaseException) -> str:
    try:
        return str(error)[:LIMIT]
    except Exception:
        return "(its message could not be shown)"


def _as_in_lab(error: BaseException, source: str) -> str:
    """A visible part's failure as a kernel shows it: its message, and for a bare `assert` (no
    message, nbgrader's usual idiom) the statement that failed."""
    text, frames = _text(error), _check_frames(error)
    if not isinstance(error, CheckFailed) and frames:
        number = frames[-1].tb_lineno
        statement = next((ast.get_source_segment(source, node) for node in ast.walk(_tree(source))
                          if isinstance(node, ast.Assert) and node.lineno <= number <= node.end_lineno), None)
        failed = statement or source.split("\n")[number - 1].strip()
        return f"{text}\n(the test's line {number}: {failed})" if text else f"the test's line {number} failed: {failed}"
    return text


def _check_frames(error: BaseException) -> list[types.TracebackType]:
    found, trace = [], error.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == FILENAME:
            found.append(trace)
        trace = trace.tb_next
    return found


def _before_hidden_part(error: BaseException, hidden_from: int) -> bool:
    """Whether the check stopped before its hidden region: its top-level statement running then is
    above it, or none ran yet (a function the visible part defined and the hidden part called
    counts as hidden)."""
    frames = _check_frames(error)
    return not frames or frames[0].tb_lineno < hidden_from


def _template(error: BaseException, source: str) -> str:
    """The failing check's message as the check writes it, values elided unless `shown` and made of
    course words (`course_words`): the message argument (the last) of the call the check's code was
    in when it failed (`expect(...)`, or a helper of the check's own), innermost first."""
    for trace in reversed(_check_frames(error)):
        call = _call_at(source, _position(trace))
        if call is None or len(call.args) < 2:
            continue
        elided = _Elide().visit(ast.parse(ast.unparse(call.args[-1]), mode="eval"))  # a copy: the cached tree stays
        if isinstance(elided.body, ast.Constant) and elided.body.value == ELIDED:
            continue  # no words of the course's in it: look at the caller
        words = _literals(source)
        try:
            text = eval(compile(ast.fix_missing_locations(elided), FILENAME, "eval"), trace.tb_frame.f_globals,
                        {**trace.tb_frame.f_locals, "shown": lambda value: course_words(value, words)})
        except Exception:
            continue
        return wrap(str(text))
    return "a hidden check failed"


def course_words(value: Any, words: set) -> Any:
    """`value` if it is made of words a learner may see in a hidden part's message, else "…": the
    check's own literals, small counts, and lists, reprs and "a, b and c" joins of those. Anything
    a learner process could have made from a hidden input is not among them (a value learner code
    made in the hidden phase is not, even one it held before the check's hidden part began: another
    check's hidden input may have reached it)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(course_words(item, words) for item in value)
    if isinstance(value, (str, int, float)) and (value in words or isinstance(value, int) and 0 <= value <= 64):
        return value
    if isinstance(value, str) and len(value) <= 300:
        pieces = re.split(r",\s*|\s+and\s+", value)
        if len(pieces) > 1 and all(piece in words for piece in pieces):
            return value
        try:
            inner = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return ELIDED
        if inner != value and course_words(inner, words) == inner:
            return value
    return ELIDED


@functools.lru_cache(maxsize=64)
def _literals(source: str) -> frozenset:
    return frozenset(node.value for node in ast.walk(_tree(source)) if isinstance(node, ast.Constant)
                     and isinstance(node.value, (str, int, float)) and not isinstance(node.value, bool))


class _Elide(ast.NodeTransformer):
    """Keep the message's words: literal text, `+` of texts, f-strings, a call with literal
    arguments (`not_implemented("claim")`) and `shown(...)`; any other value becomes "…"."""

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Expression):
            node.body = self.visit(node.body)
            return node
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node
        if isinstance(node, ast.JoinedStr):
            node.values = [value if isinstance(value, ast.Constant) else self._formatted(value) for value in node.values]
            return node
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            node.left, node.right = self.visit(node.left), self.visit(node.right)
            return node
        if self._shown(node) or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and all(
                isinstance(arg, ast.Constant) for arg in [*node.args, *(k.value for k in node.keywords)])):
            return node
        return ast.Constant(ELIDED)

    def _formatted(self, node: ast.FormattedValue) -> ast.AST:
        return node if self._shown(node.value) else ast.Constant(ELIDED)

    @staticmethod
    def _shown(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "shown"


def _position(trace: types.TracebackType) -> tuple[int, int]:
    code, index = trace.tb_frame.f_code, trace.tb_lasti // 2
    for number, (line, _, column, _) in enumerate(code.co_positions()):
        if number == index:
            return (line or trace.tb_lineno, column or 0)
    return (trace.tb_lineno, 0)


def _call_at(source: str, position: tuple[int, int]) -> ast.Call | None:
    """The innermost call to a named function whose span holds `position`."""
    found = None
    for node in ast.walk(_tree(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and (node.lineno, node.col_offset) <= position <= (node.end_lineno, node.end_col_offset)):
            if found is None or (node.lineno, node.col_offset) >= (found.lineno, found.col_offset):
                found = node
    return found


@functools.lru_cache(maxsize=64)
def _tree(source: str) -> ast.Module:
    return ast.parse(source)


def unwritten(answers: dict[str, str], report: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """For each answer name whose cell did not run to its end: why, in a sentence to act on; and,
    apart, the names whose cell still ends in nbgrader's raise (a value there was filled in above it,
    and does not count: in Lab the cell stops with an error, and its test says so)."""
    why, kept = {}, {}
    for run in report:
        if not run.get("ename"):
            continue
        for name, cell in answers.items():
            if cell != run.get("label"):
                continue
            ename, evalue = str(run["ename"])[:80], str(run.get("evalue", ""))[:300]
            if ename == "NotImplementedError":
                why[name] = not_implemented(name)
                kept[name] = kept_the_stub_line(name)  # if the name holds a value: filled in, the raise kept
            elif ename in ("SyntaxError", "IndentationError", "TabError"):
                why[name] = f"{ename} in your cell {cell!r}: {evalue}. Fix it and run the cell."
            elif ename == "CellTimeoutError":
                why[name] = f"your cell {cell!r} ran past the time limit, so `{name}` was never defined."
            else:
                why[name] = f"your cell {cell!r} stopped with {ename}: {evalue}; `{name}` is not defined."
    return why, kept
