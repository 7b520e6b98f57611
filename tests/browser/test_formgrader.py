"""Formgrader as an instructor meets it: `make formgrader` (the course's own command), a real
server rooted at the course folder, chromium. It must list the assignment and show a
submission's written answers for manual grading, and the instructor's Lab opens with no news pop-up."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course.lab.workspace import jupyter_lab

from .conftest import REPO_ROOT, LabServer, copy_course
from .test_lab import screenshot

pytestmark = pytest.mark.browser

WRITTEN_ANSWER = "An expired lease only says that the holder's bounded time is over"  # 01b_expiry, model answer
ERROR_PAGE = "Sorry, the formgrader encountered an error"


def graded_course(root: Path) -> Path:
    """A course folder with the assignment released and one autograded submission (01b_expiry only)."""
    copy_course(root, "solutions", "notebooks", "jupyter")
    env = jupyter_lab(root, instructor=True)[1]  # the environment `make formgrader` gives nbgrader
    submission = root / "submitted" / "alice" / "ch12"
    submission.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "solutions" / "ch12" / "01b_expiry.ipynb", submission)  # answers written
    for step in (["generate_assignment", "ch12", "--force"],
                 ["autograde", "ch12", "--student=alice", "--notebook=01b_expiry", "--force"]):
        done = subprocess.run([sys.executable, "-m", "nbgrader", *step], cwd=root, capture_output=True, text=True,
                              timeout=600, env=env)
        assert done.returncode == 0, f"nbgrader {step[0]} failed:\n{(done.stdout + done.stderr)[-3000:]}"
    return root


def test_formgrader_lists_the_assignment_and_shows_written_answers(tmp_path, page, output_path):
    from nbgrader.api import Gradebook

    root = graded_course(tmp_path / "course")
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        submission_id = gradebook.find_submission_notebook("01b_expiry", "ch12", "alice").id
    with LabServer(tmp_path / "server", course=root, instructor=True).running() as server:
        page.goto(f"{server.url}/?token={server.token}", timeout=90_000)  # what `make formgrader` opens
        page.get_by_text("ch12", exact=True).first.wait_for(timeout=60_000)
        assert "/formgrader" in page.url, f"`make formgrader` opened {page.url}, not the formgrader"
        screenshot(page, output_path, "formgrader-assignments.png")
        assert ERROR_PAGE not in page.content()

        page.goto(f"{server.url}/formgrader/submissions/{submission_id}/?token={server.token}", timeout=90_000)
        answer = page.get_by_text(WRITTEN_ANSWER).first
        answer.wait_for(timeout=60_000)
        answer.scroll_into_view_if_needed()
        screenshot(page, output_path, "formgrader-written-answer.png")
        assert ERROR_PAGE not in page.content()
        assert "course directory root is not a subdirectory" not in server.log_tail(400)

        page.goto(f"{server.url}/lab?token={server.token}", timeout=90_000)  # the instructor's own Lab
        page.locator(".jp-LabShell").wait_for(timeout=60_000)
        page.get_by_text("Launcher", exact=True).first.wait_for(timeout=60_000)
        page.wait_for_timeout(3000)  # the pop-up comes once Lab has started its plugins
        screenshot(page, output_path, "formgrader-lab.png")
        assert page.get_by_text("official Jupyter news").count() == 0, "Lab's news pop-up greets the instructor"
