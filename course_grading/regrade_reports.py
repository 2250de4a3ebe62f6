"""Splicing one student's regraded rows into a class's reports (``regrade.py``).

``report.csv``, ``report.md``, ``scores.csv`` and ``function_times.csv`` keep every other row
exactly as it was; the student's rows are written as a whole run writes them, in the same
order a whole run sorts them, and ``report.md``'s count line is brought up to date. The copies
section of ``report.md`` is written anew afterwards (``report.refresh_copies``).
"""

from __future__ import annotations

import csv
import re
import shutil
import tempfile
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.grading_run import Options
from course_grading.report import REPORT_FIELDS, STATUSES, Row, write_reports
from course_grading.report_text import csv_text, read_rows, unguarded
from course_grading.submissions import Submission


def csv_rows(path: Path) -> list[dict[str, str]]:
    """A CSV file's rows as dicts (its header's names).

    Args:
        path: the file.

    Returns:
        Each row, in order.
    """
    return read_rows(path)


def md_table(path: Path) -> tuple[list[str], list[str]]:
    """``report.md`` as (the lines above the table's rows, the rows), in order.

    What follows the table (the copies section) is left out: ``report.refresh_copies`` writes
    it anew after a regrade, ``refresh.py`` keeps it as it was.

    Args:
        path: the report.

    Returns:
        The lines up to and including the table's header and rule, and the table's rows.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| student | lesson |"))
    end = next((i for i in range(head + 2, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[: head + 2], lines[head + 2 : end]


def unescaped(cell: str) -> str:
    """A CSV cell without the quote ``csv_text`` put before a formula's first character.

    Args:
        cell: the cell as written.

    Returns:
        The text as it was before it was guarded.
    """
    return unguarded(cell)


def merge_student(
    out: Path, student: str, new_rows: list[Row], folders: list[Path], options: Options
) -> None:
    """Write the reports: every other row as it was, the student's as a whole run writes them.

    Args:
        out: the workspace.
        student: the student's id as the report writes it.
        new_rows: the student's rows from this run.
        folders: the student's submission folders (their unrecognised entries are theirs too).
        options: the run's options (the sandbox and the secret, for the report's first lines).

    Raises:
        GradingError: ``report.md`` and ``report.csv`` disagree (regrade the class).
    """
    old_csv, (head, old_md) = csv_rows(out / "report.csv"), md_table(out / "report.md")
    if len(old_csv) != len(old_md):
        raise GradingError(f"{out / 'report.md'} and report.csv disagree: regrade the class")
    with tempfile.TemporaryDirectory() as tmp:
        write_reports(
            Path(tmp), new_rows, sandboxed=options.sandbox, practice=options.secret is None
        )
        new = list(zip(csv_rows(Path(tmp) / "report.csv"), md_table(Path(tmp) / "report.md")[1]))

    def mine(cells: dict[str, str]) -> bool:
        if cells["status"] == "unrecognised":
            return any(Path(cells["file"]).is_relative_to(f) for f in folders)
        return unescaped(cells["student"]) == student

    kept = [pair for pair in zip(old_csv, old_md) if not mine(pair[0])]
    rows = kept + new
    graded = [p for p in rows if p[0]["status"] != "unrecognised"]
    others = [p for p in rows if p[0]["status"] == "unrecognised"]
    graded.sort(key=lambda p: (unescaped(p[0]["student"]), p[0]["lesson"]))
    others.sort(key=lambda p: p[0]["file"])
    rows = graded + others
    with open(out / "report.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, REPORT_FIELDS)
        writer.writeheader()
        writer.writerows(cells for cells, _ in rows)
    counts = {s: sum(cells["status"] == s for cells, _ in rows) for s in STATUSES}
    line = ", ".join(f"{n} {status}" for status, n in counts.items() if n) + "."
    counted = re.compile(r"^\d+ (ok|flagged|not graded|missing|unrecognised)\b")
    head = [line if counted.match(text) else text for text in head]
    (out / "report.md").write_text("\n".join(head + [md for _, md in rows]) + "\n", "utf-8")
    shadow = [
        Row(unescaped(c["student"]), c["lesson"], c["status"], float(c["score"] or 0),
            float(c["max_score"] or 0))
        for c, _ in rows
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        write_reports(Path(tmp), shadow)
        shutil.copyfile(Path(tmp) / "scores.csv", out / "scores.csv")


def merge_times(out: Path, student: str, subs: list[Submission]) -> None:
    """``function_times.csv``: every other student's rows as they were, this student's new.

    Args:
        out: the workspace.
        student: the student's id as the report writes it.
        subs: the student's submissions graded in this run.
    """
    path = out / "function_times.csv"
    kept = (
        [r for r in csv_rows(path) if unescaped(r["student"]) != student] if path.is_file() else []
    )
    for sub in subs:
        for gid, verdict in sorted(sub.verdicts.items()):
            if verdict.seconds:
                kept.append({"student": csv_text(sub.student), "lesson": csv_text(sub.lesson),
                             "item": gid, "seconds": f"{verdict.seconds:.3f}"})  # fmt: skip
    kept.sort(key=lambda r: (unescaped(r["student"]), r["lesson"], r["item"]))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, ["student", "lesson", "item", "seconds"])
        writer.writeheader()
        writer.writerows(kept)
