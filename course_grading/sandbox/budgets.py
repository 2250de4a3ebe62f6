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
from typing import Protocol

import nbformat
from nbformat.notebooknode import NotebookNode

from course_grading.sandbox.jobs import JobSpec, Outcome, Worker, run_jobs


@dataclass(frozen=True)
class Budget:
    """One lesson's budget for each of its notebooks."""

    seconds: int
    why: str  # how it was set, in the words of a report line (the same in every run)
    problem: str = ""  # why the solution could not be measured, if it could not


class BudgetOptions(Protocol):
    """What a budget is made of: the run's options (``grading_run.Options``, which imports this
    module, so it is named by what it has)."""

    @property
    def budget_factor(self) -> float:
        """The budget in multiples of the solution's wall-clock seconds."""

    @property
    def notebook_floor(self) -> int:
        """The least budget, in seconds."""

    @property
    def notebook_timeout(self) -> int:
        """The most, in seconds."""


def budget_of(outcome: Outcome | None, factor: float, floor: int, cap: int) -> Budget:
    """The budget a lesson's submissions get, from its solution's ``outcome`` (module docstring).

    Args:
        outcome: how the lesson's solution notebook ran in this run; ``None``: it was not run.
        factor: the budget in multiples of the solution's wall-clock seconds.
        floor: the least budget, in seconds.
        cap: the most, in seconds (also the budget when the solution did not run).

    Returns:
        ``min(max(factor × seconds, floor), cap)`` seconds and why in words (no measured
        figure: the same every run), or the cap with the reason the solution was not measured.
    """
    if outcome is None or outcome.status != "ok":
        why = f"the fixed --notebook-timeout of {cap} s"
        problem = outcome.reason or outcome.status if outcome else "it was not run"
        return Budget(cap, why, problem)
    seconds = min(max(int(factor * outcome.seconds + 0.999), floor), cap)
    # no measured figure in the words: the same submissions give the same report, every run
    why = f"{factor:g} times the lesson's solution's time in this run, at least {floor} s, "
    return Budget(seconds, why + f"at most {cap} s")


def measure(
    jobs: list[tuple[str, Path, JobSpec]], options: BudgetOptions, workers: list[Worker], logs: Path
) -> dict[str, Budget]:
    """Run each lesson's solution job in the run's slots; each lesson's budget.

    Args:
        jobs: ``(lesson, folder, spec)`` of each lesson's solution job.
        options: the run's options (``grading_run.Options``): ``budget_factor``,
            ``notebook_floor``, ``notebook_timeout``.
        workers: the run's slots, kept for its submissions.
        logs: the folder of the workers' logs.

    Returns:
        Lesson -> its :class:`Budget`.

    Raises:
        GradingError: a solution's sandbox does not hold.
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
    """Give ``spec`` its lesson's ``budget``.

    Args:
        spec: a submission's job spec; its ``notebook_timeout`` and ``budget`` are set here.
        budget: its lesson's budget.

    Returns:
        The report line to add when the budget is the fixed one (the solution did not run),
        else ``None``.
    """
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
        """The limits of one work course.

        Args:
            course: the work course's folder (its ``source/`` and ``release/`` notebooks tell the
                lesson's cells from the student's).
            student: seconds a cell of student code may take.
            lesson: seconds a cell of the lesson's own code may take.
        """
        self.course, self.student, self.lesson = Path(course), int(student), int(lesson)
        self._lesson_sources: set[str] | None = None

    def lesson_sources(self) -> set[str]:
        """Sources of every non-answer cell in the work course's source and release notebooks.

        Returns:
            The sources, read once and kept.
        """
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
        """Whether ``cell`` holds student code rather than the lesson's own code.

        Args:
            cell: a cell of the submitted notebook.

        Returns:
            True for an answer cell, or an unmarked cell whose source is not one of the lesson's;
            False for a graded or locked cell (nbgrader restores those) and the lesson's own cells.
        """
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            return True
        if meta.get("grade") or meta.get("locked"):
            return False  # nbgrader restores these from the gradebook
        return cell.source not in self.lesson_sources()

    def __call__(self, cell: NotebookNode) -> int:
        """The cell's limit, as ``Execute.timeout_func``.

        Args:
            cell: a cell about to run.

        Returns:
            Seconds: ``student`` for student code, ``lesson`` for the lesson's.
        """
        return self.student if self.is_students(cell) else self.lesson
