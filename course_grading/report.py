"""The grading report: one row per student and lesson, in CSV and Markdown, and a score sheet.

``report.csv`` / ``report.md``: status (ok, flagged, not graded, missing, unrecognised: an entry
of the submissions folder that is not graded, with the reason), score,
maximum, autograded points, written-answer points still to grade, failed items with the trusted
checks' messages, and the reasons in plain words. ``scores.csv``: one row per student, a column
per lesson, total and maximum.

Much of a row is text a student controls (their id, their file's name, an exception's message,
a value quoted back to them, a field of their notebook's metadata). Every such text is written
bounded (``report_text.LIMITS``: each field cut at its limit, the cut saying how long the text
was) and as text (``report_text.py``): one line (newlines and other
control characters, terminal escapes included, become spaces, already in each ``Row``, so the
command's summary on the terminal is safe too), nothing live in ``report.md`` (every ASCII
punctuation character that means something there is backslash-escaped, as CommonMark allows
for any of them: no link, image, autolink, HTML, entity or code span can start, ``|`` cannot
end a table cell, and a bare URL's ``:``, ``/``, ``.`` and ``@`` are escaped so GFM's
linkify does not see one), and no CSV cell that a spreadsheet would run as a formula (a
cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return, once read as NFKC and
past any spaces and invisible characters, gets a leading ``'``).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from course_grading.judge.lesson import LessonSpec
from course_grading.judge.secret import PRACTICE
from course_grading.report_text import (
    LIMITS,
    bounded,
    bounded_all,
    csv_text,
    markdown_text,
    one_line,
)
from course_grading.review.copies import NOISE, THRESHOLD, Copy
from course_grading.submissions import Skipped, Submission

#: The first lines of report.md when student code ran without a sandbox.
UNSANDBOXED = (
    "**WARNING: graded with --no-sandbox.** Student code ran as the grader, with access to "
    "everything the grader's account can read, write and reach (the work course, the gradebook, "
    "the solutions, other students' files, the network). Re-grade with the sandbox if any "
    "submission may be hostile."
)
STATUSES = ("ok", "flagged", "not graded", "missing", "unrecognised")


@dataclass(frozen=True)
class Row:
    """One row of the report: a student's lesson (or a file that was not understood); every
    text field :func:`bounded` (``LIMITS``), so no row can grow past a spreadsheet's or
    ``csv``'s reach."""

    student: str
    lesson: str
    status: str  # one of STATUSES
    score: float = 0.0
    max_score: float = 0.0
    auto_score: float = 0.0
    auto_max: float = 0.0
    manual_pending: float = 0.0
    failed_tests: tuple[str, ...] = ()  # "grade id (points/max: the check's message)"
    reasons: tuple[str, ...] = ()
    file: str = ""
    sandbox: str = "bubblewrap"

    def __post_init__(self) -> None:
        for name in ("student", "lesson", "file"):
            object.__setattr__(self, name, bounded(getattr(self, name), LIMITS[name]))
        object.__setattr__(self, "reasons", bounded_all(self.reasons, LIMITS["reason"]))
        failed = bounded_all(self.failed_tests, LIMITS["failed_test"])
        object.__setattr__(self, "failed_tests", failed)

    def csv_cells(self) -> dict[str, str]:
        """The row as CSV cells (text made safe, see the module docstring).

        Returns:
            Field name -> cell: numbers as ``%g``, tuples joined with ``"; "``, text on one line
            and never read as a formula.
        """
        cells = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float):
                cells[f.name] = f"{value:g}"
            elif isinstance(value, tuple):
                cells[f.name] = csv_text("; ".join(value))
            else:
                cells[f.name] = csv_text(value)
        return cells


REPORT_FIELDS = [f.name for f in fields(Row)]


