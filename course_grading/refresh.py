"""``python -m course_grading refresh GRADING_OUT``: every output made again from the grades now.

A grading run writes its outputs once: the feedback pages (``GRADING_OUT/feedback/``, what
students get), ``report.csv``, ``report.md`` and ``scores.csv``. Manual grading comes after,
in a formgrader: the workspace's (``make formgrader``, its own gradebook) or the hub's (the
class gradebook, once ``classroom/autograde.py`` recorded the workspace there). Either way the
grade lives in one gradebook (``nbgrader/workspace_gradebook.py``), and this brings every
output up to date with it (``make feedback`` runs it):

1. with ``--due LESSON=WHEN``, the due date is set in that gradebook (a date decided after
   manual grading: nothing is regraded and no manual grade is lost);
2. nbgrader's late penalty is decided again for every graded submission of a lesson with a
   due date, on its score now (``due.assign_penalties``);
3. feedback: ``nbgrader generate_feedback`` from that gradebook (manual scores, comments and
   penalties in the pages), each page scanned for instructor material as the run scans it,
   the clean ones copied to ``GRADING_OUT/feedback/<student>/<lesson>.html`` (a page now
   withheld is removed there);
4. each graded row of ``report.csv`` and ``report.md`` takes its score, autograded points,
   written points still to grade, late line and failed items from the gradebook; every other
   row and reason stays as it was, and ``scores.csv`` is written from the rows.

The LMS exports (``python -m course_grading export``) read the same gradebook directly.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from dataclasses import fields, replace
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from course_grading import due as due_dates
from course_grading.errors import GradingError
from course_grading.judge.lesson import LessonSpec
from course_grading.judge.secret import PRACTICE
from course_grading.nbgrader import course as wc
from course_grading.nbgrader.workspace_gradebook import WorkspaceGradebook, workspace_gradebook
from course_grading.pages.feedback import WITHHELD_DIR
from course_grading.regrade_reports import csv_rows, md_table, unescaped
from course_grading.report import Row, write_reports
from course_grading.run import _keep_feedback  # the whole run's own feedback step
from course_grading.submissions import Submission
from course_grading.workspace import MARKER

_GRADED = ("ok", "flagged")
#: The reasons a row takes from the gradebook (``report._row``, ``due.report_lateness``).
_FROM_GRADEBOOK = re.compile(
    r"needs manual grading \(.* points of written answers\)"
    r"|submitted .* after the due date \(.*\): .*"
    r"|no timestamp\.txt: nbgrader counts it on time \(due .*\)"
)
_PENDING = re.compile(r"needs manual grading \(")


def _rows(out: Path) -> list[Row]:
    """``report.csv`` back as rows: numbers as numbers, text unguarded, each joined list (failed
    items, reasons) kept as the one text it was written as."""
    rows = []
    for cells in csv_rows(out / "report.csv"):
        values = {}
        for f in fields(Row):
            text = unescaped(cells.get(f.name, ""))
            if isinstance(f.default, float):
                values[f.name] = float(text or 0)
            elif isinstance(f.default, tuple):
                values[f.name] = (text,) if text else ()
            else:
                values[f.name] = text
        rows.append(Row(**values))
    return rows


def _work(out: Path) -> wc.WorkCourse:
    needed = [out / MARKER, out / "report.csv", out / "report.md", out / "course" / "source"]
    if missing := [str(p.relative_to(out)) for p in needed if not p.exists()]:
        raise GradingError(
            f"{out} is not a graded workspace (no {', '.join(missing)}): give the --out folder "
            "of a `python -m course_grading` run"
        )
    course = out / "course"
    config = (course / wc.CONFIG_FILE).read_text(encoding="utf-8")
    named = re.search(r"^c\.CourseDirectory\.root = (['\"])(.*)\1$", config, re.M)
    if named and Path(named.group(2)) != course:
        raise GradingError(
            f"{out} was moved here from {Path(named.group(2)).parent}: its nbgrader settings "
            f"({course / wc.CONFIG_FILE}) still name the old folder. Move it back, or grade again"
        )
    lessons = sorted(p.name for p in (course / "source").iterdir() if p.is_dir())
    return wc.WorkCourse(course, tuple(lessons))


def _reasons(
    row: Row, pending: float, sub: Submission, lateness: list[str]
) -> tuple[tuple[str, ...], bool]:
    """The row's reasons with the gradebook's lines made anew, each where its old line was
    (else the written points after the others, the late line last); and whether a new problem
    (withheld feedback) was found."""
    old = "; ".join(row.reasons).split("; ") if row.reasons else []
    manual = [f"needs manual grading ({pending:g} points of written answers)"] if pending else []
    kept: list[str] = []
    for reason in old:
        if not _FROM_GRADEBOOK.fullmatch(reason):
            kept.append(reason)
        elif _PENDING.match(reason):
            kept, manual = kept + manual, []
        else:
            kept, lateness = kept + lateness, []
    new = [p for p in sub.problems if p not in kept]
    extra = [i for i in sub.info if i not in kept]
    return tuple(new + kept + manual + extra + lateness), bool(new)


def _failed(row: Row, spec: LessonSpec, notebook) -> tuple[str, ...]:
    """Failed items: as the run wrote them, unless a test's points were set by hand."""
    by_hand = {
        g.name for g in notebook.grades if g.name in spec.tests and g.manual_score is not None
    }
    if not by_hand:
        return row.failed_tests
    names = "|".join(re.escape(name) for name in spec.tests)
    old = (
        re.split(rf"; (?=(?:{names}) \()", "; ".join(row.failed_tests)) if row.failed_tests else []
    )
    entries = {item.split(" (", 1)[0]: item for item in old}
    failed = []
    for grade in notebook.grades:
        got = grade.score or 0.0
        if grade.name not in spec.tests or got >= grade.max_score:
            continue
        if grade.name in by_hand:
            failed.append(f"{grade.name} ({got:g}/{grade.max_score:g}: set by hand in formgrader)")
        else:
            failed.append(entries.get(grade.name, f"{grade.name} ({got:g}/{grade.max_score:g})"))
    return ("; ".join(failed),) if failed else ()


