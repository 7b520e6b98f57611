"""The course's nbgrader settings, built from a root path so tests can grade a toy course."""

from pathlib import Path

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import GetGrades

from course.grading.feedback import HideHiddenTests

ASSIGNMENT = "ch12"


def configure(c, root):
    """Fill the traitlets config `c` for the course rooted at `root`."""
    root = Path(root).resolve()
    c.CourseDirectory.course_id = "crash-recovery"
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.source_directory = "solutions"
    c.CourseDirectory.release_directory = "notebooks"
    c.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
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
    ]
    # The chapter's notebooks start real worker subprocesses and wait for leases.
    c.Execute.timeout = 120
    c.Execute.interrupt_on_timeout = True
    # Feedback HTML is rendered from the autograded notebook, which holds the hidden tests.
    c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
