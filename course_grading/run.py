"""Grade a folder of student submissions, each in its own sandbox, and write a report.

    python -m course_grading SUBMISSIONS_DIR [--out grading] [--jobs N] [--timeout 60]

Steps, all inside a private workspace (``--out``, default ``grading/``):

1. find the submissions (nbgrader's ``<student>/<lesson>/<lesson>.ipynb`` layout or a flat
   ``<student>_<lesson>.ipynb`` download) without following a link, every entry not graded
   given a row of its own (``submissions``), and check each against its lesson, sizes checked
   before anything is parsed (``inspection``);
2. build a fresh nbgrader course in ``<out>/course`` from ``solutions/`` (its own gradebook) and
   copy every readable submission into its ``submitted/`` folder, repaired and reported; the
   originals are only read;
3. autograde: every notebook runs in its own kernel in a sandbox (``autograde``, ``sandbox``),
   ``--jobs`` at a time, with every hidden-test region removed; the lesson's trusted checks
   decide every autograded item outside the kernel (``verdicts``, ``items``); the cheat scan
   only flags for review (``cheats``); a deleted test cell is scored 0 explicitly;
4. ``nbgrader generate_feedback`` with hidden tests removed (``HideHiddenTests``); a feedback
   file holding any instructor line the student did not write is withheld (``leaks``), the
   others are copied to ``<out>/feedback/<student>/<lesson>.html``;
5. ``<out>/report.csv`` and ``<out>/report.md`` (per student and lesson: status, score, maximum,
   reasons in plain words) and ``<out>/scores.csv`` (one row per student).

Every run rebuilds the workspace from the submissions, so the same submissions give the same
files, whatever ``--jobs``. Written answers are left for manual grading (``needs manual
grading`` in the report); the workspace course is a complete nbgrader course, so
``formgrader`` can be opened there. A run refuses to replace a workspace whose gradebook
already holds manual grades unless ``--force`` is given.
"""

from __future__ import annotations

import csv
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
from nbgrader.utils import parse_utc

from course_grading import due as due_dates
from course_grading.autograde import Options, autograde
from course_grading.errors import GradingError
from course_grading.judge.items import check_notebook
from course_grading.judge.lesson import LessonSpec
from course_grading.lms import downloads
from course_grading.nbgrader import course as wc
from course_grading.nbgrader.steps import render_editions
from course_grading.notebook_file import NotRead, read_no_follow
from course_grading.pages.feedback import WITHHELD, withheld_record
from course_grading.pages.student_run import keep_student_runs
from course_grading.report import Row, rows_of, write_reports
from course_grading.report_text import bounded, csv_text
from course_grading.review.copies import class_copies
from course_grading.review.inspection import inspect, repaired_copy
from course_grading.review.leaks import instructor_lines, leaked, own_lines, unchecked
from course_grading.sandbox.bwrap import check_available
from course_grading.submissions import TIMESTAMP, Skipped, Submission, add_missing, collect
from course_grading.workspace import prepare_workspace

if TYPE_CHECKING:
    from course_grading.cluster import ClusterRun

#: Most characters of an edition label read from a submitted notebook (ours are a few words).
EDITION_LIMIT = 80


def _check_paths(submissions_dir: Path, out: Path) -> None:
    downloads.check_submissions(submissions_dir)
    if out == submissions_dir or out in submissions_dir.parents or submissions_dir in out.parents:
        raise GradingError("--out must be outside the submissions folder (and not contain it)")


