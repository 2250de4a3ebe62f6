"""Run submissions' notebooks in parallel, each in its own kernel and sandbox.

A job is a folder (see ``execute.py``) that the grader fills and a worker process runs::

    <run>/<n>/job.json  in.ipynb  stage/  runtime/   ->   out.ipynb  result.json  kernel.log

``run_jobs`` keeps ``jobs`` workers busy, one worker process per slot, and a sandbox in a slot
runs as the slot's own uid (``sandbox.sandbox_uid``: dropped to by a root grader, inside a user
namespace otherwise) in a PID namespace of its own, so one slot can neither signal another nor
count another's processes. A worker that does not answer in time is killed, and with it its
bwrap and so the whole sandbox (``--die-with-parent``). Results come back in completion order;
the grader records them in submission order, so ``--jobs`` never changes the report.
"""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.sandbox import bwrap as sandbox

#: Seconds a worker may run past its notebook's limit (kernel start and shutdown) before it is
#: killed from outside.
WORKER_GRACE = 120


@dataclass
class JobSpec:
    """What one worker needs to run one notebook (``job.json``)."""

    lesson: str
    sandbox: bool
    bwrap: str | None
    limits: dict
    cell_timeouts: list[int]  # seconds of CPU time, one per cell of in.ipynb
    notebook_timeout: int  # seconds of wall-clock time for the whole notebook (its budget)
    hidden: list[str]  # paths the probe checks do not exist inside the sandbox
    iopub_timeout: int = 30  # let an interrupted torch kernel answer
    startup_timeout: int = 120
    uid: int | None = None  # set when a slot is given
    values: list[str] = field(default_factory=list)  # names taken out after the last cell
    wall_factor: float = 4.0  # a cell's wall-clock backstop, as a multiple of its CPU limit
    budget: str = ""  # what notebook_timeout is, in words for the reason when it is reached

    def save(self, job: Path) -> None:
        """Write the spec as ``job.json`` in the job's folder, for its worker.

        Args:
            job: the job's folder.
        """
        (job / "job.json").write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, job: Path) -> JobSpec:
        """Read the spec a grader wrote.

        Args:
            job: the job's folder, holding ``job.json``.

        Returns:
            The spec.
        """
        return cls(**json.loads((job / "job.json").read_text(encoding="utf-8")))


@dataclass
class Outcome:
    """What became of one notebook (``result.json``)."""

    status: str  # ok, timeout, dead, error, sandbox failed
    reason: str = ""
    seconds: float = 0.0
    hidden_errors: list[int] = field(default_factory=list)  # error replies without an output
    output_cut: list[int] = field(default_factory=list)  # cells whose output was cut
    probe: dict | None = None
    leftovers: int = 0  # processes still running beside the kernel after the last cell
    cpu_stopped: list[int] = field(default_factory=list)  # cells stopped at their CPU limit
    wall_stopped: list[int] = field(default_factory=list)  # cells stopped by the wall backstop
    refused: list[int] = field(default_factory=list)  # cells whose output was over the cap
    cpu_seconds: float = 0.0  # CPU time the whole sandbox used
    memory: str = ""  # how the sandbox's memory was bounded: "cgroup v2", "cgroup v1", "watched"
    memory_peak: int = 0  # the most it held at once, processes and tmpfs pages (bytes)
    memory_kills: int = 0  # processes killed at its memory limit
    memory_over: int = 0  # watched: most samples in a row over the limit (the bound's looseness)
    grader_rss: int = 0  # the worker's own peak resident memory so far (bytes)

    def save(self, job: Path) -> None:
        """Write the outcome as ``result.json`` in the job's folder, for the grader.

        Args:
            job: the job's folder.
        """
        (job / "result.json").write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    def stop_if_sandbox_failed(self) -> None:
        """Stop the whole run when this job found the sandbox open.

        Raises:
            GradingError: the status is ``"sandbox failed"``; the message gives the probe's reason.
        """
        if self.status == "sandbox failed":
            raise GradingError(
                f"the sandbox does not hold ({self.reason}); grading stopped. Check bubblewrap "
                "and the grader's account, or pass --no-sandbox knowingly"
            )

    @classmethod
    def load(cls, job: Path) -> Outcome:
        """Read the outcome a worker wrote.

        Args:
            job: the job's folder, holding ``result.json``.

        Returns:
            The outcome.
        """
        return cls(**json.loads((job / "result.json").read_text(encoding="utf-8")))


