"""Grade a folder of student submissions with nbgrader, robustly, and write a report.

    python -m course_lib.grading SUBMISSIONS_DIR [--out grading] [--timeout 60]

Steps, all inside a private workspace (``--out``, default ``grading/``):

1. find the submissions (nbgrader's ``<student>/<lesson>/<lesson>.ipynb`` layout or a flat
   ``<student>_<lesson>.ipynb`` download) and check each against its lesson (``submissions``);
2. build a fresh nbgrader course in ``<out>/course`` from ``solutions/`` (its own gradebook) and
   copy every readable submission into its ``submitted/`` folder; the originals are only read;
3. one ``nbgrader autograde`` run for everything; a deleted test cell is scored 0 explicitly;
4. ``nbgrader generate_feedback`` with hidden tests removed (``HideHiddenTests``), copied to
   ``<out>/feedback/<student>/<lesson>.html``;
5. ``<out>/report.csv`` and ``<out>/report.md`` (per student and lesson: status, score, maximum,
   reasons in plain words) and ``<out>/scores.csv`` (one row per student).

Every run rebuilds the workspace from the submissions, so the same submissions give the same
files. Written answers are left for manual grading (``needs manual grading`` in the report);
the workspace course is a complete nbgrader course, so ``formgrader`` can be opened there. A
run refuses to replace a workspace whose gradebook already holds manual grades unless
``--force`` is given.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import nbformat
from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import ClearHiddenTests, GetGrades
from traitlets import List

from course_lib import nbgrader_course as nbc
from course_lib.grading_report import write_reports
from course_lib.submissions import (
    LessonSpec,
    Submission,
    add_missing,
    collect,
    inspect,
    repaired_copy,
    review_autograded,
)

MARKER = ".shapes-grading"


class HideHiddenTests(ClearHiddenTests):
    """Feedback preprocessor: remove hidden tests again, and what their tracebacks reveal.

    nbgrader's autograde puts the hidden tests back into the graded notebook, and its feedback
    shows them (jupyter/nbgrader#917). This removes the ``### BEGIN/END HIDDEN TESTS`` region as
    the release does and, in the same cells, cuts every error traceback down to its last line
    (the exception and its message), since IPython tracebacks quote the failing source line.
    """

    display_data_priority = List(GetGrades.display_data_priority.default_value).tag(config=True)

    def preprocess_cell(
        self, cell: NotebookNode, resources: ResourcesDict, cell_index: int
    ) -> tuple[NotebookNode, ResourcesDict]:
        had_hidden = self.begin_test_delimeter in cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if had_hidden and cell.cell_type == "code":
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    message = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".rstrip(": ")
                    out["traceback"] = [message, "(the failing line belongs to a hidden test)"]
        return cell, resources


class CellTimeouts:
    """``Execute.timeout_func`` for grading: one limit for student code, one for the lesson's.

    nbgrader applies a single per-cell limit to every cell, and when one of the lesson's own
    cells (a measurement sweep on a busy machine) overruns it, the kernel may not answer the
    interrupt in time and nbgrader discards the whole submission. Student code (answer cells,
    cells the student added or changed) gets ``student`` seconds, so an infinite loop costs
    little; the lesson's cells (locked, tests, or unmarked cells whose source is the lesson's)
    get ``lesson`` seconds.
    """

    def __init__(self, course: str | Path, student: int, lesson: int) -> None:
        self.course, self.student, self.lesson = Path(course), int(student), int(lesson)
        self._lesson_sources: set[str] | None = None

    def lesson_sources(self) -> set[str]:
        """Sources of every non-answer cell in the work course's source and release notebooks."""
        if self._lesson_sources is None:
            self._lesson_sources = set()
            for path in [
                *self.course.glob("source/*/*.ipynb"),
                *self.course.glob("release/*/*.ipynb"),
            ]:
                for cell in nbformat.read(str(path), as_version=4).cells:
                    if not cell.metadata.get("nbgrader", {}).get("solution"):
                        self._lesson_sources.add(cell.source)
        return self._lesson_sources

    def is_students(self, cell: NotebookNode) -> bool:
        """Whether ``cell`` holds student code rather than the lesson's own code."""
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            return True
        if meta.get("grade") or meta.get("locked"):
            return False  # nbgrader restores these from the gradebook
        return cell.source not in self.lesson_sources()

    def __call__(self, cell: NotebookNode) -> int:
        return self.student if self.is_students(cell) else self.lesson


