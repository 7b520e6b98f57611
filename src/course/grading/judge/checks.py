"""The grader's side of the checks: each graded cell's job, built from trusted sources, and its run.

The cells' order, tags and points come from the release; their full sources, hidden tests
included, from the gradebook; nothing from the submission (the learner process reads that
itself). A check gets a scratch folder, a learner process for its notebook, and a judge forked
in the student's judge sandbox; the grader answers the judge's broker requests until the verdict
comes or the time is up, then kills the check's learner processes. Each runs in its phase
(course.grading.judge.phases).
"""

from __future__ import annotations

import ast
import functools
import json
import os
import select
import shutil
import socket
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.grading import findings, lockcalls
from course.grading.judge import broker
from course.grading.judge.phases import HIDDEN, VISIBLE, Gate, PhaseTimeout
from course.grading.judge.server import JudgeServer, ServerGone
from course.grading.learner.tripwires import ANSWERS, IMPLEMENTATION, of_worker
from course.grading.sandbox import learners, private
from course.grading.sandbox.bubblewrap import Limits, Sandbox, sandbox_disabled

BEGIN_HIDDEN, END_HIDDEN = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"  # nbgrader's test: any line holding these
PLACEHOLDER = "# hidden tests (not shown)"
SCRATCH_INSIDE = "/scratch"  # the student's scratch folder in the judge's sandbox
CHECKS_AT_ONCE = 8  # many checks mostly wait (a real lease running out): more than the cores
PHASE_WAIT = 900.0  # seconds a check may wait for the other phase (course.grading.judge.phases) to end
SLOW_TAG, SLOW_GUESS = "slow", 5.0  # a test cell the course tags `slow` (real leases, real races): seconds, until timed


@dataclass(frozen=True)
class CourseCell:
    """One cell of the release, with its trusted full source."""

    grade_id: str
    cell_type: str
    source: str
    tags: tuple[str, ...]
    graded: bool
    solution: bool
    points: float
    visible_source: str  # as released: hidden regions removed


def course_cells(release: dict[str, Any], full_sources: dict[str, str]) -> list[CourseCell]:
    """The release's cells, with the gradebook's source (hidden tests included) where it has one."""
    found = []
    for cell in release["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id", "")
        released = cell_text(cell.get("source", ""))
        found.append(CourseCell(
            grade_id, cell["cell_type"], full_sources.get(grade_id, released),
            tuple(cell.get("metadata", {}).get("tags", [])), bool(meta.get("grade")),
            bool(meta.get("solution")), float(meta.get("points", 0) or 0), released,
        ))
    return found


def autograded(cells: list[CourseCell]) -> list[CourseCell]:
    """Cells whose points the judge decides: graded code cells that are not answers."""
    return [c for c in cells if c.cell_type == "code" and c.graded and not c.solution]


def answers(cells: list[CourseCell]) -> dict[str, str]:
    """{name an answer cell defines in the release: its grade_id} (what the learner must write)."""
    found = {}
    for cell in cells:
        if cell.cell_type == "code" and cell.solution:
            for node in ast.parse(cell.visible_source).body:
                names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [
                    target.id for target in getattr(node, "targets", []) if isinstance(target, ast.Name)]
                found.update(dict.fromkeys(names, cell.grade_id))
    return found


def loaded_by_setup(setup: list[dict[str, str]]) -> list[str]:
    """The learner's answers a second part's setup runs from its saved first part, as it names them:
    `saved_definitions("04_recovery.ipynb", "order_to_continue")` (course.lab.learner). Its learner
    process holds them, so they are tripwired there as its own answers are."""
    names = []
    for cell in setup:
        for node in ast.walk(ast.parse(cell["source"])):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "saved_definitions":
                names += [arg.value for arg in node.args[1:] if isinstance(arg, ast.Constant)]
    return names


def build_job(notebook: str, check: CourseCell, cells: list[CourseCell]) -> dict[str, Any]:
    """The judge's input for one graded cell."""
    lines = check.source.split("\n")
    hidden_from = next((number for number, line in enumerate(lines, start=1) if BEGIN_HIDDEN in line), None)
    setup = [{"label": c.grade_id or "setup", "source": c.source}
             for c in cells if c.cell_type == "code" and "setup" in c.tags]
    return {"notebook": notebook, "cell": check.grade_id, "what": notebook, "setup": setup, "check": check.source,
            "hidden_from": hidden_from, "answers": answers(cells), "loaded": loaded_by_setup(setup),
            "slow": SLOW_TAG in check.tags, "races": lockcalls.forces_a_race(check.source)}


