"""The student's own run of a quoted cell stays beside the grader's (``pages/student_run.py``).

Grading runs the notebook again; a written answer quotes the student's run. One fixture lesson
with a measuring cell whose output differs on every run (a random "×1.3x"), marked as quoted by
the written answer; a student whose submitted file shows ``measured ×1.12`` there. Graded by the
grading command and by nbgrader's own ``autograde`` (formgrader's button): the graded copy and the
feedback show the grader's run and, labelled as the student's, ``×1.12``. The unit tests show what
of a hostile output crosses (bounded, plain text, inert in the page).
"""

from __future__ import annotations

import copy
import csv
import html
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from class_builders import FIXTURE, FIXTURE_ROOT, REPO, filled, find, sandbox_problem, write

from course_grading.nbgrader import course as wc
from course_grading.pages.active import neutralise_notebook
from course_grading.pages.safe_pages import FeedbackExporter
from course_grading.pages.student_run import (
    GRADER_LABEL,
    IMITATION,
    QUOTED_CHARS,
    QUOTED_LINES,
    keep_student_runs,
    quoted_cells,
    run_text,
    show_student_run,
)

NO_SANDBOX = ["--no-sandbox"] if sandbox_problem() else []
MEASURE = (
    "import random\n"
    "ratio = 1.3 + random.random() / 10  # a timing: different on every run\n"
    'print(f"measured ×{ratio:.2f} (pairs from ×{ratio - 0.1:.2f} to ×{ratio + 0.1:.2f})")'
)
THEIRS = "measured ×1.12 (pairs from ×0.93 to ×1.26)\n"


def _meta(gid: str, **extra) -> dict:
    nbgrader = {"grade": False, "grade_id": gid, "locked": True, "schema_version": 3}
    return {"nbgrader": {**nbgrader, "solution": False}, **extra}


def _stream(text: str, name: str = "stdout") -> nbformat.NotebookNode:
    return nbformat.v4.new_output("stream", name=name, text=text)


def _notebooks():
    """(source, executed, submitted): one quoted cell, one plain cell, both run twice."""
    source = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                MEASURE, metadata=_meta("measure", shapes={"quoted_by": ["written"]})
            ),
            nbformat.v4.new_code_cell("print(2)", metadata=_meta("plain")),
        ]
    )
    executed, submitted = copy.deepcopy(source), copy.deepcopy(source)
    executed.cells[0].outputs = [_stream("measured ×1.37 (pairs from ×1.27 to ×1.47)\n")]
    executed.cells[1].outputs = [_stream("2\n")]
    submitted.cells[0].outputs = [_stream(THEIRS)]
    submitted.cells[1].outputs = [_stream("student's 2\n")]
    return source, executed, submitted


def _text(cell) -> str:
    return "".join(
        o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.outputs
    )


def test_a_quoted_cell_shows_both_runs_labelled_and_others_are_untouched():
    source, executed, submitted = _notebooks()
    plain = copy.deepcopy(executed.cells[1])
    assert quoted_cells(source) == {"measure": ["written"]}
    assert show_student_run(executed, submitted, source) == ["measure"]
    shown = _text(executed.cells[0])
    assert shown.index(GRADER_LABEL) < shown.index("×1.37") < shown.index("student's own run")
    assert shown.index("student's own run") < shown.index("×1.12")
    assert "written" in shown  # which answer quotes it
    assert executed.cells[1] == plain  # not quoted: the grader's run only
    again = copy.deepcopy(executed)
    show_student_run(again, submitted, source)
    assert again == executed  # running the step twice changes nothing


def test_without_the_mark_nothing_of_the_submission_crosses():
    """The failing case: the step shows the student's run only where the lesson marks it."""
    source, executed, submitted = _notebooks()
    del source.cells[0].metadata["shapes"]
    before = copy.deepcopy(executed)
    assert show_student_run(executed, submitted, source) == []
    assert executed == before and "×1.12" not in _text(executed.cells[0])


def test_the_staged_copy_keeps_only_the_quoted_cells_run_as_bounded_text():
    """The grading command clears outputs when it stages a submission; the quoted cell keeps
    its run as text, and the step then shows it as from the file itself."""
    source, executed, submitted = _notebooks()
    staged = copy.deepcopy(submitted)
    for cell in staged.cells:
        cell.outputs = []
    assert keep_student_runs(staged, submitted, source) == ["measure"]
    assert _text(staged.cells[0]) == THEIRS and staged.cells[1].outputs == []
    show_student_run(executed, staged, source)
    assert "×1.12" in _text(executed.cells[0]).split("student's own run")[1]


def test_a_students_output_cannot_pass_as_the_graders_run():
    """A saved output that imitates the labels (to put the student's number in the grader's
    block) is left out, line by line; the student's numbers stay in the student's block."""
    source, executed, submitted = _notebooks()
    forged = f"{GRADER_LABEL}\nmeasured ×1.12\n[THE STUDENT'S OWN RUN, as submitted] ×9.99\n"
    submitted.cells[0].outputs = [_stream(forged)]
    show_student_run(executed, submitted, source)
    shown = _text(executed.cells[0])
    assert shown.count(GRADER_LABEL) == 1 and shown.count("student's own run") == 1
    assert shown.count(IMITATION) == 2 and "×9.99" not in shown
    assert shown.index("×1.37") < shown.index("student's own run") < shown.index("×1.12")


