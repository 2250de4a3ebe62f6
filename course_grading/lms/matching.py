"""Which row of an LMS file is which graded student: matched by an id, never by a name.

Each LMS row offers a few ids (Canvas: SIS Login ID, SIS User ID, its own user ID; Moodle:
username, e-mail address, ID number); each graded student has a few names (the grader's id, and
the e-mail address and LMS user id nbgrader's gradebook may hold). A student and a row match
when one of the row's ids equals one of the student's names, looked for in three steps, the
first that finds anything deciding:

1. exactly;
2. ignoring case (Canvas and Moodle compare logins without case);
3. as the grader writes an id it was given (``submissions.safe_student_id``: ``josé`` was
   graded as ``jos_``);
4. likewise where two ids read the same and the changed one got a digest (``jos_-d994e1``);
5. as the classroom makes an LTI login its nbgrader id (``accounts.student_id``).

A student whose rows all belong to one LMS user (one person in two sections, in an export that
gives one row per section) fills all of them. A student matching rows of different users, or a
row matched by two students at the same step (or the later student's, when an earlier step
found the other), is *ambiguous*: nothing is filled for them, and they are listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from hashlib import sha256

from course_grading.lms.accounts import student_id
from course_grading.submissions import safe_student_id


@dataclass(frozen=True)
class LmsRow:
    """One row of an LMS file that is a person: its row number, its ids, and who it is."""

    number: int  # counting the header as row 1
    ids: tuple[str, ...]  # every non-empty id the row offers
    person: str  # what identifies the LMS user (Canvas's user ID, else the first id)
    label: str  # the row in words, for messages


@dataclass
class Matches:
    """The outcome: each matched row's student, and who could not be matched, and why."""

    student_of: dict[int, str] = field(default_factory=dict)  # row number -> student
    unmatched_students: list[str] = field(default_factory=list)
    unmatched_rows: list[LmsRow] = field(default_factory=list)
    ambiguous: list[tuple[str, list[LmsRow]]] = field(default_factory=list)
    several_rows: dict[str, list[LmsRow]] = field(default_factory=dict)  # one user, >1 row


def _with_digest(text: str) -> str:
    """The id the grader gives ``text`` when another id reads the same (``student_ids``)."""
    safe = safe_student_id(text)
    return text if safe == text else f"{safe}-{sha256(text.encode()).hexdigest()[:6]}"


def _same(text: str) -> str:
    return text


#: Each step: how a student's names are written, and how a row's ids are (the classroom's id is
#: made from the LMS login once: a made-up id is never made up again).
_STEPS = (
    (_same, _same),
    (str.casefold, str.casefold),
    (safe_student_id, safe_student_id),
    (_with_digest, _with_digest),
    (_same, student_id),
)


def _candidates(names: set[str], rows: list[LmsRow]) -> tuple[int, list[LmsRow]]:
    """The first step that finds rows for ``names``, and the rows ((len(_STEPS), []): none)."""
    for step, (ours, theirs) in enumerate(_STEPS):
        wanted = {ours(n) for n in names}
        found = [row for row in rows if any(theirs(i) in wanted for i in row.ids)]
        if found:
            return step, found
    return len(_STEPS), []


def match(students: dict[str, set[str]], rows: list[LmsRow]) -> Matches:
    """Match every student to the rows that are theirs (module docstring).

    Args:
        students: each graded student's id -> every name an LMS may know them by.
        rows: the LMS file's rows of people.

    Returns:
        The matches; every student and every row is either matched or listed.
    """
    result = Matches()
    claims: dict[int, list[tuple[int, str]]] = {}  # row number -> (step, student)
    found: dict[str, tuple[int, list[LmsRow]]] = {}
    for student in sorted(students):
        step, rows_found = _candidates(students[student], rows)
        if not rows_found:
            result.unmatched_students.append(student)
        elif len({row.person for row in rows_found}) > 1:
            result.ambiguous.append((student, rows_found))
        else:
            found[student] = step, rows_found
            for row in rows_found:
                claims.setdefault(row.number, []).append((step, student))
    for student, (step, rows_found) in found.items():
        rivals = {s for row in rows_found for at, s in claims[row.number] if at <= step}
        if rivals - {student}:  # a row another student claims as well or better
            result.ambiguous.append((student, rows_found))
            continue
        for row in rows_found:
            result.student_of[row.number] = student
        if len(rows_found) > 1:
            result.several_rows[student] = rows_found
    taken = {row.number for _, rs in result.ambiguous for row in rs} | set(result.student_of)
    result.unmatched_rows = [row for row in rows if row.number not in taken]
    result.ambiguous.sort(key=lambda pair: pair[0])
    return result