def _select(
    submissions: Path,
    out: Path,
    roster: Path | None,
    all_lessons: list[str],
    lessons: list[str] | None,
) -> tuple[list[Submission], list[Skipped], list[str]]:
    """The submissions to grade (a downloaded zip unpacked into ``out``, a download's students
    named by the LMS's ``roster``), the entries not graded, and the lessons to grade."""
    unknown_lessons = sorted(set(lessons or []) - set(all_lessons))
    if unknown_lessons:
        raise GradingError(f"unknown lesson(s) {unknown_lessons}; the lessons are {all_lessons}")
    folder, lms_roster, unpacked = downloads.open_submissions(submissions, out, roster)
    subs, skipped = collect(folder, all_lessons, lms_roster)
    skipped += unpacked
    wanted = sorted(lessons) if lessons else sorted({s.lesson for s in subs})
    subs = [s for s in subs if s.lesson in wanted]
    if lessons:  # the lessons that were due: report every student who did not submit one
        subs = add_missing(subs, wanted)
    return subs, skipped, wanted


def _build_course(
    course_root: Path,
    work_dir: Path,
    lessons: list[str],
    timeouts: tuple[int, int],
    secret: bytes | None = None,
) -> tuple[wc.WorkCourse, dict[str, LessonSpec]]:
    """The work course with every lesson released in the class's edition (``secret``'s: what
    the students were given, so their locked cells are restored as they got them), and each
    lesson's spec."""
    config = [
        "from course_grading.sandbox.budgets import CellTimeouts",
        f"c.Execute.timeout_func = CellTimeouts({str(work_dir)!r}, student={timeouts[0]}, "
        f"lesson={timeouts[1]})",
        "c.Execute.iopub_timeout = 30  # let an interrupted torch kernel answer",
    ]
    work = wc.make_work_course(
        course_root,
        work_dir,
        lessons,
        cell_timeout=timeouts[0],
        extra_config=config,
    )
    render_editions(work, secret)
    if lessons:
        wc.generate_assignments(work)
    specs = {}
    for lesson in lessons:  # every item declared and checked, before any student's code runs
        source, release = work.source_notebook(lesson), work.release_notebook(lesson)
        try:
            specs[lesson] = LessonSpec.from_notebooks(lesson, source, release)
            nb = nbformat.read(str(source), as_version=4)
        except Exception as err:  # nbformat raises several types for a damaged notebook
            raise GradingError(
                f"cannot read lesson {lesson}'s notebook ({type(err).__name__}: {err}); fix "
                f"{wc.SOURCE_DIR}/{lesson}/{lesson}.ipynb"
            ) from None
        check_notebook(lesson, nb)
    return work, specs


def _timestamp(sub: Submission) -> str:
    """The ``timestamp.txt`` beside ``sub``'s notebook in nbgrader's layout, if it is usable
    (read without following a link; a date nbgrader can read); else ``""``, and why."""
    if sub.original is None:
        return ""
    stamp = sub.original.parent / TIMESTAMP
    nbgrader_layout = sub.original.name == f"{sub.lesson}.ipynb" == f"{stamp.parent.name}.ipynb"
    if not nbgrader_layout or not os.path.lexists(stamp):
        return ""
    try:
        text = read_no_follow(stamp, 256).decode("utf-8", "replace").strip()
        parse_utc(text)
    except NotRead as err:
        sub.flag(f"{err}: not used, so no late penalty is worked out")
        return ""
    except Exception:  # dateutil raises several types for what is not a date
        sub.flag(f"{TIMESTAMP} holds no date nbgrader can read ({text[:40]!r}); not used")
        return ""
    return text


