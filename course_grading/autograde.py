"""Autograde every submission, each notebook in its own sandbox, several at a time.

Per submission: the grader records it and prepares its notebook with nbgrader's own steps
(``gradebook.sanitize``), reads the student's code for what deserves a look (``cheats.scan``:
flags only), removes every hidden-test region, writes its job (``job_folder.py``) and hands it
to a worker (``jobs.py``) that runs the notebook in a sandboxed kernel (``execute.py``,
``bwrap.py``) and takes the lesson's declared values out of it as plain data
(``evidence.py``). Each lesson's solution notebook runs first, in the same sandbox, to set the
lesson's time budget (``budgets.py``) and its graded functions' call limits. As each job ends,
the grader decides every item with the trusted checks and records the grades
(``gradebook.record``, ``verdicts.py``): no grade comes from the kernel's cell status. One
notebook that crashes, hangs or misbehaves costs only its own grade. A sandbox that does not
hold stops the whole run. The run's settings (``Options``, ``GradingRun``) are in
``grading_run.py``.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

from course_grading.errors import GradingError
from course_grading.grading_run import GradingRun, Options
from course_grading.job_folder import job_spec, solution_job, write_job
from course_grading.judge import items as trusted
from course_grading.judge.functions import FunctionSandbox
from course_grading.judge.items import is_test_cell, items_of, strip_hidden_tests
from course_grading.judge.lesson import LessonSpec
from course_grading.judge.verdicts import Graded, grade_submission, payload_of
from course_grading.nbgrader import gradebook
from course_grading.nbgrader.course import WorkCourse
from course_grading.review.cheats import cell_owner, scan
from course_grading.review.inspection import review_autograded
from course_grading.sandbox.budgets import Budget, give, measure
from course_grading.sandbox.jobs import JobSpec, Outcome, held_slots, run_jobs
from course_grading.submissions import Submission

# --- one submission -------------------------------------------------------------------------


def _flag_findings(sub: Submission, nb: NotebookNode, spec: LessonSpec, sandboxed: bool) -> None:
    """Report what ``cheats.scan`` finds, for review: it changes no grade (``cheats.py``)."""
    for found in scan(nb, spec):
        where = cell_owner(nb, found.cell, spec)
        if found.cheat:
            sub.flag(f"for review: {where} {found.what}")
        else:
            kept = "; the sandbox confined it" if sandboxed else ""
            sub.flag(f"{where} {found.what}{kept}")


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
    runnable = strip_hidden_tests(nb)  # not even a declaration enters the kernel
    write_job(job, runnable, [work.release / sub.lesson, gradebook.submitted_folder(work, sub)])
    size = sum(path.stat().st_size for path in (job / "stage").rglob("*") if path.is_file())
    if size > options.limits.tmpfs_bytes // 2:  # it must fit in the sandbox's home, with room
        room = options.limits.tmpfs_bytes / 2**20
        message = f"its folder is {size / 2**20:.0f} MiB: too large for a {room:g} MiB sandbox"
        sub.flag(message, gradable=False)
        return None
    values = sorted({n for item in items_of(sub.lesson).values() for n in item.values})
    spec_of_job = job_spec(run, sub.lesson, runnable, job, values)
    return spec_of_job, {i: c.source for i, c in enumerate(nb.cells) if is_test_cell(c)}


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
        how = "" if outcome.memory.startswith("cgroup") else " (watched: resident and tmpfs)"
        sub.flag(  # how many depends on timing: the report says only that there were
            f"its sandbox reached its memory limit of {gib:g} GiB{how}; processes of it were killed"
        )


def decide_job(run: GradingRun, sub: Submission, spec: LessonSpec, job: Path) -> Graded:
    """Every item of ``sub`` decided, graded functions called: in the job's slot (``then``), or
    on the Dask worker that ran its notebook (``cluster_worker.py``).

    The same inputs nbgrader's step (``verdicts.SaveTrustedGrades``) would read: the lesson's
    source, the file as submitted and the values its kernel gave.

    Args:
        run: the run's settings (its ``functions`` call the graded functions).
        sub: the submission, staged in the work course.
        spec: its lesson.
        job: its job folder, holding the kernel's ``values.json``.

    Returns:
        The verdict of every item and the review flags.

    Raises:
        GradingError: the lesson's declarations and its checks disagree, or graded functions
            cannot run here.
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


def solution_calls(
    run: GradingRun, lessons: list[str]
) -> dict[tuple[str, str], tuple[float, float]]:
    """Each graded function's solution, run here, in this run, with the same sandbox: the CPU
    seconds of its slowest call, what each student's calls are limited from
    (``functions.call_limit``), and the wall-clock seconds of its runs, what each student's item
    and submission budgets are made from (``functions.item_budget``, ``submission_budget``).

    Args:
        run: the run's settings (its function sandbox, its ``--jobs`` threads).
        lessons: the lessons graded in this run.

    Returns:
        ``(lesson, grade_id)`` -> (CPU seconds of the slowest call of that item's function in
        the lesson's solution, 0.0 when none of its calls reported a time; wall-clock seconds
        of every run of it, sandbox start to end).
    """
    work: list[tuple[trusted.Item, str]] = []
    for lesson in lessons:
        nb = nbformat.read(str(run.work.source_notebook(lesson)), as_version=4)
        cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
        work += [(i, cells[i.answer]) for i in items_of(lesson).values() if i.function]

    def measure_one(item: trusted.Item, source: str) -> tuple[float, float]:
        ev = trusted.Evidence(item, "solution", answer_source=source, sandbox=run.functions)
        trusted.verdict(item, ev, [])
        return max((cpu for cpu, _ in ev.call_times), default=0.0), ev.run_seconds

    with ThreadPoolExecutor(max_workers=max(1, run.options.jobs)) as pool:
        found = list(pool.map(lambda pair: measure_one(*pair), work))
    return {(item.lesson, item.grade_id): times for (item, _), times in zip(work, found)}


