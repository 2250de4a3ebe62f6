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
from course_grading.review.copies import SOLUTION, THRESHOLD, Cluster
from course_grading.review.fingerprints import MIN_GRAMS, K
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
            totals = [f"{sum(scores):g}", f"{sum(maxima):g}"]
            writer.writerow([csv_text(student), *(f"{x:g}" for x in scores), *totals])


def _write_markdown(
    out: Path, rows: list[Row], sandboxed: bool, practice: bool, copies: Sequence[Cluster] = ()
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
#: How a row says its submission answers the self-study edition (``judge/verdicts.py``).
SELF_STUDY = "answers the self-study edition"
NAMED = 40  # students named on a cluster's line before "and N more"


def _who(cluster: Cluster) -> str:
    names = [markdown_text(s) for s in cluster.students[:NAMED]]
    more = len(cluster.students) - NAMED
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _sources(cluster: Cluster) -> str:
    return " and ".join(markdown_text(s) for s in cluster.sources)


def cluster_line(cluster: Cluster) -> str:
    """One cluster of copies in one line: who, how alike, with which sources (inert Markdown).

    Args:
        cluster: a cluster (``review/copies.py``).

    Returns:
        ``"**3 students, near-identical** (at least 81 % in common), with the instructor's
        solution: ann, bob, cyd"``.
    """
    n, alike = len(cluster.students), "the same program" if cluster.identical else "near-identical"
    kind = "1 student" if n == 1 else f"{n} students, {alike}"
    with_ = f", with {_sources(cluster)}" if cluster.sources else ""
    return f"**{kind}** (at least {cluster.share:.0%} in common){with_}: {_who(cluster)}"


def _copies_section(copies: Sequence[Cluster]) -> list[str]:
    """The lines ``report.md`` ends with when there are clusters of copies: one row each."""
    if not copies:
        return []
    return [
        "",
        COPIES_HEADING,
        "",
        "Graded cells that are the same program, or nearly, as each other or the course's own "
        "code; nothing was taken off a grade. Each group once, with its lines: `copies.md`.",
        "",
        "| lesson | item | students | with | in common |",
        "|---|---|---|---|---|",
    ] + [
        f"| {markdown_text(c.lesson)} | {markdown_text(c.item)} | {_who(c)} | "
        f"{_sources(c) or '-'} | {c.share:.0%} |"
        for c in copies
    ]


def refresh_copies(out: Path, copies: Sequence[Cluster]) -> None:
    """Write ``report.md``'s copies section and ``copies.md`` anew (after a regrade): the
    report up to its section as it is, the section from ``copies``, the page from ``copies`` and
    ``report.csv``'s rows; ``copies.md`` removed when it would say nothing.

    Args:
        out: the workspace.
        copies: the class's clusters now (``review/copies.py``).
    """
    lines = (out / "report.md").read_text(encoding="utf-8").splitlines()
    if COPIES_HEADING in lines:
        lines = lines[: lines.index(COPIES_HEADING) - 1]  # and the blank line before it
    (out / "report.md").write_text("\n".join(lines + _copies_section(copies)) + "\n", "utf-8")
    with open(out / "report.csv", newline="", encoding="utf-8") as fh:
        rows = [
            Row(r["student"], r["lesson"], r["status"], reasons=tuple(r["reasons"].split("; ")))
            for r in csv.DictReader(fh)
        ]
    _write_page(out, copies, rows)


def _write_page(out: Path, copies: Sequence[Cluster], rows: Sequence[Row]) -> None:
    """``copies.md`` when there is a cluster or a row answering the self-study edition."""
    if copies or edition_rows(rows):
        (out / "copies.md").write_text(render_copies(copies, rows), encoding="utf-8")
    else:
        (out / "copies.md").unlink(missing_ok=True)


def write_reports(
    out: Path,
    rows: list[Row],
    *,
    sandboxed: bool = True,
    practice: bool = False,
    copies: Sequence[Cluster] = (),
) -> None:
    """Write ``report.csv``, ``scores.csv`` and ``report.md`` from ``rows``.

    Args:
        out: the workspace folder the files are written to.
        rows: the report's rows (:func:`rows_of`).
        sandboxed: False (``--no-sandbox``) puts a warning at the top of ``report.md``.
        practice: True (no course secret) makes its first line say that hidden inputs follow
            from public files.
        copies: clusters of copies (``review/copies.py``): a section listing each in
            ``report.md``, and ``copies.md`` (each with its lines in common, and the rows that
            answer the self-study edition).
    """
    with open(out / "report.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, REPORT_FIELDS)
        writer.writeheader()
        writer.writerows(r.csv_cells() for r in rows)
    _write_scores(out, rows)
    _write_markdown(out, rows, sandboxed, practice, copies)
    _write_page(out, copies, rows)


def edition_rows(rows: Iterable[Row]) -> list[tuple[str, str, str]]:
    """``(student, lesson, items)`` of every row flagged as answering the self-study edition.

    Args:
        rows: the report's rows.

    Returns:
        One triple per such row, in report order.
    """
    found = []
    for row in rows:
        for reason in row.reasons:
            if SELF_STUDY in reason:
                found.append((row.student, row.lesson, reason.split(SELF_STUDY, 1)[1].strip(" :")))
    return found


def _summary(copies: Sequence[Cluster]) -> list[str]:
    """One row per item: its clusters, the students in them, and how many of those share code
    with the instructor's solution or with the course's code (the library, the checks)."""
    items: dict[tuple[str, str], list[Cluster]] = {}
    for c in copies:
        items.setdefault((c.lesson, c.item), []).append(c)
    out = ["| lesson | item | clusters | students | with the solution | with the course's code |",
           "|---|---|---|---|---|---|"]  # fmt: skip
    for (lesson, item), found in items.items():
        students = [len(c.students) for c in found]
        solution = sum(n for c, n in zip(found, students) if c.with_solution)
        course = sum(n for c, n in zip(found, students) if set(c.sources) - {SOLUTION})
        out.append(f"| {markdown_text(lesson)} | {markdown_text(item)} | {len(found)} | "
                   f"{sum(students)} | {solution} | {course} |")  # fmt: skip
    return [*out, ""]


def render_copies(copies: Sequence[Cluster], rows: Iterable[Row] = ()) -> str:
    """``copies.md``, the class's review page: a summary row per item, then each cluster of copies
    once (one line, then its lines in common as an indented code block, every line indented so
    none can end it: code, never Markdown), item by item, then the rows that answer the
    self-study edition.

    Args:
        copies: the class's clusters (``review/copies.py``).
        rows: the report's rows (the self-study edition's table).

    Returns:
        The Markdown text (a line saying none were found when there are none).
    """
    out = [
        "# Possible copies, for review",
        "",
        f"Graded cells grouped when {THRESHOLD:.0%} or more of the smaller one's code is in the "
        f"other (fingerprints of {K} tokens, names, layout and comments aside; a cell of under "
        f"{MIN_GRAMS} is too short to judge), with the solution, `course_lib` or the grader's "
        "checks where they join. Short functions written from one rule can be the same program: "
        "nothing here was taken off a grade; each group is for you to decide.",
        "",
    ]
    out += _summary(copies) if copies else ["No copies found.", ""]
    where = None
    for c in copies:
        if (c.lesson, c.item) != where:
            where = (c.lesson, c.item)
            out += [f"## {markdown_text(c.lesson)} · {markdown_text(c.item)}", ""]
        code = ["    " + line for line in c.lines.expandtabs(4).splitlines()] or ["    -"]
        first = markdown_text(c.students[0])
        out += [cluster_line(c), "", f"In common, from {first}'s cell:", "", *code, ""]
    if editions := edition_rows(rows):
        out += ["## Answers of the self-study edition", "", "The public notebook's numbers "
                "handed in to a class edition: the items named score 0.", "",
                "| student | lesson | items |", "|---|---|---|"]  # fmt: skip
        out += [f"| {markdown_text(s)} | {markdown_text(x)} | {markdown_text(i)} |"
                for s, x, i in editions]  # fmt: skip
    return "\n".join(out) + "\n"
