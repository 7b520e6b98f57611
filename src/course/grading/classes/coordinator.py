"""The trusted side of class grading: hand out grading units, record what comes back.

The coordinator (`course autograde`) alone touches the gradebook. It packs the assignment once
(`definition`) and each student's folder (`submission`), sends both to workers (`LocalWorkers`, a
process pool; `DaskWorkers`, a cluster) and records each outcome as it arrives (`record`).
Recording sets values and never adds, so recording an outcome twice changes nothing.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import closing
from datetime import datetime
from pathlib import Path

from course.grading.classes.unit import Assignment, Submission, run, warm_up
from course.grading.sandbox import private

def definition(root: Path, url: str, assignment: str) -> Assignment:
    """The assignment as the unit needs it: config, release, and a gradebook holding only it."""
    from nbgrader.api import Gradebook
    from sqlalchemy import text

    root = Path(root)
    release = {p.name: p.read_bytes() for p in sorted((root / "notebooks" / assignment).glob("*.ipynb"))}
    with tempfile.TemporaryDirectory(prefix="definition-", dir=private.folder()) as scratch:
        copy = Path(scratch) / "gradebook.db"
        with Gradebook(url) as source:
            found = source.find_assignment(assignment)
            _stamp_schema(copy, source)
            with Gradebook(f"sqlite:///{copy}", found.course_id) as target:
                target.db.execute(text("PRAGMA synchronous=OFF"))  # a scratch file: nbgrader commits per cell
                target.update_or_create_assignment(assignment, duedate=found.duedate)
                for notebook in found.notebooks:
                    target.update_or_create_notebook(notebook.name, assignment)
                    for cell in notebook.grade_cells:
                        target.update_or_create_grade_cell(cell.name, notebook.name, assignment,
                                                           max_score=cell.max_score, cell_type=cell.cell_type)
                    for cell in notebook.solution_cells:
                        target.update_or_create_solution_cell(cell.name, notebook.name, assignment)
                    for cell in notebook.task_cells:
                        target.update_or_create_task_cell(cell.name, notebook.name, assignment,
                                                          max_score=cell.max_score, cell_type=cell.cell_type)
                    for cell in notebook.source_cells:
                        target.update_or_create_source_cell(
                            cell.name, notebook.name, assignment, cell_type=cell.cell_type, locked=cell.locked,
                            source=cell.source, checksum=cell.checksum)
        gradebook = copy.read_bytes()
    return Assignment(assignment, (root / "nbgrader_config.py").read_bytes(), release, gradebook)


def _stamp_schema(path: Path, source) -> None:
    """Stamp a new gradebook with the source's schema version (else nbgrader runs `alembic heads`, 3 s)."""
    from sqlalchemy import text

    version = source.db.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        db.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (version,))


def submission(folder: Path, student: str) -> Submission:
    """A student's submitted folder as bytes; links are not followed (they could point anywhere)."""
    files = {}
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and not path.is_symlink() and ".ipynb_checkpoints" not in path.parts:
            files[str(path.relative_to(folder))] = path.read_bytes()
    return Submission(student, files)


def record(url: str, outcome: dict, root: Path) -> None:
    """Write one student's outcome into the gradebook and autograded/; every value is set, none
    added to, so recording the same outcome twice changes nothing.
    """
    from nbgrader.api import Gradebook

    student, assignment = outcome["student"], outcome["assignment"]
    if outcome["notebooks"]:
        with Gradebook(url) as gb:
            gb.update_or_create_student(student)
            stamp = {"timestamp": datetime.fromisoformat(outcome["timestamp"])} if outcome["timestamp"] else {}
            gb.update_or_create_submission(assignment, student, **stamp)
            for name, graded in outcome["notebooks"].items():
                notebook = gb.find_submission_notebook(name, assignment, student)
                notebook.late_submission_penalty = graded["late_submission_penalty"]
                for grade in notebook.grades:
                    if grade.name in graded["grades"]:
                        grade.auto_score = graded["grades"][grade.name]["auto_score"]
                        grade.needs_manual_grade = graded["grades"][grade.name]["needs_manual_grade"]
                for comment in notebook.comments:
                    if comment.name in graded["comments"]:
                        comment.auto_comment = graded["comments"][comment.name]
            gb.db.commit()
    if not outcome["autograded"]:
        return  # nbgrader wrote nothing: keep what an earlier grading left
    folder = Path(root) / "autograded" / student / assignment
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = folder.parent / f".{assignment}-{uuid.uuid4().hex[:8]}"
    for relative, data in outcome["autograded"].items():
        path = fresh / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    shutil.rmtree(folder, ignore_errors=True)
    fresh.rename(folder)


class LocalWorkers:
    """`jobs` worker processes on this machine, each paying nbgrader's start-up once."""

    def __init__(self, jobs: int) -> None:
        self._pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, mp_context=multiprocessing.get_context("spawn"), initializer=warm_up)
        for _ in range(jobs):  # the pool starts a process per task it has no idle worker for: all of them, now
            self._pool.submit(os.getpid)

    def grade(self, assignment: Assignment, submissions: list[Submission], sandbox: bool) -> Iterator[tuple[str, dict | BaseException]]:
        """(student, outcome or the error that stopped its grading), in the order they finish."""
        futures = {self._pool.submit(run, assignment, s, sandbox): s.student for s in submissions}
        for future in concurrent.futures.as_completed(futures):
            error = future.exception()
            yield futures[future], error if error is not None else future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class DaskWorkers:
    """A Dask cluster's workers (`dask worker --nthreads 1`). A task whose worker dies is rescheduled
    by the scheduler; one that raises is retried once; then the student is reported as not graded.
    """

    def __init__(self, address: str) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise RuntimeError("--scheduler needs Dask: pip install -e '.[cluster]'") from None
        self._client = Client(address, timeout="30s")

    def grade(self, assignment: Assignment, submissions: list[Submission], sandbox: bool) -> Iterator[tuple[str, dict | BaseException]]:
        """(student, outcome or error), as they finish. A task cancelled because the scattered
        assignment died with a worker (it cannot be computed again) is sent once more, with the
        assignment scattered again."""
        from distributed import as_completed

        waiting = list(submissions)
        for last in (False, True):
            shared = self._client.scatter(assignment, broadcast=True)
            futures = {self._client.submit(run_on_dask_worker, shared, s, sandbox, key=f"grade-{s.student}-{uuid.uuid4().hex}",
                                           pure=False, retries=1): s for s in waiting}
            waiting = []
            for future in as_completed(futures):
                try:  # a result held by a worker that has died since is computed again; `result` waits for it
                    outcome = future.result()
                except concurrent.futures.CancelledError as error:  # its input was lost with a worker
                    if not last:
                        waiting.append(futures[future])
                        continue
                    outcome = error
                except Exception as error:  # the task's own error, or KilledWorker after its retries
                    outcome = error
                yield futures[future].student, outcome
            if not waiting:
                return

    def close(self) -> None:
        self._client.close()


def run_on_dask_worker(assignment: Assignment, submission: Submission, sandbox: bool) -> dict:
    """`unit.run` on a Dask worker that grades one student at a time (nbgrader changes the working
    folder, and the unit kills what the previous student left running).
    """
    from distributed import get_worker

    threads = get_worker().state.nthreads
    if threads != 1:
        raise RuntimeError(f"this Dask worker runs {threads} tasks at once; start grading workers with --nthreads 1")
    return run(assignment, submission, sandbox)
