"""A notebook's job made ready for a worker: its folder, and what the worker is told.

A job's folder holds the notebook the worker runs (``in.ipynb``, every hidden-test region
removed), the student's folder as their kernel may see it (``stage/``: the lesson's files, then
theirs, every notebook stripped of hidden tests, nothing through a link) and an empty
``runtime/``; its :class:`~course_grading.sandbox.jobs.JobSpec` carries the run's limits. The
grading command and nbgrader's ``SandboxedExecute`` step (``nbgrader/steps.py``) both make their
folders here; the lesson's solution gets a job of its own (:func:`solution_job`), measured
before its submissions run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

from course_grading.grading_run import GradingRun
from course_grading.judge.items import strip_hidden, strip_hidden_tests
from course_grading.nbgrader.course import ignored
from course_grading.sandbox.jobs import JobSpec


def stage_folder(bases: list[Path], stage: Path) -> None:
    """The student's folder as their kernel may see it.

    Args:
        bases: the folders whose files are copied, each in turn (the lesson's, then the
            student's or the solution's); a later one's file replaces an earlier one's. Links,
            ignored files and notebooks that cannot be read are left out; every notebook loses
            its hidden-test regions.
        stage: the folder written (made as needed).
    """
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


def write_job(job: Path, runnable: NotebookNode, bases: list[Path]) -> None:
    """Make the folder of a job: ``stage/`` (``bases`` staged, :func:`stage_folder`), an empty
    ``runtime/``, and ``in.ipynb``, the notebook the worker runs.

    Args:
        job: the job's folder, made here if needed; its ``stage/`` and ``runtime/`` must not
            exist yet.
        runnable: the notebook as the kernel may receive it (no hidden-test region).
        bases: the folders whose files the kernel sees, in turn (the lesson's, then the
            student's or the solution's).
    """
    for folder in ("stage", "runtime"):
        (job / folder).mkdir(parents=True)
    nbformat.write(runnable, str(job / "in.ipynb"))
    stage_folder(bases, job / "stage")


def job_spec(
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
    runnable = strip_hidden_tests(nbformat.read(str(work.source_notebook(lesson)), as_version=4))
    write_job(job, runnable, [work.release / lesson, work.source / lesson])
    return job_spec(run, lesson, runnable, job)
