"""nbgrader's own ``autograde``, made to grade the way the grading command does.

nbgrader 0.9's ``Autograde.autograde_preprocessors`` is configurable. The course's
``nbgrader_config.py`` replaces two of them, so that ``nbgrader autograde`` and formgrader's
Autograde button record the same trusted verdicts as ``python -m course_grading``:

- ``Execute`` -> :class:`SandboxedExecute`: the notebook, with every hidden-test region removed,
  runs in a sandboxed kernel exactly as the grading command runs it (``execute.py``, in a
  process of its own), and the declared values come back as plain data;
- ``SaveAutoGrades`` -> ``verdicts.SaveTrustedGrades``: the trusted checks score every item.

Its ``generate_assignment`` (and formgrader's Generate button) starts with :class:`RenderEdition`:
the lesson is released in the class's edition, the numbers the course secret draws
(``judge/editions.py``), which the trusted checks then expect.

Neither falls back: where bubblewrap cannot run, autograding stops with the reason (set
``SandboxedExecute.sandbox = False`` and ``SaveTrustedGrades.sandbox = False`` to grade trusted
notebooks unsandboxed, knowingly).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Bool, Float, Integer, Unicode

from course_grading.errors import GradingError
from course_grading.job_folder import write_job
from course_grading.judge import editions, items
from course_grading.judge import secret as course_secret
from course_grading.judge.items.model import lesson_of
from course_grading.judge.verdicts import payload_of
from course_grading.nbgrader import self_study
from course_grading.nbgrader.course import WorkCourse, course_directory, lesson_paths
from course_grading.sandbox import bwrap as sandbox
from course_grading.sandbox.bwrap import Limits
from course_grading.sandbox.jobs import WORKER_GRACE, JobSpec, Outcome


class SandboxedExecute(Execute):
    """nbgrader's ``Execute`` step, run in the course's sandbox (module docstring).

    Per-cell limits are ``Execute``'s own settings (``timeout``, ``timeout_func``,
    ``iopub_timeout``); the rest are below.
    """

    sandbox = Bool(True, help="run the notebook in a bubblewrap sandbox (False: unsafe)").tag(
        config=True
    )
    notebook_timeout = Integer(1800, help="seconds a whole notebook may run").tag(config=True)
    memory_gib = Float(4, help="GiB of memory per sandboxed process").tag(config=True)
    max_processes = Integer(256, help="processes and threads per sandbox").tag(config=True)

    def _cell_limit(self, cell: NotebookNode) -> int:
        limit = self.timeout_func(cell) if self.timeout_func is not None else self.timeout
        return int(limit) if limit is not None else 1800

    def _limits(self) -> Limits:
        """The sandbox's limits from this step's settings.

        nbgrader autogrades one submission at a time: its kernel may use every core, as
        ``python -m course_grading --jobs 1`` gives it (the sandbox's default is one thread).
        """
        return Limits(
            memory_bytes=int(self.memory_gib * 2**30),
            processes=self.max_processes,
            threads=os.cpu_count() or 1,
        )

    def preprocess(
        self, nb: NotebookNode, resources: ResourcesDict
    ) -> tuple[NotebookNode, ResourcesDict]:
        """Run ``nb`` in the sandbox, as the grading command runs a submission.

        Args:
            nb: the submitted notebook, as nbgrader's earlier steps left it (hidden tests in
                its test cells; they are removed before the kernel gets it).
            resources: nbgrader's resources; ``resources["nbgrader"]`` names the lesson
                (``assignment``), the student and the notebook.

        Returns:
            The executed notebook, its test cells' sources as recorded (declarations
            included), and ``resources`` with the declared values taken out of the kernel
            under ``resources["course_grading"]["values"]`` (for ``SaveTrustedGrades``).

        Raises:
            GradingError: the lesson's declarations and checks disagree, bubblewrap cannot run,
                the sandbox does not hold, or the notebook could not be run to its end.
        """
        info = resources["nbgrader"]
        lesson, student, name = info["assignment"], info["student"], info["notebook"]
        coursedir = course_directory(self)
        source, release, submitted = lesson_paths(coursedir, lesson, name, student)
        registered = items.check_notebook(lesson, nbformat.read(str(source), as_version=4))
        names = sorted({n for item in registered.values() for n in item.values})
        bwrap = sandbox.check_available() if self.sandbox else None
        if bwrap is None:
            self.log.warning("SandboxedExecute.sandbox is False: %s runs unsandboxed", student)
        runnable = items.strip_hidden_tests(nb)
        with tempfile.TemporaryDirectory(prefix="shapes-autograde-") as tmp:
            os.chmod(tmp, 0o700)
            job = Path(tmp) / "job"
            write_job(job, runnable, [release.parent, submitted.parent])
            JobSpec(
                lesson=lesson,
                sandbox=bwrap is not None,
                bwrap=bwrap,
                limits=self._limits().as_dict(),
                cell_timeouts=[self._cell_limit(cell) for cell in runnable.cells],
                notebook_timeout=self.notebook_timeout,
                hidden=[str(job / "in.ipynb"), str(Path(coursedir.root).resolve())],
                iopub_timeout=self.iopub_timeout,
                uid=sandbox.sandbox_uid(0) if bwrap else None,
                values=names,
            ).save(job)
            self._run_job(job, f"{student}/{lesson}")
            executed = nbformat.read(str(job / "out.ipynb"), as_version=4)
            payload = payload_of(job / "values.json")
        for ran, original in zip(executed.cells, nb.cells):
            ran.source = original.source  # the test cells as recorded, declarations included
        resources.setdefault("course_grading", {})["values"] = payload
        return executed, resources

    def _run_job(self, job: Path, who: str) -> None:
        """Run the job in ``job`` in a process of its own (``execute.py``), to its end.

        Raises:
            GradingError: the process failed, the sandbox does not hold, or the notebook was
                not run to its end (``who`` names the submission).
        """
        with open(job / "worker.log", "wb") as log:
            subprocess.run(
                [sys.executable, "-m", "course_grading.sandbox.execute", str(job)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                timeout=self.notebook_timeout + WORKER_GRACE,
                check=False,
            )
        try:
            outcome = Outcome.load(job)
        except (OSError, ValueError, TypeError):
            why = (job / "worker.log").read_text(errors="replace")[-500:]
            raise GradingError(f"{who}: the grading process failed: {why}") from None
        if outcome.status == "sandbox failed":
            raise GradingError(
                f"the sandbox does not hold ({outcome.reason}); grading stopped. Check "
                "bubblewrap and the grader's account"
            )
        if outcome.status != "ok":
            raise GradingError(f"{who}: could not grade it: {outcome.reason}")


def render_lesson(nb: nbformat.NotebookNode, lesson: str, secret: bytes | None) -> int:
    """Render a lesson's instructor notebook in the edition ``secret`` draws
    (``judge/editions.py``), in place.

    Args:
        nb: the lesson's instructor notebook, changed in place.
        lesson: its folder name.
        secret: the course secret, or ``None`` for the self-study edition.

    The self-study edition (no secret) also gets a *Check your answer* cell after each written
    answer (``self_study.py``); a class edition does not.

    Returns:
        How many cells were rendered or added.

    Raises:
        GradingError: the notebook has templates and its lesson declares no edition, or a
            template does not render.
    """
    if secret is None:
        added = self_study.add_check_cells(nb)
    else:
        added = self_study.mark_class_edition(nb)
    registry = lesson_of(lesson)
    edition = registry.edition if registry is not None else None
    if edition is None:
        if any(editions.template_of(cell) is not None for cell in nb.cells):
            raise GradingError(f"{lesson}: cells carry edition templates, the lesson no Edition")
        return added
    numbers = edition.names(edition.draw(secret))
    return added + editions.render_notebook(nb, numbers, edition.label(secret))


def _render_file(path: Path, lesson: str, secret: bytes | None) -> int:
    """Render a copied instructor notebook in the edition ``secret`` draws, in place.

    Args:
        path: the lesson's notebook in a work course's ``source/``.
        lesson: its folder name.
        secret: the course secret, or ``None`` (the self-study edition).

    Returns:
        How many cells were rendered (the file is left untouched when none).

    Raises:
        GradingError: the notebook cannot be read, or its templates do not render.
    """
    if not path.is_file():
        return 0
    try:
        nb = nbformat.read(str(path), as_version=nbformat.NO_CONVERT)
    except Exception as err:  # nbformat raises several types for a damaged notebook
        raise GradingError(f"cannot read {path} ({type(err).__name__}: {err})") from None
    rendered = render_lesson(nb, lesson, secret)
    if rendered:
        nbformat.write(nb, str(path))
    return rendered


def render_editions(work: WorkCourse, secret: bytes | None) -> None:
    """Render every lesson of a work course in the edition ``secret`` draws, before
    ``generate_assignments``: the release, the grading workspace (so locked cells are restored
    as the class got them) and the checks then agree on the numbers.

    Args:
        work: a work course, ``source/`` filled (``make_work_course``).
        secret: the course secret, or ``None`` for the self-study edition.

    Raises:
        GradingError: a notebook cannot be read, or its templates do not render.
    """
    for lesson in work.lessons:
        _render_file(work.source_notebook(lesson), lesson, secret)


class RenderEdition(NbGraderPreprocessor):
    """``generate_assignment``'s first step: the lesson in the class's edition (module docstring).

    The templates of the instructor notebook are rendered with the numbers the course secret
    draws (``SHAPES_COURSE_SECRET_FILE``, as ``SaveTrustedGrades`` reads it) and removed; without
    a secret, with the self-study edition's. A notebook without templates passes unchanged.
    """

    secret_file = Unicode(
        "", help="the course secret's file (judge/secret.py); empty: the self-study edition"
    ).tag(config=True)

    def preprocess(
        self, nb: NotebookNode, resources: ResourcesDict
    ) -> tuple[NotebookNode, ResourcesDict]:
        """Render the lesson's edition templates in place.

        Args:
            nb: the instructor notebook being released.
            resources: nbgrader's resources (``resources["nbgrader"]["assignment"]``: the lesson).

        Returns:
            The notebook, rendered, and ``resources`` unchanged.

        Raises:
            GradingError: the secret cannot be used, or a template does not render.
        """
        secret = course_secret.load(self.secret_file or None)
        render_lesson(nb, resources["nbgrader"]["assignment"], secret)
        return nb, resources
