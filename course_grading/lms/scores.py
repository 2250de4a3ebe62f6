"""Per-student, per-lesson scores, read from where the grader keeps them.

Two sources, one table (``ClassScores``):

- a grading workspace (``python -m course_grading ... --out GRADING_OUT``): its ``report.csv``
  says which (student, lesson) pairs exist and their status (graded, ``missing``, ``not
  graded``); the gradebook its grades live in holds the current score of every graded
  submission, manual grades entered in formgrader after the run included: its own
  (``course/gradebook.db``, opened read-only), or the class gradebook the classroom recorded
  them in (``nbgrader/workspace_gradebook.py``), whichever formgrader they were entered in.
  ``scores.csv`` is not read: it is the score sheet as ``refresh`` last wrote it;
- an nbgrader gradebook (the class's, through ``nbgrader export --exporter ...``).

A score is nbgrader's: the submission's points less its late penalty, never below 0, as
``nbgrader export`` computes it. A lesson a student did not submit scores 0, as in
``scores.csv`` and ``nbgrader export``; a submission the grader could not grade scores 0 too, and
the table says so (``status``), so that the export lists it for review.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from course_grading.errors import GradingError
from course_grading.nbgrader.workspace_gradebook import workspace_gradebook
from course_grading.report import REPORT_FIELDS
from course_grading.report_text import raise_field_limit, unguarded
from course_grading.workspace import MARKER

GRADED = "graded"
MISSING = "missing"
NOT_GRADED = "not graded"
#: report.csv's statuses of a submission that was graded.
_GRADED_STATUSES = ("ok", "flagged")


@dataclass(frozen=True)
class Score:
    """One student's score for one lesson."""

    points: float
    max_points: float
    status: str = GRADED  # GRADED, MISSING or NOT_GRADED
    pending: float = 0.0  # points of written answers still to grade
    source: str = ""  # where it was read (a workspace), for messages


@dataclass
class ClassScores:
    """Every score of a class: ``scores[(student, lesson)]``, and each student's other names.

    ``names[student]`` holds the ids a learning-management system may know the student by: the
    grader's id, and the e-mail address and LMS user id nbgrader's gradebook holds, if any.
    """

    scores: dict[tuple[str, str], Score] = field(default_factory=dict)
    names: dict[str, set[str]] = field(default_factory=dict)

    @property
    def lessons(self) -> list[str]:
        return sorted({lesson for _, lesson in self.scores})

    @property
    def students(self) -> list[str]:
        return sorted(self.names)

    def add(self, student: str, lesson: str, score: Score) -> None:
        """Record ``score``; a second score for the same student and lesson is refused.

        Args:
            student: the grader's student id.
            lesson: the lesson (nbgrader assignment id).
            score: the score.

        Raises:
            GradingError: ``student`` already has a score for ``lesson`` (two workspaces
                graded the same submission).
        """
        before = self.scores.get((student, lesson))
        if before is not None:
            raise GradingError(
                f"{student} has two scores for {lesson}: in {before.source} and in "
                f"{score.source}; export each lesson from one grading workspace"
            )
        self.scores[(student, lesson)] = score
        self.names.setdefault(student, set()).add(student)


def report_text(cell: str) -> str:
    """A student id as the grader wrote it into ``report.csv``, without the formula guard.

    Student ids never hold ``'`` (``submissions.safe_student_id``), so a leading ``'`` before
    ``=``, ``+``, ``-`` or ``@`` can only be ``report.csv_text``'s.

    Args:
        cell: the CSV cell.

    Returns:
        The id.
    """
    return unguarded(cell)


