"""`course`: the everyday jobs of the course from a terminal.

Runtime jobs (start the supplier, queue work, run one worker pass, show status) and the
instructor's grading jobs (release, autograde, feedback, grades). Each command is a thin shell
around a library function, so the notebooks and tests exercise the same code.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from reference_organizations.store.agent import OfflineShopModel, seed_lucy
from reference_organizations.store.assistant import run_once
from reference_organizations.store.supplier import SupplierClient
from sovereign_agent.assistant_work import enqueue as enqueue_work
from sovereign_agent.database import Database
from sovereign_agent.records import spending_policy
from sovereign_agent.status import format_report, status_report

DATABASE = click.option(
    "--database", type=click.Path(dir_okay=False, path_type=Path), required=True, help="The shop's SQLite file."
)


@click.group()
def main() -> None:
    """Recover work after a process crash: runtime and grading commands."""


@main.command()
@click.option("--database", "ledger", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The supplier's own SQLite ledger.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True)
@click.option("--ready", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="File to write (atomically) once listening.")
def supplier(ledger: Path, port: int, ready: Path) -> None:
    """Run the HTTP supplier in the foreground (127.0.0.1 only)."""
    from reference_organizations.store import supplier as supplier_process

    sys.exit(supplier_process.main(["--database", str(ledger), "--port", str(port), "--ready", str(ready)]))


@main.command()
@DATABASE
@click.argument("origin")
@click.argument("session")
@click.argument("prompt")
@click.option("--subject", default="", help="Product the assignment is about, e.g. SKU-VANILLA.")
def enqueue(database: Path, origin: str, session: str, prompt: str, subject: str) -> None:
    """Queue an assignment (idempotent per ORIGIN)."""
    with Database(database) as db:
        seed_lucy(db)
        try:
            click.echo(enqueue_work(db, origin, session, prompt, subject=subject))
        except ValueError as error:
            raise click.BadParameter(str(error)) from None


@main.command()
@DATABASE
@click.option("--supplier-ready", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The supplier's ready file; without it, orders are drafted but never sent.")
@click.option("--owner", default=None, help="Owner label for the claim (default: a fresh one).")
@click.option("--operator", "operators", multiple=True, default=("lucy",), show_default=True)
def worker(database: Path, supplier_ready: Path | None, owner: str | None, operators: tuple[str, ...]) -> None:
    """Run one worker pass with the offline shop model and print its outcome as JSON."""
    client = SupplierClient.from_ready_file(supplier_ready) if supplier_ready else None
    with Database(database) as db:
        seed_lucy(db)
        policy = spending_policy(db.connection, operators)
        outcome = run_once(db, OfflineShopModel(), owner=owner, policy=policy, supplier=client)
    click.echo(json.dumps(outcome, indent=2, sort_keys=True))


@main.command()
@DATABASE
@click.option("--supplier-ready", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(database: Path, supplier_ready: Path | None, as_json: bool) -> None:
    """Health, progress, cancellation and external completion: four separate answers."""
    client = SupplierClient.from_ready_file(supplier_ready) if supplier_ready else None
    report = status_report(database, supplier=client)  # read-only: it also describes a database it would refuse
    click.echo(json.dumps(report, indent=2, sort_keys=True) if as_json else format_report(report))


def _use_gradebook(context, parameter, url):
    """--db-url: every nbgrader step of this command (and nbgrader_config.py) uses that gradebook."""
    if url:
        import os

        from course.grading.nbgrader.gradebook import DB_URL_VARIABLE

        os.environ[DB_URL_VARIABLE] = url
    return url


@contextmanager
def _one_sentence(*expected: type[BaseException]) -> Iterator[None]:
    """An expected failure is told in its own sentence, not as a traceback whose tail hides the cause."""
    try:
        yield
    except expected as error:
        raise click.ClickException(str(error)) from None


DB_URL = click.option(
    "--db-url", default=None, expose_value=False, callback=_use_gradebook, envvar="COURSE_DB_URL",
    help="The gradebook's SQLAlchemy URL, e.g. postgresql://user@host/grades (default: gradebook.db here).")


COURSE_ROOT = click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("."),
                           show_default=True, help="The course folder (holds nbgrader_config.py).")


@main.command()
@COURSE_ROOT
@click.option("--no-verify", is_flag=True,
              help="Skip grading the solutions through the judge first (they must earn every automatic point).")
def release(root: Path, no_verify: bool) -> None:
    """Generate the learner release (notebooks/ch12) from the solutions, outputs stripped, once the
    solutions, graded through the judge, earn every automatic point (a minute or two)."""
    from course.grading.classes import solutions_check
    from course.grading.nbgrader import commands

    with _one_sentence(commands.NbgraderError, solutions_check.SolutionsFail):
        paths = commands.release(root=root) if no_verify else solutions_check.verified_release(root)
    click.echo(f"Released {len(paths)} notebook(s) into {paths[0].parent if paths else root}: "
               f"{', '.join(p.name for p in paths)}.")


@main.command("check-authoring")
@click.argument("solutions", type=click.Path(exists=True, file_okay=False, path_type=Path),
                default=Path("solutions/ch12"))
@click.option("--guide", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The instructor guide whose generated parts to compare (default: docs/instructor-guide.md).")
def check_authoring(solutions: Path, guide: Path | None) -> None:
    """Before grading: what in the solutions would break under the judge (one finding a line, exit 1)."""
    from course.authoring import check as authoring

    try:
        found = authoring.check(solutions, guide)
    except authoring.BadInput as error:
        raise click.BadParameter(str(error), param_hint="SOLUTIONS") from None
    for finding in found:
        click.echo(finding)
    click.echo(f"{len(found)} finding(s) in {solutions}" if found else f"No findings in {solutions}.", err=True)
    sys.exit(1 if found else 0)


@main.command()
@click.option("--submitted", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Folder of submissions (default: ./submitted).")
@click.option("--no-sandbox", is_flag=True,
              help="Grade without isolating learner code (bubblewrap). Every report line will say UNSANDBOXED.")
@click.option("--force", is_flag=True,
              help="Regrade submissions that were graded before (a newer one is regraded anyway).")
@click.option("--student", "students", multiple=True, metavar="ID",
              help="Grade only this student's submission (repeat for more).")
@click.option("--jobs", type=click.IntRange(1), default=None,
              help="Students graded at once on this machine (default: the number of cores).")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="Grade on a Dask cluster instead (needs the [cluster] extra); results are recorded here.")
@COURSE_ROOT
@DB_URL
def autograde(submitted: Path | None, no_sandbox: bool, force: bool, students: tuple[str, ...], jobs: int | None,
              scheduler: str | None, root: Path) -> None:
    """Autograde every submission, each in its own sandbox; print and save (grading-report.csv) a report."""
    from course.grading.classes.autograde import autograde as grade_class
    from course.grading.nbgrader import commands
    from course.grading.sandbox.bubblewrap import SandboxUnavailable

    with _one_sentence(SandboxUnavailable, commands.NbgraderError, RuntimeError):
        grade_class(submitted, force=force, sandbox=not no_sandbox, jobs=jobs, scheduler=scheduler,
                    root=root, only=students)


@main.command()
@COURSE_ROOT
@DB_URL
def feedback(root: Path) -> None:
    """Feedback HTML for every graded student (hidden tests are in none)."""
    from course.grading.nbgrader import commands

    with _one_sentence(commands.NbgraderError):
        paths = commands.feedback(root=root)
    students = sorted({p.parent.parent.name for p in paths})
    click.echo(f"Feedback for {len(students)} student(s) in {Path(root).resolve() / 'feedback'}: {len(paths)} HTML file(s).")


@main.command()
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("grades.csv"),
              show_default=True)
@COURSE_ROOT
@DB_URL
def grades(output: Path, root: Path) -> None:
    """Export the gradebook as CSV, one row per student, sorted by student, with what still waits (and
    write grading-report.csv again from the same gradebook)."""
    from course.grading.classes import report
    from course.grading.nbgrader import commands

    with _one_sentence(commands.NbgraderError):
        path = report.export(output, Path(root))
    click.echo(f"Grades of the gradebook written to {path}.")


@main.command()
@click.option("--output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for ch12-checks.csv, .png and .html (default: analytics/ in the course folder).")
@COURSE_ROOT
@DB_URL
def analytics(output: Path | None, root: Path) -> None:
    """What the class got wrong: each check's pass rate, the scores, grading errors and limits, the
    misconception an often-failed check points to; a CSV, a figure, a page and a summary (exit 2: nothing graded)."""
    from course.grading.classes import analytics as class_analytics

    try:
        result, paths = class_analytics.analyse(root, output)
    except class_analytics.NoGrades as error:
        failure = click.ClickException(str(error))
        failure.exit_code = 2
        raise failure from None
    click.echo("\n".join(class_analytics.summary(result, paths)))


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="The course folder.")
@click.argument("jupyter_args", nargs=-1, type=click.UNPROCESSED)
def lab(root: Path, jupyter_args: tuple[str, ...]) -> None:
    """JupyterLab on your own working copy (my-work/ch12), created on first use."""
    import os

    from course.lab.workspace import jupyter_lab, working_copy

    folder, copied = working_copy(root)
    click.echo(f"Your work lives in {folder}" + (f" (copied now: {', '.join(copied)})" if copied else ""))
    click.echo("To start a notebook over: delete it there and run `make lab` again.")
    command, env = jupyter_lab(root, instructor=False, extra=list(jupyter_args))
    os.execve(command[0], command, env)


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="The course folder (holds nbgrader_config.py).")
@click.argument("jupyter_args", nargs=-1, type=click.UNPROCESSED)
def formgrader(root: Path, jupyter_args: tuple[str, ...]) -> None:
    """JupyterLab for instructors, rooted at the course folder, opening nbgrader's formgrader."""
    import os

    from course.lab.workspace import jupyter_lab

    command, env = jupyter_lab(root, instructor=True, extra=list(jupyter_args))
    os.execve(command[0], command, env)


@main.command()
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="The course folder whose processes to end.")
def cleanup(root: Path) -> None:
    """End checkpoint workers and suppliers started from this course folder (nobody else's)."""
    from course.lab.cleanup import cleanup as end_processes

    ended = end_processes(root)
    for process in ended:
        click.echo(f"{process.how} pid {process.pid}: {process.command[:120]}")
    click.echo(f"{len(ended)} process(es) from {root.resolve()} ended.")
