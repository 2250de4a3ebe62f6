"""Where a grading workspace's grades live: one gradebook, whichever formgrader wrote to it.

A grading run (``python -m course_grading ... --out GRADING_OUT``) records its grades in its
own SQLite gradebook (``GRADING_OUT/course/gradebook.db``); ``make formgrader`` grades the
written answers there. On a classroom hub, ``classroom/autograde.py`` then copies those grades
into the class gradebook (PostgreSQL, ``SHAPES_GRADEBOOK_URL``), where the hub's formgrader
enters the written answers' points. From that moment the class gradebook is the one truth for
the workspace's lessons, and :func:`record_class_gradebook` says so in the workspace:

- ``GRADING_OUT/class_gradebook.json`` names the environment variable that holds the class
  gradebook's URL (never the URL: it holds a password), a digest of the URL (so another
  class's gradebook is refused) and the nbgrader course id;
- the workspace course's ``nbgrader_config.py`` reads its gradebook from that variable, so
  ``make formgrader`` on the workspace and ``nbgrader generate_feedback`` there read and write
  the class gradebook too (without the variable nbgrader stops, rather than show the stale
  SQLite copy).

:func:`workspace_gradebook` is what every output reads (the feedback pages, ``report.csv``,
``scores.csv``, the Canvas and Moodle files): the class gradebook when recorded, else the
workspace's own.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from course_grading.errors import GradingError

#: The record a workspace keeps once its grades went to a class gradebook.
RECORD = "class_gradebook.json"
#: The environment variable holding the class gradebook's URL (the hub sets it for instructors).
URL_VARIABLE = "SHAPES_GRADEBOOK_URL"
_CONFIG_MARK = "# --- recorded in the class gradebook (course_grading.nbgrader.workspace_gradebook)"


@dataclass(frozen=True)
class WorkspaceGradebook:
    """The gradebook a workspace's grades live in."""

    url: str  # an SQLAlchemy URL (may hold a password: never print it)
    course_id: str  # the nbgrader course id to open it with
    where: str  # the gradebook in words, for messages
    read_only_url: str = ""  # the workspace's own SQLite file, opened read-only

    @property
    def is_class(self) -> bool:
        return not self.read_only_url


def _digest(url: str) -> str:
    return hashlib.sha256(b"shapes-class-gradebook\0" + url.encode()).hexdigest()[:16]


def workspace_gradebook(out: Path) -> WorkspaceGradebook:
    """The gradebook ``out``'s grades live in now (see the module).

    Args:
        out: a grading workspace (``--out`` of a grading run).

    Returns:
        The class gradebook (from ``$SHAPES_GRADEBOOK_URL``) when the workspace was recorded
        in one, else the workspace's own SQLite gradebook.

    Raises:
        GradingError: the workspace has no gradebook, or was recorded in a class gradebook and
            ``SHAPES_GRADEBOOK_URL`` is unset or names another one.
    """
    out = Path(out)
    record = out / RECORD
    if not record.is_file():
        return _own(out / "course" / "gradebook.db")
    saved = json.loads(record.read_text(encoding="utf-8"))
    url = os.environ.get(saved["variable"], "")
    where = f"the class gradebook (${saved['variable']})"
    if not url:
        raise GradingError(
            f"{out}'s grades were recorded in the class gradebook, where manual grades are "
            f"entered: run this where ${saved['variable']} names it (the instructor's server, or "
            "`classroom/run.py instructor -- ...` as root)"
        )
    if _digest(url) != saved["digest"]:
        raise GradingError(
            f"${saved['variable']} names another gradebook than the class gradebook {out}'s "
            "grades were recorded in; give the class's"
        )
    return WorkspaceGradebook(url, saved["course_id"], where)


def _own(db: Path) -> WorkspaceGradebook:
    """The workspace's SQLite gradebook, its course id read from it (opening it with another
    would add a course row, and a read-only file cannot take one)."""
    if not db.is_file():
        raise GradingError(
            f"{db.parent.parent} has no course/gradebook.db; grade again to remake it"
        )
    db = db.resolve()
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            ids = [row[0] for row in con.execute("SELECT id FROM course")]
    except sqlite3.Error as err:
        raise GradingError(f"cannot read the gradebook {db} ({err})") from None
    read_only = f"sqlite:///file:{db}?mode=ro&uri=true"
    return WorkspaceGradebook(f"sqlite:///{db}", (ids or ["default_course"])[0], str(db), read_only)


def record_class_gradebook(out: Path, url: str, course_id: str) -> None:
    """Record in ``out`` that its grades now live in the class gradebook ``url``.

    Writes ``class_gradebook.json`` and points the workspace course's ``nbgrader_config.py`` at
    ``$SHAPES_GRADEBOOK_URL`` (once; a second merge changes nothing).

    Args:
        out: the grading workspace whose grades were copied into the class gradebook.
        url: the class gradebook's URL (only its digest is written).
        course_id: the nbgrader course id the class gradebook files the grades under.
    """
    out = Path(out)
    record = {"variable": URL_VARIABLE, "digest": _digest(url), "course_id": course_id}
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    config = out / "course" / "nbgrader_config.py"
    text = config.read_text(encoding="utf-8")
    if _CONFIG_MARK in text:
        return
    block = [
        "",
        _CONFIG_MARK,
        "# Its grades live in the class gradebook now: formgrader and feedback read them there.",
        "# Without the variable the URL is empty and nbgrader stops (never the stale copy here).",
        "import os as _os",
        f"c.CourseDirectory.db_url = _os.environ.get({URL_VARIABLE!r}, '')",
        f"c.CourseDirectory.course_id = {course_id!r}",
    ]
    config.write_text(text.rstrip("\n") + "\n" + "\n".join(block) + "\n", encoding="utf-8")
