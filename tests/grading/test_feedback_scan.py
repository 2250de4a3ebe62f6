"""The feedback scan (``course_grading.leaks``) and the feedback preprocessor, on the fixture.

No nbgrader run: the instructor lines are read from the fixture's two versions, and the pages
are small HTML strings written the way nbconvert writes code (tokens in ``<span>``s).
"""

from __future__ import annotations

import json

import nbformat
import pytest
from class_builders import FIXTURE, FIXTURE_ROOT
from traitlets.config import Config

from course_grading import course as wc
from course_grading.feedback import (
    FeedbackWithheld,
    HideHiddenTests,
    WithholdInstructorMaterial,
    withheld_record,
)
from course_grading.items import items_of
from course_grading.leaks import instructor_lines, leaked, own_lines, visible_text

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


def test_withhold_refuses_a_notebook_that_prints_a_hidden_test(tmp_path):
    step = _course(tmp_path, nbformat.read(str(RELEASE), as_version=4))
    with pytest.raises(FeedbackWithheld, match="feedback withheld: it contains instructor"):
        step.preprocess(_printed(f"\x1b[0;31m{HIDDEN}\x1b[0m"), RESOURCES)  # colours don't hide it
    record = withheld_record(tmp_path, "ana", FIXTURE, FIXTURE)
    assert HIDDEN in record.read_text(encoding="utf-8")
    step.preprocess(_printed("all tests passed"), RESOURCES)  # a clean page: the record goes
    assert not record.exists()


def test_withhold_reads_html_outputs_as_a_reader_sees_them(tmp_path):
    step = _course(tmp_path, nbformat.read(str(RELEASE), as_version=4))
    cell = nbformat.v4.new_code_cell("display(HTML(x))")
    tagged = "".join(f"<b>{word}</b> " for word in HIDDEN.split())
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": tagged})]
    with pytest.raises(FeedbackWithheld):
        step.preprocess(nbformat.v4.new_notebook(cells=[cell]), RESOURCES)


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
