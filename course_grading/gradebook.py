"""nbgrader's autograde without its execution: the grader's side, in the grader's process.

``nbgrader autograde`` does three things per notebook: it *sanitizes* the submission (records the
student and the submission, clears outputs, restores test and read-only cells from the
gradebook, hidden tests included), *executes* it, and *records* the result (limits output,
saves the grades and late penalties, writes ``autograded/``). Here the first and last run with
nbgrader's own preprocessors and the course's configuration, and the execution happens
elsewhere (``jobs.py``: a worker per submission, a sandbox per kernel). Only this module, in
the grader's process, writes the gradebook.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import nbformat
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    IgnorePattern,
    LimitOutput,
    OverwriteCells,
    OverwriteKernelspec,
    SaveAutoGrades,
)
from nbgrader.utils import parse_utc
from sqlalchemy.exc import SAWarning
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from course_grading.course import CONFIG_FILE, WorkCourse, ignored
from course_grading.lesson import LessonSpec
from course_grading.submissions import Submission

SANITIZE = (ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata)
RECORD = (
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
)


def load_config(work: WorkCourse) -> Config:
    """The work course's nbgrader configuration (the repository's, with its paths)."""
    return PyFileConfigLoader(CONFIG_FILE, path=str(work.root)).load_config()


def _resources(work: WorkCourse, sub: Submission, folder: Path) -> dict:
    return {
        "unique_key": sub.lesson,
        "output_files_dir": f"{sub.lesson}_files",
        "metadata": {"path": str(folder)},
        "nbgrader": {
            "student": sub.student,
            "assignment": sub.lesson,
            "notebook": sub.lesson,
            "db_url": work.db_url,
        },
    }


def _apply(steps, nb: nbformat.NotebookNode, resources: dict, config: Config):
    for step in steps:
        nb, resources = step(config=config)(nb, resources)
    return nb


def submitted_folder(work: WorkCourse, sub: Submission) -> Path:
    return work.submitted / sub.student / sub.lesson


def autograded_path(work: WorkCourse, sub: Submission) -> Path:
    """Where the graded copy of ``sub`` is written, as nbgrader would."""
    return work.autograded / sub.student / sub.lesson / f"{sub.lesson}.ipynb"


def sanitize(work: WorkCourse, sub: Submission, config: Config) -> nbformat.NotebookNode:
    """Record the student and the submission; return the notebook ready to execute.

    The result holds the hidden tests (restored from the gradebook): it must never be where
    student code can read it.
    """
    folder = submitted_folder(work, sub)
    stamp = folder / "timestamp.txt"
    text = stamp.read_text(encoding="utf-8").strip() if stamp.is_file() else ""
    with Gradebook(work.db_url) as gb, warnings.catch_warnings():
        # nbgrader's own autograde makes SQLAlchemy warn here too (autoflush of a new row)
        warnings.simplefilter("ignore", SAWarning)
        gb.update_or_create_student(sub.student)
        gb.find_assignment(sub.lesson)
        if text:
            gb.update_or_create_submission(sub.lesson, sub.student, timestamp=parse_utc(text))
        else:
            gb.update_or_create_submission(sub.lesson, sub.student)
    nb = nbformat.read(str(folder / f"{sub.lesson}.ipynb"), as_version=4)
    return _apply(SANITIZE, nb, _resources(work, sub, folder), config)


def record(
    work: WorkCourse, sub: Submission, executed: nbformat.NotebookNode, config: Config
) -> Path:
    """Save the grades of an executed notebook and write it (and its files) to ``autograded/``."""
    dest = autograded_path(work, sub)
    if dest.parent.exists():
        shutil.rmtree(dest.parent)
    dest.parent.mkdir(parents=True)
    for base in (work.source / sub.lesson, submitted_folder(work, sub)):
        for path in sorted(base.rglob("*")):
            rel = path.relative_to(base)
            if path.is_file() and path.suffix != ".ipynb" and not ignored(rel):
                (dest.parent / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest.parent / rel)
    nb = _apply(RECORD, executed, _resources(work, sub, dest.parent), config)
    nbformat.write(nb, str(dest))
    return dest


def read_scores(work: WorkCourse, subs: list[Submission], specs: dict[str, LessonSpec]) -> None:
    """Fill the scores of graded submissions from the gradebook; zeroed tests count 0.

    A deleted test cell is left ungraded by nbgrader ("needs manual grade"), and a test that a
    cheat may have passed (``cheats.py``) must not count: both are scored 0 here.
    """
    with Gradebook(work.db_url) as gb:
        for sub in subs:
            if not sub.graded:
                continue
            try:
                notebook = gb.find_submission_notebook(sub.lesson, sub.lesson, sub.student)
            except MissingEntry:
                sub.graded = False
                sub.flag("grades were not recorded; see course/nbgrader.log")
                continue
            for grade in notebook.grades:
                if grade.name in sub.deleted or grade.name in sub.zeroed:
                    grade.auto_score = 0.0
                    grade.needs_manual_grade = False
            gb.db.commit()
            _add_up(sub, specs[sub.lesson], notebook)


def _add_up(sub: Submission, spec: LessonSpec, notebook) -> None:
    for grade in notebook.grades:
        got = grade.score or 0.0
        if grade.name in spec.tests:
            sub.auto_score += got
            if got < grade.max_score:
                sub.failed_tests.append(f"{grade.name} ({got:g}/{grade.max_score:g})")
        elif grade.needs_manual_grade:
            sub.manual_pending += grade.max_score
    sub.score = notebook.score
    sub.max_score = notebook.max_score
