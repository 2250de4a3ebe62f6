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

import hashlib
import json
import shutil
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from course_grading import due as due_dates
from course_grading.autograde import Options, autograde
from course_grading.errors import GradingError
from course_grading.judge.items import check_notebook
from course_grading.judge.lesson import LessonSpec
from course_grading.lms.download_names import Roster
from course_grading.lms.downloads import open_submissions
from course_grading.nbgrader import course as wc
from course_grading.nbgrader.workspace_gradebook import RECORD as RECORDED
from course_grading.regrade_reports import csv_rows, merge_student, merge_times, unescaped
from course_grading.report import Row, refresh_copies, rows_of
from course_grading.review.copies import class_copies
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


def record_class_run(
    out: Path, options: Options, lessons: list[str] | None, roster: Path | None = None
) -> None:
    """Write ``class.json``: what a regrade of one student must match (no secret in it).

    Args:
        out: the workspace a whole run just wrote.
        options: that run's options (its secret is kept only as a 16-hex-digit fingerprint).
        lessons: the ``--lessons`` given (``None``: every lesson someone submitted).
        roster: the LMS's roster the run named students with (``--roster``), reused.
    """
    record = {
        "secret": _fingerprint(options.secret),
        "sandbox": options.sandbox,
        "lessons_due": lessons is not None,
        "roster": str(Path(roster).resolve()) if roster else None,
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
    if (out / RECORDED).is_file():
        raise GradingError(
            f"{out}'s grades were recorded in the class gradebook (classroom/autograde.py): grade "
            "the lesson again there (classroom/run.py autograde LESSON keeps every manual grade)"
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
    roster: Roster | None,
) -> tuple[list[Submission], list[Skipped], list[Path]]:
    """The student's submissions of the workspace's lessons, the entries not graded in their
    own folders, and those folders (found as a whole run finds them: every lesson of the
    course, then only the workspace's kept; a download's students named by the class's
    roster)."""
    subs, skipped = collect(submissions_dir, all_lessons, roster)
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
        submissions_dir: the class's submissions folder, or the zip an LMS downloaded (only
            read); a download's students are named by the roster the class was graded with.
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
    record = _class_run(out, options)
    folder, lms_roster, _ = open_submissions(submissions_dir, out, record.get("roster"))
    course = out / "course"
    lessons = sorted(p.name for p in (course / "source").iterdir() if p.is_dir())
    work = wc.WorkCourse(course, tuple(lessons))
    _check_due(due, course, lessons)
    bwrap = check_available() if options.sandbox else None
    specs = _specs(work)
    known = {unescaped(r["student"]) for r in csv_rows(out / "report.csv")} - {"?"}
    all_lessons = wc.find_lessons(Path(course_root).resolve())
    subs, skipped, folders = _student_submissions(
        folder, work, student, record, known, all_lessons, lms_roster
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
    merge_student(out, student, rows, folders, options)
    merge_times(out, student, subs)
    refresh_copies(out, class_copies(work, staged_submissions(work)))
    return rows


def _check_due(due: list[str] | None, course: Path, lessons: list[str]) -> None:
    """``--due`` on a regrade may only repeat the due dates the class was graded with."""
    class_due = due_dates.due_dates_of(course)
    if (asked := due_dates.parse_due(due, lessons)) and asked != {
        k: class_due.get(k) for k in asked
    }:
        raise GradingError(
            f"--due differs from the class's due dates ({class_due or 'none'}): set a new one "
            "with `refresh GRADING_OUT --due LESSON=WHEN` (manual grades kept), then regrade"
        )


def staged_submissions(work: wc.WorkCourse) -> list[Submission]:
    """Every submission staged in the work course (``submitted/STUDENT/LESSON``), as the class's
    copies are compared again after one student's regrade.

    Args:
        work: the workspace's course.

    Returns:
        One :class:`Submission` per staged notebook, by student and lesson.
    """
    found = []
    for student in sorted(p for p in work.submitted.iterdir() if p.is_dir()):
        for lesson in sorted(p for p in student.iterdir() if p.is_dir()):
            found.append(Submission(student.name, lesson.name, lesson / f"{lesson.name}.ipynb"))
    return found
