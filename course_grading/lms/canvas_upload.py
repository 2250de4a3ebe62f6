"""The file to upload to Canvas: the gradebook export's student columns and one column per lesson.

See ``canvas.py`` for Canvas's rules and what is kept; here each cell is decided:

- a row matched to a graded student: the lesson's score (points less late penalty), or, with
  ``rescale``, that score out of the column's points possible; an ``EX`` or ``N/A`` cell is
  kept, and a different grade the export held is replaced and listed;
- any other row (no graded student, an ambiguous one, an assignment row): the export's cell;
- the Points Possible row: the column's own, or the lesson's maximum for a new column.
"""

from __future__ import annotations

from course_grading.errors import GradingError
from course_grading.lms import review as rv
from course_grading.lms.canvas import CanvasGradebook, Target
from course_grading.lms.csv_files import Table, formula_like, number_text, parse_number, safe_cell
from course_grading.lms.matching import Matches
from course_grading.lms.scores import MISSING, NOT_GRADED, ClassScores, Score

_STATUS_NOTES = {MISSING: rv.MISSING, NOT_GRADED: rv.NOT_GRADED}
_KEPT = {"EX": "excused in Canvas", "N/A": "not assigned to this student in Canvas"}


def lesson_maximum(scores: ClassScores, lesson: str) -> float:
    """The lesson's maximum score in the grading output (one value for the whole class).

    Args:
        scores: the graded class.
        lesson: the lesson.

    Returns:
        The maximum of its graded submissions (of all its rows when none was graded).

    Raises:
        GradingError: its submissions have different maxima (graded against different
            versions of the lesson).
    """
    rows = [s for (_, name), s in scores.scores.items() if name == lesson]
    maxima = {s.max_points for s in rows if s.status not in _STATUS_NOTES} or {
        s.max_points for s in rows
    }
    if len(maxima) != 1:
        raise GradingError(
            f"{lesson} has several maximum scores in the grading output "
            f"({', '.join(number_text(m) for m in sorted(maxima))}): grade it again in one run"
        )
    return maxima.pop()


def _check_points(target: Target, lesson_max: float, rescale: bool) -> None:
    if target.index is None or target.points_possible == lesson_max:
        return
    if not rescale or lesson_max <= 0:
        raise GradingError(
            f"Canvas column {target.header!r} is out of {number_text(target.points_possible)} "
            f"points, {target.lesson} out of {number_text(lesson_max)}: make them equal in "
            f"Canvas, or give --rescale to enter each score out of "
            f"{number_text(target.points_possible)}"
        )


def _value(score: Score, target: Target, lesson_max: float) -> float:
    if target.index is None or target.points_possible == lesson_max:
        return score.points
    return score.points * target.points_possible / lesson_max


def _cell(
    row: list[str],
    number: int,
    target: Target,
    student: str,
    scores: ClassScores,
    label: str,
    lesson_max: float,
) -> tuple[str, list[rv.Note]]:
    """One student's cell for one lesson, and what to say about it."""
    existing = row[target.index].strip() if target.index is not None else ""
    where = dict(student=student, lesson=target.lesson, row=number, lms_user=label)
    if existing.upper() in _KEPT:
        return existing, [
            rv.Note(rv.KEPT, **where, detail=f"{existing}: {_KEPT[existing.upper()]}")
        ]
    score = scores.scores.get((student, target.lesson))
    if score is None:
        return existing, [rv.Note(rv.KEPT, **where, detail="no score for this lesson")]
    value = _value(score, target, lesson_max)
    text, notes = number_text(value), []
    if score.status in _STATUS_NOTES:
        notes.append(rv.Note(_STATUS_NOTES[score.status], **where))
    if score.pending:
        notes.append(rv.Note(rv.PENDING, **where, detail=f"{number_text(score.pending)} points"))
    old = parse_number(existing)
    if existing and (old is None or number_text(old) != text):
        notes.append(rv.Note(rv.REPLACED, **where, detail=f"was {existing}, now {text}"))
    return text, notes