# --- the workspace ----------------------------------------------------------------------------


def _manual_grades(db: Path) -> int:
    """Count manual scores and comments stored in an existing workspace gradebook."""
    if not db.is_file():
        return 0
    with sqlite3.connect(db) as con:
        try:
            grades = con.execute("SELECT COUNT(*) FROM grade WHERE manual_score IS NOT NULL")
            comments = con.execute(
                "SELECT COUNT(*) FROM comment WHERE manual_comment IS NOT NULL "
                "AND manual_comment != ''"
            )
            return grades.fetchone()[0] + comments.fetchone()[0]
        except sqlite3.Error:
            return 0


def prepare_workspace(out: Path, force: bool) -> None:
    """Make ``out`` an empty workspace, refusing folders that are not ours or hold manual grades."""
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise SystemExit(
            f"{out} exists and is not a grading workspace (no {MARKER}); "
            "give an empty or new folder with --out"
        )
    manual = _manual_grades(out / "course" / "gradebook.db")
    if manual and not force:
        raise SystemExit(
            f"{out / 'course' / 'gradebook.db'} holds {manual} manual grade(s) or "
            "comment(s); a new run would replace them. Use another --out, or "
            "--force to discard them."
        )
    for name in ("course", "feedback", "report.csv", "report.md", "scores.csv"):
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("made by python -m course_lib.grading\n", encoding="utf-8")


_EXCEPTION_LINE = re.compile(
    r"^\s*(?:[\w.]+\.)?(?P<name>\w+(?:Error|Exception|Interrupt|Exit))"
    r":\s*(?P<message>.*)$"
)


def _plain_reason(block: list[str]) -> str:
    """Turn the traceback nbgrader logged for one submission into one plain sentence."""
    for i in range(len(block) - 1, -1, -1):
        match = _EXCEPTION_LINE.match(block[i])
        if not match:
            continue
        name, message = match["name"], match["message"].strip()
        if name == "CellTimeoutError":
            return (
                "a cell ran past its time limit and the kernel did not recover, so nbgrader "
                "gave up on the whole notebook (if it is one of the lesson's cells, raise "
                "--lesson-timeout)"
            )
        if name == "DeadKernelError":
            return "the kernel died while running it (the code crashed or exhausted memory)"
        return f"{name}: {message}" if message else name
    return block[-1].strip() if block else "see course/nbgrader.log"


def _nbgrader_failures(log: str) -> dict[tuple[str, str], str]:
    """Map (student, lesson) to a plain reason for every submission nbgrader failed on."""
    failures: dict[tuple[str, str], str] = {}
    pattern = re.compile(
        r"There was an error processing assignment: .*[/\\]submitted[/\\]"
        r"(?P<student>[^/\\]+)[/\\](?P<lesson>[^/\\\s]+)"
    )
    lines = log.splitlines()
    for i, line in enumerate(lines):
        match = pattern.search(line)
        if not match:
            continue
        block = []
        for follow in lines[i + 1 :]:
            if follow.startswith("[") and "App |" in follow and "Traceback" not in follow:
                break
            if follow.strip():
                block.append(follow)
        failures[(match["student"], match["lesson"])] = _plain_reason(block)
    for match in re.finditer(
        r"error processing assignment '(?P<lesson>[^']+)' for student "
        r"'(?P<student>[^']+)'",
        log,
    ):
        failures.setdefault((match["student"], match["lesson"]), "see course/nbgrader.log")
    return failures


def _autograded(work: nbc.WorkCourse, sub: Submission) -> Path:
    """Where nbgrader writes the graded copy of ``sub``."""
    return work.autograded / sub.student / sub.lesson / f"{sub.lesson}.ipynb"


