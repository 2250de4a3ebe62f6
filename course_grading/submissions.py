"""Find student submissions, and hold what is found out about each one.

nbgrader grades what it is given and stays quiet about several kinds of damage: a deleted test
cell is simply not graded (no warning), copied cells lose their grade id silently, a file that
is not a notebook stops that student's whole assignment. This module finds the submissions in
either layout an instructor is likely to have and holds what is found out about each one
(``inspection.py`` compares every notebook with its lesson), so that each problem ends up in
the report in plain words.

Layouts accepted (both may be mixed in one folder):

* nbgrader's ``<dir>/<student>/<lesson>/<lesson>.ipynb`` (or ``<dir>/submitted/...``), also
  ``<dir>/<student>/<lesson>.ipynb``;
* a flat LMS download: ``<dir>/<student>_<lesson>.ipynb``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_SAFE_ID = re.compile(r"[^A-Za-z0-9._@+-]")


@dataclass
class Submission:
    """One student's notebook for one lesson, and everything found out about it."""

    student: str
    lesson: str
    original: Path | None  # the file as found; read, never written
    problems: list[str] = field(default_factory=list)  # reasons to look at it (flagged)
    info: list[str] = field(default_factory=list)  # worth knowing, not a problem
    gradable: bool = True
    deleted: list[str] = field(default_factory=list)  # grade ids missing from the notebook
    verdicts: dict = field(default_factory=dict)  # test grade id -> items.Verdict
    unchanged_answers: list[str] = field(default_factory=list)
    graded: bool = False
    auto_score: float = 0.0
    score: float = 0.0
    max_score: float = 0.0
    manual_pending: float = 0.0
    failed_tests: list[str] = field(default_factory=list)

    def flag(self, reason: str, *, gradable: bool = True) -> None:
        self.problems.append(reason)
        self.gradable = self.gradable and gradable

    @property
    def status(self) -> str:
        if self.original is None:
            return "missing"
        if not self.graded:
            return "not graded"
        return "flagged" if self.problems else "ok"


# --- finding submissions ---------------------------------------------------------------------


def safe_student_id(raw: str) -> str:
    """A student id usable as a folder name: letters, digits and ``._@+-``; others become ``_``."""
    return _SAFE_ID.sub("_", raw.strip()).lstrip(".") or "_"


def _in_student_folder(entry: Path, lessons: list[str], found: list, unknown: list) -> None:
    """``<student>/<lesson>/<lesson>.ipynb`` or ``<student>/<lesson>.ipynb`` under ``entry``."""
    for item in sorted(entry.iterdir()):
        if item.name.startswith("."):
            continue
        stem = item.stem if item.is_file() and item.suffix == ".ipynb" else item.name
        if stem not in lessons:
            unknown.append(str(item))
        elif item.is_file():
            found.append((entry.name, stem, item, ""))
        elif (item / f"{stem}.ipynb").is_file():
            found.append((entry.name, stem, item / f"{stem}.ipynb", ""))
        else:
            others = sorted(p.name for p in item.glob("*.ipynb"))
            seen = f" (found: {', '.join(others)})" if others else " (folder is empty)"
            note = f"no {stem}.ipynb in {item}{seen}; rename the file to grade it"
            found.append((entry.name, stem, None, note))


def collect(folder: Path, lessons: list[str]) -> tuple[list[Submission], list[str]]:
    """Find every submission under ``folder``; return them and the files that were not understood.

    Submissions are sorted by (student, lesson). A student/lesson pair found twice keeps the
    first path in sorted order and flags the others. Nothing is opened beyond listing.
    """
    folder = Path(folder)
    if (folder / "submitted").is_dir():
        folder = folder / "submitted"
    by_length = sorted(lessons, key=len, reverse=True)
    found: list[tuple[str, str, Path | None, str]] = []  # raw student, lesson, path, note
    unknown: list[str] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if not entry.is_file():
            _in_student_folder(entry, lessons, found, unknown)
            continue
        lesson = next((x for x in by_length if entry.name.endswith(f"_{x}.ipynb")), None)
        if lesson and len(entry.name) > len(lesson) + 7:
            found.append((entry.name[: -len(lesson) - 7], lesson, entry, ""))
        else:
            unknown.append(str(entry))

    subs: dict[tuple[str, str], Submission] = {}
    for raw, lesson, path, note in found:
        student = safe_student_id(raw)
        key = (student, lesson)
        if key in subs:
            subs[key].flag(f"a second submission for this lesson was ignored: {path}")
            continue
        sub = Submission(student, lesson, path)
        if student != raw:
            sub.info.append(f"student id {raw!r} is used as {student!r}")
        if note:
            sub.flag(note, gradable=False)
        subs[key] = sub
    return [subs[key] for key in sorted(subs)], unknown


def add_missing(subs: list[Submission], lessons: list[str]) -> list[Submission]:
    """Add a ``missing`` row for every student without a submission for one of ``lessons``."""
    have = {(s.student, s.lesson) for s in subs}
    students = sorted({s.student for s in subs})
    extra = [
        Submission(st, le, None, problems=["no notebook submitted for this lesson"], gradable=False)
        for st in students
        for le in lessons
        if (st, le) not in have
    ]
    return sorted(subs + extra, key=lambda s: (s.student, s.lesson))