class Worker:
    """One worker process (``execute.py --serve``) for one slot: it runs jobs one after another.

    Its imports are paid once per slot, not once per notebook; each job still gets a fresh
    kernel in a fresh sandbox, and the worker kills whatever a kernel left before the next.
    A worker that does not answer in time is killed and replaced for the next job.
    """

    def __init__(self, slot: int, log: Path) -> None:
        """A slot with no process yet (it starts with its first job).

        Args:
            slot: the slot's number, which picks its sandbox uid.
            log: the file the worker's stderr is appended to.
        """
        self.slot, self.log = slot, log
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "course_grading.sandbox.execute", "--serve"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    env={**os.environ, "SHAPES_PARENT_PID": str(os.getpid())},
                )
        return self.proc

    def run(self, job: Path, spec: JobSpec) -> Outcome:
        """Run ``job`` in this slot; never raises for the notebook's sake.

        The spec gets the slot's sandbox uid and is saved in the job's folder; a worker that is late
        (the notebook's budget plus ``WORKER_GRACE``) or dies is killed, replaced for the next job.

        Args:
            job: the job's folder (``in.ipynb``, ``stage/``, ``runtime/``).
            spec: what the worker needs to run it.

        Returns:
            What became of the notebook: the worker's ``result.json``, or a ``timeout`` or
            ``error`` outcome when the worker gave none.
        """
        spec.uid = sandbox.sandbox_uid(self.slot) if spec.sandbox else None  # --no-sandbox: none
        spec.save(job)
        try:
            self._start().stdin.write(f"{job}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # it died after its last job: a fresh one
            self.stop()
            self._start().stdin.write(f"{job}\n")
            self.proc.stdin.flush()
        answer = self._answer(job, time.monotonic() + spec.notebook_timeout + WORKER_GRACE)
        if answer is None or not answer:  # too late, or the worker died: it goes, and its
            self.stop()  # sandbox with it (bwrap dies with its parent, and so its namespace)
            if answer is None:
                return Outcome(status="timeout", reason=f"over {spec.notebook_timeout} s in all")
        try:
            return Outcome.load(job)
        except (OSError, ValueError, TypeError):  # the job folder was damaged (--no-sandbox)
            why = answer or f"the grading process stopped (see {self.log.name})"
            return Outcome(status="error", reason=f"the grading process failed: {why}")

    def _answer(self, job: Path, deadline: float) -> str | None:
        """The worker's line about ``job``; ``""`` if it died, ``None`` if it is late."""
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                break
            line = self.proc.stdout.readline()
            if not line:
                return ""
            if line.startswith((f"done {job}", f"failed {job}")):
                return line.strip()
        return None

    def stop(self) -> None:
        """Kill the worker now (its sandbox dies with it); the next job starts a fresh one."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Let the worker finish and exit (end of its input)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.stop()


def slots(workers: int, logs: Path) -> list[Worker]:
    """``workers`` slots, each a worker process once it has a job.

    Args:
        workers: how many notebooks run at once.
        logs: the folder of the workers' logs (``worker-<slot>.log``).

    Returns:
        The slots, numbered from 0.
    """
    return [Worker(slot, logs / f"worker-{slot}.log") for slot in range(workers)]


@contextmanager
def held_slots(workers: int, logs: Path) -> Iterator[list[Worker]]:
    """``slots`` kept for several ``run_jobs`` calls (their imports paid once), closed after.

    Args:
        workers: how many notebooks run at once.
        logs: the folder of the workers' logs.

    Yields:
        The slots; each worker is closed (let finish, then killed after 30 s) on leaving.
    """
    kept = slots(workers, logs)
    try:
        yield kept
    finally:
        for worker in kept:
            worker.close()


def run_jobs(
    jobs: Iterable[tuple[object, Path, JobSpec]],
    workers: int | list[Worker],
    done: Callable[[object, Outcome], None],
    logs: Path,
    then: Callable[[object, Outcome], None] | None = None,
) -> None:
    """Run every ``(key, folder, spec)`` with ``workers`` at a time; call ``done`` as each ends.

    ``done`` runs in the calling thread, so it may write the gradebook. ``then``, if given, runs
    first in the job's own thread while the job still holds its slot (the graded functions of a
    submission: their time is the slot's, beside the other slots' kernels).

    Args:
        jobs: the jobs; may be a generator: the first jobs run while the next are prepared.
        workers: a number of this call's own slots, or slots the caller made (``slots``) and
            keeps for a later call (their processes, imports paid, carry on) and closes itself.
        done: called with each job's key and outcome, in the calling thread, as jobs end.
        logs: the folder of this call's own workers' logs.
        then: called with each job's key and outcome in the job's slot, before ``done``.

    Raises:
        BaseException: whatever ``jobs``, ``done`` or a job's ``then`` raised (a
            ``GradingError`` when the sandbox does not hold), once the running jobs have ended;
            no further job starts.
    """
    own = isinstance(workers, int)
    pool_slots = slots(workers, logs) if isinstance(workers, int) else workers
    idle: queue.Queue[Worker] = queue.Queue()
    for worker in pool_slots:
        idle.put(worker)

    def in_slot(key: object, job: Path, spec: JobSpec) -> Outcome:
        worker = idle.get()
        try:
            outcome = worker.run(job, spec)
            if then is not None:
                then(key, outcome)
            return outcome
        finally:
            idle.put(worker)

    with ThreadPoolExecutor(max_workers=len(pool_slots), thread_name_prefix="grading-job") as pool:
        futures = {}
        try:
            for key, job, spec in jobs:
                futures[pool.submit(in_slot, key, job, spec)] = key
            for future in as_completed(futures):
                done(futures[future], future.result())
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # the running ones end on their own
            raise
        finally:
            for worker in pool_slots if own else []:
                worker.close()