def _match_notes(matches: Matches, scores: ClassScores) -> list[rv.Note]:
    notes = []
    for student in matches.unmatched_students:
        got = [
            f"{lesson} {number_text(s.points)}"
            for (name, lesson), s in sorted(scores.scores.items())
            if name == student
        ]
        notes.append(rv.Note(rv.NOT_IN_LMS, student, detail="; ".join(got)))
    for row in matches.unmatched_rows:
        left = "its cells are left as the LMS file had them"
        notes.append(rv.Note(rv.NOT_GRADED_ROW, row=row.number, lms_user=row.label, detail=left))
    for student, rows in matches.ambiguous:
        listed = "; ".join(f"row {r.number} ({r.label})" for r in rows)
        notes.append(rv.Note(rv.AMBIGUOUS, student, detail=f"matches {listed}"))
    for student, rows in matches.several_rows.items():
        listed = ", ".join(str(r.number) for r in rows)
        notes.append(rv.Note(rv.SEVERAL_ROWS, student, detail=f"rows {listed}"))
    return notes


def canvas_upload(
    book: CanvasGradebook,
    scores: ClassScores,
    names: dict[str, str],
    keys: tuple[str, ...],
    rescale: bool = False,
) -> tuple[Table, list[rv.Note]]:
    """The table to upload to Canvas, and the notes for the instructor (module docstring).

    Args:
        book: the instructor's gradebook export.
        scores: the graded class.
        names: lesson -> the column it fills (a header or title); a lesson not named fills the
            column titled as the lesson, or a new one.
        keys: the ids to match students by (``canvas.ID_COLUMNS``).
        rescale: enter each score out of the column's points possible when they differ.

    Returns:
        The table (same separator, byte-order mark and line ending as the export) and the notes.

    Raises:
        GradingError: a lesson's column cannot be chosen, or its points possible differ from
            the lesson's maximum and ``rescale`` is off.
    """
    maxima = {lesson: lesson_maximum(scores, lesson) for lesson in scores.lessons}
    targets = _targets(book, names, maxima, rescale)
    matches = book.matches(scores, keys)
    labels = {person.number: person.label for person in book.people}
    rows, notes = [], _match_notes(matches, scores)
    for number, row in enumerate(book.table.rows, start=1):
        cells = [c if i in book.id_columns else safe_cell(c) for i, c in enumerate(row)]
        cells = cells[: book.info_end]
        notes += [
            rv.Note(rv.FORMULA_ID, row=number, lms_user=labels[number], detail=row[i])
            for i in book.id_columns
            if number in labels and formula_like(row[i])
        ]
        student = matches.student_of.get(number)
        for target in targets:
            if number == 1:
                cells.append(safe_cell(target.header))
            elif student is None or number not in labels:
                new_points = number - 1 == book.points_row and target.index is None
                kept = row[target.index] if target.index is not None else ""
                cells.append(number_text(target.points_possible) if new_points else safe_cell(kept))
            else:
                lesson_max = maxima[target.lesson]
                text, found = _cell(
                    row, number, target, student, scores, labels[number], lesson_max
                )
                cells.append(text)
                notes += found
        rows.append(cells)
    table = book.table
    return Table(rows, table.separator, table.bom, table.line_end, table.name), notes


def _targets(
    book: CanvasGradebook, names: dict[str, str], maxima: dict[str, float], rescale: bool
) -> list[Target]:
    """Each lesson's column, its points checked; two lessons may not share one."""
    targets = []
    for lesson, lesson_max in maxima.items():
        target = book.target(lesson, names.get(lesson, lesson), lesson_max)
        _check_points(target, lesson_max, rescale)
        if twin := next((t for t in targets if t.header == target.header), None):
            raise GradingError(
                f"{twin.lesson} and {lesson} would both fill column {target.header!r}: give "
                "each its own --column"
            )
        targets.append(target)
    return targets
