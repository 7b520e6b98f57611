"""What the notebooks' test and observation cells share.

`expect` turns a failed check into one or two sentences for the learner (what was observed,
what was expected, why it matters) instead of a bare AssertionError; long sentences are
broken into lines a dialog can show. `require_written` opens a test cell: while a function it
checks is still nbgrader's stub (or a data answer still at its "?"), the test says "not
implemented yet", in the same words as the observation cells, instead of failing with whatever
the stub happens to cause; it also tells a setup cell not run, a cell not run since a restart,
and a filled-in answer whose cell still ends in nbgrader's raise. `checked_when_graded` is the
one line a visible test that passed prints about what only grading checks; `letters_missing`
words a letter answer's form (a capital from A to H).
`observation` lets an observation cell in the untouched release say the same and carry on;
`unexpected` states the fact the text around it claims: it says when the learner's code made the
fact false, and fails the run when the course's own answers do (CI runs every solutions notebook
so: a runtime change that makes a sentence false fails `make test`).
`differences` names the fields in which a returned value differs from the expected one.
`fresh_shop` gives every cell its own seeded database, so cells do not depend on each other's
leftovers. `forced_race` (01_claims) and `between_check_and_write` (02_fencing) are the
harnesses that force an unlucky interleaving, built on `interleave`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
import sys
import tempfile
import textwrap
import threading
import time
import types
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from reference_organizations.store.agent import seed_lucy
from sovereign_agent.database import Database

WIDTH = 88  # characters per line of a failure message (nbgrader's Validate dialog, a traceback)


class CheckFailed(AssertionError):
    """A learner-facing check: its message is the whole explanation."""

    def __str__(self) -> str:
        return wrap(self.args[0]) if self.args else "check failed"


def wrap(message: str, width: int = WIDTH) -> str:
    """Break every paragraph of `message` into lines of at most `width` characters."""
    return "\n".join(textwrap.fill(line, width, break_on_hyphens=False) for line in message.splitlines())


def expect(condition: object, message: str) -> None:
    """Fail with `message` (observed, expected, why it matters) unless `condition` holds."""
    if not condition:
        raise CheckFailed(message)


def shown(value: object) -> object:
    """`value`, unchanged. In a hidden check's message it marks a value the course chooses to show
    when the check fails (at grading every other value in such a message is replaced by "…", see
    course.grading.judge.messages): only what cannot carry a hidden case, like which of the
    learner's own answers were wrong."""
    return value


def not_implemented(name: str, where: str = "in its cell above") -> str:
    """The one sentence for a function that is still a stub (observation, test and checkpoint)."""
    return f"not implemented yet: write `{name}` {where} and run it"


def is_stub(value: object) -> bool:
    """True for nbgrader's stub: a function (or its code) whose body only raises NotImplementedError."""
    code = value if isinstance(value, types.CodeType) else getattr(value, "__code__", None)
    return isinstance(code, types.CodeType) and code.co_names == ("NotImplementedError",)


def not_run(name: str) -> str:
    """The sentence for a function whose cell has not run in this kernel (after a restart, say)."""
    return (f"`{name}` is not defined in this kernel: its cell has not run since the kernel started. Run it "
            "(Run > Run All Above runs every cell above this one)")


def _ran_its_cell(namespace: Mapping[str, Any], name: str) -> bool:
    """Whether a cell this kernel ran defines `name` (IPython keeps the inputs it ran in `In`;
    where there is no `In`, as at grading, assume it ran)."""
    ran = namespace.get("In")
    if not isinstance(ran, list):
        return True
    defines = re.compile(rf"^\s*(?:def|class)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*(?::[^=]*)?=", re.M)
    return any(isinstance(source, str) and defines.search(source) for source in ran)


SETUP_NOT_RUN = ("The setup cell at the top of this notebook has not run in this kernel (after a restart, say), so "
                 "this test has nothing to run with. Run it first: Run > Run All Above runs every cell above this one.")


def is_placeholder(value: object) -> bool:
    """True for a data answer as released: a dict whose values are all still "?" or None."""
    return isinstance(value, dict) and bool(value) and all(v is None or v == "?" for v in value.values())


