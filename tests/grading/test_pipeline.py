"""The nbgrader pipeline: ``solutions/`` -> ``notebooks/``, structure, an autograde round trip.

Every lesson ``solutions/<lesson>/<lesson>.ipynb`` is released once into a temporary nbgrader
course (``nbgrader generate_assignment``, one process for all lessons). The drift test compares
that release, in its normal form, with the committed ``notebooks/``. The round trip then submits,
for every lesson, the blank student notebook as student ``blank`` and the student notebook
answered with the solution's code as student ``solution``, runs one ``nbgrader autograde`` over
each student's lessons (each student in a course of their own, the two runs at once), and reads
the scores from the gradebooks (``nbgrader validate``'s exit status is 0 even on failure, so it
proves nothing).

``SHAPES_COURSE_ROOT=tests/grading/fixtures`` runs the same tests on the one-lesson fixture course.
"""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from helpers import answered

from course_grading.judge.lesson import LessonSpec
from course_grading.nbgrader import course as wc
from course_grading.nbgrader import release as rel
from course_grading.review.leaks import instructor_lines, leaked

REPO = Path(__file__).resolve().parents[2]
ROOT = (REPO / os.environ.get("SHAPES_COURSE_ROOT", ".")).resolve()
LESSONS = wc.find_lessons(ROOT)
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
# The round trip uses the grading command's limits: student code 60 s a cell, the lesson's own
# cells 600 s (a measurement cell on a busy 2-core machine must not void the submission).
TIMEOUTS = 60, 600


def _kind(cell: dict) -> str:
    if cell.get("grade") and cell.get("solution"):
        return "written"
    if cell.get("grade"):
        return "test"
    if cell.get("solution"):
        return "answer"
    return "locked"


def test_there_are_lessons():
    assert LESSONS, f"no lessons: expected {ROOT / wc.SOURCE_DIR}/<lesson>/<lesson>.ipynb"


# --- the release ------------------------------------------------------------------------------


