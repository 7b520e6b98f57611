"""Learner content is inert wherever it is shown (course.grading.nbgrader.inert).

Unit: each kind of markup that acts in a browser is removed from a written answer, a raw cell and
an output, while honest markdown (and every markdown cell the course wrote) stays as written.
Through the real path: a hostile submission (tests/hostile_markup.py) and its honest twin graded by
`autograde(jobs=2)` and given feedback; the autograded notebook and the feedback HTML are read and
searched, with a parser of their own, for anything that would run. The browser test
(tests/browser/test_inert_in_browser.py) opens the same kind of submission in formgrader and feedback.
"""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from traitlets.config import Config

from course.grading.nbgrader.config import configure
from course.grading.nbgrader.inert import NOTE, MakeInert, inert_html, inert_markdown, render

from hostile_markup import (
    ANSWER_ID, HONEST, HONEST_ANSWER, HOSTILE_ANSWER, HTML_PAYLOAD, MARKED, PAYLOADS, RAW_HTML, graded_course,
    hostile_notebook,
)
from test_hostile_submissions import SOLUTIONS, notebook

ROOT = Path(__file__).resolve().parents[1]
ACTING_TAGS = {"script", "iframe", "frame", "frameset", "object", "embed", "applet", "style", "meta", "base", "link",
               "form", "button", "svg", "math", "template", "noscript"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "data", "poster", "background", "xlink:href", "srcset"}
TEXT_ALIGN = re.compile(r"(text-align:\w+;?)?")  # a table column's alignment
INLINE_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml);base64,", re.IGNORECASE)
RICH_MARKDOWN = r"""# A heading *with emphasis*

A paragraph with **bold**, _em_, `code <b>`, a [link](https://example.com "t"), x < y > z & w, and
$a_1 < b$ inline. Line two<br>with a break, H<sub>2</sub>O, x<sup>2</sup>, [an anchor](#A-heading).

$$
\sum_i x_i < 3
$$

| left | centre |
|:-----|:------:|
| 1 < 2 | `x` |

1. one
   - nested

> a quote

```python
def f(x):
    return x < 1
```

- [x] done

<details><summary>Hint <code>x</code></summary>

text
</details>

~~struck~~ https://example.org/x?a=1&b=2 <me@example.org> [mail](mailto:a@b.c) ![alt](https://example.com/a.png)
"""


class _Acting(HTMLParser):
    """What in an HTML page could run: tags that load or run something, event handlers, srcdoc, and
    URLs that are script or a document (data: other than an inline image)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ACTING_TAGS:
            self.found.append(f"<{tag}>")
        if tag == "input" and dict(attrs).get("type") != "checkbox":
            self.found.append("<input>")
        for name, value in attrs:
            compact = re.sub(r"[\x00-\x20]", "", value or "").lower()
            if name.startswith("on") or name == "srcdoc" or (name == "style" and not TEXT_ALIGN.fullmatch(compact)):
                self.found.append(f"{name} on <{tag}>")
            elif name in URL_ATTRIBUTES and compact.startswith(("javascript:", "vbscript:", "data:")) \
                    and not (tag == "img" and name == "src" and INLINE_IMAGE.match(compact)):
                self.found.append(f"{compact.split(':')[0]}: in {name} of <{tag}>")

    handle_startendtag = handle_starttag


def acting(html_text: str) -> list[str]:
    parser = _Acting()
    parser.feed(html_text)
    parser.close()
    return parser.found


class _Text(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)


def text_of(html_text: str) -> str:
    parser = _Text()
    parser.feed(html_text)
    return " ".join(" ".join(parser.parts).split())


def shown(cell) -> str:
    """The HTML a markdown or raw cell becomes in nbconvert's pages."""
    return render(cell.source, cell.get("attachments")) if cell.cell_type == "markdown" else cell.source


# --- unit: the preprocessor's rules ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_each_kind_of_markup_that_acts_is_made_inert_in_a_written_answer(kind):
    written = f"{HONEST}.\n\n{PAYLOADS[kind]}\n"
    if kind != "file_link":  # a relative link is plain markdown; formgrader is what serves the file
        assert acting(render(written)), f"the {kind} payload must act when rendered as written"
    inert = inert_markdown(written)
    assert inert != written and inert.startswith('<div class="inert">') and NOTE in inert
    html = render(inert)
    assert acting(html) == []
    assert HONEST in text_of(html)
    if kind == "file_link":
        assert "diagram.html" not in html