def _row(sub: Submission, spec: LessonSpec | None, sandbox: str) -> Row:
    """One report row; the maximum falls back to the lesson's when nbgrader never graded it."""
    auto_max = spec.auto_max if spec else 0.0
    max_score = sub.max_score or (auto_max + (spec.manual_max if spec else 0.0))
    reasons = list(sub.problems)
    if sub.manual_pending:
        reasons.append(f"needs manual grading ({sub.manual_pending:g} points of written answers)")
    reasons += sub.info
    return Row(
        student=one_line(sub.student),
        lesson=sub.lesson,
        status=sub.status,
        score=sub.score,
        max_score=max_score,
        auto_score=sub.auto_score,
        auto_max=auto_max,
        manual_pending=sub.manual_pending,
        failed_tests=tuple(sub.failed_tests),
        reasons=tuple(one_line(reason) for reason in reasons),
        file=one_line(str(sub.original)) if sub.original else "",
        sandbox=sandbox,
    )


def rows_of(
    subs: list[Submission],
    specs: dict[str, LessonSpec],
    skipped: list[Skipped],
    *,
    sandboxed: bool = True,
) -> list[Row]:
    """The report's rows: every submission in order, then every entry not graded.

    Args:
        subs: the graded submissions, in report order.
        specs: each lesson's spec, by lesson (its maximum when nbgrader never graded a row).
        skipped: the files that were not understood as submissions, with why.
        sandboxed: whether student code ran in bubblewrap (the rows' ``sandbox`` column).

    Returns:
        One row per submission, then one ``unrecognised`` row per skipped entry, each with its
        reason.
    """
    sandbox = "bubblewrap" if sandboxed else "none (--no-sandbox)"
    rows = [_row(sub, specs.get(sub.lesson), sandbox) for sub in subs]
    rows += [
        Row(
            student="?",
            lesson="?",
            status="unrecognised",
            reasons=(one_line(entry.reason),),
            file=one_line(entry.path),
            sandbox=sandbox,
        )
        for entry in sorted(skipped, key=lambda e: e.path)
    ]
    return rows


def _write_scores(out: Path, rows: list[Row]) -> None:
    graded = [r for r in rows if r.status != "unrecognised"]
    lessons = sorted({r.lesson for r in graded})
    table = {(r.student, r.lesson): r for r in graded}
    with open(out / "scores.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", *lessons, "total", "max_total"])
        for student in sorted({r.student for r in graded}):
            cells = [table.get((student, lesson)) for lesson in lessons]
            scores = [c.score if c else 0.0 for c in cells]
            maxima = [c.max_score if c else 0.0 for c in cells]
            writer.writerow(
                [
                    csv_text(student),
                    *(f"{x:g}" for x in scores),
                    f"{sum(scores):g}",
                    f"{sum(maxima):g}",
                ]
            )


