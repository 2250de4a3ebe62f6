"""Pages that look right (issue 28, item 3): tables keep their layout, TeX is drawn, nothing runs.

A student's written answer holds a markdown table (``| 2 × 8192 | 4.29e9 |``) and TeX
(``$...$``, ``$$...$$``). Before, formgrader's view and the feedback page ran the table's cells
together (``2 × 81924.29e9``: their templates load Bootstrap's ``td { padding: 0 }`` and not the
notebook stylesheet) and showed the TeX raw (MathJax is a script; the feedback page may run
none). Now the course's stylesheet is in each page (``pages/course_style.py``) and the TeX is
MathML made on the server (``pages/mathml.py``), which Chromium draws itself.

The fast checks run the converter and the allow-list: TeX becomes MathML, the converter's own
output is not trusted (it copies ``\\text{<img onerror>}`` and ``\\href`` as they are), MathML
payloads (``maction``, ``annotation-xml``, ``mglyph``, links, namespace confusion) come out
inert. The browser check grades the fixture lesson for real (about 10 s), opens the feedback
page and formgrader's view of the submission in Debian's Chromium, measures the table and the
formulas in the DOM and saves screenshots; the same page without the course stylesheet shows
the old fault, so the check can fail.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import latex2mathml.converter
import nbformat
import pytest
from class_builders import FIXTURE, filled, find, fixture_course, sandbox_problem, write
from helpers import CHROMIUM, CHROMIUM_ARGS, wait_for_jupyter
from nbconvert.exporters import HTMLExporter
from nbgrader.api import Gradebook
from traitlets.config import Config

from course_grading.nbgrader import course as wc
from course_grading.pages import mathml
from course_grading.pages.active import clean_html
from course_grading.pages.course_style import STYLE_ID, with_course_style
from course_grading.pages.formgrader_csp import install
from course_grading.pages.safe_pages import FEEDBACK_CSP, FeedbackExporter, SafeMarkdown

ANSWER = r"""Scores grow with $s = b \times h \times n^2$:

| shape | score elements |
|---|---|
| 16 × 1024 | 5.37e8 |
| 2 × 8192 | 4.29e9 |

