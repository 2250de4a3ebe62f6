"""The grading report: one row per student and lesson, in CSV and Markdown, and a score sheet.

``report.csv`` / ``report.md``: status (ok, flagged, not graded, missing, unrecognised: an entry
of the submissions folder that is not graded, with the reason), score,
maximum, autograded points, written-answer points still to grade, failed items with the trusted
checks' messages, and the reasons in plain words. ``scores.csv``: one row per student, a column
per lesson, total and maximum.

Much of a row is text a student controls (their id, their file's name, an exception's message,
a value quoted back to them). Every such text is written as text: one line (newlines and other
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
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from course_grading.judge.lesson import LessonSpec
from course_grading.judge.secret import PRACTICE
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
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
#: What can start a link, image, autolink, HTML, entity, code span or emphasis, or end a cell
#: (``_`` inside a word is not emphasis in CommonMark and stays, so ``99_fixture`` reads as is).
_PUNCTUATION = re.compile(r"([\\`*~!\[\]()<>&|:./@{}])")


@dataclass(frozen=True)
class Row:
    """One row of the report: a student's lesson (or a file that was not understood)."""

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


def one_line(text: str) -> str:
    """``text`` on one line: every control character (newlines included) becomes a space.

    Args:
        text: any text (a student's name, a reason); other values are turned into text.

    Returns:
        The text, every unprintable character a space.
    """
    return "".join(ch if ch.isprintable() else " " for ch in str(text))


def formula_start(text: str) -> bool:
    """Whether a spreadsheet could read ``text`` as a formula: it starts with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return once read as NFKC (full-width ``＝`` is ``=``) and
    without the spaces and invisible characters before it (a no-break or zero-width space,
    which :func:`one_line` makes a plain space, hides nothing).

    Args:
        text: a cell's text.

    Returns:
        ``True`` when :func:`csv_text` guards it.
    """
    folded = unicodedata.normalize("NFKC", text)
    start = 0
    while start < len(folded) and _invisible(folded[start]):
        start += 1
    return folded.startswith(_FORMULA, start)


def _invisible(ch: str) -> bool:
    """A space, a format character (zero-width space and joiners, a byte-order mark) or a
    control character, but the tab and carriage return the guard looks for."""
    return ch not in "\t\r" and (ch.isspace() or unicodedata.category(ch) in ("Cf", "Cc"))


def csv_text(text: str) -> str:
    """A CSV cell no spreadsheet runs as a formula, on one line.

    Args:
        text: the cell's text.

    Returns:
        :func:`one_line` of it, with a leading ``'`` when it could read as a formula
        (:func:`formula_start`).
    """
    text = one_line(text)
    return "'" + text if formula_start(text) else text


def unguarded(cell: str) -> str:
    """A CSV cell :func:`csv_text` wrote, without the quote it put before a formula.

    Args:
        cell: the cell as written.

    Returns:
        The text as it was before it was guarded.
    """
    return cell[1:] if cell.startswith("'") and formula_start(cell[1:]) else cell


def markdown_text(text: str) -> str:
    """Text for a Markdown table cell: one line, its meaningful punctuation escaped, so nothing of
    it is a link, an image, HTML or a cell break (module docstring).

    Args:
        text: the cell's text.

    Returns:
        The escaped text.
    """
    return _PUNCTUATION.sub(r"\\\1", one_line(text))


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
