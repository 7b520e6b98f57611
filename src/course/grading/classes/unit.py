"""The unit of class-scale grading: one student, graded in their sandbox, plain data in and out.

Input: the assignment's definition (`Assignment`: the course's nbgrader_config.py, the release
notebooks and a gradebook holding only the assignment, hidden tests included) and one student's
submitted files (`Submission`), all as bytes. Output (`grade`): a dict of plain values: per-cell
scores and comments, the autograded notebooks as bytes, what grading saw (the integrity report's
findings, reasons and sentence) and the seconds it took.

The unit needs the course package installed (and bubblewrap), nothing else: no shared file system
and no access to the real gradebook. It builds a private scratch course in a temporary folder,
runs nbgrader's Autograde converter in this process (the course's preprocessors: hidden tests
stripped, kernel sandboxed, checks decided outside the kernel, gradebook verified), reads the
scratch gradebook back and deletes the folder. Only the trusted coordinator
(course.grading.classes.coordinator) writes results into the real gradebook.

`run` is what a worker process calls (a local process pool or a Dask worker): nbgrader is
imported once per worker, and after each student every process grading left behind is killed.
One process grades all of a student's notebooks, so the checks of every notebook start at once, in
one check server, before the first kernel: a notebook then waits for its checks only if they are
still running.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from types import SimpleNamespace
from pathlib import Path

from course.grading.classes import report as integrity
from course.grading.sandbox import reaper
from course.grading.sandbox.bubblewrap import NO_SANDBOX_VARIABLE

GRADEBOOK = "gradebook.db"


@dataclass(frozen=True)
class Assignment:
    """What every student is graded against; made by the coordinator (record.definition)."""

    name: str
    config: bytes  # the course's nbgrader_config.py
    release: dict[str, bytes]  # notebook file name -> the released notebook
    gradebook: bytes  # an SQLite gradebook holding this assignment only (no student data)


@dataclass(frozen=True)
class Submission:
    """One student's submitted folder: relative path -> bytes (notebooks, timestamp.txt)."""

    student: str
    files: dict[str, bytes]


def grade(assignment: Assignment, submission: Submission, sandbox: bool = True) -> dict:
    """Autograde one student in a private scratch course; return the outcome as plain data."""
    start = time.monotonic()
    os.environ[NO_SANDBOX_VARIABLE] = "" if sandbox else "1"  # read by the preprocessors and checkers
    with tempfile.TemporaryDirectory(prefix="ch12-unit-") as scratch:
        root = Path(scratch)
        _lay_out(root, assignment, submission)
        notebooks = sorted(Path(name).stem for name in submission.files if name.endswith(".ipynb") and "/" not in name)
        failures = _autograde(root, assignment.name, submission.student, notebooks)
        outcome = _read_back(root, assignment.name, submission.student, failures)
        autograded = root / "autograded" / submission.student / assignment.name
        outcome["findings"] = integrity.findings(autograded)
        outcome["autograded"] = {str(p.relative_to(autograded)): p.read_bytes()
                                 for p in sorted(autograded.rglob("*")) if p.is_file()}
    outcome.update(student=submission.student, assignment=assignment.name, sandboxed=sandbox,
                   seconds=round(time.monotonic() - start, 1))
    outcome["report"] = integrity.reason(SimpleNamespace(**outcome))  # the integrity report's sentence
    return outcome


def run(assignment: Assignment, submission: Submission, sandbox: bool = True) -> dict:
    """`grade`, then wait for its checks, kill every process it left behind and remove the
    sandboxes' cgroups (a worker grades one student at a time)."""
    from course.grading.judge import checks
    from course.grading.sandbox.cgroup import Cgroup

    reaper.become_subreaper()
    try:
        return grade(assignment, submission, sandbox)
    finally:
        checks.wait_for_all()
        reaper.kill_all_descendants()
        Cgroup.remove_left()


def warm_up() -> None:
    """Pay nbgrader's and Jupyter's import time once, when a worker starts."""
    reaper.become_subreaper()
    import nbgrader.converters  # noqa: F401
    import nbgrader.preprocessors  # noqa: F401

    import course.grading.nbgrader.preprocessors  # noqa: F401

    _check_metadata_schema_once()
    _one_engine_per_gradebook()


