"""Learner content made inert before a browser shows it: formgrader's manual grading, feedback.

A written answer is markdown, and markdown may hold HTML, which nbconvert renders as written.
Formgrader shows a submission inside the instructor's own Jupyter session, where a script could
call formgrader's API and the contents API; feedback HTML is opened by learners and instructors.
`MakeInert` runs twice (config.py): in the autograde chain after DecideByJudge, so the autograded
notebook that formgrader and feedback both render from is inert on disk, and again in every
HTMLExporter nbgrader builds (formgrader's view, feedback), for a notebook that got into
autograded/ another way.

Every cell is treated as the learner's; the course's cells hold no markup it removes, so they stay
as written. nbconvert's own `HTMLExporter.sanitize_html` is not used: it escapes the course's `<p>`
and `<h1>` as text, and formgrader's template ignores it for markdown cells.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import nh3
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor
from nbformat import from_dict
from traitlets import Bool

NOTE = "<p><em>[Markup that could act in a browser was removed from this cell when it was graded.]</em></p>"
IMAGES = ("image/png", "image/jpeg", "image/gif")
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
INLINE_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml);base64,[A-Za-z0-9+/=\s]*", re.IGNORECASE)
GRADE_ID = re.compile(r"[\w.-]+")


def _leaves_the_page_or_shows_an_image(tag: str, attribute: str, value: str) -> str | None:
    """nh3 has already dropped every scheme but http(s), mailto and data. `data:` stays only as an
    inline image (a pasted attachment); a link keeps only http(s), mailto or `#anchor`: a relative
    one would open a file the learner submitted, which formgrader serves in the instructor's session."""
    if attribute not in ("href", "src", "cite"):
        return value
    compact = re.sub(r"[\x00-\x20]", "", value).lower()  # what a browser reads: "da ta:" is "data:"
    if compact.startswith("data:"):
        return value if (tag, attribute) == ("img", "src") and INLINE_IMAGE.fullmatch(value.strip()) else None
    if attribute == "href" and not compact.startswith(("http:", "https:", "mailto:", "#")):
        return None
    return value


