"""The feedback scan (``course_grading.review.leaks``) and the feedback preprocessor, on a fixture.

No nbgrader run: the instructor lines are read from the fixture's two versions, and the pages
are small HTML strings written the way nbconvert writes code (tokens in ``<span>``s). The scan
is linear in what it reads and has a time budget (issue 19, item 5), and it reads through the
disguises of item 7 (base64, zero-width characters, hidden elements).
"""

from __future__ import annotations

import base64
import html
import json
import re
import sys
import time
import unicodedata
from pathlib import Path

import nbformat
import pytest
from class_builders import FIXTURE, FIXTURE_ROOT
from traitlets.config import Config

from course_grading.judge.items import items_of
from course_grading.nbgrader import course as wc
from course_grading.pages import withheld
from course_grading.pages.feedback import (
    FeedbackWithheld,
    HideHiddenTests,
    WithholdInstructorMaterial,
    withheld_record,
)
from course_grading.review import leaks, page_text
from course_grading.review.leaks import (
    found_in,
    instructor_lines,
    leaked,
    notebook_text,
    own_lines,
    unchecked,
    visible_text,
)
from course_grading.review.unmask import fold

SOURCE = FIXTURE_ROOT / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
RELEASE = FIXTURE_ROOT / wc.RELEASE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
# The hidden regions now hold only declarations (no hidden test reaches a kernel): a declaration
# line is still instructor material a page must not show.
HIDDEN = items_of(FIXTURE)["test_tokens"].declaration_line()
SOLUTION = "return batch_size * seq_len"


@pytest.fixture(scope="module")
def secret():
    return instructor_lines(SOURCE, RELEASE)


def _page(tmp_path, text: str):
    words = "".join(f'<span class="n">{w}</span> ' for w in text.split())
    page = tmp_path / "feedback.html"
    page.write_text(f"<html><style>.n {{color: red}}</style><pre>{words}</pre></html>")
    return page


def test_instructor_lines_are_the_hidden_and_solution_regions(secret):
    assert HIDDEN in secret and SOLUTION in secret
    assert items_of(FIXTURE)["test_ratio"].declaration_line() in secret
    assert "assert tokens_per_batch(16, 1024) == 16_384" not in secret  # a visible test
    assert not any("BEGIN" in line for line in secret)
    model_answer = next(line for line in secret if line.startswith("Linear activations"))
    assert "seq²" in model_answer  # a written answer's model answer is instructor material


def test_a_page_quoting_a_hidden_test_leaks(tmp_path, secret):
    page = _page(tmp_path, f"the spy printed: {HIDDEN} and more")
    assert leaked(page, secret, frozenset()) == [HIDDEN]


def test_the_students_own_lines_do_not_count(tmp_path, secret):
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(f"def f(batch_size, seq_len):\n    {SOLUTION}")]
    )
    mine = tmp_path / "mine.ipynb"
    nbformat.write(nb, str(mine))
    page = _page(tmp_path, f"def f(batch_size, seq_len): {SOLUTION}")
    assert leaked(page, secret, frozenset()) == [SOLUTION]
    assert leaked(page, secret, own_lines(mine)) == []


def test_visible_text_drops_styles_and_tags():
    assert visible_text("<style>p {x: 1}</style><p>a &lt; b</p>") == "a < b"


def _test_cell(source: str) -> nbformat.NotebookNode:
    meta = {"grade": True, "grade_id": "t", "locked": True, "points": 1, "schema_version": 3}
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {**meta, "solution": False}})


def test_hidden_tests_preprocessor_hides_region_and_traceback():
    cell = _test_cell(
        "assert f(1) == 1\n### BEGIN HIDDEN TESTS\nassert f(2) == 99\n### END HIDDEN TESTS"
    )
    cell.outputs = [
        nbformat.v4.new_output(
            "error", ename="AssertionError", evalue="", traceback=["assert f(2) == 99"]
        )
    ]
    out, _ = HideHiddenTests().preprocess_cell(cell, {}, 0)
    assert "f(2)" not in out.source and "f(1)" in out.source
    assert "f(2)" not in json.dumps(out.outputs)