def _write_markdown(
    out: Path, rows: list[Row], sandboxed: bool, practice: bool, copies: Sequence[Copy] = ()
) -> None:
    counts = {status: sum(r.status == status for r in rows) for status in STATUSES}
    lines = [f"**{PRACTICE}**", ""] if practice else []
    lines += ["# Grading report", ""] + ([UNSANDBOXED, ""] if not sandboxed else [])
    lines += [
        ", ".join(f"{n} {status}" for status, n in counts.items() if n) + ".",
        "",
        "Scores are autograded points plus any manual points entered so far; written "
        "answers still need manual grading in formgrader (`course/` is an nbgrader course). "
        "Every autograded point is decided by the lesson's trusted checks, outside the "
        "student's kernel; a failed item shows the check's message.",
        "",
        "| student | lesson | status | score | max | failed items | reasons |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        failed = markdown_text("; ".join(r.failed_tests)) or "-"
        where = [r.file] if r.status == "unrecognised" else []  # it has no student or lesson
        reasons = markdown_text(": ".join([*where, "; ".join(r.reasons)])) or "-"
        lines.append(
            f"| {markdown_text(r.student)} | {markdown_text(r.lesson)} | {r.status} | "
            f"{r.score:g} | {r.max_score:g} | {failed} | {reasons} |"
        )
    lines += _copies_section(copies)
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


COPIES_HEADING = "## Possible copies, for review"


def _copies_section(copies: Sequence[Copy]) -> list[str]:
    """The lines ``report.md`` ends with when graded functions were found elsewhere."""
    if not copies:
        return []
    return [
        "",
        COPIES_HEADING,
        "",
        "Graded functions whose own code is largely found in another source; nothing was "
        "taken off a grade. The matching lines, side by side: `copies.md`.",
        "",
        "| student | lesson | function | found in | share of their own code |",
        "|---|---|---|---|---|",
    ] + [
        f"| {markdown_text(c.student)} | {markdown_text(c.lesson)} | "
        f"{markdown_text(c.item)} | {markdown_text(c.source)} | {c.share:.0%} |"
        for c in copies
    ]


def refresh_copies(out: Path, copies: Sequence[Copy]) -> None:
    """Write ``report.md``'s copies section and ``copies.md`` anew (after a regrade): the
    report up to its section as it is, the section from ``copies``; ``copies.md`` removed
    when there are none.

    Args:
        out: the workspace.
        copies: the class's pairs now (``review/copies.py``).
    """
    lines = (out / "report.md").read_text(encoding="utf-8").splitlines()
    if COPIES_HEADING in lines:
        lines = lines[: lines.index(COPIES_HEADING) - 1]  # and the blank line before it
    (out / "report.md").write_text("\n".join(lines + _copies_section(copies)) + "\n", "utf-8")
    if copies:
        (out / "copies.md").write_text(render_copies(copies), encoding="utf-8")
    else:
        (out / "copies.md").unlink(missing_ok=True)


def write_reports(
    out: Path,
    rows: list[Row],
    *,
    sandboxed: bool = True,
    practice: bool = False,
    copies: Sequence[Copy] = (),
) -> None:
    """Write ``report.csv``, ``scores.csv`` and ``report.md`` from ``rows``.

    Args:
        out: the workspace folder the files are written to.
        rows: the report's rows (:func:`rows_of`).
        sandboxed: False (``--no-sandbox``) puts a warning at the top of ``report.md``.
        practice: True (no course secret) makes its first line say that hidden inputs follow
            from public files.
        copies: pairs of graded functions found elsewhere (``review/copies.py``): a section
            listing each in ``report.md``, and ``copies.md`` with their matching lines side
            by side.
    """
    with open(out / "report.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, REPORT_FIELDS)
        writer.writeheader()
        writer.writerows(r.csv_cells() for r in rows)
    _write_scores(out, rows)
    _write_markdown(out, rows, sandboxed, practice, copies)
    if copies:
        (out / "copies.md").write_text(render_copies(copies), encoding="utf-8")


def render_copies(copies: Iterable[Copy]) -> str:
    """``copies.md``: each pair with its matching passages side by side, as inert Markdown.

    Args:
        copies: the pairs (``review/copies.py``).

    Returns:
        The Markdown text (a line saying none were found when there are none).
    """
    copies = list(copies)
    out = [
        "# Possible copies, for review",
        "",
        "Graded functions whose own code (beyond the lesson's blank) is largely found in "
        f"another source ({THRESHOLD:.0%} or more, copydetect fingerprints of {NOISE} "
        "characters; names do not matter). Nothing was taken off a grade: decide each case.",
        "",
    ]
    if not copies:
        return "\n".join([*out, "None found.", ""])
    for c in copies:
        out += [
            f"## {markdown_text(c.student)} · {c.lesson} · {markdown_text(c.item)}",
            "",
            f"{c.share:.0%} of the student's own code is in {markdown_text(c.source)}.",
            "",
            "| the student's cell | " + markdown_text(c.source) + " |",
            "|---|---|",
        ]
        for mine, other in c.passages:
            out.append(f"| {_cell(mine)} | {_cell(other)} |")
        out.append("")
    return "\n".join(out)


def _cell(text: str) -> str:
    """A passage as one table cell: each line inert text (``report.markdown_text``), its
    indentation kept as no-break spaces, the lines apart with ``<br>`` (ours, never the
    student's: their ``<`` is escaped)."""
    lines = []
    for line in text.expandtabs(4).splitlines():
        body = line.lstrip(" ")
        lines.append("&nbsp;" * (len(line) - len(body)) + markdown_text(body))
    return "<br>".join(lines)
