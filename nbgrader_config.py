"""nbgrader settings for this course; the logic lives in course.grading.config."""

from pathlib import Path

from course.grading.config import configure

configure(c, Path(__file__).resolve().parent)  # noqa: F821 (traitlets provides `c`)