def test_hidden_tests_preprocessor_leaves_the_students_cells_alone():
    # A student's cell quoting the delimiter without its end made nbgrader's step raise and
    # the student lose their feedback file.
    cell = nbformat.v4.new_code_cell("if 'BEGIN HIDDEN TESTS' in text:\n    print(text)")
    out, _ = HideHiddenTests().preprocess_cell(cell, {}, 0)
    assert out.source == cell.source


# --- the feedback step that refuses to render a leak (WithholdInstructorMaterial) ------------


def _course(tmp_path, submitted: nbformat.NotebookNode | None):
    """A course folder with the fixture's two versions and, optionally, a submission."""
    for step, path in (("source", SOURCE), ("release", RELEASE)):
        dest = tmp_path / step / FIXTURE / f"{FIXTURE}.ipynb"
        dest.parent.mkdir(parents=True)
        dest.write_bytes(path.read_bytes())
    if submitted is not None:
        dest = tmp_path / "submitted" / "ana" / FIXTURE / f"{FIXTURE}.ipynb"
        dest.parent.mkdir(parents=True)
        nbformat.write(submitted, str(dest))
    config = Config()
    config.CourseDirectory.root = str(tmp_path)
    config.CourseDirectory.source_directory = "source"
    config.CourseDirectory.release_directory = "release"
    return WithholdInstructorMaterial(config=config)


RESOURCES = {"nbgrader": {"student": "ana", "assignment": FIXTURE, "notebook": FIXTURE}}


