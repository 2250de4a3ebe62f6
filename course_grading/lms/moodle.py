"""Moodle: a file for Moodle's grade import from CSV (*Grades > Import > CSV file*).

The rules are Moodle's own, read from ``grade/import/csv/classes/load_data.php`` and
``lib/csvlib.class.php`` (moodle/moodle):

- a header row; on the import page one column is mapped to a user field (``username``,
  ``email``, ``idnumber`` or ``userid``), each other to a grade item (an existing one, or *new
  grade item*, named by its header) or ignored;
- every row must name a user Moodle has: one unknown user (or a blank id) stops the whole
  import; so rows are written only for students the export can name;
- a grade is a number (``.`` is always read as the decimal point); ``-`` or a blank cell is no
  grade; a grade above the site's maximum (``gradepointmax``, 100 by default) stops the import;
- the file is read as UTF-8 by default, a byte-order mark removed.

Written: ``username`` (or ``email``) and one column per lesson, one row per student, comma-
separated, UTF-8 with a byte-order mark (so a spreadsheet shows accents; Moodle removes it).
Without a roster every graded student gets a row under their grader id (for ``email``, only ids
that are e-mail addresses). With a roster (``--gradebook``: Moodle's own grade export, *Grades >
Export > Plain text file*, or any CSV with a ``Username``, ``Email address`` or ``ID number``
column) only the students matched to a roster row get one, under the roster's value, and the
others are listed. Moodle compares ids without case, so two students whose ids differ only in
case (``Alice``, ``alice``) would be one user there: neither row is written, both are listed.
"""

from __future__ import annotations

from course_grading.errors import GradingError
from course_grading.lms import review as rv
from course_grading.lms.csv_files import Table, formula_like, number_text, safe_cell
from course_grading.lms.matching import LmsRow, match
from course_grading.lms.scores import MISSING, NOT_GRADED, ClassScores

WHAT = "Moodle roster"
#: Moodle's user fields an import maps from, and the headers its export (or a person) gives them.
ID_FIELDS = {
    "username": ("username", "Username"),
    "email": ("email", "Email address", "useremail"),
    "idnumber": ("idnumber", "ID number", "useridnumber"),
}
#: Moodle's default maximum grade (``$CFG->gradepointmax``); the import stops above it.
DEFAULT_MAXIMUM = 100.0
_STATUS_NOTES = {MISSING: rv.MISSING, NOT_GRADED: rv.NOT_GRADED}


def _roster_columns(table: Table) -> dict[str, int]:
    folded = {h.strip().casefold(): i for i, h in enumerate(table.header)}
    found = {}
    for field, headers in ID_FIELDS.items():
        for header in headers:
            if header.casefold() in folded:
                found[field] = folded[header.casefold()]
                break
    if not found:
        raise GradingError(
            f"{WHAT} {table.name}: row 1 has no Username, Email address or ID number column "
            "(export the grades with those user fields, or give no --gradebook)"
        )
    return found


def _roster_rows(table: Table, columns: dict[str, int], keys: tuple[str, ...]) -> list[LmsRow]:
    names = [i for i, h in enumerate(table.header) if h.strip() in ("First name", "Last name")]
    rows = []
    for number, row in enumerate(table.rows[1:], start=2):
        ids = tuple(row[columns[k]].strip() for k in keys if k in columns and row[columns[k]])
        label = " ".join(row[i].strip() for i in names) or (ids[0] if ids else "")
        if ids:
            rows.append(LmsRow(number, ids, ids[0], label))
    return rows


def _lms_id(student: str, names: set[str], id_field: str) -> str:
    if id_field == "email":
        return min((n for n in names if "@" in n), default="")
    return student


def _student_row(
    student: str, user: str, scores: ClassScores, lessons: list[str]
) -> tuple[list[str], list[rv.Note]]:
    cells, notes = [user], []  # exactly: Moodle looks the user up by it
    if formula_like(user):
        notes.append(rv.Note(rv.FORMULA_ID, student, lms_user=user))
    for lesson in lessons:
        score = scores.scores.get((student, lesson))
        cells.append(number_text(score.points) if score else "-")
        if score is None:
            continue
        where = dict(student=student, lesson=lesson, lms_user=user)
        if score.status in _STATUS_NOTES:
            notes.append(rv.Note(_STATUS_NOTES[score.status], **where))
        if score.pending:
            notes.append(
                rv.Note(rv.PENDING, **where, detail=f"{number_text(score.pending)} points")
            )
        if score.points > DEFAULT_MAXIMUM:
            detail = f"{number_text(score.points)} > {number_text(DEFAULT_MAXIMUM)}: raise it"
            notes.append(rv.Note(rv.OVER_MAXIMUM, **where, detail=detail))
    return cells, notes