def _refreshed(
    row: Row, gb: Gradebook, spec: LessonSpec, sub: Submission, work: wc.WorkCourse, book
) -> Row:
    """``row`` with what the gradebook says now (module docstring, step 4)."""
    try:
        notebook = gb.find_submission_notebook(row.lesson, row.lesson, row.student)
    except MissingEntry:
        raise GradingError(
            f"report.csv says {row.student}'s {row.lesson} was graded, but {book.where} has no "
            "such submission: grade the class again"
        ) from None
    auto = sum(g.score or 0.0 for g in notebook.grades if g.name in spec.tests)
    pending = sum(
        g.max_score for g in notebook.grades if g.needs_manual_grade and g.name not in spec.tests
    )
    late = Submission(row.student, row.lesson, None, graded=True, score=notebook.score or 0.0)
    due_dates.report_lateness(work, [late], book)
    reasons, problem = _reasons(row, pending, sub, late.info)
    status = "flagged" if problem else row.status
    return replace(
        row,
        status=status,
        score=max(0.0, late.score),
        auto_score=auto,
        manual_pending=pending,
        failed_tests=_failed(row, spec, notebook),
        reasons=reasons,
    )


def _feedback(work: wc.WorkCourse, out: Path, subs: list[Submission], lessons: list[str]) -> None:
    """Step 3: stale pages and records removed, then the run's own feedback step per lesson."""
    for sub in subs:
        (out / "feedback" / sub.student / f"{sub.lesson}.html").unlink(missing_ok=True)
        record = work.root / WITHHELD_DIR / sub.student / sub.lesson
        if record.is_dir() and not record.is_symlink():
            shutil.rmtree(record)
    for lesson in lessons:
        _keep_feedback(work, [s for s in subs if s.lesson == lesson], out, lesson=lesson)


def _write(out: Path, rows: list[Row]) -> None:
    """``report.csv``, ``scores.csv`` and ``report.md`` from ``rows``; the report's copies
    section (what follows its table) as it was."""
    lines = (out / "report.md").read_text(encoding="utf-8").splitlines()
    practice = lines[:1] == [f"**{PRACTICE}**"]
    sandboxed = all(r.sandbox == "bubblewrap" for r in rows if r.sandbox)
    head, old_rows = md_table(out / "report.md")
    tail = lines[len(head) + len(old_rows) :]
    with tempfile.TemporaryDirectory() as tmp:
        write_reports(Path(tmp), rows, sandboxed=sandboxed, practice=practice)
        for name in ("report.csv", "scores.csv"):
            shutil.copyfile(Path(tmp) / name, out / name)
        new_head, new_rows = md_table(Path(tmp) / "report.md")
    (out / "report.md").write_text("\n".join(new_head + new_rows + tail) + "\n", "utf-8")


