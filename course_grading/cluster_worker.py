"""What a Dask worker does for a grading run on a cluster (``cluster.py`` sends it the work).

**Checked before it is used.** The client runs :func:`admit` on every worker before it sends
any work, and on every worker that joins later (a restarted or added one). A worker is fit
when, on its own machine and account, bubblewrap makes the sandbox a kernel gets (root, or user
namespaces: ``bwrap.check_available``) and a graded function runs in a sandbox of its own
(``FunctionSandbox.check``); its ``course_lib`` is the run's version, its installed
``course_grading`` has the run's digest (:func:`grader_digest`: every file of the package), its
Python the run's minor version; and it reads a file the client wrote in the run's workspace
(the workspace is shared, at the same path) and writes in its ``jobs/`` folder (a worker may
run as an unprivileged account: docs/instructors.md, section 3.8). The sandbox's part is checked
once per worker
process, the rest for every run. A fit worker gets the run's resource
(:attr:`Needs.resource`), which every job asks for, so the scheduler sends nothing to a worker
that was not checked or failed the check; the client names each one refused, and why.

**A job** (:func:`grade`): the job folder the client wrote in the shared workspace, run in this
worker's own slot (one ``jobs.Worker`` per thread of the Dask worker, its sandbox uid its own)
exactly as a local slot runs it; then, still here, every item decided by the trusted judge,
graded functions called in their own sandboxes (``autograde.decide_job``), or for a lesson's
solution its graded functions' calls measured (``autograde.solution_calls``). The answer goes
back to the client, which records it.

**Attempts.** An attempt leaves its mark in the job folder (``attempts/<n>``: the worker and
its pid) before it starts and runs in a fresh copy of the folder (``attempt-<n>/``), so a worker
killed mid-job (by hand, or out of memory) leaves nothing another attempt reads. When the
scheduler sends the job again, the next attempt runs on another worker; after
``MAX_ATTEMPTS`` marks no further attempt runs, and the answer says so.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import course_grading
from course_grading.autograde import decide_job, solution_calls
from course_grading.errors import GradingError
from course_grading.grading_run import GradingRun
from course_grading.judge.functions import FunctionSandbox
from course_grading.judge.lesson import LessonSpec
from course_grading.judge.secret import LessonKeys
from course_grading.judge.verdicts import Graded
from course_grading.sandbox.bwrap import MAX_SLOTS, Limits
from course_grading.sandbox.jobs import JobSpec, Outcome, Worker
from course_grading.submissions import Submission

if TYPE_CHECKING:
    from distributed import Worker as DaskWorker

#: Attempts at one job; a job whose workers died this many times is not tried again.
MAX_ATTEMPTS = 2


@dataclass(frozen=True)
class Needs:
    """What a Dask worker must have to grade for one run (module docstring)."""

    course_lib: str  # course_lib.__version__
    grader: str  # grader_digest()
    python: str  # major.minor
    probe: str  # a file in the run's workspace, which the worker must read...
    token: str  # ...holding this
    limits: Limits  # the sandboxes' limits, for the graded-function check

    @property
    def resource(self) -> str:
        """The Dask resource a fit worker is given for this run, and every job asks for."""
        return "shapes-grader-" + hashlib.sha256(repr(self).encode()).hexdigest()[:12]


@lru_cache(maxsize=1)
def grader_digest() -> str:
    """The SHA-256 of the installed ``course_grading``: every file's path and bytes.

    Returns:
        The hex digest (``__pycache__`` left out).
    """
    package = Path(course_grading.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def needs_of(limits: Limits, probe: Path, token: str) -> Needs:
    """What this machine has, as a worker must have it (the client's side).

    Args:
        limits: the run's sandbox limits.
        probe: the file in the run's workspace the client wrote.
        token: what it holds.

    Returns:
        The run's needs.
    """
    import course_lib

    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return Needs(course_lib.__version__, grader_digest(), python, str(probe), token, limits)


#: Each run's graded-function sandbox on this worker process, once it is admitted; and each
#: sandbox's own check, passed once (bubblewrap and a graded function, for these limits).
_ADMITTED: dict[Needs, FunctionSandbox] = {}
_SANDBOXES: dict[Limits, FunctionSandbox] = {}


def unfit(needs: Needs) -> str:
    """Why this machine cannot grade for the run, or ``""``; admitted when it can.

    Args:
        needs: the run's needs.

    Returns:
        One line saying what is missing, or ``""`` (the graded-function sandbox is kept).
    """
    mine = needs_of(needs.limits, Path(needs.probe), needs.token)
    for what, wanted, found in (
        ("course_lib", needs.course_lib, mine.course_lib),
        ("course_grading (digest)", needs.grader[:12], mine.grader[:12]),
        ("Python", needs.python, mine.python),
    ):
        if wanted != found:
            return f"it has {what} {found}, the run needs {wanted}: install the run's checkout"
    try:
        shared = Path(needs.probe).read_text(encoding="utf-8") == needs.token
        why = "it holds another run's token"
    except OSError as err:
        shared, why = False, err.strerror or type(err).__name__
    if not shared:
        return (
            f"it cannot read the run's workspace ({needs.probe}: {why}): share the workspace "
            "folder with every worker, at the same path"
        )
    jobs = Path(needs.probe).parent / "jobs"
    try:
        tempfile.TemporaryFile(dir=jobs).close()
    except OSError as err:
        return (
            f"it cannot write in the run's workspace ({jobs}: {err.strerror}): give the "
            "workers' account the workspace folder's group (docs/instructors.md, section 3.8)"
        )
    functions = _SANDBOXES.get(needs.limits)
    if functions is None:  # checked once per worker process (bubblewrap, a graded function)
        try:
            functions = FunctionSandbox.default(sandboxed=True, limits=needs.limits)
        except GradingError as err:
            return str(err).split("; --no-sandbox")[0].split(", or pass --no-sandbox")[0]
        _SANDBOXES[needs.limits] = functions
    _ADMITTED[needs] = functions
    return ""


async def admit(needs: Needs, dask_worker: DaskWorker) -> str:
    """Check this worker (:func:`unfit`); give a fit one the run's resource, one per thread.

    Run by the client with ``Client.run`` on each worker before any job is sent there.

    Args:
        needs: the run's needs.
        dask_worker: this worker (given by Dask).

    Returns:
        Why it is refused, or ``""``: admitted.
    """
    from distributed.core import Status

    why = await asyncio.get_running_loop().run_in_executor(None, unfit, needs)
    if not why:
        await dask_worker.set_resources(**{needs.resource: dask_worker.state.nthreads})
        # The scheduler looks again at the jobs no worker could take when a worker starts
        # running, not when one gains a resource: pause and resume it, as Dask does itself
        # under memory pressure, so jobs waiting for this run's resource come here.
        if dask_worker.status == Status.running:
            dask_worker.status = Status.paused
            dask_worker.status = Status.running
    return why


_SLOTS: dict[int, Worker] = {}
_SLOTS_LOCK = threading.Lock()


def _slot(logs: Path) -> Worker:
    """This thread's slot: its worker process, kept for the next job (imports paid once)."""
    host = os.uname().nodename
    with _SLOTS_LOCK:
        ident = threading.get_ident()
        if ident in _SLOTS and _SLOTS[ident].log.parent != logs:  # a new run's workspace
            _SLOTS.pop(ident).close()
        if ident not in _SLOTS:
            slot = min(set(range(MAX_SLOTS - 1)) - {w.slot for w in _SLOTS.values()})
            _SLOTS[ident] = Worker(slot, logs / f"worker-{host}-{os.getpid()}-{slot}.log")
        return _SLOTS[ident]


@dataclass
class Task:
    """One job for a worker: a submission's (``sub`` and ``lesson`` given) or a lesson's
    solution's (neither)."""

    run: GradingRun  # the client's; its bubblewrap and graded-function sandbox are the worker's
    needs: Needs
    job: str  # the job folder, in the shared workspace
    spec: JobSpec
    sub: Submission | None = None
    lesson: LessonSpec | None = None

    def keyed(self) -> Task:
        """This task carrying its lesson's key in place of the course secret: all a worker needs
        to draw the lesson's hidden inputs and edition (``secret.LessonKeys``), and no more.

        Returns:
            The task as it is sent (itself, without a secret to replace).
        """
        options = self.run.options
        if not isinstance(options.secret, bytes):
            return self
        keys = LessonKeys.of(options.secret, [self.spec.lesson])
        return replace(self, run=replace(self.run, options=replace(options, secret=keys)))


@dataclass
class Answer:
    """What became of one job on a worker."""

    outcome: Outcome | None  # None: not run, MAX_ATTEMPTS workers died on it
    decided: Graded | dict | BaseException | None  # verdicts, a solution's call times, or why not
    folder: str  # the attempt's folder (out.ipynb, values.json)
    attempt: int
    worker: str
    seconds: float = 0.0  # on the worker: the notebook and its items


def _attempt(task: Task, worker: str) -> tuple[Path | None, int]:
    """Mark a new attempt at the task's job and make its folder; ``None`` after the last."""
    job = Path(task.job)
    marks = job / "attempts"
    marks.mkdir(exist_ok=True)
    if marks.stat().st_uid == os.getuid():  # a worker of another account marks its attempt too
        marks.chmod(0o2770)
    attempt = 1 + sum(1 for _ in marks.iterdir())
    if attempt > MAX_ATTEMPTS:
        return None, attempt - 1
    who = task.sub.student if task.sub else "(solution)"
    mark = {"worker": worker, "pid": os.getpid(), "student": who, "lesson": task.spec.lesson}
    (marks / str(attempt)).write_text(json.dumps(mark), encoding="utf-8")
    folder = job / f"attempt-{attempt}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(job / "stage", folder / "stage", symlinks=True)
    shutil.copyfile(job / "in.ipynb", folder / "in.ipynb")
    (folder / "runtime").mkdir()
    return folder, attempt


def grade(task: Task) -> Answer:
    """Run one job here, as a local slot does, and decide its items (module docstring).

    Args:
        task: the job.

    Returns:
        Its outcome and verdicts (or a solution's call times, or what deciding raised), or no
        outcome when ``MAX_ATTEMPTS`` workers died on it.

    Raises:
        GradingError: this worker was not admitted for the run (the client stops the run).
    """
    from distributed import get_worker

    here = get_worker()
    name = f"{here.name} ({here.address})" if str(here.name) != here.address else here.address
    functions = _ADMITTED.get(task.needs)
    if functions is None:
        raise GradingError(f"Dask worker {name} was sent a job before it was checked")
    start = time.perf_counter()
    folder, attempt = _attempt(task, name)
    if folder is None:
        return Answer(None, None, task.job, attempt, name)
    calls = task.run.functions.solution_cpu
    run = replace(task.run, bwrap=functions.bwrap, functions=replace(functions, solution_cpu=calls))
    logs = Path(task.job).parents[1] / "logs"  # <out>/cluster/logs: the workers' to write
    outcome = _slot(logs).run(folder, replace(task.spec, bwrap=functions.bwrap))
    decided: Graded | dict | BaseException | None = None
    try:
        if task.sub is None:  # a lesson's solution: its graded functions' calls, measured
            decided = solution_calls(run, [task.spec.lesson])
        elif outcome.status == "ok":
            decided = decide_job(run, task.sub, task.lesson, folder)
    except BaseException as err:  # noqa: BLE001 (raised again on the client, as in a slot)
        decided = err
    return Answer(outcome, decided, str(folder), attempt, name, time.perf_counter() - start)