def _check_metadata_schema_once() -> None:
    """nbgrader validates each cell's metadata with `jsonschema.validate`, which first checks the
    schema itself, every time: some 350 cells a student, 0.6 s of the 2.4 s a worker spends on one.
    Here the schema is checked once per worker; each cell is validated as before (the same error,
    jsonschema's best match, for an invalid one)."""
    import jsonschema
    from nbgrader.nbgraderformat import common

    checked: dict[int, jsonschema.protocols.Validator] = {}

    def validate(instance, schema) -> None:
        if id(schema) not in checked:
            kind = jsonschema.validators.validator_for(schema)
            kind.check_schema(schema)
            checked[id(schema)] = kind(schema)
        error = jsonschema.exceptions.best_match(checked[id(schema)].iter_errors(instance))
        if error is not None:
            raise error

    common.jsonschema = SimpleNamespace(validate=validate)


def _one_engine_per_gradebook() -> None:
    """nbgrader opens a new SQLAlchemy engine for each `Gradebook(...)`, some 30 a student, and an
    engine's cache of compiled queries goes with it: every query was compiled again each time.
    Here a worker keeps the engine of the gradebook it is grading into and hands it out again
    (`Gradebook.close` still disposes of its connections). That gradebook is always the student's
    scratch copy (a worker cannot reach the real one), so its commits, some 130 a student, skip
    the disk flush: nothing in it has to survive a power cut."""
    from nbgrader import api
    from sqlalchemy import event

    create_engine, engines = api.create_engine, {}

    def one_engine(url, **options):
        key = (str(url), tuple(sorted(options.items())))
        if key not in engines:
            engines.clear()  # the previous student's scratch gradebook is gone
            engine = engines[key] = create_engine(url, **options)
            if engine.dialect.name == "sqlite":
                event.listen(engine, "connect", _without_flush)
        return engines[key]

    api.create_engine = one_engine


def _without_flush(connection, _record) -> None:
    connection.execute("PRAGMA synchronous=OFF")