def notebook_jobs(notebook: str, release: Path, sources: dict[str, str]) -> list[dict]:
    """One notebook's checks, as jobs (`sources`: the gradebook's full cell sources)."""
    cells = course_cells(json.loads((release / f"{notebook}.ipynb").read_text()), sources)
    return [build_job(notebook, check, cells) for check in autograded(cells)]


# --- running checks -------------------------------------------------------------------------------

_pool = ThreadPoolExecutor(max_workers=CHECKS_AT_ONCE, thread_name_prefix="check")  # threads start on demand
_started: list[Future] = []  # every check this process started
# Checks started for notebooks nbgrader has not reached yet (StartChecks): {(submitted folder, notebook): them}
STARTED: dict[tuple[Path, str], PendingChecks] = {}
# How long each check (notebook, cell) took when this process last ran it: a worker grades student
# after student, and starts the longest first, so checks that mostly wait overlap the others.
last_seconds: dict[tuple[str, str], float] = {}


@dataclass
class PendingChecks:
    """One notebook's checks, running or queued, and its learner process's report on each cell."""

    futures: dict[str, Future]
    group: CheckGroup
    notebook: str

    def results(self) -> dict[str, dict]:
        return {cell: future.result() for cell, future in self.futures.items()}

    def report(self) -> list[dict] | None:
        """What the notebook's first learner process reported of each cell (one started in the visible
        phase), with what grading saw in each cell in any of the notebook's learner processes (a
        bound one of them hit, say)."""
        first, seen = self.group.reports.get(self.notebook), self.group.seen.get(self.notebook, {})
        if first is None:
            return None
        return [{**run, "findings": sorted(set(run.get("findings", [])) | seen.get(cell_key(run), set()))} for run in first]


def wait_for_all() -> None:
    """Wait for every check this process started (each has its time limit), as a worker does
    before it kills what its student left behind."""
    wait(_started)
    _started.clear()
    STARTED.clear()


def longest_first(jobs: list[dict]) -> list[dict]:
    """`jobs` by how long each took last time, longest first. Never run here (a worker's first student,
    every student of plain nbgrader): the course's `slow` ones first, the rest in their own order."""
    return sorted(jobs, key=lambda job: -last_seconds.get((job["notebook"], job["cell"]),
                                                          SLOW_GUESS if job.get("slow") else 0.0))


def start_checks(jobs_by_notebook: dict[str, list[dict]], submitted: Path, release: Path, timeout: float,
                 cell_seconds: float = 120.0) -> dict[str, PendingChecks]:
    """Start the checks of one student's notebooks, in one judge sandbox, longest first."""
    every = [job for built in jobs_by_notebook.values() for job in built]
    group = CheckGroup(submitted, release, len(every), cell_seconds)
    futures = {id(job): _pool.submit(group.check, job, timeout) for job in longest_first(every)}
    _started.extend(futures.values())
    return {notebook: PendingChecks({job["cell"]: futures[id(job)] for job in built}, group, notebook)
            for notebook, built in jobs_by_notebook.items()}


@functools.cache
def gate() -> Gate:
    return Gate()