def _work_course(folder: Path) -> wc.WorkCourse:
    """A work course in ``folder`` with the grading command's limits, every lesson released."""
    work = wc.make_work_course(
        ROOT,
        folder,
        extra_config=[
            "from course_grading.sandbox.budgets import CellTimeouts",
            f"c.Execute.timeout_func = CellTimeouts({str(folder)!r}, "
            f"student={TIMEOUTS[0]}, lesson={TIMEOUTS[1]})",
            "c.Execute.iopub_timeout = 30",
        ],
    )
    wc.generate_assignments(work)
    return work


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The whole course released once into a temporary nbgrader course."""
    if not LESSONS:
        pytest.fail("no lessons to release")
    tmp = tmp_path_factory.mktemp("pipeline")
    work = _work_course(tmp / "course")
    return work, rel.release_files(work)


def test_notebooks_match_a_fresh_release(release):
    """Regenerating notebooks/ from solutions/ gives no diff (else: run `make release`)."""
    _, files = release
    problems = rel.compare_release(files, ROOT)
    assert not problems, "notebooks/ is out of date; run `make release`:\n" + "\n".join(problems)


def test_drift_check_notices_an_edit(release, tmp_path):
    """The comparison itself fails when a student notebook is edited by hand."""
    _, files = release
    shutil.copytree(ROOT / wc.RELEASE_DIR, tmp_path / wc.RELEASE_DIR)
    assert rel.compare_release(files, tmp_path) == rel.compare_release(files, ROOT)
    path = tmp_path / wc.RELEASE_DIR / LESSONS[0] / f"{LESSONS[0]}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    nb.cells[0].source += "\nedited by hand"
    nbformat.write(nb, str(path))
    assert any("differs" in p for p in rel.compare_release(files, tmp_path))


def test_normal_form_is_stable(release):
    """Normalising a released notebook again changes nothing (so `git diff` stays empty)."""
    _, files = release
    for key, text in files.items():
        if key.endswith(".ipynb"):
            nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
            assert rel.notebook_text(rel.normalise_notebook(nb)) == text, key
            assert text.endswith("}\n") and '\n "cells": [' in text, key


@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_notebook_is_stripped(lesson):
    """Instructor notebooks are kept without outputs (`scripts/release.py --strip-solutions`)."""
    path = ROOT / wc.SOURCE_DIR / lesson / f"{lesson}.ipynb"
    assert not rel.normalise_file(path, check=True), f"{path} has outputs or execution counts"


# --- structure --------------------------------------------------------------------------------


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_structure(lesson):
    """Answer cells, tests with points and hidden tests, a written answer, unique grade ids."""
    nb = nbformat.read(str(ROOT / wc.SOURCE_DIR / lesson / f"{lesson}.ipynb"), as_version=4)
    cells = wc.nbgrader_cells(nb)
    ids = [c["grade_id"] for c in cells]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    assert not repeated, f"repeated grade ids: {repeated}"
    assert all(c.get("schema_version") == 3 for c in cells)
    kinds = [_kind(c) for c in cells]
    assert "answer" in kinds, "no autograded answer cell"
    tests = [c for c in cells if _kind(c) == "test"]
    assert any(float(c.get("points", 0)) > 0 and HIDDEN.search(c["source"]) for c in tests), (
        "no test cell with points and hidden tests"
    )
    assert all(float(c.get("points", 0)) > 0 for c in tests), "a test cell is worth 0 points"
    assert "written" in kinds, "no manually graded written answer"
    for cell in cells:
        if _kind(cell) == "answer" and cell["cell_type"] == "code":
            assert "### BEGIN SOLUTION" in cell["source"], f"{cell['grade_id']}: no solution region"


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_version_gives_nothing_away(lesson):
    """No solutions, hidden tests or mark schemes in notebooks/; exercises raise NotImplemented."""
    source = nbformat.read(str(ROOT / wc.SOURCE_DIR / lesson / f"{lesson}.ipynb"), as_version=4)
    student_path = ROOT / wc.RELEASE_DIR / lesson / f"{lesson}.ipynb"
    assert student_path.is_file(), f"{student_path} missing: run `make release`"
    text = student_path.read_text(encoding="utf-8")
    for marker in (
        "BEGIN SOLUTION",
        "END SOLUTION",
        "BEGIN HIDDEN TESTS",
        "END HIDDEN TESTS",
        "BEGIN MARK SCHEME",
    ):
        assert marker not in text, f"{marker!r} in the student notebook"

    visible = "\n".join(HIDDEN.sub("", c.source) for c in source.cells)
    student = nbformat.reads(text, as_version=4)
    student_src = "\n".join(c.source for c in student.cells)
    for cell in wc.nbgrader_cells(source):
        for hidden in HIDDEN.findall(cell["source"]):
            for line in hidden.splitlines():
                if line.strip() and not line.strip().startswith("#") and line not in visible:
                    assert line not in student_src, f"hidden test line leaked: {line!r}"

    answers = [
        c for c in wc.nbgrader_cells(student) if _kind(c) == "answer" and c["cell_type"] == "code"
    ]
    assert answers
    for cell in answers:
        # The blank raises itself, or through course_lib.answers.ensure_answered, with a message
        # that names what to set (tests/notebooks/test_assessment.py checks the message).
        blank = cell["source"]
        assert "raise NotImplementedError" in blank or "ensure_answered(" in blank, cell["grade_id"]


# --- autograde round trip ------------------------------------------------------------------


def _autograde(work: wc.WorkCourse, student: str) -> dict[tuple[str, str], dict]:
    """``student``'s submission of every lesson of ``work`` (``blank``: the student notebook;
    ``solution``: it answered), one ``nbgrader autograde`` over them all, scores by cell."""
    from nbgrader.api import Gradebook

    for lesson in work.lessons:
        blank, source = work.release_notebook(lesson), work.source_notebook(lesson)
        dest = work.submitted / student / lesson
        dest.mkdir(parents=True)
        shutil.copyfile(blank, dest / f"{lesson}.ipynb")
        if student == "solution":  # an honest student who got every answer right (no solution
            # markers, written answers in their own words; a copy of the instructor's notebook
            # is flagged instead)
            nbformat.write(answered(blank, source), str(dest / f"{lesson}.ipynb"))
    proc = work.run("autograde", "*", "--force")
    scores = {}
    with Gradebook(work.db_url) as gb:
        for lesson in work.lessons:
            graded = work.autograded / student / lesson / f"{lesson}.ipynb"
            assert graded.is_file(), (
                f"nbgrader did not grade {student}/{lesson}:\n" + proc.stdout[-4000:]
            )
            tests = LessonSpec.from_notebooks(
                lesson, work.source_notebook(lesson), work.release_notebook(lesson)
            ).tests
            sub = gb.find_submission_notebook(lesson, lesson, student)
            scores[student, lesson] = {
                g.name: (g.auto_score, g.max_score) for g in sub.grades if g.name in tests
            }
    return scores


@pytest.fixture(scope="module")
def round_trip(release, tmp_path_factory):
    """Blank and solution submissions of every lesson, scores by cell, and the courses.

    Each student's submissions go through one ``nbgrader autograde`` in a course of their own
    (the release's for ``blank``, a second release for ``solution``): two processes with their
    own gradebooks, run at once. nbgrader grades one notebook at a time, each kernel mostly on
    one core; two courses keep both cores busy without two writers sharing a SQLite gradebook.
    """
    work, _ = release
    folder = tmp_path_factory.mktemp("pipeline-solution") / "course"

    def solution() -> tuple[wc.WorkCourse, dict]:
        second = _work_course(folder)  # released while the blanks are graded
        return second, _autograde(second, "solution")

    with ThreadPoolExecutor(max_workers=2) as pool:
        blank = pool.submit(_autograde, work, "blank")
        second, solution_scores = pool.submit(solution).result()
        scores = {**blank.result(), **solution_scores}
    return scores, {"blank": work, "solution": second}


@pytest.mark.parametrize("lesson", LESSONS)
def test_blank_notebook_scores_zero(round_trip, lesson):
    grades = round_trip[0]["blank", lesson]
    assert grades
    assert all(score == 0 for score, _ in grades.values()), f"(score, max): {grades}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_notebook_scores_full_marks(round_trip, lesson):
    grades = round_trip[0]["solution", lesson]
    assert grades
    missed = {gid: got for gid, got in grades.items() if got[0] != got[1] or not got[1]}
    assert not missed, f"solution lost points (score, max): {missed}"


def test_honest_submissions_get_their_feedback(round_trip):
    """The feedback step's leak check withholds nothing from a blank or a solution notebook.

    A false alarm here (an instructor line that is part of a visible one, say) would cost every
    honest student their feedback; this runs nbgrader's feedback step as formgrader does, in
    each student's course.
    """
    _, courses = round_trip
    for student, work in courses.items():
        proc = work.run("generate_feedback", "*", "--force")
        withheld = sorted(
            str(p.relative_to(work.root)) for p in work.root.rglob("withheld_*/**/*.txt")
        )
        assert not withheld, proc.stdout[-3000:]
        for lesson in work.lessons:
            page = work.feedback / student / lesson / f"{lesson}.html"
            assert page.is_file(), f"no feedback for {student}/{lesson}:\n{proc.stdout[-3000:]}"
            if student == "blank":
                secret = instructor_lines(
                    work.source_notebook(lesson), work.release_notebook(lesson)
                )
                assert not leaked(page, secret, frozenset()), (
                    f"blank/{lesson} shows instructor lines"
                )
