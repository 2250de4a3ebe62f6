"""Each notebook's time budget, relative to its lesson's own solution measured in the same run.

A fixed budget (it was 1800 s) let nine cells, each sleeping just under the cell limit, hold a
slot about 30 times as long as an honest notebook, unflagged. Now, before any submission of a
lesson runs, the lesson's solution notebook runs once in the same sandbox with the same limits
(``job_folder.solution_job``), and every submission of it gets

    budget = min(max(factor × the solution's time, floor), cap)

seconds of wall-clock time, kernel start included (``Options.budget_factor``,
``notebook_floor``, ``notebook_timeout``). Measured in the same run, the solution's time
reflects the machine's load as the submissions' times do. A notebook over its budget is stopped
and not graded, and its row says why. A solution that does not run leaves the lesson with the
fixed cap, and each of its rows says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

from course_grading.sandbox.jobs import JobSpec, Outcome, Worker, run_jobs


@dataclass(frozen=True)
class Budget:
    """One lesson's budget for each of its notebooks."""

    seconds: int
    why: str  # how it was set, in the words of a report line (the same in every run)
    problem: str = ""  # why the solution could not be measured, if it could not


def budget_of(outcome: Outcome | None, factor: float, floor: int, cap: int) -> Budget:
    """The budget a lesson's submissions get, from its solution's ``outcome`` (module)."""
    if outcome is None or outcome.status != "ok":
        why = f"the fixed --notebook-timeout of {cap} s"
        problem = outcome.reason or outcome.status if outcome else "it was not run"
        return Budget(cap, why, problem)
    seconds = min(max(int(factor * outcome.seconds + 0.999), floor), cap)
    # no measured figure in the words: the same submissions give the same report, every run
    why = f"{factor:g} times the lesson's solution's time in this run, at least {floor} s, "
    return Budget(seconds, why + f"at most {cap} s")


def measure(
    jobs: list[tuple[str, Path, JobSpec]], options, workers: list[Worker], logs: Path
) -> dict[str, Budget]:
    """Run each lesson's solution job ``(lesson, folder, spec)`` in ``workers`` (the run's
    slots, kept for its submissions); return each lesson's budget (``options``:
    ``grading_run.Options``).

    Raises ``GradingError`` when a solution's sandbox does not hold.
    """
    outcomes: dict[str, Outcome] = {}

    def done(lesson: str, outcome: Outcome) -> None:
        outcomes[lesson] = outcome

    run_jobs(jobs, workers[: max(1, len(jobs))], done, logs)
    for outcome in outcomes.values():
        outcome.stop_if_sandbox_failed()
    factor, floor, cap = options.budget_factor, options.notebook_floor, options.notebook_timeout
    return {lesson: budget_of(outcomes.get(lesson), factor, floor, cap) for lesson, _, _ in jobs}


def give(spec: JobSpec, budget: Budget) -> str | None:
    """Give ``spec`` its lesson's ``budget``; the report line to add when it is the fixed one."""
    spec.notebook_timeout = budget.seconds
    spec.budget = f"time budget ({budget.why})"
    if not budget.problem:
        return None
    why = f"the lesson's solution did not run here ({budget.problem})"
    return f"its time budget is {budget.why}: {why}"


class CellTimeouts:
    """``Execute.timeout_func`` for grading: one limit for student code, one for the lesson's
    (seconds of CPU time in the grader's own runs, ``watch.py``; of wall-clock time in
    nbgrader's).

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
