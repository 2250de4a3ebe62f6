"""Regrade one student in a graded workspace: ``python -m course_grading ... --student ID``.

A whole run rebuilds the workspace (``run.py``); after manual grading that would throw the
manual grades away, and a resubmission or a fixed timestamp concerns one student. Here only that
student's submissions are graded again, in the workspace course as it is (the same lessons, the
same gradebook, the due dates the class was graded with), and only that student's rows, pages
and times are replaced:

- the student's copies in the work course (``course/submitted/ID``), their graded notebooks and
  their feedback pages are made again from the submissions folder; every other student's files
  stay as they are, byte for byte;
- nbgrader's gradebook keeps each manual score, comment and extra credit the student had (as
  ``nbgrader autograde`` does); a written answer whose text changed since it was graded by hand
  is flagged (its manual score is kept: look at it again). ``--force`` discards them instead;
- ``report.csv``, ``report.md``, ``scores.csv`` and ``function_times.csv`` keep every other
  row exactly as it was; the student's rows are written as a whole run writes them, in the same
  place, and ``report.md``'s count line is brought up to date.

The run must match the class's: the same course secret (or none), the sandbox or not as before;
``class.json``, written by every whole run, says what they were. A student who is not in the
submissions folder, a workspace without a graded class, or a lesson the workspace was not built
for is one line and exit status 2.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from course_grading import due as due_dates
from course_grading.autograde import Options, autograde
from course_grading.errors import GradingError
from course_grading.judge.items import check_notebook
from course_grading.judge.lesson import LessonSpec
from course_grading.nbgrader import course as wc
from course_grading.report import REPORT_FIELDS, STATUSES, Row, csv_text, rows_of, write_reports
from course_grading.run import _keep_feedback, _stage  # the whole run's own steps
from course_grading.sandbox.bwrap import check_available
from course_grading.submissions import Skipped, Submission, add_missing, collect, submissions_root
from course_grading.workspace import MARKER

#: What a whole run records about itself in the workspace, for ``--student`` to match.
CLASS_RUN = "class.json"


def _fingerprint(secret: bytes | None) -> str:
    if secret is None:
        return "practice"
    return hashlib.sha256(b"shapes-class-run\0" + secret).hexdigest()[:16]


def record_class_run(out: Path, options: Options, lessons: list[str] | None) -> None:
    """Write ``class.json``: what a regrade of one student must match (no secret in it).

    Args:
        out: the workspace a whole run just wrote.
        options: that run's options (its secret is kept only as a 16-hex-digit fingerprint).
        lessons: the ``--lessons`` given (``None``: every lesson someone submitted).
    """
    record = {
        "secret": _fingerprint(options.secret),
        "sandbox": options.sandbox,
        "lessons_due": lessons is not None,
    }
    (Path(out) / CLASS_RUN).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _class_run(out: Path, options: Options) -> dict:
    """The class run's record, checked against this run's options."""
    needed = [out / MARKER, out / CLASS_RUN, out / "report.csv", out / "report.md"]
    needed.append(out / "course" / "gradebook.db")
    if missing := [p.name for p in needed if not p.is_file()]:
        raise GradingError(
            f"--student regrades one student in a graded workspace; {out} has no "
            f"{', '.join(missing)}: grade the class first (without --student), with this --out"
        )
    record = json.loads((out / CLASS_RUN).read_text(encoding="utf-8"))
    if record.get("secret") != _fingerprint(options.secret):
        before = "without one" if record.get("secret") == "practice" else "with another one"
        now = "this one" if options.secret else "none"
        raise GradingError(
            f"the class in {out} was graded {before} than the course secret given now ({now}): "
            "one student's hidden inputs would not be drawn as the class's. Give the same "
            "--secret-file (or regrade the class)"
        )
    if record.get("sandbox") != options.sandbox:
        was = "in the sandbox" if record.get("sandbox") else "with --no-sandbox"
        raise GradingError(f"the class in {out} was graded {was}: regrade the student the same way")
    return record


def _specs(work: wc.WorkCourse) -> dict[str, LessonSpec]:
    specs = {}
    for lesson in work.lessons:
        source, release = work.source_notebook(lesson), work.release_notebook(lesson)
        specs[lesson] = LessonSpec.from_notebooks(lesson, source, release)
        check_notebook(lesson, nbformat.read(str(source), as_version=4))
    return specs


def _student_submissions(
    submissions_dir: Path,
    work: wc.WorkCourse,
    student: str,
    record: dict,
    known: set[str],
    all_lessons: list[str],
) -> tuple[list[Submission], list[Skipped], list[Path]]:
    """The student's submissions of the workspace's lessons, the entries not graded in their
    own folders, and those folders (found as a whole run finds them: every lesson of the
    course, then only the workspace's kept)."""
    subs, skipped = collect(submissions_dir, all_lessons)
    mine = [s for s in subs if s.student == student and s.lesson in work.lessons]
    if not mine and student in known:  # nothing of theirs left: each lesson is missing
        gone = "no notebook submitted for this lesson"
        mine = [
            Submission(student, le, None, problems=[gone], gradable=False) for le in work.lessons
        ]
    if not mine and any(s.student == student for s in subs):
        raise GradingError(
            f"--student {student}: no submission for the lessons {', '.join(work.lessons)} the "
            "workspace was graded for; grade those lessons as a class first"
        )
    if not mine:
        ids = sorted({s.student for s in subs} | set(known))
        shown = ", ".join(ids[:20]) + (" ..." if len(ids) > 20 else "")
        raise GradingError(
            f"--student {student}: no such student in {submissions_dir} or the report; the "
            f"students are: {shown or 'none'} (ids as the report writes them)"
        )
    if record.get("lessons_due"):  # the class run reported every lesson due, submitted or not
        mine = [s for s in add_missing(mine, list(work.lessons)) if s.student == student]
    root = submissions_root(submissions_dir, all_lessons)
    folders = set()
    for sub in mine:
        if sub.original is not None and len(rel := sub.original.relative_to(root).parts) > 1:
            folders.add(root / rel[0])
    own = [s for s in skipped if any(Path(s.path).is_relative_to(f) for f in folders)]
    return mine, own, sorted(folders)


def _manual_work(work: wc.WorkCourse, student: str) -> dict[tuple[str, str], dict]:
    """The student's manual scores, comments and extra credit, by (lesson, grade id)."""
    kept: dict[tuple[str, str], dict] = {}
    with Gradebook(work.db_url) as gb:
        for lesson in work.lessons:
            try:
                notebook = gb.find_submission_notebook(lesson, lesson, student)
            except MissingEntry:
                continue
            for grade in notebook.grades:
                if grade.manual_score is not None or grade.extra_credit:
                    kept.setdefault((lesson, grade.name), {}).update(
                        manual_score=grade.manual_score, extra_credit=grade.extra_credit
                    )
            for comment in notebook.comments:
                if comment.manual_comment:
                    kept.setdefault((lesson, comment.name), {})["manual_comment"] = (
                        comment.manual_comment
                    )
    return kept


def _forget(work: wc.WorkCourse, student: str, lessons: list[str]) -> None:
    """Remove the student's submissions of ``lessons`` from the work gradebook (``--force``, or
    a submission that is gone from the submissions folder)."""
    with Gradebook(work.db_url) as gb:
        for lesson in lessons:
            try:
                gb.remove_submission(lesson, student)
            except MissingEntry:
                pass


def _written_sources(work: wc.WorkCourse, student: str, lesson: str) -> dict[str, str]:
    """The student's answer cells as their graded notebook holds them (``{}`` if none)."""
    path = work.autograded / student / lesson / f"{lesson}.ipynb"
    if not path.is_file():
        return {}
    nb = nbformat.read(str(path), as_version=4)
    return {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id")
    }


def _clear_student(work: wc.WorkCourse, out: Path, student: str) -> None:
    """Remove the student's copies (submitted, graded, feedback) from the workspace."""
    for folder in (work.submitted, work.autograded, work.feedback, out / "feedback"):
        path = folder / student
        if path.is_dir() and not path.is_symlink():
            for inner in path.rglob("*"):  # nbgrader leaves graded notebooks read-only
                inner.chmod(0o755 if inner.is_dir() else 0o644)
            shutil.rmtree(path)


def _check_kept(
    work: wc.WorkCourse,
    student: str,
    kept: dict[tuple[str, str], dict],
    before: dict[str, dict[str, str]],
    subs: list[Submission],
) -> None:
    """Put back any manual work lost (nbgrader keeps it; this makes sure); flag a written
    answer changed since it was graded by hand, and take an unchanged one off the to-grade list
    (nbgrader marks every hand-graded cell for review when it autogrades again)."""
    with Gradebook(work.db_url) as gb:
        for (lesson, name), values in kept.items():
            sub = next((s for s in subs if s.lesson == lesson and s.graded), None)
            if sub is None:
                continue
            if values.get("manual_comment"):
                try:
                    comment = gb.find_comment(name, lesson, lesson, student)
                    comment.manual_comment = comment.manual_comment or values["manual_comment"]
                except MissingEntry:
                    pass
            try:
                grade = gb.find_grade(name, lesson, lesson, student)
            except MissingEntry:
                continue
            grade.extra_credit = grade.extra_credit or values.get("extra_credit")
            if values.get("manual_score") is None:
                continue
            if grade.manual_score is None:
                grade.manual_score = values["manual_score"]
            now = _written_sources(work, student, lesson).get(name)
            if now != before[lesson].get(name, now):
                sub.flag(
                    f"written answer {name!r} changed since it was graded by hand "
                    f"({values['manual_score']:g} points kept): grade it again in formgrader"
                )
            elif grade.needs_manual_grade:  # nbgrader asks for a review; nothing changed
                grade.needs_manual_grade = False
                sub.manual_pending = max(0.0, sub.manual_pending - grade.max_score)
        gb.db.commit()


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _md_table(path: Path) -> tuple[list[str], list[str]]:
    """``report.md`` as (the lines above the table's rows, the rows), in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| student | lesson |"))
    return lines[: head + 2], lines[head + 2 :]


def _unescaped(cell: str) -> str:
    return cell[1:] if cell.startswith("'") and cell[1:2] in "=+-@\t\r" else cell


def _merge(out: Path, student: str, new_rows: list[Row], folders: list[Path], options) -> None:
    """Write the reports: every other row as it was, the student's as a whole run writes them."""
    old_csv, (head, old_md) = _csv_rows(out / "report.csv"), _md_table(out / "report.md")
    if len(old_csv) != len(old_md):
        raise GradingError(f"{out / 'report.md'} and report.csv disagree: regrade the class")
    with tempfile.TemporaryDirectory() as tmp:
        write_reports(
            Path(tmp), new_rows, sandboxed=options.sandbox, practice=options.secret is None
        )
        new = list(zip(_csv_rows(Path(tmp) / "report.csv"), _md_table(Path(tmp) / "report.md")[1]))

    def mine(cells: dict[str, str]) -> bool:
        if cells["status"] == "unrecognised":
            return any(Path(cells["file"]).is_relative_to(f) for f in folders)
        return _unescaped(cells["student"]) == student

    kept = [pair for pair in zip(old_csv, old_md) if not mine(pair[0])]
    rows = kept + new
    graded = [p for p in rows if p[0]["status"] != "unrecognised"]
    others = [p for p in rows if p[0]["status"] == "unrecognised"]
    graded.sort(key=lambda p: (_unescaped(p[0]["student"]), p[0]["lesson"]))
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
        Row(_unescaped(c["student"]), c["lesson"], c["status"], float(c["score"] or 0),
            float(c["max_score"] or 0))
        for c, _ in rows
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        write_reports(Path(tmp), shadow)
        shutil.copyfile(Path(tmp) / "scores.csv", out / "scores.csv")


def _merge_times(out: Path, student: str, subs: list[Submission]) -> None:
    path = out / "function_times.csv"
    kept = (
        [r for r in _csv_rows(path) if _unescaped(r["student"]) != student]
        if path.is_file()
        else []
    )
    for sub in subs:
        for gid, verdict in sorted(sub.verdicts.items()):
            if verdict.seconds:
                kept.append({"student": csv_text(sub.student), "lesson": csv_text(sub.lesson),
                             "item": gid, "seconds": f"{verdict.seconds:.3f}"})  # fmt: skip
    kept.sort(key=lambda r: (_unescaped(r["student"]), r["lesson"], r["item"]))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, ["student", "lesson", "item", "seconds"])
        writer.writeheader()
        writer.writerows(kept)