def refresh(
    out: Path, *, lessons: list[str] | None = None, due: list[str] | None = None
) -> list[Row]:
    """Bring every output of the graded workspace ``out`` up to date (see the module).

    Args:
        out: a graded workspace (``--out`` of a grading run).
        lessons: only these lessons (default: every lesson of the workspace).
        due: ``--due LESSON=WHEN`` values: due dates to set first (``due.parse_due``).

    Returns:
        The report's rows as written.

    Raises:
        GradingError: ``out`` is not a graded workspace, an unknown lesson or a bad due date,
            or the gradebook cannot be reached or does not hold what the report says.
    """
    out = Path(out).resolve()
    work = _work(out)
    if unknown := sorted(set(lessons or []) - set(work.lessons)):
        raise GradingError(
            f"no lesson {', '.join(unknown)} in {out}; it has {', '.join(work.lessons)}"
        )
    chosen = sorted(lessons) if lessons else list(work.lessons)
    book: WorkspaceGradebook = workspace_gradebook(out)
    due_dates.set_due_dates(work, due_dates.parse_due(due, list(work.lessons)), book)
    rows = _rows(out)
    todo = [r for r in rows if r.status in _GRADED and r.lesson in chosen]
    subs = {
        (r.student, r.lesson): Submission(r.student, r.lesson, Path(r.file), graded=True)
        for r in todo
    }
    due_dates.assign_penalties(work, list(subs.values()), book)
    _feedback(work, out, list(subs.values()), sorted({r.lesson for r in todo}))
    specs = {
        lesson: LessonSpec.from_notebooks(
            lesson, work.source_notebook(lesson), work.release_notebook(lesson)
        )
        for lesson in chosen
    }
    with Gradebook(book.url, course_id=book.course_id) as gb:
        rows = [
            _refreshed(r, gb, specs[r.lesson], subs[(r.student, r.lesson)], work, book)
            if (r.student, r.lesson) in subs
            else r
            for r in rows
        ]
    _write(out, rows)
    return rows


def build_parser() -> argparse.ArgumentParser:
    """The ``refresh`` command's options.

    Returns:
        The parser.
    """
    parser = argparse.ArgumentParser(
        prog="python -m course_grading refresh",
        description="After manual grading (in the workspace's formgrader or the hub's), make the "
        "feedback pages, report.csv, report.md and scores.csv again from the gradebook's grades "
        "now; optionally set a due date first (the late penalty is decided again, every manual "
        "grade kept).",
    )
    parser.add_argument("grading_out", type=Path, help="a graded workspace: --out of a grading run")
    parser.add_argument("--lessons", nargs="+", help="only these lessons (default: all)")
    parser.add_argument(
        "--due",
        metavar="LESSON=WHEN",
        action="append",
        help="set the lesson's due date first (UTC unless it says otherwise; repeat per lesson)",
    )
    return parser


def refresh_main(argv: list[str]) -> int:
    """``refresh GRADING_OUT [--lessons ...] [--due LESSON=WHEN]``: print what changed.

    Args:
        argv: the arguments after ``refresh``.

    Returns:
        0 once every output is written.

    Raises:
        GradingError: anything that keeps them from being written (one line, exit 2).
    """
    args = build_parser().parse_args(argv)
    rows = refresh(args.grading_out, lessons=args.lessons, due=args.due)
    out = args.grading_out.resolve()
    graded = [r for r in rows if r.status in _GRADED]
    pending = [r for r in graded if r.manual_pending]
    print(
        f"refreshed {len(graded)} graded row(s) from {workspace_gradebook(out).where}: "
        f"feedback {out / 'feedback'}, report {out / 'report.md'}, scores {out / 'scores.csv'}"
    )
    for r in pending:
        print(f"  {r.student} / {r.lesson}: {r.manual_pending:g} written point(s) still to grade")
    return 0