def _lay_out(root: Path, assignment: Assignment, submission: Submission) -> None:
    (root / "nbgrader_config.py").write_bytes(assignment.config)
    (root / GRADEBOOK).write_bytes(assignment.gradebook)
    release = root / "notebooks" / assignment.name
    release.mkdir(parents=True)
    for name, data in assignment.release.items():
        (release / _safe(name)).write_bytes(data)
    folder = root / "submitted" / submission.student / assignment.name
    folder.mkdir(parents=True)
    for name, data in submission.files.items():
        path = folder / _safe(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _safe(name: str) -> str:
    """A relative path that stays inside its folder."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        raise ValueError(f"refusing file name {name!r}")
    return name


def _autograde(root: Path, assignment: str, student: str, notebooks: list[str]) -> dict[str, str]:
    """Grade the whole submission; return {notebook: why nbgrader could not grade it}.

    On a failure nbgrader deletes the student's autograded folder and skips the remaining
    notebooks, so then grade notebook by notebook to keep the rest and pin the failure down.
    """
    submitted = (root / "submitted" / student / assignment).resolve()
    try:
        _start_checks(root, assignment, student, notebooks)
        error = _convert(root, assignment, student, "*")
    finally:
        _drain(submitted)
    if error is None:
        return {}
    if len(notebooks) <= 1:
        return {name: error for name in notebooks or ["*"]}
    failures = {}
    for notebook in notebooks:
        error = _convert(root, assignment, student, notebook)
        if error is not None:
            failures[notebook] = error
    return failures


def _config(root: Path, assignment: str, student: str, notebook: str):
    """The course's nbgrader configuration, pointed at the scratch course and its gradebook."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{root / GRADEBOOK}"  # the scratch copy, never the real one
    config.CourseDirectory.assignment_id = assignment
    config.CourseDirectory.student_id = student
    config.CourseDirectory.notebook_id = notebook
    return config


def _start_checks(root: Path, assignment: str, student: str, notebooks: list[str]) -> None:
    """Start every notebook's checks now, in one judge sandbox for the student; nbgrader's
    StartChecks picks them up (preprocessors.PRESTARTED). A notebook whose checks cannot be built
    here (one the assignment does not have) is left to StartChecks."""
    from nbgrader.api import Gradebook
    from nbgrader.coursedir import CourseDirectory

    from course.grading.judge import checks
    from course.grading.nbgrader.preprocessors import PRESTARTED, StartChecks

    config = _config(root, assignment, student, "*")
    coursedir, starter = CourseDirectory(config=config), StartChecks(config=config)
    submitted = Path(coursedir.format_path(coursedir.submitted_directory, student, assignment)).resolve()
    release = Path(coursedir.format_path(coursedir.release_directory, ".", assignment))
    built, sources = {}, {}
    with Gradebook(config.CourseDirectory.db_url) as gb:
        for notebook in notebooks:
            try:
                full = {c.name: c.source for c in gb.find_notebook(notebook, assignment).source_cells}
                built[notebook], sources[notebook] = checks.notebook_jobs(notebook, release, full)
            except Exception:  # an unknown notebook: nbgrader reports it in its own words
                continue
    for notebook, pending in checks.start_checks(built, submitted, release, starter.timeout, starter.cell_timeout).items():
        PRESTARTED[(submitted, notebook)] = (pending, sources[notebook])


def _drain(submitted: Path) -> None:
    """Forget the checks nbgrader never picked up (a notebook it failed on); `run` waits for them."""
    from course.grading.nbgrader.preprocessors import PRESTARTED

    for key in [key for key in PRESTARTED if key[0] == submitted]:
        PRESTARTED.pop(key)


def _convert(root: Path, assignment: str, student: str, notebook: str) -> str | None:
    """nbgrader's Autograde converter, in this process; None, or why it failed."""
    from nbgrader.converters import Autograde
    from nbgrader.coursedir import CourseDirectory

    from course.grading.classes.report import failure_reason

    config = _config(root, assignment, student, notebook)
    coursedir = CourseDirectory(config=config)
    converter = Autograde(coursedir=coursedir, config=config)
    converter.force = True
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("[Autograde | %(levelname)s] %(message)s"))
    logger = converter.log
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        converter.start()
        return None
    except Exception:  # nbgrader logged why (NbGraderException, or a preprocessor's error)
        return failure_reason(log.getvalue())
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _read_back(root: Path, assignment: str, student: str, failures: dict[str, str]) -> dict:
    """Scores and comments from the scratch gradebook; the parts of unfinished notebooks zeroed."""
    from nbgrader.api import Gradebook, MissingEntry

    from course.grading.classes.report import timeout_reason

    with Gradebook(f"sqlite:///{root / GRADEBOOK}") as gb:
        max_score = gb.find_assignment(assignment).max_score
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return {"score": 0.0, "max_score": max_score, "timestamp": None, "notebooks": {},
                    "reasons": {"*": failures.get("*", "not graded")}}
        reasons, notebooks = {}, {}
        for notebook in submission.notebooks:
            autograded = root / "autograded" / student / assignment / f"{notebook.name}.ipynb"
            why = failures.get(notebook.name)
            if why is None and autograded.exists():
                why = timeout_reason(autograded)
            for grade in notebook.grades:
                if why is not None and grade.cell_type == "code":  # manually graded answers keep waiting
                    if grade.auto_score is None:  # nbgrader stopped before scoring it
                        grade.auto_score, grade.needs_manual_grade = 0.0, False
                    if grade.score == 0:
                        reasons[f"{notebook.name}/{grade.name}"] = why
            notebooks[notebook.name] = {
                "late_submission_penalty": notebook.late_submission_penalty,
                "grades": {g.name: {"auto_score": g.auto_score, "needs_manual_grade": g.needs_manual_grade}
                           for g in notebook.grades},
                "comments": {c.name: c.auto_comment for c in notebook.comments},
            }
        gb.db.commit()
        return {"score": submission.score, "max_score": submission.max_score,
                "timestamp": submission.timestamp.isoformat() if submission.timestamp else None,
                "notebooks": notebooks, "reasons": reasons}
