"""nbgrader's autograde without its execution: the grader's side, in the grader's process.

``nbgrader autograde`` does three things per notebook: it *sanitizes* the submission (records the
student and the submission, clears outputs, restores test and read-only cells from the
gradebook, hidden-test declarations included), *executes* it, and *records* the result (limits
output, saves the grades and late penalties, writes ``autograded/``). Recording starts with the
course's own step ``ShowStudentRun`` (``pages/student_run.py``): the cells written answers quote
show the student's own run beside the grader's. Here the first and last
run with nbgrader's own preprocessors and the course's configuration, except that the grades
are the trusted checks' (``verdicts.SaveTrustedGrades``, the same step ``nbgrader autograde``
uses with the course's configuration); the execution happens elsewhere (``jobs.py``: a worker
per submission, a sandbox per kernel, hidden regions removed). Only this module and
``class_gradebook.py``, in the grader's process, write a gradebook.
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
    OverwriteKernelspec,
)
from nbgrader.utils import parse_utc
from sqlalchemy.exc import SAWarning
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from course_grading.judge.functions import FunctionSandbox
from course_grading.judge.lesson import LessonSpec
from course_grading.judge.verdicts import Graded, SaveTrustedGrades
from course_grading.nbgrader.course import CONFIG_FILE, WorkCourse, ignored
from course_grading.nbgrader.overwrite import RestoreLockedCells
from course_grading.pages.safe_pages import NeutraliseActiveContent
from course_grading.pages.student_run import ShowStudentRun
from course_grading.submissions import Submission

# nbgrader's sanitize steps; RestoreLockedCells is its OverwriteCells without the false
# checksum warning for every test cell with hidden tests (overwrite.py).
SANITIZE = (ClearOutput, DeduplicateIds, OverwriteKernelspec, RestoreLockedCells, CheckCellMetadata)
RECORD = (
    ShowStudentRun,  # the student's own run beside the grader's where written answers quote it
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveTrustedGrades,
    AssignLatePenalties,
    CheckCellMetadata,
    NeutraliseActiveContent,  # as nbgrader_config.py's autograde steps: inert stored outputs
)


def load_config(work: WorkCourse) -> Config:
    """The work course's nbgrader configuration (the repository's, with its paths).

    Args:
        work: the work course.

    Returns:
        The configuration ``nbgrader_config.py`` gives, loaded from the work course's root.
    """
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
    return nb, resources


def submitted_folder(work: WorkCourse, sub: Submission) -> Path:
    """Where ``sub`` is staged in the work course, as nbgrader keeps submissions.

    Args:
        work: the work course.
        sub: the submission.

    Returns:
        ``submitted/<student>/<lesson>``.
    """
    return work.submitted / sub.student / sub.lesson


def autograded_path(work: WorkCourse, sub: Submission) -> Path:
    """Where the graded copy of ``sub`` is written, as nbgrader would.

    Args:
        work: the work course.
        sub: the submission.

    Returns:
        ``autograded/<student>/<lesson>/<lesson>.ipynb``.
    """
    return work.autograded / sub.student / sub.lesson / f"{sub.lesson}.ipynb"


def sanitize(work: WorkCourse, sub: Submission, config: Config) -> nbformat.NotebookNode:
    """Record the student and the submission; the notebook ready to execute.

    The result holds the hidden-test declarations (restored from the gradebook): it must never be
    where student code can read it (``items.strip_hidden_tests`` makes the runnable copy).

    Args:
        work: the work course.
        sub: the submission (its ``timestamp.txt``, when there is one, is recorded).
        config: the work course's nbgrader configuration.

    Returns:
        The notebook after nbgrader's steps before execution (metadata checked, locked and test
        cells restored from the gradebook).
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
    return _apply(SANITIZE, nb, _resources(work, sub, folder), config)[0]


def record(
    work: WorkCourse,
    sub: Submission,
    executed: nbformat.NotebookNode,
    config: Config,
    *,
    values: dict,
    sandbox: FunctionSandbox,
    graded: Graded | None = None,
    secret: bytes | None = None,
) -> tuple[Path, Graded]:
    """Save the trusted grades of an executed notebook and write it (and its files) to
    ``autograded/``.

    Args:
        work: the work course.
        sub: the submission.
        executed: the executed notebook, its test cells' sources as recorded.
        config: the work course's nbgrader configuration.
        values: what was taken out of its kernel (a ``values.json`` payload, ``evidence.py``).
        sandbox: where graded functions run.
        graded: the verdicts, when they were decided already (``verdicts.grade_submission`` in
            the job's slot), so none is decided twice; ``None``: decided here.
        secret: the course secret, else practice grading (``judge/secret.py``).

    Returns:
        The graded copy's path and the verdicts.
    """
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
    resources = _resources(work, sub, dest.parent)
    resources["course_grading"] = {
        "values": values,
        "sandbox": sandbox,
        "decided": graded,
        "secret": secret,
    }
    nb, resources = _apply(RECORD, executed, resources, config)
    nbformat.write(nb, str(dest))
    return dest, resources["course_grading"]["graded"]


def read_scores(work: WorkCourse, subs: list[Submission], specs: dict[str, LessonSpec]) -> None:
    """Fill the scores of graded submissions from the gradebook; deleted tests count 0.

    A deleted test cell is left ungraded by nbgrader ("needs manual grade"): it is scored 0 here,
    as the report says.

    Args:
        work: the work course.
        subs: the run's submissions; those not graded are skipped, those whose grades are
            missing are flagged.
        specs: each lesson's spec, by lesson (which cells are tests).
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
                if grade.name in sub.deleted:
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
                verdict = sub.verdicts.get(grade.name)
                decided = verdict is not None and got == verdict.points
                why = f": {verdict.message}" if decided else ""
                sub.failed_tests.append(f"{grade.name} ({got:g}/{grade.max_score:g}{why})")
        elif grade.needs_manual_grade:
            sub.manual_pending += grade.max_score
    sub.score = notebook.score
    sub.max_score = notebook.max_score
