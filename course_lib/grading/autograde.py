"""Run nbgrader's autograde over the work course and read the scores from its gradebook.

One ``nbgrader autograde`` run grades everything; a submission that nbgrader failed on gets a
plain reason parsed from its log, and submissions left without a result because nbgrader
aborted the whole run are graded one by one.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

from course_lib.grading.course import WorkCourse
from course_lib.grading.lesson import LessonSpec
from course_lib.grading.submissions import Submission


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


# --- nbgrader's run and its log -----------------------------------------------------------


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


def autograded_path(work: WorkCourse, sub: Submission) -> Path:
    """Where nbgrader writes the graded copy of ``sub``."""
    return work.autograded / sub.student / sub.lesson / f"{sub.lesson}.ipynb"


def autograde(work: WorkCourse, subs: list[Submission]) -> dict[tuple[str, str], str]:
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
        if key in failures or autograded_path(work, sub).is_file():
            continue
        retry = work.run("autograde", sub.lesson, "--student", sub.student, "--force")
        found = _nbgrader_failures(retry.stdout)
        if key in found:
            failures[key] = found[key]
        elif not autograded_path(work, sub).is_file():
            lines = [ln for ln in retry.stdout.splitlines() if "ERROR" in ln or "Error" in ln]
            failures[key] = lines[-1].strip() if lines else "see course/nbgrader.log"
    return failures


# --- scores -----------------------------------------------------------------------------------


def read_scores(work: WorkCourse, subs: list[Submission], specs: dict[str, LessonSpec]) -> None:
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
