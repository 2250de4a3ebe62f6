"""A grading run's settings: the options a person chooses, and what the run is handed.

:class:`Options` are the knobs of ``python -m course_grading`` (cell and notebook limits, worker
slots, the sandbox and its limits, the course secret); :class:`GradingRun` is one run's
settings as every step of it gets them: the options, the work course, nbgrader's configuration,
the folders no kernel may see, the bubblewrap binary and how graded functions run.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from course_grading.judge.functions import FunctionSandbox
from course_grading.judge.secret import LessonKeys
from course_grading.nbgrader.course import WorkCourse
from course_grading.sandbox.budgets import CellTimeouts
from course_grading.sandbox.bwrap import Limits


@dataclass(frozen=True)
class Options:
    """How to run the students' notebooks."""

    cell_timeout: int = 60  # seconds of CPU time per cell of student code
    lesson_timeout: int = 600  # seconds of CPU time per cell of the lesson's own code
    wall_factor: float = 4.0  # a cell's wall-clock backstop: this times its CPU limit
    budget_factor: float = 5.0  # a notebook's budget: this times its solution's own time...
    notebook_floor: int = 120  # ...but at least this many seconds (kernel start included)...
    notebook_timeout: int = 1800  # ...and at most this many (the solution's own limit too)
    jobs: int = 1  # notebooks run at once
    sandbox: bool = True
    limits: Limits = field(default_factory=Limits)
    #: the course secret (judge/secret.py); on a Dask worker, its job's lesson key (LessonKeys)
    secret: bytes | LessonKeys | None = field(default=None, repr=False)


@dataclass(frozen=True)
class GradingRun:
    """One run's settings, handed to every step of it (in place of a list of arguments).

    Attributes:
        work: the work course the run grades in.
        options: the run's options.
        config: nbgrader's configuration of the work course (``gradebook.load_config``).
        hidden: folders the sandbox check makes sure no kernel can see.
        bwrap: the bubblewrap binary (``None``: ``--no-sandbox``).
        functions: how graded functions run (``judge.functions.FunctionSandbox``).
    """

    work: WorkCourse
    options: Options
    config: object
    hidden: tuple[str, ...]
    bwrap: str | None
    functions: FunctionSandbox

    @property
    def timeouts(self) -> CellTimeouts:
        """The per-cell limits: one for student code, one for the lesson's."""
        options = self.options
        return CellTimeouts(self.work.root, options.cell_timeout, options.lesson_timeout)


def add_time_options(parser: argparse.ArgumentParser) -> None:
    """The time limits' flags of ``python -m course_grading`` (the :class:`Options` they set:
    ``cli.options_from``).

    Args:
        parser: the command's parser.
    """
    add = parser.add_argument
    add(
        "--timeout",
        type=int,
        default=60,
        help="seconds of CPU time a cell of student code may use (60; wall clock: 4 times that)",
    )
    add(
        "--lesson-timeout",
        type=int,
        default=600,
        help="seconds of CPU time one of the lesson's own cells may use (600)",
    )
    add(
        "--budget-factor",
        type=float,
        default=5,
        help="a notebook may run this many times as long as the lesson's solution, measured "
        "in the same run (5)",
    )
    add(
        "--notebook-floor",
        type=int,
        default=120,
        help="...but at least this many seconds, kernel start included (120)",
    )
    add(
        "--notebook-timeout",
        type=int,
        default=1800,
        help="...and at most this many (1800)",
    )
