"""Due dates and late penalties, through nbgrader's own mechanism.

nbgrader keeps a lesson's due date in the gradebook (``Assignment.duedate``, what ``nbgrader db
assignment add LESSON --duedate=...`` and formgrader's *Manage Assignments* set), each
submission's time in it (``timestamp.txt``, written by ``nbgrader submit`` and kept by ``nbgrader
collect``), and decides a penalty with ``AssignLatePenalties`` and its plugin (by default
``LateSubmissionPlugin``: ``c.LateSubmissionPlugin.penalty_method = "none"`` or ``"zero"`` in
``nbgrader_config.py``; ``c.AssignLatePenalties.plugin_class`` names one of your own).

The grading command builds a fresh gradebook every run, so the due dates are given to it:
``--due LESSON=WHEN`` (a date nbgrader can read; UTC unless it says otherwise). They are set in
the work course's gradebook before anything is graded (:func:`set_due_dates`); the grader's
record step runs nbgrader's ``AssignLatePenalties`` with the course's configuration; afterwards
:func:`report_lateness` puts what nbgrader decided on each row: how late, the penalty, and the
score with the penalty taken off, as ``nbgrader export`` computes it. A submission without a
timestamp (an LMS download, a folder without ``timestamp.txt``) is on time for nbgrader, and
the row says so.

A due date decided after manual grading is set with ``python -m course_grading refresh
GRADING_OUT --due LESSON=WHEN`` (``refresh.py``): the date goes into the gradebook the
workspace's grades live in, :func:`assign_penalties` runs nbgrader's ``AssignLatePenalties``
again for every graded submission (on its score now, manual points included), and every manual
grade and comment stays.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import AssignLatePenalties
from nbgrader.utils import parse_utc
from traitlets.config.loader import PyFileConfigLoader

from course_grading.errors import GradingError
from course_grading.nbgrader.course import CONFIG_FILE, WorkCourse
from course_grading.nbgrader.workspace_gradebook import WorkspaceGradebook
from course_grading.submissions import Submission


def _open(work: WorkCourse, book: WorkspaceGradebook | None) -> Gradebook:
    """The gradebook the grades live in: ``book``, else the work course's own."""
    return Gradebook(book.url, course_id=book.course_id) if book else Gradebook(work.db_url)


def parse_due(values: list[str] | None, lessons: list[str]) -> dict[str, datetime.datetime]:
    """The due dates ``--due LESSON=WHEN`` gives, by lesson, in UTC as nbgrader keeps them.

    Args:
        values: the ``--due`` arguments as typed (``None``: none given).
        lessons: the course's lesson ids.

    Returns:
        Lesson id -> due date (naive, UTC, as ``nbgrader.utils.parse_utc`` returns it).

    Raises:
        GradingError: a value without ``=``, an unknown lesson, a lesson given twice, or a
            date nbgrader cannot read.
    """
    due: dict[str, datetime.datetime] = {}
    for value in values or []:
        lesson, sep, when = value.partition("=")
        lesson, when = lesson.strip(), when.strip()
        if not sep or not lesson or not when:
            raise GradingError(
                f"--due {value!r}: give LESSON=WHEN, e.g. {lessons[0]}=2026-12-01T17:00Z"
            )
        if lesson not in lessons:
            raise GradingError(f"--due {value!r}: no lesson {lesson!r}; the lessons are {lessons}")
        if lesson in due:
            raise GradingError(f"--due: {lesson} is given twice")
        try:
            due[lesson] = parse_utc(when)
        except (ValueError, OverflowError):  # dateutil's ParserError is a ValueError
            raise GradingError(
                f"--due {value!r}: {when!r} is no date nbgrader can read (try 2026-12-01 17:00 UTC)"
            ) from None
    return due


def set_due_dates(
    work: WorkCourse, due: dict[str, datetime.datetime], book: WorkspaceGradebook | None = None
) -> None:
    """Record each lesson's due date in the gradebook (nbgrader's own column).

    Args:
        work: the work course, its lessons generated.
        due: lesson id -> due date (``parse_due``); lessons not in it keep theirs.
        book: the gradebook the workspace's grades live in; ``None``: the work course's own.
    """
    if not due:
        return
    with _open(work, book) as gb:
        for lesson, when in due.items():
            if lesson in work.lessons:
                gb.update_or_create_assignment(lesson, duedate=when)