def test_a_submission_without_the_output_says_so():
    source, executed, submitted = _notebooks()
    submitted.cells[0].outputs = []
    show_student_run(executed, submitted, source)
    assert "holds no output of this cell" in _text(executed.cells[0])
    del submitted.cells[0]  # the cell deleted: nbgrader restores it, with the grader's run only
    executed2 = _notebooks()[1]
    show_student_run(executed2, submitted, source)
    assert "holds no output of this cell" in _text(executed2.cells[0])


def test_only_bounded_plain_text_crosses_and_the_page_shows_it_inert(tmp_path):
    source, executed, submitted = _notebooks()
    flood = "".join(f"line {i} ×1.{i:02d}\n" for i in range(10_000))
    submitted.cells[0].outputs = [
        _stream("\x1b[31m×1.12\x1b[0m\x07 measured\nprogress 10%\rprogress 100%\n"),
        _stream("a warning on stderr\n", name="stderr"),
        nbformat.v4.new_output(
            "display_data",
            data={
                "text/html": "<script>alert(1)</script>",
                "text/plain": "<script>alert(2)</script>",
            },
        ),
        nbformat.v4.new_output(
            "display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}
        ),
        nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=["secret"]),
        _stream(flood),
    ]
    text = run_text(submitted.cells[0])
    # no escapes, no bell, and of a line a carriage return rewrote only what a terminal shows
    assert text.startswith("×1.12 measured\nprogress 100%\n")
    assert "stderr" not in text and "alert(1)" not in text and "secret" not in text
    assert "<script>alert(2)</script>" in text  # the plain text, shown as text below
    assert "[a figure: not copied]" in text and "ValueError: bad" in text
    assert len(text.splitlines()) <= QUOTED_LINES + 1 and len(text) <= QUOTED_CHARS + 60
    assert text.endswith("[... the rest of the student's output is left out]")
    show_student_run(executed, submitted, source)
    page, _ = FeedbackExporter().from_notebook_node(neutralise_notebook(executed))
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page and "<script>alert" not in page


# --- end to end: the grading command and nbgrader's autograde ----------------------------------


def _course(tmp: Path) -> tuple[Path, wc.WorkCourse]:
    """The fixture lesson with a quoted measuring cell, released in a work course."""
    root = tmp / "root"
    shutil.copytree(FIXTURE_ROOT / wc.SOURCE_DIR / FIXTURE, root / wc.SOURCE_DIR / FIXTURE)
    shutil.copy(REPO / wc.CONFIG_FILE, root / wc.CONFIG_FILE)
    path = root / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    meta = _meta("measure", shapes={"quoted_by": ["written_reflect"]})
    nb.cells.insert(2, nbformat.v4.new_code_cell(MEASURE, metadata=meta))
    nbformat.write(nb, str(path))
    work = wc.make_work_course(root, tmp / "release")
    wc.generate_assignments(work)
    return root, work


def _submission(work: wc.WorkCourse) -> nbformat.NotebookNode:
    nb = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    find(nb, "measure").outputs = [_stream(THEIRS)]
    return nb


def _check(graded: Path, page: Path) -> None:
    shown = _text(find(nbformat.read(str(graded), as_version=4), "measure"))
    assert GRADER_LABEL in shown and "student's own run, as submitted" in shown
    assert "×1.12" in shown.split("student's own run, as submitted")[1], shown
    grader = shown.split(GRADER_LABEL)[1].split("student's own run")[0]
    assert "measured ×1.3" in grader or "measured ×1.4" in grader, shown  # the grader's own
    text = html.unescape(page.read_text(encoding="utf-8"))
    assert GRADER_LABEL in text and "×1.12" in text.split("student's own run, as submitted")[1]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return _course(tmp_path_factory.mktemp("student-run"))


def test_the_grading_command_keeps_the_students_run(course, tmp_path):
    root, work = course
    subs, out = tmp_path / "class", tmp_path / "out"
    write(subs / f"timed_{FIXTURE}.ipynb", _submission(work))
    command = [sys.executable, "-m", "course_grading", str(subs), "--out", str(out)]
    command += ["--root", str(root), "--jobs", "1", "--timeout", "60", *NO_SANDBOX]
    proc = subprocess.run(command, capture_output=True, text=True, env=wc.nbgrader_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "report.csv", newline="", encoding="utf-8") as fh:
        row = next(csv.DictReader(fh))
    assert float(row["auto_score"]) == float(row["auto_max"]) > 0, row
    graded = out / "course" / "autograded" / "timed" / FIXTURE / f"{FIXTURE}.ipynb"
    _check(graded, out / "feedback" / "timed" / f"{FIXTURE}.html")


def test_nbgraders_own_autograde_keeps_the_students_run(course):
    """Formgrader's Autograde and Generate Feedback buttons run these steps."""
    _, work = course
    write(work.submitted / "timed" / FIXTURE / f"{FIXTURE}.ipynb", _submission(work))
    if NO_SANDBOX:
        (work.root / wc.CONFIG_FILE).write_text(
            (work.root / wc.CONFIG_FILE).read_text()
            + "\nc.SandboxedExecute.sandbox = False\nc.SaveTrustedGrades.sandbox = False\n"
        )
    proc = work.run("autograde", FIXTURE, "--student", "timed", "--force")
    graded = work.autograded / "timed" / FIXTURE / f"{FIXTURE}.ipynb"
    assert graded.is_file(), proc.stdout[-3000:]
    proc = work.run("generate_feedback", FIXTURE, "--student", "timed", "--force")
    page = work.feedback / "timed" / FIXTURE / f"{FIXTURE}.html"
    assert page.is_file(), proc.stdout[-3000:]
    _check(graded, page)
