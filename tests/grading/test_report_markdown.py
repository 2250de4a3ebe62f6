"""``report.md`` is inert: student text renders as text in real Markdown renderers.

Rendered with markdown-it-py (its GFM-like preset: tables, strikethrough, linkify of bare URLs)
and mistune (tables, bare URLs), no ``<a``, ``<img`` or HTML tag of the student's comes out, and
the student's text reads back as written.
"""

from __future__ import annotations

import html
import re

import markdown_it
import mistune
import pytest

from course_grading.report import Row, write_reports

HOSTILE = [
    "![x](https://example.invalid/a.png)",
    "[x](javascript:alert(1))",
    "<https://example.invalid/auto>",
    "https://example.invalid/bare and www.example.invalid and me@example.invalid",
    "<img src=x onerror=alert(1)>",
    "<div>\n<b>block</b>\n</div>",
    "[ref][1] and [1]: https://example.invalid/ref",
    "a | b | c",
    "`code` **bold** ~~gone~~ &lt;&amp;",
    "\\![x](https://example.invalid/escaped.png)",
]
RENDERERS = {
    "markdown-it": markdown_it.MarkdownIt("gfm-like").render,
    "mistune": mistune.create_markdown(plugins=["table", "url", "strikethrough"]),
}
_TAG = re.compile(r"<(/?)([a-z0-9]+)")
_TABLE_TAGS = {"table", "thead", "tbody", "tr", "th", "td", "h1", "p", "strong", "code", "em"}


def _report(tmp_path, text: str) -> str:
    rows = [
        Row(student=text, lesson="99_fixture", status="flagged", reasons=(text,), file=text),
        Row(student="?", lesson="?", status="unrecognised", reasons=(text,), file=text),
        Row(student="ann", lesson="99_fixture", status="ok", failed_tests=(f"t (0/1: {text})",)),
    ]
    write_reports(tmp_path, rows)
    return (tmp_path / "report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("renderer", RENDERERS)
@pytest.mark.parametrize("text", HOSTILE)
def test_student_text_renders_as_text(tmp_path, renderer, text):
    page = RENDERERS[renderer](_report(tmp_path, text))
    assert "<a" not in page and "<img" not in page
    tags = {name for _, name in _TAG.findall(page)}
    assert tags <= _TABLE_TAGS, tags - _TABLE_TAGS
    rows = [line for line in page.splitlines() if "<td>" in line or "<td" in line]
    cells = [html.unescape(re.sub(r"<[^>]+>", "", line)).strip() for line in rows]
    assert " ".join(text.split()) in cells, cells  # the text itself, once per cell it is in
    assert page.count("<tr>") == 4  # the header and three rows: no cell broke the table


def test_the_image_that_rendered_before_is_text_now(tmp_path):
    page = RENDERERS["markdown-it"](_report(tmp_path, HOSTILE[0]))
    assert "<img" not in page and "![x](https://example.invalid/a.png)" in html.unescape(page)