def record_job(
    run: GradingRun, sub: Submission, spec: LessonSpec, job: Path, tests: dict[int, str],
    outcome: Outcome, decided: Graded | BaseException | None = None,
) -> None:  # fmt: skip
    """Record one finished job (:func:`_record`); what only a damaged workspace raises
    (``--no-sandbox``) becomes the row's reason, and the submission is not graded.

    Args:
        run: the run's settings.
        sub: the submission.
        spec: its lesson.
        job: its job folder (``out.ipynb``, ``values.json``).
        tests: its test cells' sources as recorded (index -> source, declarations included).
        outcome: what the job's worker reported.
        decided: its verdicts decided in its slot (:func:`decide_job`), or what that raised.

    Raises:
        GradingError: the sandbox does not hold, or the judge could not run (the run stops).
    """
    try:
        _record(run, sub, spec, job, tests, outcome, decided)
    except GradingError:
        raise  # the sandbox does not hold: the run stops
    except Exception as err:  # only a damaged workspace gets here (--no-sandbox)
        sub.graded = False
        sub.flag(f"could not record it: {type(err).__name__}: {err}", gradable=False)


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
        decided: its verdicts decided in its slot (:func:`decide_job`), or what that raised.
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


def prepared_jobs(
    run: GradingRun, subs: list[Submission], specs: dict[str, LessonSpec],
    budgets: dict[str, Budget], folder: Path,
) -> Iterator[tuple[tuple[Submission, Path, dict[int, str]], Path, JobSpec]]:  # fmt: skip
    """Each gradable submission's job, prepared when a slot asks for it (``run_jobs``), or as
    it is sent to a Dask cluster (``cluster.py``).

    Args:
        run: the run's settings.
        subs: the submissions, in order; the ones not gradable are flagged and left out.
        specs: each lesson's spec, by lesson name.
        budgets: each lesson's notebook budget, measured on its solution (``budgets.measure``).
        folder: the run's private folder; job ``n`` is its subfolder ``n``.

    Yields:
        ``((submission, job folder, test cells' sources), job folder, job spec)``.
    """
    for number, sub in enumerate(subs):
        job = folder / str(number)
        if (prepared := _prepare(run, sub, specs[sub.lesson], job)) is not None:
            spec, tests = prepared
            if problem := give(spec, budgets[sub.lesson]):
                sub.flag(problem)
            yield (sub, job, tests), job, spec


@contextmanager
def nbgrader_log(work: WorkCourse) -> Iterator[None]:
    """Send what nbgrader's preprocessors log (checksum warnings...) to ``nbgrader.log``.

    Args:
        work: the work course, whose ``nbgrader.log`` gets the lines.

    Yields:
        Nothing: the lines go there while the block runs.
    """
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

    Each lesson's solution runs first in the run's slots (its notebook's time sets the lesson's
    budget, its graded functions' calls the call limits); each submission then runs in a slot,
    its items decided there, and is recorded as it ends. The scores are read back from the
    gradebook at the end.

    Args:
        work: the work course the submissions are staged in.
        subs: the submissions, in order; each is marked graded, or flagged with why not.
        specs: each lesson's spec, by lesson.
        options: the run's options.
        hidden: folders the sandbox check makes sure the kernels cannot see.
        bwrap: ``sandbox.check_available()``'s answer (``None`` with ``--no-sandbox``).

    Raises:
        GradingError: graded functions cannot run in the sandbox, or a sandbox does not hold
            (the run stops).
    """
    functions = FunctionSandbox.default(sandboxed=bwrap is not None, limits=options.limits)
    run = GradingRun(
        work, options, gradebook.load_config(work), tuple(map(str, hidden)), bwrap, functions
    )
    with (
        tempfile.TemporaryDirectory(prefix="shapes-grading-", ignore_cleanup_errors=True) as tmp,
        nbgrader_log(work),
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
                    decided[job] = decide_job(run, sub, specs[sub.lesson], job)
                except BaseException as err:  # noqa: BLE001 (raised again in done)
                    decided[job] = err

        def done(key, outcome: Outcome) -> None:
            sub, job, tests = key
            record_job(run, sub, specs[sub.lesson], job, tests, outcome, decided.pop(job, None))
            shutil.rmtree(job, ignore_errors=True)

        jobs = prepared_jobs(run, subs, specs, budgets, Path(tmp))
        run_jobs(jobs, workers, done, work.root, then)
    gradebook.read_scores(work, subs, specs)
