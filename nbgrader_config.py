"""nbgrader settings for this course; the logic lives in course.grading.nbgrader.config."""

from pathlib import Path

from course.grading.nbgrader.config import configure

configure(c, Path(__file__).resolve().parent)  # noqa: F821 (traitlets provides `c`)