def kept_the_stub_line(name: str) -> str:
    """The sentence for a data answer filled in while its cell still ends in nbgrader's raise."""
    return (f"Your cell that sets `{name}` still ends in `raise NotImplementedError()`, so it stops with an error "
            "(the traceback under it) although your values are filled in. Delete that line and run the cell again.")


def require_written(namespace: Mapping[str, Any], *names: str) -> None:
    """Stop a test before its first check when it cannot say anything about the learner's answer:
    the setup cell has not run in this kernel; one of `names` is still nbgrader's stub or a data
    answer still at its "?" ("not implemented yet"); its cell has not run here ("not defined in this
    kernel"); or its cell, filled in, still ends in nbgrader's `raise NotImplementedError()`.

    `namespace` is the cell's `globals()`; a class whose stub raised while it was defined
    (nbgrader's stub in a class body) is simply missing from it.
    """
    if namespace.get("expect") is not expect:  # every setup cell imports it; a test cell alone does not
        raise CheckFailed(SETUP_NOT_RUN)
    for name in names:
        value = namespace.get(name)
        if value is None and not _ran_its_cell(namespace, name):
            raise CheckFailed(not_run(name))
        if value is None or is_stub(value) or is_placeholder(value):
            raise CheckFailed(not_implemented(name))
        if _last_error.get(name) == "NotImplementedError" and not callable(value):
            raise CheckFailed(kept_the_stub_line(name))


_last_error: dict[str, str] = {}  # name -> the error that ended the last cell this kernel ran that set it ("": none)


def _assigned(source: str) -> set[str]:
    """The names a cell's top-level statements define or assign."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython syntax (magics): not an answer cell
        return set()
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        for target in getattr(node, "targets", []) or [getattr(node, "target", None)]:
            if isinstance(target, ast.Name):
                found.add(target.id)
    return found


def _listen() -> None:
    """In an IPython kernel, note after every cell which names it set and whether it ended in an
    error, so that a test can tell a filled-in answer whose cell still raises (see require_written)."""
    ipython = sys.modules.get("IPython")  # loaded in a kernel; elsewhere (a grading process) not worth importing
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "events") or getattr(shell, "_course_checks_listening", False):
        return

    def after_cell(result: Any) -> None:
        source = getattr(getattr(result, "info", None), "raw_cell", None) or ""
        error = getattr(result, "error_in_exec", None)
        for name in _assigned(source):
            _last_error[name] = type(error).__name__ if error is not None else ""

    shell.events.register("post_run_cell", after_cell)
    shell._course_checks_listening = True


_listen()


def checked_when_graded(message: str) -> None:
    """At the end of a visible test that passed: one line on what it did not check here."""
    print(wrap(message))


PASSED = "Passed:"  # how a visible test's last line starts when every check above it held
LATER = "hidden cases run when your instructor grades"


def passed(what: str, later: str = LATER) -> None:
    """The last statement of a visible test: one line naming what it established, so a pass is
    seen, and saying what waits for grading (its hidden cases), so a pass is not taken for the points.
    At grading the judge's prints go nowhere; course check-authoring asks every test to end in it."""
    print(wrap(f"{PASSED} {what}; {later}."))


LETTERS = "ABCDEFGH"


def letters_missing(answers: Mapping[str, Any], keys: list[str], what: str, name: str) -> str:
    """'' when every key of `answers` holds one capital letter from A to H; otherwise the sentence
    that says which do not, and why (a lower-case letter is named as such)."""
    lower = [k for k in keys if isinstance(answers.get(k), str) and answers[k].strip().upper() in list(LETTERS)
             and answers[k] not in list(LETTERS)]
    if lower:
        shown_as = ", ".join(f"{k}: {answers[k]!r} (write {answers[k].strip().upper()!r})" for k in lower)
        return (f"In {name}, a letter must be one capital, exactly as in the table ('A' to 'H'), and these are not, "
                f"as written: {shown_as}. The letters are compared exactly.")
    missing = [k for k in keys if answers.get(k) not in list(LETTERS)]
    if missing:
        return (f"In {name}, these {what} have no letter from A to H yet: {missing}. Give each one letter (a capital, "
                "in quotes).")
    return ""


