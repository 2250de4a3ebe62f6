"""The allow-list every page from a submission goes through (``course_grading/pages/active.py``).

Each payload class is neutralised (and the same check run on the payload left alone fails:
the payload is live), honest content is kept, and the cost is linear on inputs that make
nh3 or ``html.parser`` quadratic.
"""

from __future__ import annotations

import base64
import html
import io
import re
import time

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from traitlets.config import Config

from course_grading.pages.active import (
    active_parts,
    clean_html,
    neutralise_cell,
    neutralise_output,
    too_costly,
)
from course_grading.pages.safe_pages import (
    FEEDBACK_CSP,
    FeedbackExporter,
    NeutraliseActiveContent,
    SafeMarkdown,
    with_policy,
)

# Markup that runs or loads something when a browser shows it, one per kind.
PAYLOADS = {
    "script": "<p>x</p><script>fetch('//canary')</script>",
    "handler": '<img src="x" onerror="fetch(\'//canary\')">',
    "handler without quotes": "<svg/onload=fetch(1)>",
    "javascript url": '<a href="javascript:fetch(1)">click</a>',
    "encoded javascript url": '<a href="jav&#x61;&#x09;script:fetch(1)">click</a>',
    "data url": '<a href="data:text/html;base64,PHNjcmlwdD4=">click</a>',
    "svg script": "<svg><script>fetch(1)</script></svg>",
    "svg foreignObject": "<svg><foreignObject><iframe src=x></iframe></foreignObject></svg>",
    "svg animate href": '<svg><a><animate attributeName="href" to="javascript:x()"/></a></svg>',
    "svg set": '<svg><set attributeName="onmouseover" to="fetch(1)"/></svg>',
    "iframe": '<iframe src="https://example.com"></iframe>',
    "iframe srcdoc": '<iframe srcdoc="<script>fetch(1)</script>"></iframe>',
    "object": '<object data="x.swf"></object>',
    "embed": '<embed src="x.swf">',
    "form": '<form action="/api/contents"><button>go</button></form>',
    "base": '<base href="https://evil.example/">',
    "meta refresh": '<meta http-equiv="refresh" content="0;url=javascript:fetch(1)">',
    "css expression": '<p style="width: expression(fetch(1))">x</p>',
    "css url": '<p style="background-image: url(javascript:fetch(1))">x</p>',
    "image from the page's own site": '<img src="/hub/logout">',
    "image by a relative path": '<img src="../../../hub/logout" alt="plot">',
    "image from another site": '<img src="https://example.com/pixel.png?who=me">',
}
# What must not survive cleaning, as a browser would read it (lower case).
ACTIVE_MARKS = (
    "<script", "onerror", "onload", "onmouseover", "javascript:", "data:text", "<iframe",
    "srcdoc", "<object", "<embed", "<form", "<base", "<meta", "expression(", "url(", "<svg",
    "<animate", "<set", "foreignobject",
)  # fmt: skip

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(64)).decode()
TABLE = (
    '<table border="1" class="dataframe">\n  <thead>\n    <tr style="text-align: right;">\n'
    "      <th></th>\n      <th>batch_size</th>\n      <th>seq_len</th>\n    </tr>\n"
    "  </thead>\n  <tbody>\n    <tr>\n      <th>0</th>\n      <td>16</td>\n"
    "      <td>1024</td>\n    </tr>\n  </tbody>\n</table>"
)


#: An image that loads a URL as the page shows (only a data: raster loads nothing).
LOADING_IMAGE = re.compile(r"<img[^>]*\ssrc\s*=\s*[\"']?(?!data:image/)", re.I)


def _marks(markup: str) -> list[str]:
    lowered = markup.lower()
    found = [mark for mark in ACTIVE_MARKS if mark in lowered]
    return found + (["<img src=URL"] if LOADING_IMAGE.search(lowered) else [])


def _live(markup: str) -> list[str]:
    """``_marks`` of the markup as a browser reads it: references decoded, tabs dropped."""
    return _marks(html.unescape(markup).replace("\t", "").replace("\n", ""))


@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_each_payload_is_found_and_cleaned(kind):
    payload = PAYLOADS[kind]
    assert _live(payload), "the payload must be live to start with"
    assert active_parts(payload), kind
    cleaned = clean_html(payload)
    assert _marks(cleaned) == [], (kind, cleaned)


