"""A hostile written answer, opened where people read it: formgrader's manual grading (the
instructor's own Jupyter session, served by the course's `make formgrader` command) and the feedback
HTML, in chromium. The submission (tests/hostile_markup.py) was graded by the real path; each of
its payloads, had it run, would set `window.__pwned`, open a dialog, or call formgrader's API (full
marks for itself) or the contents API (writing pwned.txt). The page is watched for all of it while
its links and buttons are clicked, and the answer's honest text must still be there to read.
"""

from __future__ import annotations

import pytest


from hostile_markup import ANSWER_ID, FILE_LINK, FORM_BUTTON, HONEST, LINK_TEXT, MARKED, graded_course

from .conftest import LabServer
from .test_lab import screenshot

pytestmark = pytest.mark.browser

ERROR_PAGE = "Sorry, the formgrader encountered an error"
# Records every value a payload gives window.__pwned, in every frame, before any of the page's scripts run.
CANARY = """
window.__pwnedLog = [];
Object.defineProperty(window, "__pwned", {
  configurable: false,
  get: function () { return window.__pwnedLog.length ? window.__pwnedLog.join(",") : undefined; },
  set: function (value) { window.__pwnedLog.push(String(value)); },
});
"""
# What formgrader's own manual-grading page asks of its API when nothing is edited.
FORMGRADER_OWN = ("/formgrader/api/grades?", "/formgrader/api/comments?")


class Watch:
    """Dialogs, console messages and API requests of one page; what a payload that ran would leave."""

    def __init__(self, page):
        self.page, self.dialogs, self.console, self.api = page, [], [], []
        page.on("dialog", self._dialog)
        page.on("console", lambda message: self.console.append(message.text))
        page.on("request", self._request)

    def _dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _request(self, request):
        path = request.url.split("://", 1)[-1].partition("/")[2]
        path = "/" + path
        if "/api/" in path and not (request.method == "GET" and path.startswith(FORMGRADER_OWN)):
            self.api.append(f"{request.method} {path[:120]}")

    def pwned(self) -> list[str]:
        return [value for frame in self.page.frames for value in _log(frame)]

    def click_everything_a_payload_offers(self) -> list[str]:
        """Click the javascript: link, the form's button and the link to a submitted file (each is
        plain text once made inert), as the element's own click (a payload's CSS may hide them);
        the canary after each."""
        seen = []
        for text in (LINK_TEXT, FORM_BUTTON, FILE_LINK):
            target = self.page.get_by_text(text, exact=True)
            if target.count():
                target.first.dispatch_event("click")
                self.page.wait_for_timeout(1_000)
                seen += self.pwned()
        return seen

    def seen(self, visible: bool, ran: list[str]) -> dict:
        return {"window.__pwned set": ran, "dialogs": self.dialogs, "API requests": self.api,
                "console lines naming pwned": [line for line in self.console if "pwned" in line],
                "the honest text visible": visible}

    def report(self) -> str:
        return f"dialogs {self.dialogs}, API requests {self.api}, console {self.console[-10:]}"


def _log(frame) -> list[str]:
    try:
        return frame.evaluate("() => window.__pwnedLog || []")
    except Exception:  # a frame gone with a navigation, or cross-origin: its log is unreadable here
        return []


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return graded_course(tmp_path_factory.mktemp("inert-browser") / "course")  # fails when the sandbox cannot start


def _written_answer(root) -> tuple[str, float | None]:
    """(the hostile submission's id, the manual score of its written answer) from the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission_notebook(MARKED[:-6], "ch12", "hostile")
        return submission.id, next(g.manual_score for g in submission.grades if g.name == ANSWER_ID)


NOTHING_RAN = {"window.__pwned set": [], "dialogs": [], "API requests": [], "console lines naming pwned": [],
               "the honest text visible": True}


def open_and_watch(page, url: str, output_path, name: str) -> tuple[Watch, bool, list[str]]:
    """Open `url` with the canary set, let the payloads have their time, screenshot, click what
    they offer; (the watch, whether the honest text is visible, what set the canary)."""
    page.add_init_script(CANARY)
    watch = Watch(page)
    page.goto(url, wait_until="domcontentloaded", timeout=90_000)
    honest = page.get_by_text(HONEST).first
    honest.wait_for(state="attached", timeout=60_000)
    page.wait_for_timeout(3_000)  # images that fail, frames that load, toggles and animations: their time to act
    visible = honest.is_visible()
    if visible:
        honest.scroll_into_view_if_needed()
    screenshot(page, output_path, name)
    return watch, visible, watch.pwned() + watch.click_everything_a_payload_offers()


def test_nothing_runs_in_formgraders_manual_grading_view(course, tmp_path, page, output_path):
    submission_id, _ = _written_answer(course)
    with LabServer(tmp_path / "server", course=course, instructor=True).running() as server:
        # Logged in as `make formgrader` opens it (the session cookie then covers formgrader's API).
        page.goto(f"{server.url}/?token={server.token}", timeout=90_000)
        page.get_by_text("ch12", exact=True).first.wait_for(timeout=60_000)
        url = f"{server.url}/formgrader/submissions/{submission_id}/"
        watch, visible, ran = open_and_watch(page, url, output_path, "formgrader-hostile-answer.png")
        page.wait_for_timeout(1_000)
        assert ERROR_PAGE not in page.content()
    seen = {**watch.seen(visible, ran), "pwned.txt written through the contents API": (course / "pwned.txt").exists(),
            "the answer's manual score, given through formgrader's API": _written_answer(course)[1]}
    assert seen == {**NOTHING_RAN, "pwned.txt written through the contents API": False,
                    "the answer's manual score, given through formgrader's API": None}, watch.report()


def test_nothing_runs_in_the_feedback_page(course, page, output_path):
    feedback = course / "feedback" / "hostile" / "ch12" / MARKED.replace(".ipynb", ".html")
    watch, visible, ran = open_and_watch(page, feedback.as_uri(), output_path, "feedback-hostile-answer.png")
    assert watch.seen(visible, ran) == NOTHING_RAN, watch.report()


def test_a_long_note_wraps_at_the_feedback_pages_edge(course, page, output_path):
    """The checks' notes, the outputs and the tracebacks in a feedback page wrap on a narrow screen:
    none is wider than the page, so nothing a learner must read runs off its right edge."""
    feedback = course / "feedback" / "hostile" / "ch12" / MARKED.replace(".ipynb", ".html")
    page.set_viewport_size({"width": 600, "height": 900})
    page.goto(feedback.as_uri(), wait_until="domcontentloaded", timeout=90_000)
    page.locator("div.output_area pre").first.wait_for(state="attached", timeout=60_000)
    widths = page.evaluate("""() => ({
        page: document.documentElement.clientWidth,
        notes: [...document.querySelectorAll('div.output_area pre')].map(pre => {
            const box = pre.getBoundingClientRect();
            return {right: Math.round(box.right), scroll: pre.scrollWidth, client: pre.clientWidth,
                    text: pre.innerText.slice(0, 80)};
        }),
    })""")
    screenshot(page, output_path, "feedback-narrow.png")
    assert widths["notes"], "the feedback page shows no output or note to read"
    past = [note for note in widths["notes"] if note["right"] > widths["page"] or note["scroll"] > note["client"]]
    assert not past, f"past the edge of a {widths['page']} px page: {past}"
