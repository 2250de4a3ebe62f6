"""Grading on a Dask cluster: ``python -m course_grading SUBMISSIONS --scheduler tls://HOST:PORT``.

The grader does not schedule work across machines itself: it hands each submission to a Dask
``distributed`` cluster (the ``cluster`` extra), and Dask places it on a worker. This module is
the client's side, and it is imported only with ``--scheduler`` (``distributed`` is imported only
when it connects). The run is the local one (``run.grade``) with the notebooks' slots replaced:

1. the scheduler is reached before the workspace is touched (one line and exit 2 if not), over
   TLS with the grading command's certificate only (``cluster_connect.py``: a ``tcp://``
   scheduler, which any local user could use to run code on the workers, is refused);
2. every worker is checked before it is used, and every worker that joins later
   (``cluster_worker.admit``): one that cannot sandbox, or runs another version of the course,
   or cannot read the workspace, is named on stderr with why, and never sent anything;
3. each lesson's solution runs on a worker, in its sandbox, to set the lesson's budget and its
   graded functions' call limits (``budgets.py``), as it does locally;
4. each submission is prepared here as locally (``autograde.prepared_jobs``: its job folder in
   the workspace, ``<out>/cluster/jobs/``), sent with its lesson's budget, run by a worker as a
   local slot runs it, its items decided there by the trusted judge; the answer is recorded
   here (``autograde.record_job``), so the report, scores and feedback are a local run's.
   A job carries its lesson's key (``secret.LessonKeys``: everything a lesson draws from the
   course secret is derived from it), never the secret itself.

Workers may run as an unprivileged account: the folders they write in (``jobs/``,
``solutions/``, ``logs/`` of ``<out>/cluster``, and each job's) are made group-writable, with
the group of the workspace (``--out``), which the instructor gives the workers' account
(docs/instructors.md, section 3.8); a worker that cannot write there is refused by name.

Nothing lost: a worker that dies mid-job leaves its mark (``cluster_worker``), the scheduler
sends the job again, and the next attempt runs on another worker; the row says so. A job two
workers died on is a row saying so. Each answer is kept in ``<out>/cluster/done/`` as it is
recorded (with ``run.json``, the run's grader, secret and options, and ``graded.csv``: who
graded what, in how long). If the scheduler goes, wherever the run is (waiting for a worker,
submitting, waiting for answers, taking one: ``cluster_connect.lost``), or no worker can grade
for ``--worker-wait`` seconds, the run stops in one line; the same command with ``--resume``
replays what was kept and sends only the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from course_grading.autograde import Options, nbgrader_log, prepared_jobs, record_job
from course_grading.cluster_connect import Pool, connect, lost, say
from course_grading.cluster_store import Store, job_digest
from course_grading.cluster_worker import MAX_ATTEMPTS, Answer, Task, grade, needs_of
from course_grading.errors import GradingError
from course_grading.grading_run import GradingRun
from course_grading.job_folder import solution_job
from course_grading.judge.functions import FunctionSandbox
from course_grading.judge.lesson import LessonSpec
from course_grading.nbgrader import gradebook
from course_grading.nbgrader.course import WorkCourse
from course_grading.report_text import one_line
from course_grading.sandbox.budgets import budget_of
from course_grading.submissions import Submission

CONNECT_SECONDS = 10
POLL_SECONDS = 2.0
#: Seconds to wait for a finished job's answer to come from its worker; then it is waited for
#: again (a worker that left with it: the scheduler runs the job again).
ANSWER_SECONDS = 30
#: The folders of ``<out>/cluster`` a worker writes in.
SHARED = ("jobs", "solutions", "logs")
#: The row of a submission graded again after its worker died (``Submission.info``: not a
#: problem of the submission, so it changes neither its status nor its score).
RERUN = (
    "graded again on another Dask worker: the worker grading it first died (killed, or out of "
    "memory)"
)
DIED = (
    f"could not grade it: {MAX_ATTEMPTS} Dask workers died while grading it (killed, or out of "
    "memory); it was not tried again"
)


@contextmanager
def engine(args: argparse.Namespace, options: Options) -> Iterator[ClusterRun | None]:
    """The cluster run the command line asks for, connected; ``None`` without ``--scheduler``.

    Args:
        args: the parsed command line (``--scheduler``, ``--resume``, ``--worker-wait``,
            ``--out``, ``--student``).
        options: the run's options.

    Yields:
        The cluster run (its client closed on leaving), or ``None``.

    Raises:
        GradingError: an option that does not go with the others, a workspace ``--resume``
            cannot resume, or a scheduler that cannot be reached.
    """
    if args.scheduler is None:
        if args.resume:
            raise GradingError("--resume goes with --scheduler: a local run grades everything")
        yield None
        return
    if not options.sandbox:
        raise GradingError("--no-sandbox does not go with --scheduler: workers grade sandboxed")
    if args.student is not None:
        raise GradingError("--student regrades on this machine: leave out --scheduler")
    store = Store(args.out.resolve() / "cluster", options, args.resume)
    client = connect(args.scheduler, args.cluster_certs)
    try:
        yield ClusterRun(client, args.scheduler, store, args.worker_wait)
    finally:
        try:
            client.close(timeout=CONNECT_SECONDS)
        except Exception:  # noqa: BLE001 (a scheduler already gone: nothing left to close)
            pass


class ClusterRun:
    """One grading run on a Dask cluster (module docstring): ``run.grade`` calls
    :meth:`autograde` in place of the local one.

    Args:
        client: the connected Dask client (:func:`connect`).
        address: the scheduler's address, for messages.
        store: what the run keeps, for ``--resume``.
        wait: seconds the run waits for a worker that can grade before it stops.
    """

    def __init__(self, client: object, address: str, store: Store, wait: int) -> None:
        self.client, self.address, self.store, self.wait = client, address, store, wait
        self.pending: dict[object, tuple[Task, Callable[[Answer], None]]] = {}
        self.total, self.idle_since, self.watched = 0, 0.0, 0.0
        #: Seconds this machine spent preparing and recording submissions (the benchmark's).
        self.spent = {"prepare": 0.0, "record": 0.0}
        self.gave_up: dict[str, int] = {}  # job folder -> the scheduler's KilledWorker answers

    @property
    def keep(self) -> tuple[str, ...]:
        """The workspace's outputs a new run keeps: ``cluster/`` when resuming."""
        return ("cluster",) if self.store.kept else ()

    def autograde(
        self, work: WorkCourse, subs: list[Submission], specs: dict[str, LessonSpec],
        options: Options, hidden: list[Path],
    ) -> None:  # fmt: skip
        """Grade every submission in ``subs`` on the cluster, as ``autograde.autograde`` does
        here: each marked graded, or flagged with why not.

        Args:
            work: the work course the submissions are staged in (in the shared workspace).
            subs: the submissions, in order.
            specs: each lesson's spec, by lesson.
            options: the run's options.
            hidden: folders the sandbox check makes sure the kernels cannot see.

        Raises:
            GradingError: the scheduler went away, no worker could grade for ``wait`` seconds,
                or a sandbox does not hold (the run stops; what is graded is kept).
        """
        folder = self.store.folder
        _share(folder, 0o2750)
        for made in SHARED:  # a stopped run's attempts count for nothing now
            shutil.rmtree(folder / made, ignore_errors=True)
            _share(folder / made)
        token = secrets.token_hex(16)
        (folder / "workspace.txt").write_text(token, encoding="utf-8")
        self.needs = needs_of(options.limits, folder / "workspace.txt", token)
        self.pool, self.total = Pool(self.client, self.needs), len(subs)
        # It only carries the call limits to the workers: every answer brings its verdicts, so
        # nothing is called here.
        carrier = FunctionSandbox(None, options.limits)
        config = gradebook.load_config(work)
        run = GradingRun(work, options, config, tuple(map(str, hidden)), None, carrier)
        self._wait_for_a_worker()
        with nbgrader_log(work):
            lessons = sorted({sub.lesson for sub in subs})
            budgets, calls = self.store.measured() or self._measure(run, lessons)
            self.store.begin(budgets, calls)
            run = replace(run, functions=replace(carrier, solution_cpu=calls))
            jobs = prepared_jobs(run, subs, specs, budgets, folder / "jobs")
            for key, job, spec in self._timed(jobs, "prepare"):
                self._send(run, key, job, spec, specs[key[0].lesson])
                self._collect(block=False)
            self._collect(block=True)
        gradebook.read_scores(work, subs, specs)

    def _measure(self, run: GradingRun, lessons: list[str]):
        """Each lesson's solution run on a worker: the lessons' budgets and call limits."""
        answers: dict[str, Answer] = {}
        for n, lesson in enumerate(lessons):
            job = self.store.folder / "solutions" / str(n)
            task = Task(run, self.needs, str(job), solution_job(run, lesson, job))
            self._submit(task, lambda answer, lesson=lesson: answers.__setitem__(lesson, answer))
        self._collect(block=True)
        budgets, calls, options = {}, {}, run.options
        factor, floor, cap = options.budget_factor, options.notebook_floor, options.notebook_timeout
        for lesson in lessons:
            outcome, decided = answers[lesson].outcome, answers[lesson].decided
            if outcome is not None:
                outcome.stop_if_sandbox_failed()
            if isinstance(decided, BaseException):
                raise decided  # as locally: the graded functions cannot run
            calls.update(decided or {})
            budgets[lesson] = budget_of(outcome, factor, floor, cap)
        return budgets, calls

    def _send(self, run: GradingRun, key: tuple, job: Path, spec, lesson: LessonSpec) -> None:
        """Send one submission's job, or replay the answer a stopped run kept for it."""
        sub, _, tests = key
        digest, kept = job_digest(sub, job), None

        def take(answer: Answer) -> None:
            if answer.outcome is None:
                sub.flag(DIED, gradable=False)
            else:
                if answer.attempt > 1:
                    sub.info.append(RERUN)
                    say(f"{sub.student} / {sub.lesson}: {RERUN} ({answer.worker} graded it)")
                clock, folder = time.perf_counter(), Path(answer.folder)
                record_job(run, sub, lesson, folder, tests, answer.outcome, answer.decided)
                self.spent["record"] += time.perf_counter() - clock
            if kept is None and not isinstance(answer.decided, BaseException):
                self.store.keep(digest, sub, answer)
            shutil.rmtree(job, ignore_errors=True)

        kept = self.store.answer(digest)
        if kept is not None:
            take(kept)
        else:
            self._submit(Task(run, self.needs, str(job), spec, sub, lesson), take)

    def _timed(self, items: Iterator, step: str) -> Iterator:
        """``items``, the time each took to make added to ``self.spent[step]``."""
        while True:
            clock = time.perf_counter()
            item = next(items, None)
            self.spent[step] += time.perf_counter() - clock
            if item is None:
                return
            yield item

    def _submit(self, task: Task, take: Callable[[Answer], None]) -> None:
        task = task.keyed()
        os.chmod(task.job, 0o2770)  # the worker marks its attempts there (section 3.8)
        resources = {self.needs.resource: 1}  # only a worker checked for this run has it
        with self._dask():
            future = self.client.submit(grade, task, resources=resources, pure=False)
        self.pending[future] = (task, take)

    @contextmanager
    def _dask(self) -> Iterator[None]:
        """A call into Dask: one that shows the scheduler gone (``lost``) stops the run in one
        line, keeping what is graded."""
        try:
            yield
        except GradingError:
            raise
        except (Exception, asyncio.CancelledError) as err:
            if lost(err, self.client):
                raise self._stopped(f"lost the Dask scheduler at {self.address}") from None
            raise

    def _collect(self, block: bool) -> None:
        """Take every finished job's answer; with ``block``, until none is left."""
        from distributed import wait

        while self.pending:
            with self._dask():
                try:
                    timeout = POLL_SECONDS if block else 0.001
                    done, _ = wait(list(self.pending), timeout, return_when="FIRST_COMPLETED")
                except TimeoutError:
                    done = set()
            for future in done:
                self._finish(future)
            if not block:
                return
            if time.monotonic() - self.watched > POLL_SECONDS:
                self._watch()

    def _answer(self, future: object) -> Answer | BaseException | None:
        """A finished job's answer, or what the job raised; ``None`` when it is not here yet
        (a connection was lost, but the scheduler still answers: a worker's, with the answer)."""
        with self._dask():
            if future.status == "cancelled" or self.client.status != "running":
                raise self._stopped(f"lost the Dask scheduler at {self.address}")
            try:
                return future.result(timeout=ANSWER_SECONDS)
            except (Exception, asyncio.CancelledError) as err:
                # the job's own error (an OSError too: a PermissionError is not a lost scheduler)
                if future.status == "error" or not lost(err, self.client):
                    return err  # (a timeout is an OSError: lost() sees it)
                self.client.scheduler_info(n_workers=0)  # raises when the scheduler is gone
                return None

    def _finish(self, future: object) -> None:
        from distributed import KilledWorker

        task, take = self.pending.pop(future)
        answer = self._answer(future)
        if answer is None:  # its worker left with it: the scheduler runs the job again
            self.pending[future] = (task, take)
            time.sleep(POLL_SECONDS / 4)
            return
        if isinstance(answer, BaseException):
            err = answer
            if not isinstance(err, KilledWorker):
                who = f"{task.sub.student} / {task.spec.lesson}" if task.sub else task.spec.lesson
                raise GradingError(f"grading {who} failed on a Dask worker: {one_line(str(err))}")
            self.gave_up[task.job] = self.gave_up.get(task.job, 0) + 1
            marks = sum(1 for _ in (Path(task.job) / "attempts").glob("*"))
            died = max(marks, self.gave_up[task.job])
            if died < MAX_ATTEMPTS:  # the scheduler gave up first (its allowed-failures)
                self._submit(task, take)
                return
            take(Answer(None, None, task.job, died, ""))
            return
        take(answer)

    def _watch(self) -> None:
        """Check workers that joined; stop when the scheduler or every usable worker is gone."""
        self.watched = time.monotonic()
        try:
            admitted = self.client.status == "running" and self.pool.check()
        except Exception as err:  # noqa: BLE001 (whatever a lost connection raises)
            if not lost(err, self.client):
                raise
            admitted = None
        if admitted is None or self.client.status != "running":
            raise self._stopped(f"lost the Dask scheduler at {self.address}")
        if admitted:
            self.idle_since = 0.0
        elif not self.idle_since:
            self.idle_since = time.monotonic()
        elif time.monotonic() - self.idle_since > self.wait:
            raise self._stopped(f"no Dask worker could grade for {self.wait} s")

    def _wait_for_a_worker(self) -> None:
        deadline = time.monotonic() + self.wait
        while True:
            with self._dask():
                if self.pool.check():
                    return
            if time.monotonic() > deadline:
                refused = "; ".join(f"{a}: {why}" for a, why in self.pool.refused.items())
                raise GradingError(
                    f"no Dask worker at {self.address} can grade (waited {self.wait} s"
                    f"{'; refused ' + refused if refused else ', none joined'})"
                )
            time.sleep(POLL_SECONDS)

    def _stopped(self, why: str) -> GradingError:
        kept = self.store.count() if (self.store.folder / "done").is_dir() else 0
        return GradingError(
            f"{why}; {kept} of {self.total} submission(s) graded and kept in "
            f"{self.store.folder}: run the same command with --resume to grade the rest"
        )


def _share(folder: Path, mode: int = 0o2770) -> None:
    """Make ``folder`` (if need be) one the workers' account writes in (``mode``), in the
    workspace's group: a worker may run as an unprivileged account of that group."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(folder, -1, folder.parent.stat().st_gid)
    os.chmod(folder, mode)