def stub_name(error: BaseException) -> str:
    """The innermost of nbgrader's stubs that `error` (a NotImplementedError) came out of, or ""."""
    found, trace = "", error.__traceback__
    while trace is not None:
        if is_stub(trace.tb_frame.f_code):
            found = trace.tb_frame.f_code.co_name
        trace = trace.tb_next
    return found or str(getattr(error, "stub", "") or "")


_noted: list[str] = []  # what `unexpected` said in the observation running now


class PredictionUnset(Exception):
    """The observation's prediction is still None: the experiment waits for it (course.lessons.predictions)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"Predict first: set `{self.name}` in the cell above, run it, then run this cell again."


@contextmanager
def observation(name: str, uncaught: str = "", *, course: bool = False) -> Iterator[None]:
    """Run an observation; whatever the learner's code does, the cell ends in a sentence, never a
    traceback, so Run All goes on to the tests, which say what to fix. Until its prediction is set
    (course.lessons.predictions.bound), say so in a line and run nothing more. If a function it calls is
    still a stub, name that one (`name`: the learner's functions it runs). A fence's refusal after
    the cell already went differently from the text (a note said so) is explained as following from
    that; with `uncaught` (what it means here), so is one the learner's `name` let escape. Where the
    course's own answers run (COURSE_STATED_FACTS=strict), anything else is the course's error.
    With `course`, the cell runs only the course's code (`name`), and a failure is not blamed on the learner."""
    _noted.clear()
    try:
        yield
    except PredictionUnset as unset:
        print(unset)
    except Exception as error:
        if os.environ.get(STRICT) == "strict" and not isinstance(error, NotImplementedError):
            raise
        print(wrap(_course_code_stopped(error, name) if course else _learners_code_stopped(error, name, uncaught)))
    finally:
        _noted.clear()


def _course_code_stopped(error: Exception, name: str) -> str:
    return (f"This experiment stopped with {type(error).__name__} ({str(error)[:200] or 'no message'}). It runs only "
            f"the course's code (`{name}`), none of yours: run the cell again, and tell your instructor if it stays. "
            "The tests below run anyway.")


def _learners_code_stopped(error: Exception, name: str, uncaught: str) -> str:
    """The sentence for an experiment that runs the learner's `name` and stopped with `error`."""
    if isinstance(error, NotImplementedError):
        return not_implemented(stub_name(error) or name) + ", then run this cell again."
    if isinstance(error, PermissionError) and uncaught and not _noted:
        return f"Your `{name}` stopped with PermissionError ({error}): {uncaught}"
    if isinstance(error, PermissionError) and _noted:
        return (f"Then your fence refused a later write ({error}). That follows from the difference noted above: "
                "the earlier write changed the row the later one needed. Fix that first; the test below explains.")
    return stopped(error, name)


def stopped(error: Exception, name: str) -> str:
    """Why an observation stopped, in a sentence to act on: what happened, where, what to look at."""
    what = f"{type(error).__name__} ({str(error)[:200] or 'no message'})"
    where = _raised_in(error)
    if isinstance(error, PermissionError):
        return (f"This experiment stopped: a fence refused a write the text expects to go through: {what}. "
                f"Does your `{name}` refuse a current holder? The tests below run anyway and say which.")
    if "NoneType" in str(error):
        return (f"This experiment stopped with {what} {where}: a function of yours it uses (`{name}`) returned "
                "None where the text expects a value. The tests below run anyway and say which.")
    return (f"This experiment stopped with {what} {where}. It runs your `{name}`; the tests below run anyway "
            "and say what to fix.")


def _raised_in(error: BaseException) -> str:
    """'in your `f`' when a learner's function raised it, 'in the runtime's `f`' otherwise."""
    innermost, learners, trace = "", "", error.__traceback__
    while trace is not None:
        code = trace.tb_frame.f_code
        innermost = code.co_name
        if ("ipykernel_" in code.co_filename or code.co_filename.startswith("<")) and code.co_name != "<module>":
            learners = code.co_name
        trace = trace.tb_next
    if learners and learners == innermost:
        return f"in your `{learners}`"
    return f"in the runtime's `{innermost}`" if innermost and innermost != "<module>" else ""


@contextmanager
def rebound(namespace: dict[str, Any], name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    """While inside, `name` in the learner's namespace is `wrap(what it was)`: a check sees the
    calls the learner's own code makes of it (their `finish` calling their `assert_current`). A
    dotted name (`reference.finish`) is an attribute of a module the namespace holds, so a call
    through the module is seen too. At grading the judge rebinds the name in the learner process
    too, to a callback of its own."""
    original = looked_up(namespace, name)
    assign(namespace, name, wrap(original))
    try:
        yield
    finally:
        assign(namespace, name, original)


def looked_up(namespace: Mapping[str, Any], name: str) -> Any:
    """`name` in `namespace`, or for `module.attribute` that attribute (KeyError/AttributeError if none)."""
    head, _, attribute = name.partition(".")
    return getattr(namespace[head], attribute) if attribute else namespace[head]


def assign(namespace: dict[str, Any], name: str, value: Any) -> None:
    """Bind `name` (or set `module.attribute`) in `namespace` to `value`."""
    head, _, attribute = name.partition(".")
    if attribute:
        setattr(namespace[head], attribute, value)
    else:
        namespace[head] = value


STRICT = "COURSE_STATED_FACTS"  # set to "strict" where the course's own answers run (CI's papermill runs)


class StatedFactFailed(CheckFailed):
    """With the course's own answers, an observation disagreed with the text around it: the text or
    the runtime is wrong, and the run that showed it fails."""


def unexpected(as_told: object, message: str, explained: str = "the test below explains") -> None:
    """In an observation: the fact the text around the cell states (`as_told`). When the learner's
    code made it false, say so right under the output, and where it is explained; where the course's
    own answers run (`COURSE_STATED_FACTS=strict`), a false fact is the course's error and fails."""
    if not as_told:
        if os.environ.get(STRICT) == "strict":
            raise StatedFactFailed(f"a sentence of the text is not true of this run: {message}")
        _noted.append(message)
        print(wrap(f"Note: {message}; {explained}."))


def differences(actual: object, expected: object) -> str:
    """'generation is 2, expected 1; owner is ...': the fields of two dataclasses that differ."""
    if not (dataclasses.is_dataclass(actual) and dataclasses.is_dataclass(expected)):
        return f"{actual!r}, expected {expected!r}"
    found = []
    for field in dataclasses.fields(expected):
        mine, wanted = getattr(actual, field.name, "<missing>"), getattr(expected, field.name)
        if mine != wanted:
            found.append(f"{field.name} is {mine!r}, expected {wanted!r}")
    return "; ".join(found) or "no field differs"


_shops: list[tempfile.TemporaryDirectory] = []


def fresh_shop(prefix: str = "lucy-ch12-") -> Database:
    """A new, seeded shop database in its own temporary folder (removed when Python exits)."""
    folder = tempfile.TemporaryDirectory(prefix=prefix)
    _shops.append(folder)
    db = Database(Path(folder.name) / "agent.sqlite")
    seed_lucy(db)
    return db


_tracers: dict[int, tuple[sqlite3.Connection, Callable[[str], None]]] = {}


def trace(connection: sqlite3.Connection, hook: Callable[[str], None] | None) -> None:
    """Call `hook(statement)` before each statement `connection` runs (None: stop).

    Recorded here as well as set on the connection, so that a connection passed by its path to
    another process has that process's statements traced by the same hook: in 07 the learner's
    own forced_approvals sees the statements of the approvals the judge runs for it. The judge
    itself never decides from a trace (course.grading.judge.schedule)."""
    connection.set_trace_callback(hook)
    if hook is None:
        _tracers.pop(id(connection), None)
    else:
        _tracers[id(connection)] = (connection, hook)


def tracer(connection: sqlite3.Connection) -> Callable[[str], None] | None:
    """The hook `trace` set on `connection`, if any."""
    found = _tracers.get(id(connection))
    return found[1] if found is not None and found[0] is connection else None


def interleave(connection: sqlite3.Connection, first: Callable[[], Any], location: str | Path,
               second: Callable[[Any], Any], *, pause: float = 0.5, table: str = "assistant_work",
               reopen: Callable[[str | Path], Any] = Database, told: str = "the `db` you are passed") -> dict[str, Any]:
    """Run `first()`, which works on `connection`; at the moment it has read `table` and is about
    to begin or make a write, run `second(other)` on `reopen(location)` (a new connection) in
    another thread, and let `first` wait for it (at most `pause` seconds). Lab's race; graded, the
    harnesses below are passed the judge's instead (`force`: course.grading.judge.schedule).

    Returns {"first": ..., "second": ..., "second waited": seconds `second` spent, "second in gap":
    whether `second` had ended while `first` was held between its read and its write}. An error in
    `first` propagates; an error in `second` is raised after `first` has finished. A `first` that
    ran no statement on `connection` cannot be interleaved: that is a CheckFailed (saying to work
    through `told`), not a pass.
    """
    ready, go, done = threading.Event(), threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def rival() -> None:
        other = reopen(location)  # a connection belongs to the thread that opens it
        ready.set()
        go.wait(10)
        started = time.monotonic()
        try:
            box["second"] = second(other)
        except BaseException as error:  # handed to the caller below
            box["second error"] = error
        finally:
            box["second waited"] = time.monotonic() - started
            other.close()
            done.set()

    def hold_between_read_and_write(statement: str) -> None:
        box["statements"] = box.get("statements", 0) + 1
        words = set(re.findall(r"[A-Z]+", statement.upper()))
        verb = (statement.split() or [""])[0].upper()
        writes = verb in {"BEGIN", "UPDATE", "INSERT", "DELETE", "REPLACE"} or (
            verb == "WITH" and bool(words & {"UPDATE", "INSERT", "DELETE", "REPLACE"}))  # a CTE can write, too
        if verb in {"SELECT", "WITH"} and not writes and table in statement.lower():
            box["has read"] = True
        elif box.get("has read") and writes and not go.is_set():
            go.set()
            box["second in gap"] = done.wait(pause)  # decided while `first` cannot write: no clock compared

    thread = threading.Thread(target=rival, daemon=True)
    thread.start()
    ready.wait(10)
    trace(connection, hold_between_read_and_write)
    try:
        box["first"] = first()
    finally:
        trace(connection, None)
        go.set()
        thread.join(15)
    if "second error" in box:
        raise box["second error"]
    if not box.get("statements"):
        raise CheckFailed("The function under test ran no statement on the connection it was given, so nothing "
                          f"could be released between its read and its write; work through {told}.")
    return box


def forced_race(location: str | Path, take: Callable[..., Any], *, now: float | None = None,
                pause: float = 0.5, rival: Callable[..., Any] | None = None,
                force: Callable[..., dict[str, Any]] = interleave) -> dict[str, Any]:
    """Worker A calls take(db, owner, now=now) here; worker B, another process, calls `rival` (by
    default the same `take`, in a child forked before the race begins), each on its own connection.

    B is released exactly between A's read of assistant_work and A's first write, and A waits
    for B at most `pause` seconds. B is another process because workers are: a claim that only
    holds a lock of its own process would keep two threads apart and still let two workers in.
    Returns {"A": ..., "B": ..., "B waited": seconds B spent inside take}; B's error is raised.
    """
    a = Database(location)
    b = rival if rival is not None else _Forked(take, location)
    try:
        box = force(a.connection, lambda: take(a, "worker-A", now=now), location,
                    lambda other: b(other, "worker-B", now=now), pause=pause)
    finally:
        a.close()
        if isinstance(b, _Forked):
            b.close()
    return {"A": box["first"], "B": box["second"], "B waited": box["second waited"]}


class _Forked:
    """`take` in a child process forked now, before the race begins (so it shares no lock that is
    held), and run when called: it opens its own connection, and its result (or error) comes back
    pickled: this is the learner's own kernel, where nothing is graded."""

    def __init__(self, take: Callable[..., Any], location: str | Path, limit: float = 15.0) -> None:
        import os
        import pickle

        self.limit, self._pickle = limit, pickle
        go_read, self._go = os.pipe()
        self._result, result_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: wait for "go", race, report, exit without any cleanup of the parent's
            try:
                os.close(self._go)
                os.close(self._result)
                sink = open(os.devnull, "w")
                sys.stdout = sys.stderr = sink  # a kernel's streams belong to its threads, gone here
                owner, now = pickle.loads(os.read(go_read, 1 << 16))
                try:
                    outcome: tuple[str, Any] = ("value", take(Database(location), owner, now=now))
                except BaseException as error:
                    outcome = ("error", error)
                try:
                    data = pickle.dumps(outcome)
                except Exception:
                    data = pickle.dumps(("error", RuntimeError(repr(outcome[1])[:500])))
                os.write(result_write, data)
            finally:
                os._exit(0)
        os.close(go_read)
        os.close(result_write)

    def __call__(self, other: Database, owner: str, *, now: float | None = None) -> Any:
        import os
        import select

        os.write(self._go, self._pickle.dumps((owner, now)))
        chunks = []
        while select.select([self._result], [], [], self.limit)[0]:
            chunk = os.read(self._result, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        if not chunks:
            raise TimeoutError(f"worker B did not finish within {self.limit} s")
        kind, value = self._pickle.loads(b"".join(chunks))
        if kind == "error":
            raise value
        return value

    def close(self) -> None:
        import os
        import signal

        for fd in (self._go, self._result):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)


def between_check_and_write(db: Database, write: Callable[[], Any], takeover: Callable[[Database], Any],
                            *, pause: float = 0.5, force: Callable[..., dict[str, Any]] = interleave) -> dict[str, Any]:
    """Run write() on `db`; between its check (a read of assistant_work) and its write, run
    takeover(other) on a second connection. Returns {"write": "accepted" or "refused",
    "rival": what takeover returned}."""

    def attempt() -> str:
        try:
            write()
        except PermissionError:
            return "refused"
        return "accepted"

    box = force(db.connection, attempt, db.path, takeover, pause=pause)
    return {"write": box["first"], "rival": box.get("second")}


def race_claims(location: str | Path, claim: Callable[..., Any], *, now: float | None = None,
                rival: Callable[..., Any] | None = None,
                force: Callable[..., dict[str, Any]] = interleave) -> dict[str, Any]:
    """`forced_race` over the learner's `claim` (30 s leases); a crash becomes an explanation.
    `rival`: worker B's claim, when it is not this process's `claim` in a child (the grader's)."""
    take_b = None if rival is None else (lambda db, owner, now: rival(db, owner, now=now, ttl=30))
    try:
        return forced_race(location, lambda db, owner, now: claim(db, owner, now=now, ttl=30), now=now, rival=take_b,
                           force=force)
    except (NotImplementedError, CheckFailed):  # a graded race's own verdict (judge.schedule) is said as it is
        raise
    except Exception as error:
        hint = ""
        if "locked" in str(error):
            hint = (" Your claim began as a reader (a plain BEGIN) and tried to become a writer after the other "
                    "worker had committed; take the write lock before the first read with db.immediate().")
        raise CheckFailed(f"The forced race raised {type(error).__name__}: {error}; expected each worker to "
                          f"get a claim or None.{hint}") from None


class _WorkerDied(BaseException):
    """A worker that dies right after admission, before its request leaves: the order stays SENDING."""


class ScriptedSupplier:
    """A supplier that answers every order the same way: "ACCEPTED" or "REJECTED" (a receipt),
    "lost" (the answer never arrives: OutcomeUnknown) or "crash" (the worker dies while sending).
    Lookups find nothing."""

    timeout, idempotent = 1.0, True

    def __init__(self, answer: str) -> None:
        from reference_organizations.store.agent import SUPPLIER_IDENTITY

        self.identity, self.answer = SUPPLIER_IDENTITY, answer

    def lookup(self, operation: str) -> None:
        return None

    def order(self, operation: str, proposal: Any) -> dict[str, Any]:
        from sovereign_agent.suppliers import OutcomeUnknown

        if self.answer == "lost":
            raise OutcomeUnknown("no answer")
        if self.answer == "crash":
            raise _WorkerDied()
        return {"operation": operation, "status": self.answer, "supplier": self.identity}


ORDER_STATES = {"APPROVED": None, "SENDING": "crash", "UNKNOWN": "lost", "CONFIRMED": "ACCEPTED", "REJECTED": "REJECTED"}


def order_in_state(state: str) -> tuple[Database, Any, str]:
    """(db, claim, order id): a fresh shop whose one assignment holds a Lucy-approved order that
    the runtime's own functions drove into `state` (one of ORDER_STATES)."""
    from reference_organizations.store.agent import SUPPLIER_IDENTITY
    from sovereign_agent.assistant_orders import approve, execute, propose
    from sovereign_agent.assistant_work import claim, enqueue
    from sovereign_agent.records import order as recorded_order
    from sovereign_agent.records import spending_policy
    from sovereign_agent.suppliers import OutcomeUnknown

    db = fresh_shop()
    policy = spending_policy(db.connection, {"lucy"})
    enqueue(db, f"phone:{state}", f"van-{state}", f"Restock strawberry ({state})", subject="SKU-STRAWBERRY")
    held = claim(db, f"worker-{state.lower()}", ttl=60)
    order_id = propose(db, held, "SKU-STRAWBERRY", 4, target=SUPPLIER_IDENTITY)
    digest = recorded_order(db.connection, order_id)["digest"]
    approve(db, order_id, digest, actor="lucy", policy=policy, expires=time.time() + 600)
    if ORDER_STATES[state] is not None:
        try:
            execute(db, held, order_id, ScriptedSupplier(ORDER_STATES[state]), policy=policy)
        except (OutcomeUnknown, _WorkerDied):
            pass
    reached = recorded_order(db.connection, order_id)["status"]
    if reached != state:
        raise RuntimeError(f"set-up: the order is {reached}, not {state}")
    return db, held, order_id


# --- 07_review: exercise 4's race and section 1's killed holder ----------------------------------


def forced_approvals(location: str | Path, first: Callable[[Database], Any], second: Callable[[Database], Any],
                     *, pause: float = 0.5) -> dict[str, Any]:
    """Exercise 4 (07_review): two approvals, each on its own connection to `location`.

    `second` is released exactly between `first`'s read of assistant_work and its next write, as
    `forced_race` does for claims, and `first` waits for it at most `pause` seconds. Returns
    {"first": ..., "second": ..., "second waited": seconds}; an exception either raises is
    returned as that value, so a refusal is data.
    """

    def outcome(approval: Callable[[Database], Any], db: Database) -> Any:
        try:
            return approval(db)
        except Exception as error:  # OrderRefused, or a constraint the naive version runs into
            return error

    a = Database(location)
    try:
        box = interleave(a.connection, lambda: outcome(first, a), location,
                         lambda other: outcome(second, other), pause=pause)
    finally:
        a.close()
    return {"first": box["first"], "second": box["second"], "second waited": box["second waited"]}


_HOLDER = """
import sys, time
from pathlib import Path
from sovereign_agent.assistant_work import claim
from sovereign_agent.database import Database
from sovereign_agent.processes import record_process
db = Database(sys.argv[1])
held = claim(db, sys.argv[3], identifier=sys.argv[2], ttl=float(sys.argv[4]))
record_process(db, held.owner)  # as every worker pass does after its claim
Path(sys.argv[5]).write_text(str(held.generation))
time.sleep(60)
"""


def killed_holder(db: Database, work_id: str, *, owner: str = "killed-worker", ttl: float = 1.0,
                  limit: float = 20.0) -> int:
    """A real child process claims `work_id` with a `ttl`-second lease, records its process (host,
    boot, pid, start time, as a worker pass does) and is SIGKILLed once it holds it.

    Returns the child's exit status (-9). Every wait is bounded by `limit` seconds; the child
    never outlives this call.
    """
    import signal
    import subprocess
    import sys

    from reference_organizations.children import spawn, stop, wait_for_file

    ready = Path(db.path).with_name(f"held-{work_id}")
    # -P: the working folder (the learner's) stays off sys.path; no file there stands in for ours
    child = spawn([sys.executable, "-P", "-c", _HOLDER, str(db.path), work_id, owner, str(ttl), str(ready)],
                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        try:
            wait_for_file(ready, timeout=limit, process=child)
        except (RuntimeError, TimeoutError) as error:
            said = child.stderr.read().decode()[-300:] if child.poll() is not None else ""
            raise RuntimeError(f"the holder did not claim {work_id}: {error} {said}".strip()) from None
        child.send_signal(signal.SIGKILL)
        return child.wait(limit)
    finally:
        stop(child)  # kills it if it is still running; always reaps and closes its pipe


# --- 03_leases: a lease sized from the loop's bounds; 02_fencing: the model-call reservation ---


def admission_with_lease_left(lease_left: float, supplier_timeout: float) -> dict[str, Any]:
    """The runtime's own admission decision (`execute`, at an injected `now`) for a Lucy-approved
    order when `lease_left` seconds (> 0) of the holder's lease remain and the supplier declares
    `supplier_timeout` seconds. Returns {"lease_left": the seconds left as the runtime computed them,
    "sent": bool, "reason": the refusal, or ""}."""
    from sovereign_agent.assistant_orders import OrderRefused, execute
    from sovereign_agent.records import lease_expiry, spending_policy

    db, held, order_id = order_in_state("APPROVED")
    try:
        supplier = ScriptedSupplier("ACCEPTED")
        supplier.timeout = float(supplier_timeout)
        expires = lease_expiry(db.connection, held.id)
        now = expires - lease_left
        policy = spending_policy(db.connection, {"lucy"})
        try:
            execute(db, held, order_id, supplier, policy=policy, now=now)
        except OrderRefused as refusal:
            return {"lease_left": expires - now, "sent": False, "reason": str(refusal)}
        return {"lease_left": expires - now, "sent": True, "reason": ""}
    finally:
        db.close()


TAKEOVERS = ("replacement", "same label", "cancel", "")


def takeover_after_check(assert_current: Callable[..., None], observe: Callable[..., None],
                         finish: Callable[..., None], takeover: str = "replacement") -> dict[str, Any]:
    """Lucy's real worker (`run_once`) over one assignment, with `assert_current` as every fence.

    Right after the loop's first `check_current` has passed (the one fence call made outside a
    write transaction) and before the model call is reserved, `takeover` happens: "replacement"
    (another worker claims at the lease's expiry, injected time), "same label" (the same, under the
    old worker's own label), "cancel" (the operator cancels) or "" (nothing). Returns
    {"refused": the PermissionError's message or None, "model_calls": calls that reached the
    model, "reserved": {generation: rows of assistant_model_calls}, "taken over": bool}.
    """
    from course.checkpoint.model import CountingModel
    from reference_organizations.store.agent import OfflineShopModel
    from reference_organizations.store.assistant import run_once
    from sovereign_agent import assistant_work
    from sovereign_agent.ownership import Ownership
    from sovereign_agent.records import lease_expiry, model_calls_by_generation

    if takeover not in TAKEOVERS:
        raise ValueError(f"takeover is one of {TAKEOVERS}")
    db = fresh_shop()
    work_id = assistant_work.enqueue(db, "phone:reserve", "lucy", "Check the stock and draft a reorder")
    happened: list[str] = []

    def fence(connection: sqlite3.Connection, work: Any, now: float | None = None) -> None:
        assert_current(connection, work, now)
        if takeover and not happened and not connection.in_transaction:
            happened.append(takeover)
            if takeover == "cancel":
                assistant_work.cancel(db, work_id)
            else:
                expires = lease_expiry(db.connection, work_id)
                label = work.owner if takeover == "same label" else "replacement"
                assistant_work.claim(db, label, now=expires, ttl=30)

    model = CountingModel(OfflineShopModel())
    try:
        mine = Ownership(assert_current=fence, observe=observe, finish=finish)
        run_once(db, model, owner="old-worker", ownership=mine)
        refused = None
    except PermissionError as refusal:
        refused = str(refusal)
    finally:
        reserved = model_calls_by_generation(db.connection, work_id)
        db.close()
    return {"refused": refused, "model_calls": model.calls, "reserved": reserved, "taken over": bool(happened)}