def _late_by(seconds: float) -> str:
    minutes = round(seconds / 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{days} d"] * bool(days) + [f"{hours} h"] * bool(hours) + [f"{minutes} min"]
    return " ".join(parts[:2]) if seconds >= 60 else f"{seconds:.0f} s"


def report_lateness(
    work: WorkCourse, subs: list[Submission], book: WorkspaceGradebook | None = None
) -> None:
    """Put nbgrader's late-submission verdict on every graded submission of a lesson with a due
    date: how late it was, the penalty, and its score less the penalty (never below 0).

    Args:
        work: the work course, graded (``AssignLatePenalties`` has run for each submission).
        subs: the submissions; graded ones get a line in ``info`` and, when penalised, a
            lower ``score``.
        book: the gradebook the workspace's grades live in; ``None``: the work course's own.
    """
    with _open(work, book) as gb:
        for sub in subs:
            if not sub.graded:
                continue
            try:
                submission = gb.find_submission(sub.lesson, sub.student)
                notebook = gb.find_submission_notebook(sub.lesson, sub.lesson, sub.student)
            except MissingEntry:
                continue
            due = submission.duedate
            if due is None:
                continue
            when = f"{due:%Y-%m-%d %H:%M} UTC"
            if submission.timestamp is None:
                sub.info.append(f"no timestamp.txt: nbgrader counts it on time (due {when})")
                continue
            late = submission.total_seconds_late
            if late <= 0:
                continue
            penalty = notebook.late_submission_penalty or 0.0
            if penalty:
                sub.score = max(0.0, sub.score - penalty)
                what = f"late penalty {penalty:g} point(s), score {sub.score:g}"
            else:
                what = "no late penalty (the course's late-penalty plugin gave none)"
            sub.info.append(f"submitted {_late_by(late)} after the due date ({when}): {what}")


def assign_penalties(work: WorkCourse, subs: list[Submission], book: WorkspaceGradebook) -> None:
    """nbgrader's ``AssignLatePenalties`` again for each graded submission, on the gradebook's
    due date and the submission's score now (manual points included), with the course's plugin.

    Args:
        work: the workspace's course (its ``nbgrader_config.py`` names the plugin).
        subs: the submissions to decide again; those not graded are skipped.
        book: the gradebook the workspace's grades live in.
    """
    config = PyFileConfigLoader(CONFIG_FILE, path=str(work.root)).load_config()
    for sub in subs:
        if not sub.graded:
            continue
        resources = {
            "nbgrader": {
                "notebook": sub.lesson,
                "assignment": sub.lesson,
                "student": sub.student,
                "db_url": book.url,
            }
        }
        AssignLatePenalties(config=config).preprocess(nbformat.v4.new_notebook(), resources)


def class_due_argument(class_db: str, course_id: str, lesson: str) -> list[str]:
    """``["--due", "LESSON=WHEN"]`` for the due date a class gradebook holds for ``lesson``
    (formgrader's *Manage Assignments* sets it), or ``[]`` when it holds none.

    ``classroom/autograde.py`` grades in a private workspace, whose fresh gradebook knows no due
    date: this carries the class's into the grading command.

    Args:
        class_db: the class gradebook's SQLAlchemy URL.
        course_id: the nbgrader course id the class gradebook files the lesson under.
        lesson: the lesson (nbgrader assignment id).

    Returns:
        The grading command's arguments for that due date (UTC), or none.
    """
    with Gradebook(class_db, course_id=course_id) as gb:
        try:
            when = gb.find_assignment(lesson).duedate
        except MissingEntry:
            return []
    return [] if when is None else ["--due", f"{lesson}={when:%Y-%m-%d %H:%M:%S} UTC"]


def due_dates_of(course: Path) -> dict[str, datetime.datetime]:
    """The due dates recorded in a workspace course's gradebook (``--student`` reuses them).

    Args:
        course: a work course folder holding ``gradebook.db``.

    Returns:
        Lesson id -> due date, for every lesson that has one.
    """
    with Gradebook(f"sqlite:///{Path(course).resolve() / 'gradebook.db'}") as gb:
        return {a.name: a.duedate for a in gb.assignments if a.duedate is not None}