def test_honest_markdown_stays_as_written():
    for source in (HONEST_ANSWER, RICH_MARKDOWN):
        assert inert_markdown(source) == source
    picture = {"picture.png": {"image/png": base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()}}
    pasted = "A pasted picture: ![it](attachment:picture.png)"
    assert inert_markdown(pasted, picture) == pasted


def test_every_markdown_cell_the_course_wrote_stays_as_written():
    cells = [cell for folder in ("solutions", "notebooks") for path in sorted((ROOT / folder / "ch12").glob("*.ipynb"))
             for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"]
    assert len(cells) > 200
    assert [cell.source for cell in cells if inert_markdown(cell.source, cell.get("attachments")) != cell.source] == []


def test_what_was_made_inert_is_left_alone_the_second_time():
    once = inert_markdown(HOSTILE_ANSWER)
    assert inert_markdown(once) == once
    assert inert_html(inert_html(RAW_HTML)) == inert_html(RAW_HTML)
    broken = inert_markdown("See ![it](attachment:missing.png) <script>x()</script>")  # cannot be rendered
    assert "&lt;script&gt;" in broken and inert_markdown(broken) == broken


def test_raw_cells_outputs_and_cell_fields_are_made_inert():
    picture = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
    nb = nbformat.v4.new_notebook(metadata={"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}})
    nb.cells = [
        nbformat.v4.new_raw_cell(RAW_HTML, metadata={"raw_mimetype": "text/html"}),
        nbformat.v4.new_raw_cell("plain text, a < b"),
        nbformat.from_dict({"cell_type": "code", "id": "code", "source": "x", "metadata": {},
                            "execution_count": "<img src=x onerror=alert(1)>",
                            "outputs": [  # no longer valid nbformat: what a template would write unescaped
            {"output_type": "display_data", "metadata": {},
             "data": {"text/html": HTML_PAYLOAD + "<b>kept</b>", "text/plain": "<kept>",
                      "application/javascript": "window.__pwned = 1", "image/svg+xml": "<svg onload='alert(1)'/>"}},
            {"output_type": "execute_result", "execution_count": "1 onerror=alert(1)", "metadata": {},
             "data": {"text/markdown": "**md** <script>alert(1)</script>"}},
            {"output_type": "display_data", "data": {"image/png": picture, "image/jpeg": 'x" onerror="alert(1)'},
             "metadata": {"image/png": {"width": "1 onload=alert(1)", "height": 20}, "text/html": {"isolated": True}}},
        ]}),
        nbformat.v4.new_markdown_cell("text", metadata={"nbgrader": {"grade": True,
                                                                     "grade_id": 'x"><script>alert(1)</script>'}}),
    ]
    nb, _ = MakeInert().preprocess(nb, {})
    raw, plain, code, marked = nb.cells
    assert acting(raw.source) == [] and "A raw cell" in raw.source
    assert plain.source == "plain text, a < b"
    html_output, markdown_output, image_output = code.outputs
    assert set(html_output.data) == {"text/html", "text/plain"} and acting(html_output.data["text/html"]) == []
    assert "<b>kept</b>" in html_output.data["text/html"] and html_output.data["text/plain"] == "<kept>"
    assert markdown_output.data == {"text/html": "<p><strong>md</strong> </p>\n"}
    assert image_output.data == {"image/png": picture} and image_output.metadata == {"image/png": {"height": 20}}
    assert code.execution_count is None and markdown_output.execution_count is None
    assert "nbgrader" not in marked.metadata and "widgets" not in nb.metadata
    nbformat.validate(nb)


def _exporter(template: str) -> HTMLExporter:
    """An HTMLExporter as formgrader (template 'formgrade') or generate_feedback ('feedback') builds
    it: from the course's nbgrader configuration, with nbgrader's templates."""
    from nbgrader.server_extensions.formgrader import handlers

    c = Config()
    configure(c, ROOT)
    c.HTMLExporter.template_name = template
    c.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    c.HTMLExporter.extra_template_paths = [str(Path(handlers.static_path, "node_modules", "bootstrap", "dist", "css"))]
    return HTMLExporter(config=c)


@pytest.mark.parametrize("template", ["formgrade", "feedback"])
def test_formgrader_and_feedback_pages_are_inert_even_for_a_notebook_never_autograded(template):
    """Defence in depth: the HTMLExporter nbgrader builds from the course's configuration makes
    the submission inert itself, with the same preprocessor."""
    resources = {"base_url": "", "index": 0, "total": 1, "notebook_id": MARKED[:-6], "student": "hostile",
                 "nbgrader": {"notebook": MARKED[:-6], "score": 0, "max_score": 16, "late_penalty": 0}}
    hostile, honest = hostile_notebook(), notebook(MARKED, SOLUTIONS, {ANSWER_ID: HONEST_ANSWER})
    for cell in hostile.cells + honest.cells:  # what nbgrader's GetGrades adds for the feedback template
        cell.metadata.get("nbgrader", {}).setdefault("score", 0)
    page, _ = _exporter(template).from_notebook_node(hostile, resources=resources)
    twin, _ = _exporter(template).from_notebook_node(honest, resources=resources)
    assert sorted(acting(page)) == sorted(acting(twin)), "only the page's own acts (MathJax, formgrader's buttons)"
    assert HONEST in text_of(page)


# --- the real path: autograde (two at a time) and feedback ---------------------------------------------

@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return graded_course(tmp_path_factory.mktemp("inert") / "course")  # fails when the sandbox cannot start


def _autograded(root: Path, student: str) -> nbformat.NotebookNode:
    return nbformat.read(root / "autograded" / student / "ch12" / MARKED, as_version=4)


def test_the_autograded_notebook_holds_nothing_that_acts(course):
    nb = _autograded(course, "hostile")
    shown_html = [shown(cell) for cell in nb.cells if cell.cell_type in ("markdown", "raw")]
    outputs = [value for cell in nb.cells if cell.cell_type == "code" for output in cell.outputs
               for mime, value in output.get("data", {}).items() if mime == "text/html"]
    assert [found for html in shown_html + outputs for found in acting(html)] == []
    answer = next(cell for cell in nb.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == ANSWER_ID)
    assert NOTE in answer.source and HONEST in text_of(shown(answer))
    printed = "".join(output.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                      for output in cell.outputs)
    assert "onerror" in printed, "what the learner's code printed is shown (as text: the templates escape it)"
    assert {cell.cell_type for cell in nb.cells if NOTE in cell.get("source", "")} == {"markdown"}
    assert not any("__pwned" in cell.source for cell in nb.cells if cell.cell_type == "raw")


def test_a_page_added_to_a_submission_is_never_served_beside_it(course):
    """formgrader serves a submission's other files in the instructor's session: a page stays behind."""
    submitted = course / "submitted" / "hostile" / "ch12" / "diagram.html"
    assert submitted.is_file()
    assert not [p for p in course.glob("*/hostile/ch12/diagram.html") if p != submitted]


def test_the_honest_answer_is_graded_and_kept_as_written(course):
    from nbgrader.api import Gradebook

    nb = _autograded(course, "honest")
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == ANSWER_ID)
    assert answer.source == HONEST_ANSWER
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {student: {g.name: (g.score, g.needs_manual_grade)
                            for g in gb.find_submission_notebook(MARKED[:-6], "ch12", student).grades}
                  for student in ("honest", "hostile")}
    assert scores["hostile"] == scores["honest"], "made inert or not, the answers are graded alike"
    assert scores["hostile"][ANSWER_ID] == (0, True), "the written answer waits for its manual grade"


def test_the_feedback_pages_hold_nothing_that_acts_and_read_the_same(course):
    pages = {student: (course / "feedback" / student / "ch12" / MARKED.replace(".ipynb", ".html")).read_text()
             for student in ("honest", "hostile")}
    own = acting(pages["honest"])
    assert "<script>" in own and not [found for found in own if " on <" in found or ":" in found], own
    assert sorted(acting(pages["hostile"])) == sorted(own), "nothing acts beyond the page's own (MathJax, its CSS)"
    assert HONEST in text_of(pages["hostile"]) and NOTE.split("[")[1].split("]")[0] in text_of(pages["hostile"])
    tight = lambda html: re.sub(r">\s+<", "><", html)  # the page is re-indented
    assert tight(render(HONEST_ANSWER)).strip() in tight(pages["honest"]), "the honest answer reads as it was written"