class CheckGroup:
    """One student's checks: one judge sandbox, and per check, learner sandboxes of its own, all
    writing in the student's one bounded file system (private.student_filesystem): `scratch` (the
    judge's /scratch, a folder per check), `rooms` (each learner sandbox's own folders), and
    `logs` (the checkpoint workers' stderr, which no sandbox holds)."""

    def __init__(self, submitted: Path, release: Path, count: int, cell_seconds: float = 120.0) -> None:
        self.submitted, self.release = Path(submitted).resolve(), Path(release).resolve()
        self.cell_seconds = cell_seconds
        self.reports: dict[str, list[dict]] = {}
        self.seen: dict[str, dict[str, set[str]]] = {}  # notebook -> cell -> findings of any of its learner processes
        self._left, self._lock = count, threading.Lock()
        self._server: JudgeServer | None = None
        self._resources = ExitStack()
        self._filesystem = private.student_filesystem(Limits().student_bytes)
        self._scratch, self._rooms, self._logs = (self._filesystem / name for name in ("scratch", "rooms", "logs"))
        for folder in (self._scratch, self._rooms, self._logs):
            folder.mkdir(mode=0o700)
        if not private.bounded(self._filesystem):
            self._rooms = None  # each sandbox then has tmpfs folders of its own, bounded one by one
        self._numbers = iter(range(1, 1 << 30))

    def check(self, job: dict, timeout: float) -> dict:
        start = time.monotonic()
        try:
            return self._run(job, timeout)
        finally:
            last_seconds[(job["notebook"], job["cell"])] = time.monotonic() - start
            with self._lock:
                self._left -= 1
                if self._left == 0:
                    self._stop()

    def _run(self, job: dict, timeout: float) -> dict:
        """A check with a hidden part runs all its statements in the hidden phase: nothing it sets up
        on the wall clock (a 30 s lease) waits out the other phase between its visible and hidden
        parts. When it failed before its hidden part, its visible part runs alone in the visible
        phase, to be told as Lab tells it (the verdict stays the first run's)."""
        if job["hidden_from"] is None:
            return self._judged(job, VISIBLE, timeout)
        verdict = self._judged(job, HIDDEN, timeout)
        if not verdict["passed"] and verdict.get("retell"):
            visible_part = {**job, "check": hide_region(job["check"], None), "hidden_from": None}
            alone = self._judged(visible_part, VISIBLE, timeout)
            if not alone["passed"]:
                verdict = {**alone, "findings": sorted(set(alone["findings"]) | set(verdict["findings"]))}
        return verdict

    def _judged(self, job: dict, phase: str, timeout: float) -> dict:
        """Fork a judge, send it the job, answer its broker requests until its verdict (or the time is
        up). Its learner process runs the notebook in the visible phase (what the cells print is
        fixed there); the check's statements run in `phase`, which it waits for before the first."""
        with self._lock:
            number = next(self._numbers)
        check = OneCheck(self, dict(job), number)
        try:
            check.enter(VISIBLE)
            check.waited = 0.0  # the check's time starts now
            server = self._running()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with ours, ExitStack() as cleanup:
                cleanup.callback(check.close_processes)
                try:
                    ident = server.start([theirs.detach()])
                    ours.send(json.dumps(check.job).encode())
                except (ServerGone, OSError):
                    return failure("GraderError", "the judge's sandbox has ended")
                deadline = time.monotonic() + timeout
                try:
                    while (left := deadline + check.waited - time.monotonic()) > 0:
                        if select.select([ours], [], [], left)[0]:
                            verdict = broker.serve(ours, check.start_learner, check.start_worker, check.started,
                                                   functools.partial(check.enter, phase))
                            if verdict is not None:
                                return read_verdict(verdict)
                except PhaseTimeout:
                    server.kill(ident)
                    raise
                server.kill(ident)
                return failure("CheckTimeout", f"the check did not finish within {timeout:g} s and was stopped")
        except PhaseTimeout as error:
            return failure("GraderError", f"grading error: {error}; grade this student again")
        finally:  # its learner processes are gone (cleanup above): the phase may pass to others
            check.leave()
            shutil.rmtree(check.host, ignore_errors=True)

    def _running(self) -> JudgeServer:
        with self._lock:
            if self._server is None or self._server.process.poll() is not None:
                self._stop()
                self._resources = ExitStack()
                self._server = self._start(self._resources)
            return self._server

    def _start(self, resources: ExitStack) -> JudgeServer:
        argv = [sys.executable, "-I", "-m", "course.grading.judge.server"]
        if sandbox_disabled():
            return JudgeServer(argv, self._scratch, {**os.environ, "MPLBACKEND": "Agg"})
        files = {f"{learners.RELEASE_INSIDE}/{p.name}": str(p) for p in sorted(self.release.glob("*.ipynb"))}
        sandbox = Sandbox(files=files, writable={SCRATCH_INSIDE: str(self._scratch)},
                          limits=Limits(cores=CHECKS_AT_ONCE))
        resources.enter_context(sandbox.bounded())
        return JudgeServer(sandbox.command(argv), None, {})

    def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self._resources.close()
        if self._left == 0:
            private.remove(self._filesystem)