@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_an_active_html_output_is_shown_as_text(kind):
    out = nbformat.v4.new_output("display_data", data={"text/html": PAYLOADS[kind]})
    neutralise_output(out)
    assert list(out.data) == ["text/plain"]
    assert out.data["text/plain"].startswith("[a text/html output, shown as text: it holds ")
    assert PAYLOADS[kind] in out.data["text/plain"]  # the instructor sees the attempt


def test_javascript_and_widget_outputs_are_shown_as_text():
    for mime in ("application/javascript", "application/vnd.jupyter.widget-view+json"):
        value = {"model_id": "abc"} if mime.endswith("json") else "fetch('//canary')"
        out = nbformat.v4.new_output("display_data", data={mime: value, "text/plain": "obj"})
        neutralise_output(out)
        assert list(out.data) == ["text/plain"], mime
        assert "nothing of it ran" in out.data["text/plain"]


def test_image_attributes_and_isolated_frames_are_dropped():
    out = nbformat.v4.new_output(
        "display_data",
        data={"image/png": PNG, "text/html": "<b>ok</b>"},
        metadata={"image/png": {"width": "1 onerror=fetch(1)", "height": 40}, "isolated": True},
    )
    neutralise_output(out)
    assert out.metadata == {"image/png": {"height": 40}}
    broken = nbformat.v4.new_output("display_data", data={"image/png": 'x" onerror="fetch(1)'})
    neutralise_output(broken)
    assert list(broken.data) == ["text/plain"]


def test_svg_images_with_scripts_are_text_and_clean_ones_kept():
    clean = '<svg xmlns="http://www.w3.org/2000/svg"><path d="M0 0L1 1"/><use href="#a"/></svg>'
    for svg, kept in ((clean, True), (PAYLOADS["svg foreignObject"], False)):
        out = nbformat.v4.new_output("display_data", data={"image/svg+xml": svg})
        neutralise_output(out)
        assert ("image/svg+xml" in out.data) is kept
    linked = '<svg><image href="https://canary.example/x.png"/></svg>'
    out = nbformat.v4.new_output("display_data", data={"image/svg+xml": linked})
    assert "image/svg+xml" not in neutralise_output(out).data


def test_a_matplotlib_svg_is_kept():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3])
    ax.imshow([[0.0, 1.0], [1.0, 0.0]])  # an embedded PNG, clip paths, glyphs by reference
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    out = nbformat.v4.new_output("display_data", data={"image/svg+xml": buffer.getvalue()})
    assert neutralise_output(out).data["image/svg+xml"] == buffer.getvalue()


def test_markdown_outputs_with_raw_html_are_text():
    md = 'See <img src="x" onerror="fetch(1)">'
    out = nbformat.v4.new_output("display_data", data={"text/markdown": md})
    assert list(neutralise_output(out).data) == ["text/plain"]
    honest = nbformat.v4.new_output("display_data", data={"text/markdown": "**bold** [a](b)"})
    assert neutralise_output(honest).data == {"text/markdown": "**bold** [a](b)"}


def test_honest_content_is_kept():
    png = nbformat.v4.new_output("display_data", data={"image/png": PNG, "text/plain": "<Fig>"})
    assert neutralise_output(png).data["image/png"] == PNG
    table = nbformat.v4.new_output("execute_result", data={"text/html": TABLE}, execution_count=1)
    kept = neutralise_output(table).data["text/html"]
    assert '<table border="1" class="dataframe">' in kept
    assert '<tr style="text-align:right">' in kept and "<td>1024</td>" in kept
    md = "A [link](https://example.com/a) and ![a plot](data:image/png;base64," + PNG + ")"
    shown = SafeMarkdown(parent=HTMLExporter())({}, md)
    assert '<a href="https://example.com/a" rel="noopener noreferrer">link</a>' in shown
    assert f'<img src="data:image/png;base64,{PNG}" alt="a plot">' in shown


