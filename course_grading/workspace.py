"""The grading workspace (``--out``): made fresh on every run, never over someone else's folder.

A run refuses a non-empty folder without its marker file, and a workspace whose gradebook
already holds manual grades or comments unless ``--force`` is given.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from course_grading.errors import GradingError

MARKER = ".shapes-grading"

#: What a run writes in the workspace, removed before the next run (``cluster``: what a run on a
#: Dask cluster kept of each submission, ``cluster.py``; kept for ``--resume``).
OUTPUTS = (
    "course",
    "feedback",
    "report.csv",
    "report.md",
    "scores.csv",
    "class.json",
    "cluster",
    "class_gradebook.json",  # nbgrader/workspace_gradebook.py: the grades went to the class's
    "download",  # a downloaded zip, unpacked (lms/downloads.py)
)


def _manual_grades(db: Path) -> int:
    """Count manual scores and comments stored in an existing workspace gradebook."""
    if not db.is_file():
        return 0
    with sqlite3.connect(db) as con:
        try:
            grades = con.execute("SELECT COUNT(*) FROM grade WHERE manual_score IS NOT NULL")
            comments = con.execute(
                "SELECT COUNT(*) FROM comment WHERE manual_comment IS NOT NULL "
                "AND manual_comment != ''"
            )
            return grades.fetchone()[0] + comments.fetchone()[0]
        except sqlite3.Error:
            return 0


def prepare_workspace(out: Path, force: bool, keep: tuple[str, ...] = ()) -> None:
    """Make ``out`` an empty workspace, refusing folders that are not ours or hold manual grades.

    Ours is a folder holding ``MARKER``, which this writes; only the outputs a run writes
    (``OUTPUTS``) are removed from it, never a link's target, so anything else an
    instructor left there stays.

    Args:
        out: the workspace folder (``--out``); made if missing.
        force: discard the manual grades and comments of an earlier run's gradebook.
        keep: outputs of the earlier run to keep (``("cluster",)``: ``--resume``).

    Raises:
        GradingError: ``out`` is another folder, or holds manual grades and ``force`` is off.
    """
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise GradingError(
            f"{out} exists and is not a grading workspace (no {MARKER}); "
            "give an empty or new folder with --out"
        )
    manual = _manual_grades(out / "course" / "gradebook.db")
    if manual and not force:
        raise GradingError(
            f"{out / 'course' / 'gradebook.db'} holds {manual} manual grade(s) or "
            "comment(s); a new run would replace them. Use another --out, or "
            "--force to discard them (a due date decided now: `python -m course_grading refresh "
            f"{out} --due LESSON=WHEN` sets it and keeps them)."
        )
    try:
        for name in (name for name in OUTPUTS if name not in keep):
            path = out / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
        out.mkdir(parents=True, exist_ok=True)
        (out / MARKER).write_text("made by python -m course_grading\n", encoding="utf-8")
    except OSError as err:
        raise GradingError(
            f"cannot prepare the workspace {out} ({err.strerror}: {err.filename}); "
            "give a folder you can write with --out"
        ) from None
