"""What an instructor should look at before uploading an export: one note per finding.

The notes go to the command's output and, all of them, to a review file beside the export
(``canvas.csv`` -> ``canvas.review.csv``), written with the same formula guard.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from course_grading.lms.csv_files import Table, safe_cell
from course_grading.report_text import LIMITS, bounded, one_line

#: Kinds of note, in the order the output lists them.
NOT_IN_LMS = "graded, but in no row of the LMS file"
NOT_GRADED_ROW = "in the LMS file, but not in the grading output"
AMBIGUOUS = "ambiguous: nothing filled"
SEVERAL_ROWS = "one student in several rows: each filled"
UNREADABLE_ID = "no id the LMS can use: left out"
MISSING = "no submission: scored 0"
NOT_GRADED = "not graded (see report.md): scored 0"
PENDING = "written answers not yet graded: their points are not in the score"
REPLACED = "replaces a different grade in the LMS file"
KEPT = "kept as the LMS file had it"
OVER_MAXIMUM = "above the LMS's default maximum grade"
FORMULA_ID = "an id a spreadsheet may read as a formula: written exactly, the LMS matches on it"
SAME_USER = "one LMS user for several students (ids compared without case): none written"
KINDS = (
    NOT_IN_LMS, NOT_GRADED_ROW, AMBIGUOUS, SEVERAL_ROWS, UNREADABLE_ID, SAME_USER, MISSING,
    NOT_GRADED, PENDING, REPLACED, KEPT, OVER_MAXIMUM, FORMULA_ID,
)  # fmt: skip
#: Listed one by one in the command's output; the others are counted there.
LISTED = (NOT_IN_LMS, NOT_GRADED_ROW, AMBIGUOUS, SEVERAL_ROWS, UNREADABLE_ID, SAME_USER)
FIELDS = ["finding", "student", "lesson", "row", "lms_user", "detail"]


@dataclass(frozen=True)
class Note:
    """One finding: what, about whom, where in the LMS file, and the details."""

    kind: str
    student: str = ""
    lesson: str = ""
    row: int | None = None  # in the LMS file, the header being row 1
    lms_user: str = ""
    detail: str = ""

    def __post_init__(self) -> None:
        # names and cells of the LMS's file, which students may have chosen: bounded
        for name, limit in (("student", LIMITS["student"]), ("lms_user", LIMITS["student"]),
                            ("detail", LIMITS["reason"])):  # fmt: skip
            object.__setattr__(self, name, bounded(getattr(self, name), limit))

    def line(self) -> str:
        """The note on one line of the command's output (student text kept on one line).

        Returns:
            ``"kind: student / lesson, row 7 (Name, ID 101): detail"``, the empty parts left out.
        """
        who = " / ".join(p for p in (self.student, self.lesson) if p)
        where = f"row {self.row}" if self.row else ""
        where += f" ({self.lms_user})" if self.lms_user else ""
        parts = [p for p in (who, where) if p]
        text = f"{self.kind}: {', '.join(parts)}" + (f": {self.detail}" if self.detail else "")
        return one_line(text)


def review_path(out: Path) -> Path:
    """Where the review file of the export ``out`` goes: ``canvas.csv`` -> ``canvas.review.csv``.

    Args:
        out: the export file.

    Returns:
        The review file's path, beside ``out``.
    """
    return out.with_name(f"{out.stem}.review.csv")


def review_table(notes: list[Note]) -> Table:
    """Every note as a CSV table, sorted by kind, with formula-guarded cells.

    Args:
        notes: the findings.

    Returns:
        A UTF-8 (with byte-order mark, so spreadsheets read accents), comma-separated table.
    """
    ordered = sorted(notes, key=lambda n: (KINDS.index(n.kind), n.student, n.lesson, n.row or 0))
    rows = [FIELDS] + [
        [
            safe_cell(n.kind),
            safe_cell(n.student),
            safe_cell(n.lesson),
            str(n.row or ""),
            safe_cell(n.lms_user),
            safe_cell(n.detail),
        ]
        for n in ordered
    ]
    return Table(rows, ",", True, "\r\n")


def summary(notes: list[Note]) -> list[str]:
    """The command's lines about ``notes``: the ``LISTED`` kinds one by one, others counted.

    Args:
        notes: the findings.

    Returns:
        One line per listed note, then one count per other kind found.
    """
    lines = [n.line() for kind in LISTED for n in notes if n.kind == kind]
    for kind in KINDS:
        count = sum(n.kind == kind for n in notes)
        if kind not in LISTED and count:
            lines.append(f"{count} x {kind}")
    return lines
