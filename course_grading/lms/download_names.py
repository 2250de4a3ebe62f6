"""What Canvas's and Moodle's submission downloads name their files: whose, which, how late.

The rules, read from each LMS's code, are in ``downloads.py``; this module reads one name (a
file at the top of a download, or a Moodle folder's files) and says where it goes
(:class:`Placed`: a student, a lesson, and what makes it later than another file of theirs) or
why not (:class:`NotPlaced`). It opens nothing: ``submissions.collect`` calls it as it lists
a folder, without following a link.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

_CANVAS = re.compile(  # anonymous first: a name may not start the ids' run
    r"(?:(?:(?P<anon_late>LATE|late)_)?(?P<anon>anon_[A-Za-z0-9]+)"
    r"|(?P<name>\w*?)_(?:(?P<late>LATE|late)_)?(?P<user>\d+))"
    r"_(?:(?P<attachment>\d+)_(?P<file>.+)|(?P<entry>text|link)\.html)"
)
_MOODLE = re.compile(r"(?P<name>[^_/]*)_(?P<user>\d+)_assignsubmission_(?P<plugin>[a-z0-9]+)_")
_COPY = re.compile(r"(?P<stem>.+?)(?:-(?P<dash>\d+)| \((?P<paren>\d+)\))")


@dataclass(frozen=True)
class Placed:
    """A downloaded file that is a student's notebook for a lesson."""

    student: str  # the id the export matches back (roster's, else the LMS's own)
    lesson: str
    path: Path
    order: tuple[int, ...]  # a later file of the same student and lesson sorts higher
    info: tuple[str, ...] = ()  # worth knowing (who it is, late)
    problems: tuple[str, ...] = ()  # for review (a student the export cannot name)


@dataclass(frozen=True)
class NotPlaced:
    """A downloaded file that is not graded, and why."""

    path: Path
    reason: str


@dataclass
class Roster:
    """The LMS's own list: Canvas's gradebook export or Moodle's grading worksheet."""

    lms: str  # "Canvas" or "Moodle"
    ids: dict[str, str] = field(default_factory=dict)  # the download's user id -> student id
    name: str = ""


def lesson_named(filename: str, lessons: list[str]) -> tuple[str | None, int]:
    """The lesson a student's file names, and its copy number (``-2`` or `` (2)``: 2).

    Args:
        filename: the student's own file name (the LMS's prefix removed).
        lessons: the course's lessons.

    Returns:
        ``(lesson, copy)``; ``(None, 0)`` when it is not a notebook named after a lesson.
    """
    if not filename.endswith(".ipynb"):
        return None, 0
    stem = filename.removesuffix(".ipynb")
    if stem in lessons:
        return stem, 0
    copy = _COPY.fullmatch(stem)
    if copy and copy["stem"] in lessons:
        return copy["stem"], int(copy["dash"] or copy["paren"])
    return None, 0


def _student(lms: str, user: str, name: str, roster: Roster | None) -> tuple[str, list[str]]:
    """The student id for ``user`` and the problems for review (a student it cannot name)."""
    who = f"{lms}'s {'participant' if lms == 'Moodle' else 'user'} {user} ({name or 'no name'})"
    if user.startswith("anon_"):
        return user, [
            f"{who}: Canvas's anonymous grading hides who this is, so the export cannot find "
            "their row; download again once Canvas shows the names"
        ]
    own = f"participant-{user}" if lms == "Moodle" else user  # the LMS's id, as a student id
    if roster is not None and roster.lms == lms:
        if user in roster.ids:
            return roster.ids[user], []
        return own, [f"{who} is not in the {lms} roster {roster.name}: did they leave the course?"]
    if lms == "Moodle":
        return own, [
            f"{who}: Moodle's download names no account, so the Moodle export cannot name this "
            "student; grade with --roster GRADING_WORKSHEET.csv (the assignment's grading "
            "worksheet, with the username or e-mail shown)"
        ]
    return user, []


@dataclass(frozen=True)
class _Named:
    """What an LMS's file name says: whose file, which one, how late."""

    lms: str
    user: str
    name: str
    filename: str  # the student's own
    order: tuple[int, ...] = ()
    late: bool = False


def _placed(
    named: _Named, path: Path, lessons: list[str], roster: Roster | None
) -> Placed | NotPlaced:
    """The file's place, or why it has none."""
    lesson, copy = lesson_named(named.filename, lessons)
    student, problems = _student(named.lms, named.user, named.name, roster)
    if lesson is None:
        what = "a notebook" if named.filename.endswith(".ipynb") else "not a notebook"
        reason = (
            f"a file of {named.lms} {student} ({named.name or named.user}) that names no lesson "
            f"({named.filename}: {what}); not graded"
        )
        if named.filename.endswith(".ipynb"):
            reason += "; rename the part after the LMS's prefix to LESSON.ipynb and grade again"
        return NotPlaced(path, reason)
    info = [f"from {named.lms}'s download: {named.name or 'no name'}, {named.lms} id {named.user}"]
    if named.late:
        info.append(
            "Canvas marked it late; its download carries no submission time, so no late penalty "
            "is worked out here"
        )
    return Placed(student, lesson, path, (*named.order, copy), tuple(info), tuple(problems))


def read_file(
    path: Path, lessons: list[str], roster: Roster | None = None
) -> Placed | NotPlaced | None:
    """A top-level file of a download, read by Canvas's or Moodle's (flat) naming rule.

    Args:
        path: the file (not opened).
        lessons: the course's lessons.
        roster: the LMS's roster, if given.

    Returns:
        Where it goes, or why not; ``None`` when its name follows neither LMS's rule.
    """
    if moodle := _MOODLE.match(path.name):
        rest = path.name[moodle.end() :]
        return _placed(
            _Named("Moodle", moodle["user"], moodle["name"], rest), path, lessons, roster
        )
    canvas = _CANVAS.fullmatch(path.name)
    if canvas is None:
        return None
    user, name = canvas["user"] or canvas["anon"], canvas["name"] or ""
    if canvas["entry"]:
        return NotPlaced(
            path,
            f"a {canvas['entry']} entry of Canvas user {user} ({name}): not a notebook; not graded",
        )
    late = bool(canvas["late"] or canvas["anon_late"])
    named = _Named("Canvas", user, name, canvas["file"], (int(canvas["attachment"]),), late)
    return _placed(named, path, lessons, roster)


def read_moodle_folder(
    folder: Path, lessons: list[str], roster: Roster | None = None
) -> list[Placed | NotPlaced] | None:
    """A Moodle download's folder of one student and plugin: each file in it (links not followed).

    Args:
        folder: the folder (``Alice Lee_1234_assignsubmission_file_``).
        lessons: the course's lessons.
        roster: the LMS's roster, if given.

    Returns:
        Each file's place or reason, by path; ``None`` when the folder's name is not Moodle's.
    """
    moodle = _MOODLE.fullmatch(folder.name + ("" if folder.name.endswith("_") else "_"))
    if moodle is None:
        return None
    found: list[Placed | NotPlaced] = []
    for root, dirs, files in os.walk(folder):  # os.walk never follows a link to a folder
        for name in sorted(dirs + files):
            path = Path(root) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                found.append(NotPlaced(path, "a symbolic link in a Moodle download; not followed"))
            elif stat.S_ISREG(mode):
                named = _Named("Moodle", moodle["user"], moodle["name"], name)
                found.append(_placed(named, path, lessons, roster))
    return sorted(found, key=lambda f: str(f.path))