def _stage(work: wc.WorkCourse, subs: list[Submission], specs: dict[str, LessonSpec]) -> None:
    """Inspect every submission and copy each readable one into ``submitted/`` (repaired); one
    handed in on another edition than the class's is flagged (``_edition_of``)."""
    editions = {lesson: _edition_of(work.release_notebook(lesson)) for lesson in work.lessons}
    sources = {
        lesson: nbformat.read(str(work.source_notebook(lesson)), 4) for lesson in work.lessons
    }
    for sub in subs:
        nb = inspect(sub, specs[sub.lesson]) if sub.gradable else None
        if nb is None or not sub.gradable:
            continue
        theirs, ours = _edition_of(nb), editions.get(sub.lesson)
        if theirs and ours and theirs != ours:
            sub.flag(
                f"handed in on the {theirs}, graded on this class's {ours}: its questions with "
                "class numbers were asked with others (was the lesson released with another "
                "course secret, or none? docs/instructors.md, 1.1)"
            )
        dest = work.submitted / sub.student / sub.lesson
        dest.mkdir(parents=True, exist_ok=True)
        staged = repaired_copy(nb, specs[sub.lesson], sub)
        keep_student_runs(staged, nb, sources[sub.lesson])  # what written answers quote
        nbformat.write(staged, str(dest / f"{sub.lesson}.ipynb"))
        if stamp := _timestamp(sub):
            (dest / TIMESTAMP).write_text(stamp + "\n", encoding="utf-8")


def _edition_of(nb: nbformat.NotebookNode | Path) -> str:
    """The edition a notebook records (``judge/editions.py``), or ``""``."""
    if isinstance(nb, Path):
        try:
            nb = nbformat.read(str(nb), as_version=4)
        except Exception:  # a release that cannot be read is reported where it is used
            return ""
    found = nb.metadata.get("shapes", {})
    label = str(found.get("edition", "")) if isinstance(found, dict) else ""
    return bounded(label, EDITION_LIMIT)  # the student's metadata: a label is a few words


def _keep_feedback(
    work: wc.WorkCourse,
    subs: list[Submission],
    out: Path,
    *,
    student: str | None = None,
    lesson: str = "*",
) -> None:
    """Generate feedback (for one ``student`` and one ``lesson`` only, if given), scan each
    file for instructor material, copy the clean ones out."""
    only = ["--student", student] if student else []
    work.run("generate_feedback", lesson, "--force", *only)
    secrets = {
        lesson: instructor_lines(work.source_notebook(lesson), work.release_notebook(lesson))
        for lesson in work.lessons
    }
    for sub in subs:
        html = work.feedback / sub.student / sub.lesson / f"{sub.lesson}.html"
        if not sub.graded:
            continue
        record = withheld_record(work.root, sub.student, sub.lesson, sub.lesson)
        if record.is_file():  # nbgrader's feedback step refused it (feedback.py)
            found = [line.strip() for line in record.read_text("utf-8").splitlines()[1:]]
        elif not html.is_file():
            sub.info.append("no feedback file was generated (see course/nbgrader.log)")
            continue
        else:  # the page itself, scanned again: defence in depth
            submitted = work.submitted / sub.student / sub.lesson / f"{sub.lesson}.ipynb"
            found = leaked(html, secrets[sub.lesson], own_lines(submitted))
        if found:
            html.unlink(missing_ok=True)  # not even formgrader's release_feedback may send it
            if why := unchecked(found):
                sub.flag(
                    f"feedback withheld: it could not be checked for instructor material "
                    f"(the scan {why})"
                )
            else:
                sub.flag(
                    f"{WITHHELD} ({len(found)} line(s) of hidden tests or solutions, "
                    f"e.g. {found[0][:60]!r})"
                )
            continue
        dest = out / "feedback" / sub.student / f"{sub.lesson}.html"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html, dest)