def _printed(text: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("print(secret)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    return nbformat.v4.new_notebook(cells=[cell])


def _withheld(step, nb) -> bool:
    """Whether ``step`` held ``nb``'s page back: the notice rendered in its place, its page
    noted for removal (``withheld.py``); nothing raised, so nbgrader reports success."""
    withheld.PENDING.clear()
    out, _ = step.preprocess(nb, RESOURCES)
    held = out.cells[0].source == withheld.NOTICE
    page = Path(step.config.CourseDirectory.root) / "feedback" / "ana" / FIXTURE / f"{FIXTURE}.html"
    assert withheld.PENDING == ([page] if held else [])
    if held:
        assert len(out.cells) == 1 and HIDDEN not in json.dumps(out)
    return held


def test_withhold_holds_back_a_notebook_that_prints_a_hidden_test(tmp_path):
    step = _course(tmp_path, nbformat.read(str(RELEASE), as_version=4))
    assert _withheld(step, _printed(f"\x1b[0;31m{HIDDEN}\x1b[0m"))  # colours don't hide it
    record = withheld_record(tmp_path, "ana", FIXTURE, FIXTURE)
    assert HIDDEN in record.read_text(encoding="utf-8")
    assert not _withheld(step, _printed("all tests passed"))  # a clean page: the record goes
    assert not record.exists()


def test_the_post_convert_hook_removes_the_held_back_page(tmp_path):
    page = tmp_path / "feedback" / "ana" / FIXTURE / f"{FIXTURE}.html"
    page.parent.mkdir(parents=True)
    page.write_text(withheld.NOTICE)  # what nbgrader wrote from the notice
    kept = page.with_name("other.html")
    kept.write_text("fine")
    withheld.PENDING[:] = [page]
    assert withheld.remove_withheld_pages(assignment=FIXTURE, student="*", notebooks=[]) == [page]
    assert not page.exists() and kept.exists() and withheld.PENDING == []


def test_withhold_reads_html_outputs_as_a_reader_sees_them(tmp_path):
    step = _course(tmp_path, nbformat.read(str(RELEASE), as_version=4))
    cell = nbformat.v4.new_code_cell("display(HTML(x))")
    tagged = "".join(f"<b>{word}</b> " for word in HIDDEN.split())
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": tagged})]
    assert _withheld(step, nbformat.v4.new_notebook(cells=[cell]))


def test_withhold_lets_the_students_own_lines_through(tmp_path):
    mine = nbformat.read(str(RELEASE), as_version=4)
    mine.cells.append(nbformat.v4.new_code_cell(f"# I guess the test is:\n{HIDDEN}"))
    step = _course(tmp_path, mine)
    nb, _ = step.preprocess(_printed(HIDDEN), RESOURCES)
    assert nb.cells[0].outputs[0]["text"] == HIDDEN


def test_withhold_refuses_what_it_cannot_check(tmp_path):
    step = _course(tmp_path, None)
    with pytest.raises(FeedbackWithheld, match=r"cannot check it .* without .*submitted/ana"):
        step.preprocess(_printed("nothing"), RESOURCES)


# --- a linear-time scan with a time budget (issue 19, item 5) ---------------------------------


def _html_output(markup: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("display(HTML(x))")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": markup})]
    return nbformat.v4.new_notebook(cells=[cell])


def _best_of(repeats: int, run) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _feedback_scans(tmp_path: Path, secret: frozenset[str], markup: str) -> float:
    """Seconds for both scans of one feedback (nbgrader's step on the notebook's text, then
    the page the grader keeps) of a ``text/html`` output ``markup``."""
    nb = _html_output(markup)
    page = tmp_path / "page.html"
    page.write_text(f"<html><body><pre>code</pre>{markup}</body></html>")  # as nbconvert puts it

    def both() -> None:
        assert found_in(notebook_text(nb), secret, frozenset()) == []
        assert leaked(page, secret, frozenset()) == []

    return _best_of(3, both)


def _linear(small: float, large: float) -> bool:
    """Ten times the input in under twenty times the time (quadratic would be a hundred). A
    time under 10 ms counts as 10 ms: below that, caches and the clock decide the ratio."""
    return large < 20 * max(small, 0.01)


def test_the_scan_grows_linearly_with_its_input(tmp_path, secret):
    small = _feedback_scans(tmp_path, secret, "<" * 400_000)
    large = _feedback_scans(tmp_path, secret, "<" * 4_000_000)
    print(f"feedback scans of a text/html output of '<': 400 KB {small:.3f} s, 4 MB {large:.3f} s")
    assert _linear(small, large), (small, large)


def test_the_linearity_check_fails_the_old_regex():
    """The regular expression the scan used (``<[^>]+>``) fails the same check."""
    old = re.compile(r"<[^>]+>")
    small = _best_of(2, lambda: old.sub("", "<" * 4_000))
    large = _best_of(1, lambda: old.sub("", "<" * 40_000))
    assert not _linear(small, large), (small, large)


@pytest.mark.parametrize("piece", ["<a b='", "x<", "<!--", "<![", "<<a>", "<a b", "&#"])
def test_markup_that_trips_other_parsers_is_read_in_linear_time(piece):
    """Python 3.11's ``html.parser`` is quadratic on each of these (and raises on ``<![``)."""
    small = _best_of(2, lambda: page_text.read(piece * (200_000 // len(piece))))
    large = _best_of(2, lambda: page_text.read(piece * (2_000_000 // len(piece))))
    assert _linear(small, large), (small, large)


def test_a_scan_past_its_budget_withholds_the_page(tmp_path, secret):
    nb = _html_output("<a>" * 100_000)
    assert found_in(notebook_text(nb), secret, frozenset()) == []  # in budget: clean
    assert "budget while reading an HTML page" in unchecked(
        found_in(notebook_text(nb, seconds=-1), secret, frozenset())
    )
    assert "budget" in unchecked(found_in("all tests passed", secret, frozenset(), seconds=-1))
    page = _page(tmp_path, "all tests passed")
    assert leaked(page, secret, frozenset()) == []
    assert "budget" in unchecked(leaked(page, secret, frozenset(), seconds=-1))
    assert unchecked([HIDDEN]) == ""  # a line found is not a scan that stopped


def test_a_scan_too_large_to_read_withholds_the_page(secret, monkeypatch):
    monkeypatch.setattr(leaks, "MAX_SCAN_CHARS", 100)
    assert "over its" in unchecked(found_in("x" * 101, secret, frozenset()))
    assert found_in("x" * 100, secret, frozenset()) == []


# --- hidden tests in disguise (issue 19, item 7) ------------------------------------------------


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


PRINTED = {
    "base64": lambda s: "B64 " + base64.b64encode(s.encode()).decode(),
    "base64 over lines": lambda s: "B64\n" + base64.encodebytes(((s + "\n") * 4).encode()).decode(),
    "base64 bytes repr": lambda s: repr(base64.encodebytes(((s + "\n") * 4).encode())),
    "url-safe base64": lambda s: base64.urlsafe_b64encode(s.encode()).decode(),
    "base64 twice": lambda s: base64.b64encode(base64.b64encode(s.encode())).decode(),
    "zero-width spaces": lambda s: "ZW " + "\u200b".join(s),
    "word joiners and soft hyphens": lambda s: "\u2060\u00ad".join(s),
    "base64 with zero-width spaces": lambda s: "\u200b".join(base64.b64encode(s.encode()).decode()),
    "full-width letters": _fullwidth,
    "a JSON string": lambda s: json.dumps({"seen": s}),
    "no-break spaces": lambda s: s.replace(" ", "\xa0"),
}
MARKUP = {
    "<span hidden>": lambda s: f"<span hidden>{html.escape(s)}</span>",
    "display:none": lambda s: f'<span style="display: none">{html.escape(s)}</span>',
    "split by hidden spans": lambda s: "".join(
        f'{html.escape(c)}<span style="display:none">{i}</span>' for i, c in enumerate(s)
    ),
    "a title attribute": lambda s: f'<abbr title="{html.escape(s)}">?</abbr>',
    "a comment": lambda s: f"<!-- {s} -->",
    "character references": lambda s: "".join(f"&#{ord(c)};" for c in s),
    "a script": lambda s: f"<script>var x = {json.dumps(s)};</script>",
}


@pytest.mark.parametrize("disguise", sorted(PRINTED))
def test_a_printed_hidden_test_is_found_in_disguise(tmp_path, secret, disguise):
    text = PRINTED[disguise](HIDDEN)
    assert HIDDEN not in text  # the disguise hides it from a plain search
    assert found_in(notebook_text(_printed(text)), secret, frozenset()) == [HIDDEN]
    page = tmp_path / "page.html"
    page.write_text(f"<html><body><pre>{html.escape(text)}</pre></body></html>")
    assert leaked(page, secret, frozenset()) == [HIDDEN]
    honest = PRINTED[disguise]("tokens_per_batch(16, 1024) == 16_384")  # the case that passes
    assert found_in(notebook_text(_printed(honest)), secret, frozenset()) == []


@pytest.mark.parametrize("disguise", sorted(MARKUP))
def test_a_hidden_test_in_markup_is_found(tmp_path, secret, disguise):
    markup = MARKUP[disguise](HIDDEN)
    assert found_in(notebook_text(_html_output(markup)), secret, frozenset()) == [HIDDEN]
    page = tmp_path / "page.html"
    page.write_text(f"<html><body>{markup}</body></html>")
    assert leaked(page, secret, frozenset()) == [HIDDEN]


def test_what_a_reader_sees_leaves_hidden_elements_out():
    shown = 'ass<span style="display:none">XYZ</span>ert <b hidden>no</b>yes<!-- c -->'
    assert visible_text(shown) == "assert yes"
    read = page_text.read(shown)
    assert "XYZ" in read.text and "display:none" in read.extra and " c " in read.extra


def test_fold_removes_every_invisible_format_character():
    formats = "".join(
        chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"
    )
    assert fold(f"a{formats}b") == "ab"
    assert fold(_fullwidth("assert x")) == "assert x" and fold("a\u00a0 \n b") == "a b"


def test_a_copy_of_the_solution_vouches_for_nothing(tmp_path, secret):
    """A submission that is the instructor's notebook: its solution cells are not its own."""
    copied = tmp_path / "copy.ipynb"
    copied.write_bytes(SOURCE.read_bytes())
    page = _page(tmp_path, f"def f(batch_size, seq_len): {SOLUTION}")
    assert leaked(page, secret, own_lines(copied)) == [SOLUTION]
    step = _course(tmp_path / "course", nbformat.read(str(SOURCE), as_version=4))
    assert _withheld(step, _printed(SOLUTION))