def regrade_student(
    submissions_dir: Path,
    out: Path,
    course_root: Path,
    student: str,
    *,
    options: Options,
    due: list[str] | None = None,
    force: bool = False,
) -> list[Row]:
    """Grade ``student``'s submissions again in the workspace ``out`` (see the module).

    Args:
        submissions_dir: the class's submissions folder (only read).
        out: the workspace a whole run wrote (``--out``).
        course_root: the course's root folder (its ``solutions/`` is hidden from kernels).
        student: the student's id as the report writes it.
        options: how to run the notebooks; its secret and sandbox must be the class run's.
        due: ``--due`` as typed; each must repeat the due date the class was graded with.
        force: discard the student's manual grades and comments instead of keeping them.

    Returns:
        The student's new report rows (every other row is as it was).

    Raises:
        GradingError: no graded workspace, another secret or sandbox setting than the
            class's, an unknown student, or a due date other than the class's.
    """
    submissions_dir, out = Path(submissions_dir).resolve(), Path(out).resolve()
    if not submissions_dir.is_dir():
        raise GradingError(f"submissions folder {submissions_dir} does not exist")
    record = _class_run(out, options)
    course = out / "course"
    lessons = sorted(p.name for p in (course / "source").iterdir() if p.is_dir())
    work = wc.WorkCourse(course, tuple(lessons))
    class_due = due_dates.due_dates_of(course)
    if (asked := due_dates.parse_due(due, lessons)) and asked != {
        k: class_due.get(k) for k in asked
    }:
        raise GradingError(
            f"--due differs from the due dates the class was graded with "
            f"({class_due or 'none'}): regrade the class to change a due date"
        )
    bwrap = check_available() if options.sandbox else None
    specs = _specs(work)
    known = {_unescaped(r["student"]) for r in _csv_rows(out / "report.csv")} - {"?"}
    all_lessons = wc.find_lessons(Path(course_root).resolve())
    subs, skipped, folders = _student_submissions(
        submissions_dir, work, student, record, known, all_lessons
    )
    kept = {} if force else _manual_work(work, student)
    before = {lesson: _written_sources(work, student, lesson) for lesson in lessons}
    gone = [le for le in lessons if not any(s.lesson == le and s.gradable for s in subs)]
    if gone_kept := sorted({name for (le, name) in kept if le in gone}):
        raise GradingError(
            f"{student}'s gradebook holds manual grades for {', '.join(gone)}, which has no "
            f"gradable submission now ({', '.join(gone_kept)}): use --force to discard them"
        )
    _forget(work, student, lessons if force else gone)
    _clear_student(work, out, student)
    _stage(work, subs, specs)
    gradable = [s for s in subs if s.gradable and s.original is not None]
    if gradable:
        hidden = [out, submissions_dir, Path(course_root).resolve() / wc.SOURCE_DIR]
        autograde(work, gradable, specs, options, hidden, bwrap)
        due_dates.report_lateness(work, gradable)
        _check_kept(work, student, kept, before, gradable)
        _keep_feedback(work, subs, out, student=student)
    rows = rows_of(subs, specs, skipped, sandboxed=options.sandbox)
    _merge(out, student, rows, folders, options)
    _merge_times(out, student, subs)
    return rows