def test_a_markdown_image_keeps_only_a_data_url():
    """Markdown's own image syntax goes through the same rule as raw HTML."""
    render = SafeMarkdown(parent=HTMLExporter())
    for url in ("/hub/logout", "../logout", "https://example.com/x.png", "plot.png"):
        shown = render({}, f"My plot: ![plot]({url})")
        assert url not in shown and _marks(shown) == [], shown
    assert _marks(HTMLExporter().markdown2html({}, "![p](/hub/logout)")), "nbconvert keeps it"
    kept = render({}, f"![p](data:image/png;base64,{PNG})")
    assert f'src="data:image/png;base64,{PNG}"' in kept


def test_markdown_raw_html_is_cleaned():
    exporter = HTMLExporter()
    md = 'My answer.\n\n<img src="x" onerror="fetch(1)"> <a href="javascript:x()">y</a>'
    assert _marks(exporter.markdown2html({}, md)), "nbconvert alone keeps it"
    assert _marks(SafeMarkdown(parent=exporter)({}, md)) == []


def test_a_cell_keeps_no_raw_html_attachment_or_odd_grade_id():
    cell = nbformat.v4.new_raw_cell(PAYLOADS["script"])
    cell.metadata.nbgrader = {"grade_id": 'x" onmouseover="fetch(1)', "grade": True}
    neutralise_cell(cell)
    assert _marks(cell.source) == [] and "nbgrader" not in cell.metadata
    md = nbformat.v4.new_markdown_cell("![a](attachment:a.svg)")
    md.attachments = {
        "a.svg": {"image/svg+xml": "<svg onload=fetch(1)>"},
        "b.png": {"image/png": PNG},
    }
    neutralise_cell(md)
    assert md.attachments == {"a.svg": {}, "b.png": {"image/png": PNG}}
    honest = nbformat.v4.new_code_cell("1")
    honest.metadata.nbgrader = {"grade_id": "answer_tokens", "solution": True}
    assert neutralise_cell(honest).metadata.nbgrader["grade_id"] == "answer_tokens"


def test_the_preprocessor_is_idempotent():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={"text/html": PAYLOADS["script"]}),
        nbformat.v4.new_output("display_data", data={"text/html": TABLE}),
    ]
    nb.cells.append(cell)
    once, _ = NeutraliseActiveContent().preprocess(nb, {})
    first = nbformat.writes(once)
    twice, _ = NeutraliseActiveContent().preprocess(once, {})
    assert nbformat.writes(twice) == first


def test_feedback_pages_carry_the_policy():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# hi")])
    page, _ = FeedbackExporter(config=Config()).from_notebook_node(nb)
    head = page[: page.index("</head>")]
    assert f'<meta http-equiv="Content-Security-Policy" content="{FEEDBACK_CSP}">' in head
    assert page.index("Content-Security-Policy") < page.index("<body")
    with pytest.raises(ValueError, match="no <head>"):
        with_policy("<p>no head</p>", FEEDBACK_CSP)


# Inputs on which a naive scan or parser costs seconds: html.parser on "<a<a<a..." and
# "<!--<!--..." took 3 minutes each here; nh3 on 80,000 nested <div> 30 s, on 400 KB of "&" 6 s.
HOSTILE_SHAPES = {
    "<": "<" * 400_000,
    "<a": "<a" * 200_000,
    "<!--": "<!--" * 100_000,
    "&": "&" * 400_000,
    "nested div": "<div>" * 80_000,
    "nested list": "<ul><li>" * 50_000,
    "unclosed quotes": '<a x="' * 66_000,
    "handlers": "<a " + " onx=1" * 66_000 + ">",
}


@pytest.mark.parametrize("shape", sorted(HOSTILE_SHAPES))
def test_sanitising_is_linear(shape):
    markup = HOSTILE_SHAPES[shape]
    out = nbformat.v4.new_output("display_data", data={"text/html": markup})
    start = time.perf_counter()
    neutralise_output(out)
    cleaned = clean_html(markup)
    seconds = time.perf_counter() - start
    print(f"\n{shape!r}: {len(markup) / 1000:.0f} KB neutralised and cleaned in {seconds:.3f} s")
    assert seconds < 1.5, f"{shape!r} took {seconds:.2f} s"
    assert _marks(cleaned) == []


def test_too_costly_names_the_limit():
    assert "nested" in too_costly("<div>" * 1000)
    assert "character references" in too_costly("&amp;" * 30_000)
    assert too_costly(TABLE * 50) == ""