def _users(
    scores: ClassScores, id_field: str, roster: Table | None, keys: tuple[str, ...]
) -> tuple[dict[str, str], list[rv.Note]]:
    """Student -> the value of ``id_field`` Moodle knows them by; notes on the others."""
    if roster is None:
        users = {s: _lms_id(s, scores.names[s], id_field) for s in scores.students}
        notes = [
            rv.Note(rv.UNREADABLE_ID, s, detail=f"no {id_field} known for this student")
            for s, user in users.items()
            if not user
        ]
        return {s: u for s, u in users.items() if u}, notes
    columns = _roster_columns(roster)
    if id_field not in columns:
        raise GradingError(f"{WHAT} {roster.name}: no {ID_FIELDS[id_field][1]} column to export")
    matches = match(scores.names, _roster_rows(roster, columns, keys or tuple(columns)))
    users, notes = {}, [rv.Note(rv.NOT_IN_LMS, s) for s in matches.unmatched_students]
    for number, student in sorted(matches.student_of.items()):
        user = roster.rows[number - 1][columns[id_field]].strip()
        if user and student not in users:
            users[student] = user
        elif not user:
            notes.append(rv.Note(rv.UNREADABLE_ID, student, row=number, detail=f"no {id_field}"))
    notes += [
        rv.Note(rv.NOT_GRADED_ROW, row=r.number, lms_user=r.label) for r in matches.unmatched_rows
    ]
    for student, rows in matches.ambiguous:
        listed = "; ".join(f"row {r.number} ({r.label})" for r in rows)
        notes.append(rv.Note(rv.AMBIGUOUS, student, detail=f"matches {listed}"))
    return users, notes


def _one_row_per_user(
    users: dict[str, str], id_field: str, notes: list[rv.Note]
) -> tuple[dict[str, str], list[rv.Note]]:
    """``users`` without the students whose ids Moodle reads as one user, and a note on each.

    Moodle finds a user by username or e-mail address without regard to case (its usernames
    are lower case), so ``Alice`` and ``alice`` are one user there: whichever row it read last
    would set that user's grades. None of them is written; each is named for review.
    """
    groups: dict[str, list[str]] = {}
    for student, user in users.items():
        groups.setdefault(user.casefold(), []).append(student)
    kept = dict(users)
    for students in (sorted(g) for g in groups.values() if len(g) > 1):
        listed = ", ".join(f"{s} ({id_field} {users[s]})" for s in students)
        for student in students:
            del kept[student]
            detail = f"Moodle reads {listed} as one user; enter their grades by hand"
            notes.append(rv.Note(rv.SAME_USER, student, lms_user=users[student], detail=detail))
    return kept, notes


def moodle_upload(
    scores: ClassScores,
    names: dict[str, str],
    id_field: str = "username",
    roster: Table | None = None,
    keys: tuple[str, ...] = (),
) -> tuple[Table, list[rv.Note]]:
    """The table for Moodle's CSV grade import, and the notes for the instructor.

    Args:
        scores: the graded class.
        names: lesson -> its column's header (the grade item's name); the lesson id otherwise.
        id_field: the user field the file identifies students by: ``username`` or ``email``.
        roster: Moodle's grade export (or another CSV with user fields) to match students
            against; ``None`` to write every graded student under their grader id.
        keys: the roster's fields to match by (``ID_FIELDS``' names); all it has when empty.

    Returns:
        The table and the notes (module docstring).

    Raises:
        GradingError: ``id_field`` is not ``username`` or ``email``, or the roster has no
            column for it or for any user field.
    """
    if id_field not in ("username", "email"):
        raise GradingError(f"--id {id_field}: give username or email")
    users, notes = _users(scores, id_field, roster, keys)
    users, notes = _one_row_per_user(users, id_field, notes)
    lessons = scores.lessons
    rows = [[id_field, *(safe_cell(names.get(lesson, lesson)) for lesson in lessons)]]
    for student, user in sorted(users.items(), key=lambda pair: pair[1]):
        cells, found = _student_row(student, user, scores, lessons)
        rows.append(cells)
        notes += found
    return Table(rows, ",", True, "\n", "moodle"), notes