def grade(
    submissions_dir: Path,
    out: Path,
    course_root: Path,
    *,
    options: Options | None = None,
    lessons: list[str] | None = None,
    force: bool = False,
    timings: dict[str, float] | None = None,
    due: list[str] | None = None,
    cluster: ClusterRun | None = None,
    roster: Path | None = None,
) -> list[Row]:
    """Grade every submission under ``submissions_dir``; return the report rows (see module).

    ``timings``, if given, receives the seconds each step took (``course``, ``autograde``,
    ``feedback``): for the benchmark and the command's last line, never for the report.

    Args:
        submissions_dir: the folder of submissions, in any layout ``submissions`` reads, or
            the zip an LMS downloaded (unpacked into ``out/download``); only read.
        out: the workspace folder (``--out``), outside ``submissions_dir``; rebuilt on every
            run.
        course_root: the course's root folder (the repository), holding ``solutions/``.
        options: how to run the notebooks (timeouts, jobs, sandbox, limits); the defaults
            when ``None``.
        lessons: the lessons to grade, each student missing one of them given a ``missing``
            row; when ``None``, every lesson someone submitted, and no ``missing`` rows.
        force: replace a workspace whose gradebook holds manual grades or comments.
        timings: a dict to receive each step's seconds (changed in place).
        due: ``--due LESSON=WHEN`` values: due dates for nbgrader's late penalties
            (``due.py``); none when ``None``.
        cluster: grade the notebooks on this Dask cluster (``cluster.py``: its workers
            sandbox them, this machine needs no bubblewrap); ``None``: here, ``--jobs`` at a
            time.
        roster: the LMS's roster (``--roster``): the ids a download's students are graded
            under (``lms/downloads.py``).

    Returns:
        One report row per (student, lesson) and per entry not graded, as written to
        ``<out>/report.csv`` and ``report.md``.

    Raises:
        GradingError: grading cannot go on at all (the message says what to do).
    """
    options = options or Options()
    timings = {} if timings is None else timings
    clock = time.perf_counter()
    submissions_dir, out = Path(submissions_dir).resolve(), Path(out).resolve()
    course_root = Path(course_root).resolve()
    _check_paths(submissions_dir, out)
    # no silent fallback: stop here (on a cluster, each worker is checked before it is used)
    bwrap = check_available() if options.sandbox and cluster is None else None
    all_lessons = wc.find_lessons(course_root)
    if not all_lessons:
        raise GradingError(f"no lessons in {course_root / wc.SOURCE_DIR}")
    deadlines = due_dates.parse_due(due, all_lessons)
    prepare_workspace(out, force, cluster.keep if cluster else ())
    subs, skipped, wanted = _select(submissions_dir, out, roster, all_lessons, lessons)
    timeouts = options.cell_timeout, options.lesson_timeout
    work, specs = _build_course(course_root, out / "course", wanted, timeouts, options.secret)
    due_dates.set_due_dates(work, deadlines)
    _stage(work, subs, specs)
    timings["course"], clock = time.perf_counter() - clock, time.perf_counter()
    gradable = [s for s in subs if s.gradable and s.original is not None]
    if gradable:
        hidden = [out, submissions_dir, course_root / wc.SOURCE_DIR]
        if cluster is None:
            autograde(work, gradable, specs, options, hidden, bwrap)
        else:
            cluster.autograde(work, gradable, specs, options, hidden)
        due_dates.report_lateness(work, gradable)
        timings["autograde"], clock = time.perf_counter() - clock, time.perf_counter()
        _keep_feedback(work, subs, out)
        timings["feedback"] = time.perf_counter() - clock
    clock = time.perf_counter()
    copies = class_copies(work, [s for s in subs if s.graded])
    timings["copies"] = time.perf_counter() - clock
    rows = rows_of(subs, specs, skipped, sandboxed=options.sandbox)
    write_reports(out, rows, sandboxed=options.sandbox, practice=not options.secret, copies=copies)
    _write_function_times(out, subs, timings)
    return rows


def _write_function_times(out: Path, subs: list[Submission], timings: dict[str, float]) -> None:
    """``function_times.csv``: each submission's graded-function time, item by item (wall
    clock, in its slot). Apart from the report, which stays byte-identical from run to run."""
    total = 0.0
    with open(out / "function_times.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", "lesson", "item", "seconds"])
        for sub in subs:
            for gid, verdict in sorted(sub.verdicts.items()):
                if verdict.seconds:
                    total += verdict.seconds
                    cells = [csv_text(sub.student), csv_text(sub.lesson), csv_text(gid)]
                    writer.writerow([*cells, f"{verdict.seconds:.3f}"])
    timings["function calls (summed over slots)"] = total
