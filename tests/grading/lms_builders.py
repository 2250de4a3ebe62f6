"""Grading workspaces and LMS files for the export tests (``test_lms_*.py``), built in seconds.

A workspace is what ``python -m course_grading ... --out`` leaves that the export reads: its
marker, ``report.csv`` (written by the grader's own ``write_reports``) and an nbgrader gradebook
in ``course/`` (made through nbgrader's API), without grading any notebook.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning

from course_grading.nbgrader import course as wc
from course_grading.report import Row, write_reports
from course_grading.workspace import MARKER

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lms"
CANVAS_EXPORT = FIXTURES / "canvas_gradebook.csv"
MOODLE_EXPORT = FIXTURES / "moodle_grades.csv"
#: lesson -> (autograded points, written-answer points)
LESSONS = {"01_tokens": (8.0, 2.0), "02_padding": (10.0, 2.0)}
#: (student, lesson) -> (autograded score, manual score or None when still to grade)
GRADED = {
    ("sobrien", "01_tokens"): (7.0, 2.0),
    ("sobrien", "02_padding"): (10.0, 1.0),
    ("zmuller@uni.example", "01_tokens"): (5.5, None),
    ("jos_", "01_tokens"): (3.0, 1.0),
    ("-dash", "01_tokens"): (1.0, 1.0),
    ("nobody-in-canvas", "01_tokens"): (8.0, 2.0),
}
#: (student, lesson, status) rows of students the grader could not score
UNSCORED = [
    ("zmuller@uni.example", "02_padding", "missing"),
    ("jos_", "02_padding", "not graded"),
]


def _gradebook(db: Path, lessons: dict, graded: dict) -> None:
    with Gradebook(f"sqlite:///{db}") as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        for lesson, (auto_max, manual_max) in lessons.items():
            gb.add_assignment(lesson)
            gb.add_notebook(lesson, lesson)
            gb.add_grade_cell("auto", lesson, lesson, max_score=auto_max, cell_type="code")
            gb.add_grade_cell("written", lesson, lesson, max_score=manual_max, cell_type="markdown")
            gb.add_solution_cell("written", lesson, lesson)
        for (student, lesson), (auto, manual) in graded.items():
            gb.update_or_create_student(student)
            gb.add_submission(lesson, student)
            grade = gb.find_grade("auto", lesson, lesson, student)
            grade.auto_score, grade.needs_manual_grade = auto, False
            written = gb.find_grade("written", lesson, lesson, student)
            written.manual_score, written.needs_manual_grade = manual, manual is None
            gb.db.commit()


def make_workspace(
    folder: Path,
    lessons: dict | None = None,
    graded: dict | None = None,
    unscored: list | None = None,
) -> Path:
    """A grading workspace at ``folder`` holding ``graded`` and ``unscored`` (module docstring).

    Needs this interpreter's ``bin/`` on ``PATH`` (nbgrader runs ``alembic``): the builder sets it.
    """
    lessons = LESSONS if lessons is None else lessons
    graded = GRADED if graded is None else graded
    unscored = UNSCORED if unscored is None else unscored
    (folder / "course").mkdir(parents=True)
    (folder / MARKER).write_text("made by the tests\n")
    before = os.environ["PATH"]
    os.environ["PATH"] = wc.nbgrader_env()["PATH"]
    try:
        _gradebook(folder / "course" / "gradebook.db", lessons, graded)
    finally:
        os.environ["PATH"] = before
    rows = []
    for (student, lesson), (auto, manual) in graded.items():
        auto_max, manual_max = lessons[lesson]
        pending = manual_max if manual is None else 0.0
        score = auto + (manual or 0.0)
        rows.append(
            Row(student, lesson, "ok", score, auto_max + manual_max, auto, auto_max, pending)
        )
    for student, lesson, status in unscored:
        auto_max, manual_max = lessons[lesson]
        rows.append(Row(student, lesson, status, 0.0, auto_max + manual_max, 0.0, auto_max))
    rows.append(Row("?", "?", "unrecognised", reasons=("a stray file",), file="x.txt"))
    write_reports(folder, rows)
    return folder


def copy_workspace(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest
