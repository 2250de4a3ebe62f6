"""The grading report: one row per student and lesson, in CSV and Markdown, and a score sheet.

``report.csv`` / ``report.md``: status (ok, flagged, not graded, missing, unrecognised), score,
maximum, autograded points, written-answer points still to grade, failed tests, and the reasons
in plain words. ``scores.csv``: one row per student, a column per lesson, total and maximum.
"""

from __future__ import annotations

import csv
from pathlib import Path

from course_grading.lesson import LessonSpec
from course_grading.submissions import Submission

REPORT_FIELDS = [
    "student",
    "lesson",
    "status",
    "score",
    "max_score",
    "auto_score",
    "auto_max",
    "manual_pending",
    "failed_tests",
    "reasons",
    "file",
    "sandbox",
]


def _row(sub: Submission, spec: LessonSpec | None) -> dict:
    """One report row; the maximum falls back to the lesson's when nbgrader never graded it."""
    auto_max = spec.auto_max if spec else 0.0
    max_score = sub.max_score or (auto_max + (spec.manual_max if spec else 0.0))
    reasons = list(sub.problems)
    if sub.manual_pending:
        reasons.append(f"needs manual grading ({sub.manual_pending:g} points of written answers)")
    reasons += sub.info
    return {
        "student": sub.student,
        "lesson": sub.lesson,
        "status": sub.status,
        "score": f"{sub.score:g}",
        "max_score": f"{max_score:g}",
        "auto_score": f"{sub.auto_score:g}",
        "auto_max": f"{auto_max:g}",
        "manual_pending": f"{sub.manual_pending:g}",
        "failed_tests": "; ".join(sub.failed_tests),
        "reasons": "; ".join(reasons),
        "file": str(sub.original) if sub.original else "",
    }


#: The first lines of report.md when student code ran without a sandbox.
UNSANDBOXED = (
    "**WARNING: graded with --no-sandbox.** Student code ran as the grader, with access to "
    "everything the grader's account can read, write and reach (the work course, the gradebook, "
    "the solutions, other students' files, the network). Re-grade with the sandbox if any "
    "submission may be hostile."
)


def _write_scores(out: Path, subs: list[Submission], specs: dict[str, LessonSpec]) -> None:
    lessons = sorted({sub.lesson for sub in subs})
    students = sorted({sub.student for sub in subs})
    table = {(s.student, s.lesson): s for s in subs}
    with open(out / "scores.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", *lessons, "total", "max_total"])
        for student in students:
            cells = [table.get((student, lesson)) for lesson in lessons]
            scores = [c.score if c else 0.0 for c in cells]
            maxima = [float(_row(c, specs.get(c.lesson))["max_score"]) if c else 0.0 for c in cells]
            writer.writerow(
                [student, *(f"{x:g}" for x in scores), f"{sum(scores):g}", f"{sum(maxima):g}"]
            )


def _write_markdown(out: Path, rows: list[dict], sandboxed: bool) -> None:
    counts = {
        status: sum(r["status"] == status for r in rows)
        for status in ("ok", "flagged", "not graded", "missing", "unrecognised")
    }
    lines = ["# Grading report", ""] + ([UNSANDBOXED, ""] if not sandboxed else [])
    lines += [
        ", ".join(f"{n} {status}" for status, n in counts.items() if n) + ".",
        "",
        "Scores are autograded points plus any manual points entered so far; written "
        "answers still need manual grading in formgrader (`course/` is an nbgrader course).",
        "",
        "| student | lesson | status | score | max | reasons |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        reasons = r["reasons"].replace("|", "\\|") or "-"
        lines.append(
            f"| {r['student']} | {r['lesson']} | {r['status']} | {r['score']} | "
            f"{r['max_score']} | {reasons} |"
        )
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_reports(
    out: Path,
    subs: list[Submission],
    specs: dict[str, LessonSpec],
    unknown: list[str],
    *,
    sandboxed: bool = True,
) -> list[dict]:
    """Write ``report.csv``, ``scores.csv`` and ``report.md``; return the report rows.

    ``sandboxed=False`` (``--no-sandbox``) puts a warning at the top of ``report.md`` and
    ``none`` in every row's ``sandbox`` column.
    """
    rows = [_row(sub, specs.get(sub.lesson)) for sub in subs]
    rows += [
        {
            **dict.fromkeys(REPORT_FIELDS, ""),
            "student": "?",
            "lesson": "?",
            "status": "unrecognised",
            "reasons": "file name matches no student/lesson pattern; not graded",
            "file": path,
        }
        for path in unknown
    ]
    for row in rows:
        row["sandbox"] = "bubblewrap" if sandboxed else "none (--no-sandbox)"
    with open(out / "report.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, REPORT_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    _write_scores(out, subs, specs)
    _write_markdown(out, rows, sandboxed)
    return rows
