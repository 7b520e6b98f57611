"""A submission whose written answer, added cells and outputs try to run script in whoever opens
them: the instructor in formgrader's manual grading, a learner or instructor in the feedback HTML.

`graded_course(root)` grades it (and an honest twin) through the real path, `autograde(jobs=2)`
and `commands.feedback`; tests/test_inert_content.py reads what came out, and
tests/browser/test_inert_in_browser.py opens it in chromium. Every payload, if it ran, would set
`window.__pwned`, open a dialog, or call formgrader's API (giving the answer full marks) or the
contents API (writing pwned.txt), so a browser can tell.
"""

from __future__ import annotations

import base64
from pathlib import Path

import nbformat

from course.grading.classes.autograde import autograde
from course.grading.nbgrader import commands
from test_hostile_submissions import SOLUTIONS, notebook, released_course, submit

# A notebook with checks (so the learner's code runs at grading and its outputs are shown) and a written answer.
MARKED = "03_leases.ipynb"
ANSWER_ID = "exercise_reuse_owner_label_logging"  # its written answer (markdown, graded by hand)
HONEST = "An expired lease says only that the holder's bounded time is over"
HONEST_ANSWER = f"""{HONEST}, not that the holder died: it may still be running, *slowly*.

- a holder past its expiry can still call `finish`
- so the store must refuse its stale write, $g_{{old}} < g_{{new}}$

| holder | generation |
|:-------|:----------:|
| old    | 1          |
| new    | 2          |
"""

# Given itself full marks through formgrader's API, and wrote a file through the contents API.
TAKEOVER = (
    "var xsrf = (document.cookie.match(/_xsrf=([^;]*)/) || [])[1];"
    "var sid = location.pathname.split('/').filter(Boolean).pop();"
    "fetch('/formgrader/api/grades?submission_id=' + sid).then(function (r) { return r.json(); })"
    ".then(function (grades) { grades.forEach(function (g) { g.manual_score = g.max_score;"
    " fetch('/formgrader/api/grade/' + g.id,"
    " {method: 'PUT', headers: {'X-XSRFToken': xsrf}, body: JSON.stringify(g)}); }); });"
    "fetch('/api/contents/pwned.txt',"
    " {method: 'PUT', headers: {'X-XSRFToken': xsrf, 'Content-Type': 'application/json'},"
    " body: JSON.stringify({type: 'file', format: 'text', content: 'pwned'})});"
)
LINK_TEXT = "a link to click"
FORM_BUTTON = "Send the form"
FILE_LINK = "my diagram"
# One payload per kind, each its own markdown block (a blank line between them).
PAYLOADS = {
    "script": f"<script>window.__pwned = 'script'; {TAKEOVER}</script>",
    "onerror": "<img src=x onerror=\"window.__pwned = 'onerror'\">",
    "iframe": "<iframe srcdoc=\"<script>parent.__pwned = 'iframe'; alert('iframe')</script>\"></iframe>",
    "ontoggle": "<details open ontoggle=\"window.__pwned = 'ontoggle'\"><summary>more</summary>hidden</details>",
    "svg": "<svg><animate onbegin=\"window.__pwned = 'svg'\" attributeName=x dur=1s></animate></svg>",
    "javascript_link": f"[{LINK_TEXT}](javascript:void(window.__pwned='javascript-link'))",
    "data_link": "[a data link](data:text/html;base64,PHNjcmlwdD5hbGVydCgnZGF0YScpPC9zY3JpcHQ+)",
    "object": "<object data=\"data:text/html,<script>alert('object')</script>\"></object>",
    "embed": "<embed src=\"data:text/html,<script>alert('embed')</script>\">",
    "style": "<style>body { display: none }</style>",
    "meta": "<meta http-equiv=\"refresh\" content=\"0; url=javascript:void(window.__pwned='meta')\">",
    "form": f"<form action=\"javascript:void(window.__pwned='form')\"><button>{FORM_BUTTON}</button></form>",
    "file_link": f"[{FILE_LINK}](diagram.html)",  # a file of the submission, served by formgrader
    "base": "<base href=\"javascript:void(window.__pwned='base')//\">",
}
HOSTILE_ANSWER = HONEST_ANSWER + "\n" + "\n\n".join(PAYLOADS.values()) + "\n"
HTML_PAYLOAD = (f"<script>window.__pwned = 'output'; {TAKEOVER}</script>"
                "<img src=x onerror=\"window.__pwned = 'output-onerror'\">"
                "<iframe srcdoc=\"<script>parent.__pwned = 'output-iframe'</script>\"></iframe>")
CODE_CELL = f"""PAYLOAD = {HTML_PAYLOAD!r}
print(PAYLOAD)
from IPython.display import HTML, display
display(HTML(PAYLOAD))
HTML(PAYLOAD)
"""
ADDED_MARKDOWN = ("Added by the learner: <script>window.__pwned = 'added-cell'</script>\n\n"
                  "<img src=x onerror=\"window.__pwned = 'added-onerror'\">\n\n![picture](attachment:picture.svg)\n")
SVG = (b"<svg xmlns='http://www.w3.org/2000/svg' onload=\"window.__pwned='attachment'\">"
       b"<script>alert('attachment')</script></svg>")
RAW_HTML = ("<p>A raw cell</p><script>window.__pwned = 'raw'</script>"
            "<img src=x onerror=\"window.__pwned = 'raw-onerror'\">"
            "<iframe srcdoc=\"<script>parent.__pwned = 'raw-iframe'</script>\"></iframe>")
DIAGRAM = f"<!doctype html><script>window.__pwned = 'submitted-file'; {TAKEOVER}</script>"


def hostile_notebook() -> nbformat.NotebookNode:
    """03_leases with the solutions' code answers, the hostile written answer, and the learner's
    own code, markdown (with an attachment) and raw cells at the end."""
    nb = notebook(MARKED, SOLUTIONS, {ANSWER_ID: HOSTILE_ANSWER}, [CODE_CELL])
    added = nbformat.v4.new_markdown_cell(ADDED_MARKDOWN)
    added.attachments = {"picture.svg": {"image/svg+xml": base64.b64encode(SVG).decode()}}
    raw = nbformat.v4.new_raw_cell(RAW_HTML, metadata={"raw_mimetype": "text/html", "format": "text/html"})
    nb.cells += [added, raw]
    return nb


def graded_course(root: Path) -> Path:
    """A toy course with 03_leases released, `hostile` and its honest twin `honest` submitted,
    autograded (the real classes path, two at a time) and given feedback."""
    released_course(root)
    submit(root, "hostile", {MARKED: hostile_notebook()})
    (root / "submitted" / "hostile" / "ch12" / "diagram.html").write_text(DIAGRAM)
    submit(root, "honest", {MARKED: notebook(MARKED, SOLUTIONS, {ANSWER_ID: HONEST_ANSWER})})
    results = {r.student: r for r in autograde(root=root, jobs=2, progress=False)}
    assert set(results) == {"hostile", "honest"}
    commands.feedback(root=root)
    return root
