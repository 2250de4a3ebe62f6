"""A grading run's settings: the options a person chooses, and what the run is handed.

:class:`Options` are the knobs of ``python -m course_grading`` (cell and notebook limits, worker
slots, the sandbox and its limits, the course secret); :class:`GradingRun` is one run's
settings as every step of it gets them: the options, the work course, nbgrader's configuration,
the folders no kernel may see, the bubblewrap binary and how graded functions run.
"""

from __future__ import annotations

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