def _report_rows(folder: Path) -> list[dict[str, str]]:
    report = folder / "report.csv"
    if not (folder / MARKER).is_file() or not report.is_file():
        raise GradingError(
            f"{folder} is not a grading workspace (no {MARKER} and report.csv): give the --out "
            "folder of a `python -m course_grading` run"
        )
    raise_field_limit()  # a workspace graded before fields were bounded: read it whole
    with open(report, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames != REPORT_FIELDS:
            raise GradingError(
                f"{report} does not have the grader's columns ({', '.join(REPORT_FIELDS)}); "
                "was it edited? Grade again to remake it"
            )
        return list(reader)


def submission_score(gb: Gradebook, lesson: str, student: str, source: str) -> Score | None:
    """The current score of ``student``'s ``lesson`` in ``gb``, or ``None`` if not submitted.

    Args:
        gb: an open nbgrader gradebook.
        lesson: the assignment id.
        student: the student id.
        source: where the gradebook is, for messages.

    Returns:
        Points less the late penalty (never below 0), the maximum, and the points of grades that
        still need a manual grade; ``None`` when the gradebook has no such submission.
    """
    try:
        sub = gb.find_submission(lesson, student)
    except MissingEntry:
        return None
    penalty = sub.late_submission_penalty or 0.0
    pending = sum(
        grade.max_score
        for notebook in sub.notebooks
        for grade in notebook.grades
        if grade.needs_manual_grade
    )
    points = max(0.0, (sub.score or 0.0) - penalty)
    return Score(points, sub.max_score or 0.0, GRADED, pending, source)


def _workspace_score(row: dict[str, str], gb: Gradebook, student: str, where: str) -> Score:
    lesson, status = row["lesson"], row["status"]
    if status not in _GRADED_STATUSES:
        kind = MISSING if status == "missing" else NOT_GRADED
        return Score(0.0, float(row["max_score"] or 0), kind, 0.0, where)
    found = submission_score(gb, lesson, student, where)
    if found is None:
        raise GradingError(
            f"{where}/report.csv says {student}'s {lesson} was graded, but its gradebook has no "
            "such submission: was the workspace changed after the run? Grade again"
        )
    return found


def from_workspace(folder: Path, table: ClassScores | None = None) -> ClassScores:
    """Read a grading workspace's scores into ``table`` (a new one when ``None``).

    Args:
        folder: a grading run's ``--out`` folder (``report.csv``, and ``course/gradebook.db`` or
            the class gradebook its grades were recorded in).
        table: the table to add to, when several workspaces are exported together.

    Returns:
        The table, with a score for every (student, lesson) row of ``report.csv`` (the rows of
        entries that were not submissions are left out).

    Raises:
        GradingError: ``folder`` is not a grading workspace, its report was edited, its
            gradebook does not hold what the report says, or its grades live in a class
            gradebook this process cannot reach (``workspace_gradebook``).
    """
    table = ClassScores() if table is None else table
    folder = Path(folder)
    rows = [r for r in _report_rows(folder) if r["status"] != "unrecognised"]
    book = workspace_gradebook(folder)
    with Gradebook(book.read_only_url or book.url, course_id=book.course_id) as gb:
        for row in rows:
            student = report_text(row["student"])
            table.add(student, row["lesson"], _workspace_score(row, gb, student, str(folder)))
    return table


def from_gradebook(
    gb: Gradebook, lessons: list[str] | None = None, students: list[str] | None = None
) -> ClassScores:
    """Every score an nbgrader gradebook holds (what ``nbgrader export`` exports).

    Args:
        gb: an open nbgrader gradebook (a course folder's, or the class's).
        lessons: only these assignments (all when empty or ``None``).
        students: only these students (all when empty or ``None``).

    Returns:
        A score for every chosen student and assignment, 0 with status ``missing`` where the
        student has no submission; each student's e-mail address and LMS user id, where the
        gradebook has them, among their names.
    """
    table = ClassScores()
    where = "the nbgrader gradebook"
    for assignment in gb.assignments:
        if lessons and assignment.name not in lessons:
            continue
        for student in gb.students:
            if students and student.id not in students:
                continue
            score = submission_score(gb, assignment.name, student.id, where)
            if score is None:
                score = Score(0.0, assignment.max_score or 0.0, MISSING, 0.0, where)
            table.add(student.id, assignment.name, score)
            table.names[student.id] |= {n for n in (student.email, student.lms_user_id) if n}
    return table
