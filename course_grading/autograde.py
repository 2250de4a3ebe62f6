"""Autograde every submission, each notebook in its own sandbox, several at a time.

Per submission: the grader records it and prepares its notebook with nbgrader's own steps
(``gradebook.sanitize``), reads the student's code for what deserves a look (``cheats.scan``:
flags only), removes every hidden-test region, and hands a job to a worker (``jobs.py``) that
runs the notebook in a sandboxed kernel (``execute.py``, ``sandbox.py``) and takes the lesson's
declared values out of it as plain data (``evidence.py``). Each lesson's solution notebook runs
first, in the same sandbox, to set the lesson's time budget (``budgets.py``). As each job ends,
the grader decides
every item with the trusted checks and records the grades (``gradebook.record``,
``verdicts.py``): no grade comes from the kernel's cell status. One notebook that crashes,
hangs or misbehaves costs only its own grade. A sandbox that does not hold stops the whole run.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

from course_grading.errors import GradingError
from course_grading.judge import items as trusted
from course_grading.judge.functions import FunctionSandbox
from course_grading.judge.items import is_test_cell, items_of, strip_hidden, strip_hidden_tests
from course_grading.judge.lesson import LessonSpec
from course_grading.judge.verdicts import Graded, grade_submission, payload_of
from course_grading.nbgrader import gradebook
from course_grading.nbgrader.course import WorkCourse, ignored
from course_grading.review.cheats import scan
from course_grading.review.inspection import review_autograded
from course_grading.sandbox.budgets import CellTimeouts, give, measure
from course_grading.sandbox.bwrap import Limits
from course_grading.sandbox.jobs import JobSpec, Outcome, held_slots, run_jobs
from course_grading.submissions import Submission


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
    secret: bytes | None = field(default=None, repr=False)  # the course secret (judge/secret.py)


# --- one submission -------------------------------------------------------------------------


def _flag_findings(sub: Submission, nb: NotebookNode, spec: LessonSpec, sandboxed: bool) -> None:
    """Report what ``cheats.scan`` finds, for review: it changes no grade (``cheats.py``)."""
    for found in scan(nb, spec):
        gid = nb.cells[found.cell].metadata.get("nbgrader", {}).get("grade_id")
        where = f"cell {found.cell + 1}" + (f" ({gid!r})" if gid else " (added by the student)")
        if found.cheat:
            sub.flag(f"for review: {where} {found.what}")
        else:
            kept = "; the sandbox confined it" if sandboxed else ""
            sub.flag(f"{where} {found.what}{kept}")


def stage_folder(bases: list[Path], stage: Path) -> None:
    """The student's folder as their kernel may see it: each of ``bases``' files in turn (the
    lesson's, then theirs), every notebook without hidden-test regions."""
    for base in bases:
        for path in sorted(base.rglob("*")) if base.is_dir() else []:
            rel = path.relative_to(base)
            if not path.is_file() or path.is_symlink() or ignored(rel):
                continue
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            if path.suffix == ".ipynb":
                try:
                    nb = nbformat.read(str(path), as_version=4)
                except Exception:  # noqa: BLE001 (not a notebook: it is not staged)
                    continue
                for cell in nb.cells:
                    cell.source = strip_hidden(cell.source)
                nbformat.write(nb, str(stage / rel))
            else:
                shutil.copyfile(path, stage / rel)


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


def _prepare(run: GradingRun, sub: Submission, spec: LessonSpec, job: Path):
    """Record ``sub``, write its job folder; return the job's spec (its budget still to set)
    and the test cells' sources (index -> source, declarations included), or ``None`` when it
    is not gradable.

    Args:
        run: the run's settings.
        sub: the submission.
        spec: its lesson.
        job: its job folder (made here).

    Returns:
        ``(JobSpec, {cell index: source})``, or ``None``: not gradable (``sub`` says why).
    """
    work, options = run.work, run.options
    submitted = gradebook.submitted_folder(work, sub) / f"{sub.lesson}.ipynb"
    _flag_findings(sub, nbformat.read(str(submitted), as_version=4), spec, options.sandbox)
    try:
        nb = gradebook.sanitize(work, sub, run.config)
    except Exception as err:  # nbgrader's own checks (metadata, gradebook) refused it
        sub.flag(f"could not grade it: {type(err).__name__}: {err}", gradable=False)
        return None
    for folder in ("stage", "runtime"):
        (job / folder).mkdir(parents=True)
    runnable = strip_hidden_tests(nb)  # not even a declaration enters the kernel
    nbformat.write(runnable, str(job / "in.ipynb"))
    stage_folder([work.release / sub.lesson, gradebook.submitted_folder(work, sub)], job / "stage")
    size = sum(path.stat().st_size for path in (job / "stage").rglob("*") if path.is_file())
    if size > options.limits.tmpfs_bytes // 2:  # it must fit in the sandbox's home, with room
        room = options.limits.tmpfs_bytes / 2**20
        message = f"its folder is {size / 2**20:.0f} MiB: too large for a {room:g} MiB sandbox"
        sub.flag(message, gradable=False)
        return None
    values = sorted({n for item in items_of(sub.lesson).values() for n in item.values})
    job_spec = _job_spec(run, sub.lesson, runnable, job, values)
    return job_spec, {i: c.source for i, c in enumerate(nb.cells) if is_test_cell(c)}


def _job_spec(
    run: GradingRun, lesson: str, runnable: NotebookNode, job: Path,
    values: list[str] | None = None,
) -> JobSpec:  # fmt: skip
    """The spec of a job running ``runnable`` (written to ``job/in.ipynb``) in ``run``.

    Args:
        run: the run's settings.
        lesson: the lesson the notebook is of.
        runnable: the notebook as the kernel gets it (hidden tests removed).
        job: the job folder.
        values: the names taken out after its last cell.

    Returns:
        The job's spec, its time budget still to set.
    """
    options, limits = run.options, run.timeouts
    return JobSpec(
        lesson=lesson,
        sandbox=options.sandbox,
        bwrap=run.bwrap,
        limits=options.limits.as_dict(),
        cell_timeouts=[limits(cell) for cell in runnable.cells],
        notebook_timeout=options.notebook_timeout,
        hidden=[str(job / "in.ipynb"), *run.hidden],
        values=values or [],
        wall_factor=options.wall_factor,
    )


def solution_job(run: GradingRun, lesson: str, job: Path) -> JobSpec:
    """The job that runs ``lesson``'s solution notebook, to measure it (``budgets.py``).

    Args:
        run: the run's settings.
        lesson: the lesson.
        job: the job folder (made here).

    Returns:
        The job's spec.
    """
    work = run.work
    for folder in ("stage", "runtime"):
        (job / folder).mkdir(parents=True)
    runnable = strip_hidden_tests(nbformat.read(str(work.source_notebook(lesson)), as_version=4))
    nbformat.write(runnable, str(job / "in.ipynb"))
    stage_folder([work.release / lesson, work.source / lesson], job / "stage")
    return _job_spec(run, lesson, runnable, job)


def _plain(outcome: Outcome) -> str:
    if outcome.status == "timeout":
        return f"the notebook ran {outcome.reason} and was stopped"
    if outcome.status == "dead":
        return "the kernel died while running it (the code crashed, exited or ran out of memory)"
    return outcome.reason or outcome.status


def _cells(indices: list[int]) -> str:
    return ", ".join(str(i + 1) for i in indices)


def _flag_limits(sub: Submission, outcome: Outcome, options: Options) -> None:
    """Report lines for every limit the notebook reached (``watch.py``, ``messages.py``)."""
    if outcome.leftovers:  # how many depends on timing: the report says only that there were
        sub.flag("left processes running after its kernel ended; they were killed")
    stopped = sorted({*outcome.cpu_stopped, *outcome.wall_stopped})
    if stopped:  # which limit came first depends on the machine's load: one line for both
        sub.flag(
            f"cell(s) {_cells(stopped)} reached their time limit (their CPU time, or "
            f"{options.wall_factor:g} times that in wall-clock time) and were stopped; every "
            "process they had started was killed"
        )
    if outcome.refused:
        cap = options.limits.message_bytes / 2**20
        sub.flag(
            f"cell(s) {_cells(outcome.refused)} sent a message over {cap:g} MiB; it was "
            "refused unread, and the rest of that cell's output is lost"
        )
    if outcome.memory_kills:
        gib = options.limits.memory_bytes / 2**30
        how = "" if outcome.memory == "cgroup" else " (its resident memory, watched)"
        sub.flag(  # how many depends on timing: the report says only that there were
            f"its sandbox reached its memory limit of {gib:g} GiB{how}; processes of it were killed"
        )


def _decide(run: GradingRun, sub: Submission, spec: LessonSpec, job: Path) -> Graded:
    """Every item of ``sub`` decided, graded functions called: in the job's slot (``then``).

    The same inputs nbgrader's step (``verdicts.SaveTrustedGrades``) would read: the lesson's
    source, the file as submitted and the values its kernel gave.
    """
    submitted = gradebook.submitted_folder(run.work, sub) / f"{sub.lesson}.ipynb"
    return grade_submission(
        spec=spec,
        source=nbformat.read(str(run.work.source_notebook(sub.lesson)), as_version=4),
        submitted=nbformat.read(str(submitted), as_version=4),
        student=sub.student,
        payload=payload_of(job / "values.json"),
        sandbox=run.functions,
        secret=run.options.secret,
    )


def solution_calls(run: GradingRun, lessons: list[str]) -> dict[tuple[str, str], float]:
    """The CPU seconds of each graded function's slowest call in its lesson's solution, measured
    here, in this run, with the same sandbox: what each student's calls are limited from
    (``FunctionSandbox.solution_cpu``, ``functions.call_limit``)."""
    work: list[tuple[trusted.Item, str]] = []
    for lesson in lessons:
        nb = nbformat.read(str(run.work.source_notebook(lesson)), as_version=4)
        cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
        work += [(i, cells[i.answer]) for i in items_of(lesson).values() if i.function]

    def measure_one(item: trusted.Item, source: str) -> float:
        ev = trusted.Evidence(item, "solution", answer_source=source, sandbox=run.functions)
        trusted.verdict(item, ev, [])
        return max((cpu for cpu, _ in ev.call_times), default=0.0)

    with ThreadPoolExecutor(max_workers=max(1, run.options.jobs)) as pool:
        found = list(pool.map(lambda pair: measure_one(*pair), work))
    return {(item.lesson, item.grade_id): cpu for (item, _), cpu in zip(work, found)}


def _record(
    run: GradingRun, sub: Submission, spec: LessonSpec, job: Path, tests: dict[int, str],
    outcome: Outcome, decided: Graded | BaseException | None = None,
) -> None:  # fmt: skip
    """Turn one finished job into grades and report lines.

    Args:
        run: the run's settings.
        sub: the submission.
        spec: its lesson.
        job: its job folder.
        tests: its test cells' sources as recorded (index -> source, declarations included).
        outcome: what the job's worker reported.
        decided: its verdicts decided in its slot (``_decide``), or what that raised.
    """
    work, options = run.work, run.options
    outcome.stop_if_sandbox_failed()
    _flag_limits(sub, outcome, options)
    if outcome.status != "ok":
        sub.flag(f"could not grade it: {_plain(outcome)}", gradable=False)
        return
    executed = nbformat.read(str(job / "out.ipynb"), as_version=4)
    for index, source in tests.items():  # the test cells as recorded, declarations included
        executed.cells[index].source = source
    if isinstance(decided, BaseException):
        raise decided
    graded, verdicts = gradebook.record(
        work,
        sub,
        executed,
        run.config,
        values=payload_of(job / "values.json"),
        sandbox=run.functions,
        graded=decided,
        secret=options.secret,
    )
    sub.verdicts = verdicts.verdicts
    for flag in verdicts.review:
        sub.flag(f"for review: {flag}")
    sub.graded = True
    review_autograded(sub, spec, graded, run.timeouts)
    if outcome.hidden_errors:
        sub.flag(
            f"cell(s) {_cells(outcome.hidden_errors)} failed but hid the error from the output "
            "(exception swallowing?); they count as failed"
        )
    if outcome.output_cut:
        mib = options.limits.output_bytes / 2**20
        cells = _cells(outcome.output_cut)
        sub.flag(f"printed more than {mib:g} MiB; the output of cell(s) {cells} was cut")


@contextmanager
def _nbgrader_log(work: WorkCourse):
    """Send what nbgrader's preprocessors log (checksum warnings...) to ``nbgrader.log``."""
    handler = logging.FileHandler(work.log, encoding="utf-8")
    handler.setFormatter(logging.Formatter("[%(name)s | %(levelname)s] %(message)s"))
    logger = logging.getLogger("traitlets")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()


def autograde(
    work: WorkCourse,
    subs: list[Submission],
    specs: dict[str, LessonSpec],
    options: Options,
    hidden: list[Path],
    bwrap: str | None,
) -> None:
    """Grade every submission in ``subs`` (staged in ``submitted/``); mark each graded or why not.

    ``hidden`` are folders the sandbox check makes sure the kernels cannot see; ``bwrap`` is
    ``sandbox.check_available()``'s answer (``None`` with ``--no-sandbox``).
    """
    functions = FunctionSandbox.default(sandboxed=bwrap is not None, limits=options.limits)
    run = GradingRun(
        work, options, gradebook.load_config(work), tuple(map(str, hidden)), bwrap, functions
    )
    with (
        tempfile.TemporaryDirectory(prefix="shapes-grading-", ignore_cleanup_errors=True) as tmp,
        _nbgrader_log(work),
        held_slots(options.jobs, work.root) as workers,  # from the solutions to the submissions
    ):
        os.chmod(tmp, 0o700)
        lessons = sorted({sub.lesson for sub in subs})
        solutions = [(lesson, Path(tmp) / f"solution-{n}") for n, lesson in enumerate(lessons)]
        budgets = measure(
            [(lesson, job, solution_job(run, lesson, job)) for lesson, job in solutions],
            options,
            workers,
            work.root,
        )
        run = replace(run, functions=replace(functions, solution_cpu=solution_calls(run, lessons)))
        decided: dict[Path, Graded | BaseException] = {}

        def then(key, outcome: Outcome) -> None:  # in the job's slot: its functions' time
            sub, job, _ = key
            if outcome.status == "ok":
                try:
                    decided[job] = _decide(run, sub, specs[sub.lesson], job)
                except BaseException as err:  # noqa: BLE001 (raised again in done)
                    decided[job] = err

        def jobs():
            for number, sub in enumerate(subs):
                job = Path(tmp) / str(number)
                if (prepared := _prepare(run, sub, specs[sub.lesson], job)) is not None:
                    spec, tests = prepared
                    if problem := give(spec, budgets[sub.lesson]):
                        sub.flag(problem)
                    yield (sub, job, tests), job, spec

        def done(key, outcome: Outcome) -> None:
            sub, job, tests = key
            try:
                _record(run, sub, specs[sub.lesson], job, tests, outcome, decided.pop(job, None))
            except GradingError:
                raise  # the sandbox does not hold: the run stops
            except Exception as err:  # only a damaged workspace gets here (--no-sandbox)
                sub.graded = False
                sub.flag(f"could not record it: {type(err).__name__}: {err}", gradable=False)
            shutil.rmtree(job, ignore_errors=True)

        run_jobs(jobs(), workers, done, work.root, then)
    gradebook.read_scores(work, subs, specs)
