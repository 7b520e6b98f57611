"""The course's nbgrader settings, built from a root path so tests can grade a toy course."""

import os
import stat
from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties, CheckCellMetadata, ClearOutput, GetGrades,
    IgnorePattern, LimitOutput, OverwriteCells, OverwriteKernelspec, SaveAutoGrades,
)

from course.grading.nbgrader.exchange import LinkFreeCollect
from course.grading.nbgrader.gradebook import alembic_on_path, db_url
from course.grading.nbgrader.inert import MakeInert
from course.grading.nbgrader.preprocessors import (
    DecideByJudge, ForgetDuplicateIds, MarkUngraded, PrintableNotebook, StartChecks, StripHiddenTests, VerifyGradebook,
    WrapLongLines,
)

ASSIGNMENT = "ch12"
COURSE_ID = "crash-recovery"
EXCHANGE_VARIABLE = "COURSE_EXCHANGE"  # a hub's shared exchange folder; one machine: exchange/ in the course


def exchange_root(root: Path) -> str:
    """Where nbgrader's exchange is: $COURSE_EXCHANGE, else exchange/ in the course folder."""
    return os.environ.get(EXCHANGE_VARIABLE) or str(Path(root).resolve() / "exchange")


def report_after_each_student(root: Path):
    """nbgrader's post_convert_hook: the report written again, the student just graded read afresh
    (named by the notebooks' folder, submitted/<student>/<assignment>/: the ids nbgrader passes may be globs)."""
    def hook(assignment, student, notebooks):
        from course.grading.classes.report import refresh

        graded = {Path(path).parent.parent.name for path in notebooks if Path(path).parent.name == ASSIGNMENT}
        if graded:
            refresh(root, only=sorted(graded))
    return hook


def configure(c, root):
    """Fill the traitlets config `c` for the course rooted at `root`."""
    root = Path(root).resolve()
    alembic_on_path()  # every nbgrader command loads this file before it may create a gradebook
    c.CourseDirectory.course_id = COURSE_ID
    c.Exchange.root = exchange_root(root)  # release, collect and feedback go through it (see the README)
    c.ExchangeFactory.collect = LinkFreeCollect  # a link in a learner's submission is never followed
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.source_directory = "solutions"
    c.CourseDirectory.release_directory = "notebooks"
    c.CourseDirectory.db_url = db_url(root)  # gradebook.db here, or the server named by COURSE_DB_URL
    # A course folder with its group bit (g+s: the guide's staff group on a hub) is shared by the staff:
    # what nbgrader writes there, and in the exchange, stays theirs to change.
    c.CourseDirectory.groupshared = root.is_dir() and bool(root.stat().st_mode & stat.S_ISGID)
    # Stray run artefacts must not reach the release (or the feedback folder); paired .py
    # files (jupytext) would carry the solutions.
    c.CourseDirectory.ignore = [
        ".ipynb_checkpoints",
        "__pycache__",
        "*.pyc",
        "*.py",
        "feedback",
        "*.sqlite",
        "*.sqlite-wal",
        "*.sqlite-shm",
        "*.db",
        "*.authority",
        # A page a learner adds to a submission would reach autograded/ and feedback/, where formgrader
        # serves it in the instructor's session: a script there would act as the instructor.
        "*.html",
        "*.htm",
        "*.xhtml",
        "*.svg",
        "*.js",
        "*.mjs",
        "*.xml",
    ]
    # Autograde (see course.grading.nbgrader.preprocessors): no kernel runs; each graded cell is decided
    # by the judge, against a learner process that runs the learner's notebook in a sandbox of its own.
    c.OverwriteCells.add_missing_cells = True  # a deleted test cell is restored, and graded
    # The gradebook is checked against the release first: before nbgrader overwrites cells from it,
    # and before any check it holds runs.
    c.Autograde.sanitize_preprocessors = [
        VerifyGradebook, PrintableNotebook, ClearOutput, ForgetDuplicateIds, OverwriteKernelspec, OverwriteCells,
        StripHiddenTests, CheckCellMetadata,
    ]
    c.Autograde.autograde_preprocessors = [
        StartChecks, DecideByJudge, MakeInert, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
        SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
    ]
    # Plain `nbgrader autograde` keeps grading-report.csv as `course autograde` does: after each student.
    c.Autograde.post_convert_hook = report_after_each_student(root)
    c.StartChecks.timeout = 60  # one check, once its learner process has run the notebook's cells (05's: ~10 s)
    # Feedback HTML is rendered from the autograded notebook, which holds no hidden region (StripHiddenTests).
    c.GenerateFeedback.preprocessors = [GetGrades, MarkUngraded, CSSHTMLHeaderPreprocessor, WrapLongLines]
    # Learner content is inert wherever it is shown (course.grading.nbgrader.inert): in the autograded
    # notebook (MakeInert above), and again in every HTML view nbgrader renders from it: formgrader's
    # manual grading and feedback both build an HTMLExporter from this configuration.
    c.HTMLExporter.preprocessors = [MakeInert]