class OneCheck:
    """One check, from the grader's side: its scratch folder, the processes it starts for the judge,
    and its phase (course.grading.judge.phases), held from its start until its processes are gone."""

    def __init__(self, group: CheckGroup, job: dict, number: int) -> None:
        self.group, self.job, self.number = group, job, number
        self.host = group._scratch / f"check-{number}"
        self.host.mkdir()
        self.inside = str(self.host) if sandbox_disabled() else f"{SCRATCH_INSIDE}/check-{number}"
        job["scratch"] = self.inside
        self.started: dict[int, Any] = {}
        self.answered = frozenset(job["answers"]).union(job["loaded"]) & set(ANSWERS)
        self.waited = 0.0  # seconds spent starting learner processes (they have limits of their own) or at the gate
        self.phase, self.held = VISIBLE, None

    def start_learner(self, what: str) -> tuple[Any, socket.socket, list]:
        group, began = self.group, time.monotonic()
        try:
            tripwired = self.answered if what == self.job["what"] else IMPLEMENTATION
            learner, wire_end, report = learners.start(what, tripwired, group.submitted, group.release,
                                                       (self.host, self.inside), group.cell_seconds, group._rooms,
                                                       races=bool(self.job.get("races")))
        finally:
            self.waited += time.monotonic() - began
        if what == self.job["what"] and self.phase == VISIBLE:  # what the cells printed: no hidden input near
            group.reports.setdefault(self.job["notebook"], report)
        if what == self.job["what"]:
            seen = group.seen.setdefault(self.job["notebook"], {})
            for run in report:
                seen.setdefault(cell_key(run), set()).update(run.get("findings") or [])
        # The judge needs only how answer cells ended (messages.unwritten), not what cells printed:
        # a report of every cell's output is unbounded, and one broker message is not.
        cells = set(self.job["answers"].values())
        return learner, wire_end, [{key: str(run.get(key, ""))[:300] for key in ("label", "ename", "evalue")}
                                   for run in report if run.get("ename") and run.get("label") in cells]

    def start_worker(self, argv: list[str]) -> Any:
        group = self.group
        log = group._logs / f"check-{self.number}-worker-{len(self.started) + 1}.log"
        return learners.start_worker(argv, of_worker(argv), group.submitted, group.release, (self.host, self.inside),
                                     log, group._rooms)

    def enter(self, phase: str) -> None:
        """Hold `phase` (from now on, if not already)."""
        if self.held is not None and phase == self.phase:
            return
        began = time.monotonic()
        try:
            self.leave()
            self.phase, self.held = phase, gate().enter(phase, PHASE_WAIT)
        finally:
            self.waited += time.monotonic() - began

    def leave(self) -> None:
        if self.held is not None:
            gate().leave(self.held)
            self.held = None

    def close_processes(self) -> None:
        for process in self.started.values():
            process.close()


def cell_key(run: dict) -> str:
    """A cell of a learner process's report, the same in every learner process of its notebook."""
    return str(run.get("id") or run.get("label"))


def read_verdict(verdict: Any) -> dict:
    """The judge's verdict, checked for shape (a judge that sent none was killed or crashed)."""
    try:
        return {"passed": verdict["passed"] is True, "ename": str(verdict.get("ename", ""))[:80],
                "message": str(verdict.get("message", ""))[:8192], "findings": findings.known(verdict.get("findings")),
                "retell": verdict.get("retell") is True}
    except (KeyError, TypeError, AttributeError):
        return failure("GraderError", "the judge ended without a verdict (its process was killed or crashed)")


def failure(ename: str, message: str) -> dict:
    return {"passed": False, "ename": ename, "message": message, "findings": sorted(findings.of_grader(ename))}


def hide_region(source: str, placeholder: str | None = PLACEHOLDER) -> str:
    """Every hidden-test region (an unclosed one runs to the end) replaced by `placeholder`, with
    its marker's indent, or by nothing."""
    lines, hiding = [], False
    for line in source.split("\n"):
        if BEGIN_HIDDEN in line:
            hiding = True
            lines += [] if placeholder is None else [line[: len(line) - len(line.lstrip())] + placeholder]
        elif hiding:
            hiding = END_HIDDEN not in line
        else:
            lines.append(line)
    return "\n".join(lines)


def cell_text(source) -> str:
    """Cell sources are stored as one string or as a list of lines."""
    return source if isinstance(source, str) else "".join(source)