$$\frac{2 \times 8192^2}{16 \times 1024^2} = 8$$
"""
#: Elements that must not survive cleaning, MathML's active or embedding ones included.
ACTIVE_TAGS = {"script", "maction", "semantics", "annotation", "annotation-xml", "mglyph",
               "iframe", "style", "svg", "form"}  # fmt: skip
_TAG = re.compile(r"<([a-zA-Z][^\s/>]*)([^>]*)>")
_ATTR = re.compile(r"([^\s=/]+)\s*(?:=\s*(\"[^\"]*\"|'[^']*'|[^\s>]+))?")


def active(markup: str) -> list[str]:
    """Every element or attribute of ``markup`` (as a browser parses its tags) that runs or
    loads something: a tag of ``ACTIVE_TAGS``, an event handler, a link or image source that
    is not a data: image. Escaped text (``&lt;img onerror``) is text, and not counted."""
    found = []
    for tag in _TAG.finditer(markup):
        name = tag.group(1).lower()
        found += [f"<{name}>"] if name in ACTIVE_TAGS else []
        for attr in _ATTR.finditer(tag.group(2)):
            key, value = attr.group(1).lower(), (attr.group(2) or "").strip("\"'")
            if key.startswith("on") or (
                key in ("href", "xlink:href", "src")
                and not value.startswith(("data:image/", "https://", "#"))
            ):
                found.append(f"{name} {key}={value[:20]}")
    return found


def render(markdown: str) -> str:
    return SafeMarkdown(parent=HTMLExporter())({}, markdown)


def test_tex_becomes_mathml():
    more = r"\begin{align} a &= b \\ c &= d \end{align}" + "\n\nand \\\\(x_i\\\\)."
    shown = render(ANSWER + "\n" + more)
    assert shown.count("<math") == 4 and "$" not in shown and "\\frac" not in shown
    assert '<math display="block"><mrow><mfrac>' in shown  # $$...$$, and the environment
    assert '<math display="inline"><mrow><mi>s</mi>' in shown
    assert "<td>2 × 8192</td>\n  <td>4.29e9</td>" in shown  # the table is untouched
    plain = HTMLExporter().markdown2html({}, ANSWER)  # the check can fail: nbconvert's own
    assert "<math" not in plain and "$s = b \\times h \\times n^2$" in plain


@pytest.mark.parametrize(
    "tex",
    [
        r"\text{<img src=x onerror=fetch(1)>}",
        r"\href{javascript:fetch(1)}{x}",
        r"\text{a<b}",
    ],
)
def test_what_the_converter_copies_as_it_is_stays_tex(tex):
    raw = latex2mathml.converter.convert(tex)
    assert "<img" in raw or "href=" in raw or "<b" in raw  # the converter's output is live
    assert mathml.tex_to_mathml(tex, display=False) is None
    shown = render(f"Try ${tex}$ here.")
    assert "<math" not in shown and not active(shown), shown
    assert "here" in shown and "\\" in shown  # the formula stays, as text


def test_broken_or_deep_tex_stays_text_quickly():
    start = time.perf_counter()
    for tex in (r"\frac{1}{", "{" * 3000 + "x" + "}" * 3000, "x^" * 2000 + "y"):
        assert mathml.tex_to_mathml(tex, display=True) is None
    assert time.perf_counter() - start < 2


def test_a_cell_converts_at_most_its_budget_of_tex():
    formula = "$" + "x+" * 500 + "y$ "
    count = mathml.MAX_TEX_CHARS // 1001 + 3
    shown = render(formula * count)
    assert shown.count("<math") == mathml.MAX_TEX_CHARS // 1001 < count
    assert "x+x+" in shown  # the rest as TeX text


MATHML_PAYLOADS = {
    "maction": '<math><maction actiontype="statusline"><mi>x</mi><mtext>y</mtext></maction></math>',
    "annotation-xml": '<math><semantics><mi>x</mi><annotation-xml encoding="text/html">'
    "<img src=x onerror=fetch(1)></annotation-xml></semantics></math>",
    "mglyph": '<math><mi><mglyph src="https://canary.example/x.png"/></mi></math>',
    "href": '<math href="javascript:fetch(1)"><mi xlink:href="javascript:fetch(1)">x</mi></math>',
    "mtext style": "<math><mtext><table><mglyph><style><img src=x onerror=fetch(1)>",
    "form confusion": "<form><math><mtext></form><form><mglyph><svg><mtext><style><path "
    'id="</style><img onerror=fetch(1) src>">',
    "script": "<math><mi><script>fetch(1)</script></mi></math>",
    "event": '<math onload="fetch(1)"><mi onmouseover="fetch(1)">x</mi></math>',
}


@pytest.mark.parametrize("kind", sorted(MATHML_PAYLOADS))
def test_mathml_payloads_come_out_inert(kind):
    payload = MATHML_PAYLOADS[kind]
    assert active(payload), "the payload is live to start with"
    for cleaned in (clean_html(payload), render(f"An answer.\n\n{payload}\n")):
        assert not active(cleaned), (kind, cleaned)


def test_honest_mathml_keeps_its_layout_attributes():
    tex = r"\left(\frac{a}{b}\right) \xrightarrow{n} \binom{n}{k} \boxed{x}"
    made = mathml.tex_to_mathml(tex, display=True)
    assert made and clean_html(made).count("<m") == made.count("<m")
    for kept in ('stretchy="true"', 'linethickness="0"', 'notation="box"', "<mpadded"):
        assert kept in clean_html(made)


def test_every_page_gets_the_course_stylesheet_once():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(ANSWER)])
    page, _ = FeedbackExporter(config=Config()).from_notebook_node(nb)
    head = page[: page.index("</head>")]
    assert head.index("Content-Security-Policy") < head.index(STYLE_ID)  # the policy first
    assert with_course_style(page) == page and page.count(STYLE_ID) == 1
    assert with_course_style("<p>a fragment</p>") == "<p>a fragment</p>"

    class Handler:  # formgrader's handlers write whole pages through write()
        settings: dict = {}
        written: list = []

        def write(self, chunk):
            self.written.append(chunk)

        def set_header(self, name, value):
            pass

    install(Handler)
    Handler().write("<!DOCTYPE html>\n<html><head><title>x</title></head><body></body></html>")
    assert STYLE_ID in Handler.written[-1]


# --- in Chromium, on pages the grader really made ------------------------------------------------


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def formgrader(course: Path):
    """A token-less Jupyter server on 127.0.0.1 in ``course`` (its formgrader)."""
    port, log = _port(), course.parent / "server.log"
    env = {**wc.nbgrader_env(), "JUPYTER_CONFIG_DIR": str(course.parent / ".jupyter")}
    args = [str(Path(sys.executable).with_name("jupyter")), "server", "--no-browser"]
    args += ["--ip", "127.0.0.1", f"--port={port}", "--IdentityProvider.token="]
    args += ["--ServerApp.password=", "--allow-root", f"--ServerApp.root_dir={course}"]
    with open(log, "w") as out:
        server = subprocess.Popen(args, cwd=course, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_jupyter(server, url, log, 120)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


MEASURE = """() => {
  const cell = [...document.querySelectorAll('.rendered_html')]
      .find(e => e.textContent.includes('4.29e9'));
  const text = (td) => { const r = document.createRange(); r.selectNodeContents(td);
                         return r.getBoundingClientRect(); };
  const gaps = [...cell.querySelectorAll('tbody tr')].map(tr => {
      const [a, b] = tr.querySelectorAll('td'); return text(b).left - text(a).right; });
  const frac = cell.querySelector('math[display=block] mfrac');
  const [top, bottom] = frac ? [...frac.children].map(c => c.getBoundingClientRect()) : [];
  return {gaps, padding: getComputedStyle(cell.querySelector('td')).paddingLeft,
          maths: cell.querySelectorAll('math').length,
          stacked: frac ? top.bottom <= bottom.top + 1 && top.width > 0 : false,
          dollars: cell.textContent.includes('$'), scripts: window.__ran === true};
}"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pages")
    root, work = fixture_course(tmp)
    nb = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    find(nb, "written_reflect").source = ANSWER + '\n<img src=x onerror="window.__ran=true">'
    write(tmp / "class" / f"student_{FIXTURE}.ipynb", nb)
    # off by one: the check's message on this function is longer than a line of the page
    find(nb, "answer_tokens").source = (
        'def tokens_per_batch(batch_size, seq_len):\n    """Tokens."""\n'
        "    return batch_size * seq_len - 1"
    )
    write(tmp / "class" / f"offbyone_{FIXTURE}.ipynb", nb)
    command = [
        sys.executable,
        "-m",
        "course_grading",
        str(tmp / "class"),
        "--out",
        str(tmp / "out"),
    ]
    command += ["--root", str(root), "--jobs", "1"] + (
        ["--no-sandbox"] if sandbox_problem() else []
    )
    proc = subprocess.run(command, capture_output=True, text=True, env=wc.nbgrader_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "out"


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_tables_and_formulas_look_right_in_feedback_and_formgrader(graded, tmp_path):
    playwright = pytest.importorskip("playwright.sync_api")
    course, feedback = graded / "course", graded / "feedback" / "student" / f"{FIXTURE}.html"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        submission = gb.find_submission_notebook(FIXTURE, FIXTURE, "student").id
    bare = tmp_path / "without-course-style.html"  # the check can fail: the old page
    page_text = feedback.read_text(encoding="utf-8")
    start = page_text.index(f'<style id="{STYLE_ID}">')
    bare.write_text(page_text[:start] + page_text[page_text.index("</style>", start) + 8 :])
    with playwright.sync_playwright() as p, formgrader(course) as url:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page, seen = browser.new_page(viewport={"width": 1000, "height": 900}), {}
        for name, address in [
            ("feedback", feedback.as_uri()),
            ("formgrader", f"{url}/formgrader/submissions/{submission}/"),
            ("bare", bare.as_uri()),
        ]:
            page.goto(address)
            page.wait_for_load_state("networkidle")
            seen[name] = page.evaluate(MEASURE)
            cell = page.locator(".rendered_html", has_text="4.29e9").first
            cell.screenshot(path=str(tmp_path / f"{name}.png"))
        browser.close()
    print(f"\nscreenshots in {tmp_path}: {seen}")
    for name in ("feedback", "formgrader"):
        assert min(seen[name]["gaps"]) >= 8 and seen[name]["padding"] != "0px", seen[name]
        assert seen[name]["maths"] == 2 and seen[name]["stacked"], seen[name]
        assert not seen[name]["dollars"] and not seen[name]["scripts"], seen[name]
    assert min(seen["bare"]["gaps"]) < 1 and seen["bare"]["padding"] == "0px", seen["bare"]
    assert FEEDBACK_CSP in page_text  # and the policy still holds on the page


WRAPPED = """() => [...document.querySelectorAll('pre')]
    .filter(p => p.textContent.includes('Graded outside your notebook: 0 of'))
    .map(p => ({scrolls: p.scrollWidth > p.clientWidth + 1, height: p.clientHeight,
                line: parseFloat(getComputedStyle(p).lineHeight)}))"""


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_a_long_check_message_wraps_in_the_feedback_page(graded, tmp_path):
    """Issue 40, item 6: a failed item's message (``tokens_per_batch(2, 8192) returned 16383:
    that is not the number of tokens ...``) sat on one line of its ``<pre>``, which scrolled
    sideways; it wraps between words now. The page without the course stylesheet shows the old
    fault, so the check can fail."""
    playwright = pytest.importorskip("playwright.sync_api")
    feedback = graded / "feedback" / "offbyone" / f"{FIXTURE}.html"
    page_text = feedback.read_text(encoding="utf-8")
    assert "returned 16383: that is not the number of tokens" in page_text
    bare = tmp_path / "without-course-style.html"
    start = page_text.index(f'<style id="{STYLE_ID}">')
    bare.write_text(page_text[:start] + page_text[page_text.index("</style>", start) + 8 :])
    seen = {}
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1000, "height": 900})
        for name, address in (("feedback", feedback.as_uri()), ("bare", bare.as_uri())):
            page.goto(address)
            page.wait_for_load_state("networkidle")
            seen[name] = page.evaluate(WRAPPED)
            message = page.locator("pre", has_text="Graded outside your notebook: 0 of").first
            message.screenshot(path=str(tmp_path / f"message-{name}.png"))
        browser.close()
    print(f"\nscreenshots in {tmp_path}: {seen}")
    assert seen["feedback"] and not any(m["scrolls"] for m in seen["feedback"]), seen
    assert any(m["height"] >= 2 * m["line"] for m in seen["feedback"]), seen  # it wrapped
    assert all(m["scrolls"] for m in seen["bare"]), seen
