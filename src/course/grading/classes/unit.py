"""The unit of class-scale grading: one student in, plain data out.

Input: the assignment (`Assignment`: nbgrader_config.py, the release, a gradebook holding only
the assignment, hidden tests included) and one student's files (`Submission`), as bytes. Output
(`grade`): per-cell scores and comments, the autograded notebooks, what grading saw, the seconds.
It runs nbgrader's Autograde in a private scratch course and never touches the real gradebook:
only the coordinator records. `run` is what a worker calls; afterwards it kills whatever the
student left running.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from types import SimpleNamespace
from pathlib import Path

from course.grading.classes import report as integrity
from course.grading.sandbox import private, reaper
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
    with tempfile.TemporaryDirectory(prefix="unit-", dir=private.folder()) as scratch:
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
    outcome["report"] = integrity.reason(integrity.StudentResult(  # the integrity report's sentence
        submission.student, outcome["score"], outcome["max_score"], outcome["reasons"], findings=outcome["findings"],
        sandboxed=sandbox))
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
        reaper.kill_all_descendants(spare=private.janitors())
        Cgroup.remove_left()


def warm_up() -> None:
    """Pay nbgrader's and Jupyter's import time once, when a worker starts."""
    from course.grading.nbgrader.gradebook import quiet_gradebook

    reaper.become_subreaper()
    import nbgrader.converters  # noqa: F401
    import nbgrader.preprocessors  # noqa: F401

    import course.grading.nbgrader.preprocessors  # noqa: F401

    _check_metadata_schema_once()
    _one_engine_per_gradebook()
    quiet_gradebook()


def _check_metadata_schema_once() -> None:
    """nbgrader's `jsonschema.validate` checks the schema itself for each of some 350 cells a student
    (0.6 s); here once per worker, with the same error for an invalid cell.
    """
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
    """One SQLAlchemy engine per scratch gradebook, not one per `Gradebook(...)` (some 30 a student,
    each compiling its queries again); its commits skip the disk flush (a scratch copy).
    """
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
    """Grade the whole submission; return {notebook: why nbgrader could not grade it}. After a failure
    nbgrader drops the rest, so then grade notebook by notebook to keep the others.
    """
    error = _convert(root, assignment, student, "*")
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
    config.Autograde.post_convert_hook = None  # the coordinator writes the class's report, from the real gradebook
    return config


def _convert(root: Path, assignment: str, student: str, notebook: str) -> str | None:
    """nbgrader's Autograde converter, in this process; None, or why it failed."""
    from nbgrader.converters import Autograde
    from nbgrader.coursedir import CourseDirectory

    from course.grading.nbgrader.commands import cause

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
        return cause(log.getvalue())
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _read_back(root: Path, assignment: str, student: str, failures: dict[str, str]) -> dict:
    """Scores and comments from the scratch gradebook; the parts of unfinished notebooks zeroed."""
    from nbgrader.api import Gradebook, MissingEntry

    from course.grading.classes.report import unfinished

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
                why = unfinished(autograded)
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