def autograde(work: nbc.WorkCourse, subs: list[Submission]) -> dict[tuple[str, str], str]:
    """Autograde everything in one nbgrader run; return (student, lesson) -> failure reason.

    Some errors (a database error, metadata of a foreign schema version) make nbgrader abort
    the whole run instead of only the submission at fault. Submissions left without a result
    and without a reported failure are then graded one by one, so one bad notebook cannot
    cost the rest of the class its grades.
    """
    proc = work.run("autograde", "*", "--force")
    failures = _nbgrader_failures(proc.stdout)
    for sub in subs:
        key = (sub.student, sub.lesson)
        if key in failures or _autograded(work, sub).is_file():
            continue
        retry = work.run("autograde", sub.lesson, "--student", sub.student, "--force")
        found = _nbgrader_failures(retry.stdout)
        if key in found:
            failures[key] = found[key]
        elif not _autograded(work, sub).is_file():
            lines = [ln for ln in retry.stdout.splitlines() if "ERROR" in ln or "Error" in ln]
            failures[key] = lines[-1].strip() if lines else "see course/nbgrader.log"
    return failures


# --- scores -----------------------------------------------------------------------------------


def read_scores(work: nbc.WorkCourse, subs: list[Submission], specs: dict[str, LessonSpec]) -> None:
    """Fill the scores of graded submissions from the gradebook; deleted cells count 0."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(work.db_url) as gb:
        for sub in subs:
            if not sub.graded:
                continue
            spec = specs[sub.lesson]
            try:
                notebook = gb.find_submission_notebook(sub.lesson, sub.lesson, sub.student)
            except MissingEntry:
                sub.graded = False
                sub.flag("nbgrader wrote a graded notebook but no grades; see course/nbgrader.log")
                continue
            for grade in notebook.grades:
                if grade.name in sub.deleted:
                    # nbgrader leaves a deleted cell ungraded ("needs manual grade"): score it 0.
                    grade.auto_score = 0.0
                    grade.needs_manual_grade = False
            gb.db.commit()
            for grade in notebook.grades:
                got = grade.score or 0.0
                if grade.name in spec.tests:
                    sub.auto_score += got
                    if got < grade.max_score:
                        sub.failed_tests.append(f"{grade.name} ({got:g}/{grade.max_score:g})")
                elif grade.needs_manual_grade:
                    sub.manual_pending += grade.max_score
            sub.score = notebook.score
            sub.max_score = notebook.max_score


# --- the whole run ----------------------------------------------------------------------------


def grade(
    submissions_dir: Path,
    out: Path,
    course_root: Path,
    *,
    cell_timeout: int = 60,
    lesson_timeout: int = 600,
    lessons: list[str] | None = None,
    force: bool = False,
) -> list[dict]:
    """Grade every submission under ``submissions_dir``; return the report rows (see module)."""
    submissions_dir, out = Path(submissions_dir).resolve(), Path(out).resolve()
    course_root = Path(course_root).resolve()
    if not submissions_dir.is_dir():
        raise SystemExit(f"submissions folder {submissions_dir} does not exist")
    if out == submissions_dir or out in submissions_dir.parents or submissions_dir in out.parents:
        raise SystemExit("--out must be outside the submissions folder (and not contain it)")
    all_lessons = nbc.find_lessons(course_root)
    if not all_lessons:
        raise SystemExit(f"no lessons in {course_root / nbc.SOURCE_DIR}")
    prepare_workspace(out, force)

    unknown_lessons = sorted(set(lessons or []) - set(all_lessons))
    if unknown_lessons:
        raise SystemExit(f"unknown lesson(s) {unknown_lessons}; the lessons are {all_lessons}")
    subs, unknown = collect(submissions_dir, all_lessons)
    wanted = sorted(lessons) if lessons else sorted({s.lesson for s in subs})
    subs = [s for s in subs if s.lesson in wanted]
    if lessons:  # the lessons that were due: report every student who did not submit one
        subs = add_missing(subs, wanted)
    work_dir = out / "course"
    timeouts = [
        "from course_lib.grading import CellTimeouts",
        f"c.Execute.timeout_func = CellTimeouts({str(work_dir)!r}, student={int(cell_timeout)}, "
        f"lesson={int(lesson_timeout)})",
        "c.Execute.iopub_timeout = 30  # let an interrupted torch kernel answer",
    ]
    work = nbc.make_work_course(
        course_root, work_dir, wanted, cell_timeout=cell_timeout, extra_config=timeouts
    )
    if wanted:
        nbc.generate_assignments(work)
    specs = {
        lesson: LessonSpec.from_notebooks(
            lesson, work.source_notebook(lesson), work.release_notebook(lesson)
        )
        for lesson in wanted
    }

    for sub in subs:
        nb = inspect(sub, specs[sub.lesson]) if sub.gradable else None
        if nb is not None and sub.gradable:
            dest = work.submitted / sub.student / sub.lesson
            dest.mkdir(parents=True, exist_ok=True)
            nbformat.write(
                repaired_copy(nb, specs[sub.lesson], sub), str(dest / f"{sub.lesson}.ipynb")
            )
            stamp = sub.original.parent / "timestamp.txt"
            if sub.original.name == f"{sub.lesson}.ipynb" and stamp.is_file():
                shutil.copyfile(stamp, dest / "timestamp.txt")

    gradable = [s for s in subs if s.gradable and s.original is not None]
    if gradable:
        failures = autograde(work, gradable)
        for sub in gradable:
            graded = _autograded(work, sub)
            if graded.is_file() and (sub.student, sub.lesson) not in failures:
                sub.graded = True
                review_autograded(
                    sub,
                    specs[sub.lesson],
                    graded,
                    CellTimeouts(work.root, cell_timeout, lesson_timeout),
                )
            else:
                reason = failures.get((sub.student, sub.lesson), "see course/nbgrader.log")
                sub.flag(f"nbgrader could not grade it: {reason}", gradable=False)
        read_scores(work, subs, specs)
        work.run("generate_feedback", "*", "--force")
        for sub in subs:
            html = work.feedback / sub.student / sub.lesson / f"{sub.lesson}.html"
            if sub.graded and html.is_file():
                dest = out / "feedback" / sub.student / f"{sub.lesson}.html"
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(html, dest)
            elif sub.graded:
                sub.info.append("no feedback file was generated (see course/nbgrader.log)")
    return write_reports(out, subs, specs, unknown)


def _default_root() -> Path:
    """The course root: the working folder if it holds ``solutions/``, else this checkout."""
    here = Path.cwd()
    if (here / nbc.SOURCE_DIR).is_dir():
        return here
    return Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; exits 0 when the run finished (problems are in the report)."""
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.grading",
        description="Autograde student submissions with nbgrader in a private workspace, "
        "generate feedback without hidden tests, and write a report of scores and "
        "problems. Submitted files are only read, never changed.",
    )
    parser.add_argument(
        "submissions",
        type=Path,
        help="folder of submissions: <student>/<lesson>/<lesson>.ipynb "
        "(nbgrader's submitted/ layout) and/or <student>_<lesson>.ipynb",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("grading"),
        help="workspace for the nbgrader course, feedback and reports "
        "(default: ./grading; rebuilt on every run)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="course root holding solutions/ and nbgrader_config.py "
        "(default: the working folder, else this checkout)",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=60,
        help="seconds a cell of student code may run before it is stopped (default 60)",
    )
    parser.add_argument(
        "--lesson-timeout",
        type=int,
        default=600,
        help="seconds one of the lesson's own cells may run (default 600); if "
        "it overruns, nbgrader may give up on the whole notebook",
    )
    parser.add_argument(
        "--lessons",
        nargs="+",
        default=None,
        help="the lessons that were due: only these are graded, and a student "
        "without one of them is reported as missing (default: every "
        "lesson that somebody submitted)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a workspace even if its gradebook holds manual grades",
    )
    args = parser.parse_args(argv)
    rows = grade(
        args.submissions,
        args.out,
        args.root or _default_root(),
        cell_timeout=args.timeout,
        lesson_timeout=args.lesson_timeout,
        lessons=args.lessons,
        force=args.force,
    )
    out = args.out.resolve()
    flagged = [r for r in rows if r["status"] != "ok"]
    print(
        f"graded {len(rows)} row(s), {len(flagged)} need attention; report: "
        f"{out / 'report.md'}, scores: {out / 'scores.csv'}, feedback: {out / 'feedback'}"
    )
    for r in flagged:
        print(f"  {r['student']} / {r['lesson']}: {r['status']}: {r['reasons']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