def _attributes() -> dict[str, set[str]]:
    allowed = {tag: set(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items()}
    allowed["*"] = {"class", "title"}  # pygments' and nbconvert's classes; no id, style or handler
    for tag, extra in {**{f"h{n}": {"id"} for n in range(1, 7)},  # nbconvert's heading anchors
                       "th": {"style"}, "td": {"style"},  # a table column's alignment (text-align only)
                       "input": {"checked", "disabled"}}.items():  # a task list's checkboxes
        allowed.setdefault(tag, set()).update(extra)
    return allowed


# An allow-list (nh3: the Rust ammonia sanitizer, an html5ever parse): what a written answer uses
# (paragraphs, emphasis, code, lists, tables, quotes, details, images, links) and nothing that acts.
CLEANER = nh3.Cleaner(
    tags=nh3.ALLOWED_TAGS | {"input"}, attributes=_attributes(), tag_attribute_values={"input": {"type": {"checkbox"}}},
    url_schemes={"http", "https", "mailto", "data"}, attribute_filter=_leaves_the_page_or_shows_an_image,
    filter_style_properties={"text-align"}, link_rel=None,
)


def render(markdown: str, attachments: dict | None = None) -> str:
    """Markdown as nbconvert's HTMLExporter renders it (HTML passed as written, math left for MathJax)."""
    return MarkdownWithMath(renderer=IPythonRenderer(escape=False, attachments=attachments or {})).render(markdown)


def inert_markdown(source: str, attachments: dict | None = None) -> str:
    """`source` when its rendering is already inert; otherwise that rendering sanitized, with a note.
    Kept as written when nothing is removed: an honest answer reads (and is checksummed) as its
    author wrote it, and an unanswered cell is still seen as unanswered by SaveAutoGrades."""
    try:
        rendered = render(source, attachments)
    except Exception:  # e.g. a missing attachment: the learner's text, as text
        return _one_block(NOTE + "<pre>" + html.escape(source) + "</pre>")
    clean = CLEANER.clean(rendered)
    return source if _same(rendered, clean) else _one_block(NOTE + clean)


def inert_html(text: str) -> str:
    """`text` (a raw cell, an HTML output) when sanitizing removes nothing; else the sanitized HTML."""
    clean = CLEANER.clean(text)
    return text if _same(text, clean) else clean


def _one_block(clean: str) -> str:
    """HTML that markdown passes through as it is: one line (a blank line would end an HTML block,
    and the rest would be read as markdown again)."""
    return '<div class="inert">' + clean.replace("\r", "&#13;").replace("\n", "&#10;") + "</div>"


class _Parsed(HTMLParser):
    """Tags, attributes and text (entities decoded) of an HTML fragment, to tell whether sanitizing
    changed anything; comments and declarations count as changes."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.items: list[tuple] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.items.append(("<", tag, sorted((name, value or "") for name, value in attrs)))

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag):
        self.items.append(("</", tag))

    def handle_data(self, data):
        if self.items and self.items[-1][0] == "text":
            self.items[-1] = ("text", self.items[-1][1] + data)
        else:
            self.items.append(("text", data))

    def handle_comment(self, data):
        self.items.append(("!", data))

    handle_decl = unknown_decl = handle_pi = handle_comment


def _same(html_text: str, clean: str) -> bool:
    return _Parsed(html_text).items == _Parsed(clean).items


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _count(value) -> int | None:
    return value if type(value) is int else None


def inert_output(output) -> None:
    """HTML sanitized, markdown rendered and sanitized, images only as base64, plain text and LaTeX
    (escaped by the templates) kept; JavaScript, widgets, SVG and the rest dropped. Image sizes are
    numbers or nothing (the templates write them unquoted)."""
    if "execution_count" in output:
        output.execution_count = _count(output.execution_count)
    if "data" not in output:
        return
    data, kept = output.data, {}
    for mime in ("text/plain", "text/latex"):
        if mime in data:
            kept[mime] = _text(data[mime])
    if "text/html" in data:
        kept["text/html"] = inert_html(_text(data["text/html"]))
    elif "text/markdown" in data:
        try:
            kept["text/html"] = CLEANER.clean(render(_text(data["text/markdown"])))
        except Exception:  # as for a markdown cell: the text, as text
            kept.setdefault("text/plain", _text(data["text/markdown"]))
    for mime in IMAGES:
        if mime in data and BASE64.fullmatch(_text(data[mime])):
            kept[mime] = _text(data[mime])
    metadata = output.get("metadata", {})
    sizes = {mime: {key: value for key, value in metadata[mime].items()
                    if key in ("width", "height") and type(value) in (int, float)}
             for mime in IMAGES if mime in kept and isinstance(metadata.get(mime), dict)}
    output.data, output.metadata = from_dict(kept), from_dict({mime: size for mime, size in sizes.items() if size})


class MakeInert(Preprocessor):
    """Markdown and raw cells, attachments and outputs made inert (see the module's docstring)."""

    enabled = Bool(True).tag(config=True)  # nbgrader registers preprocessors without enabling them

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)  # widget state: scripts in nbconvert's templates
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source = inert_markdown(cell.source, cell.get("attachments"))
        elif cell.cell_type == "raw":
            cell.source = inert_html(cell.source)
        elif cell.cell_type == "code":
            cell.execution_count = _count(cell.get("execution_count"))
            for output in cell.get("outputs", []):
                inert_output(output)
        grading = cell.get("metadata", {}).get("nbgrader")
        if isinstance(grading, dict) and "grade_id" in grading and not GRADE_ID.fullmatch(str(grading["grade_id"])):
            del cell.metadata["nbgrader"]  # formgrader writes grade_id into attributes unescaped
        return cell, resources
