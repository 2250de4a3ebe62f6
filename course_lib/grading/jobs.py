"""Run submissions' notebooks in parallel, each in its own process, kernel and sandbox.

A job is a folder (see ``execute.py``) that the grader fills and a worker process runs::

    <run>/<n>/job.json  in.ipynb  stage/  runtime/   ->   out.ipynb  result.json  kernel.log

``run_jobs`` keeps ``jobs`` workers busy; each worker holds a slot, and a root grader's sandbox
in that slot runs as the slot's own uid (``sandbox.sandbox_uid``), so the process limit of one
sandbox never counts another's processes. Results come back in completion order; the grader
records them in submission order, so ``--jobs`` never changes the report.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course_lib.grading import sandbox
from course_lib.grading.processes import kill_leftovers

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
    cell_timeouts: list[int]  # seconds, one per cell of in.ipynb
    notebook_timeout: int
    hidden: list[str]  # paths the probe checks do not exist inside the sandbox
    iopub_timeout: int = 30  # let an interrupted torch kernel answer
    startup_timeout: int = 120
    uid: int | None = None  # set when a slot is given

    def save(self, job: Path) -> None:
        (job / "job.json").write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, job: Path) -> JobSpec:
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
    leftovers: int = 0  # processes killed after the kernel had gone

    def save(self, job: Path) -> None:
        (job / "result.json").write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, job: Path) -> Outcome:
        return cls(**json.loads((job / "result.json").read_text(encoding="utf-8")))


def run_one(job: Path, spec: JobSpec, slot: int) -> Outcome:
    """Run the worker for ``job`` in ``slot``; never raises for the notebook's sake."""
    spec.uid = sandbox.sandbox_uid(slot) if spec.sandbox else None
    spec.save(job)
    command = [sys.executable, "-m", "course_lib.grading.execute", str(job)]
    with open(job / "worker.log", "wb") as log:
        try:
            proc = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=spec.notebook_timeout + WORKER_GRACE,
                check=False,
            )
        except subprocess.TimeoutExpired:
            if spec.uid is not None:
                kill_leftovers(spec.uid, me=-1)
            return Outcome(status="timeout", reason=f"over {spec.notebook_timeout} s in all")
    try:
        return Outcome.load(job)
    except (OSError, ValueError, TypeError):  # the job folder was damaged (--no-sandbox only)
        try:
            tail = (job / "worker.log").read_text(errors="replace").strip().splitlines()[-1:]
        except OSError:
            tail = []
        why = tail[0] if tail else f"exit status {proc.returncode}"
        return Outcome(status="error", reason=f"the grading process failed: {why}")


def run_jobs(
    jobs: Iterable[tuple[object, Path, JobSpec]],
    workers: int,
    done: Callable[[object, Outcome], None],
) -> None:
    """Run every ``(key, folder, spec)`` with ``workers`` at a time; call ``done`` as each ends.

    ``done`` runs in the calling thread, so it may write the gradebook. ``jobs`` may be a
    generator: the next job is prepared while the first ones already run.
    """
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(workers):
        slots.put(slot)

    def in_slot(job: Path, spec: JobSpec) -> Outcome:
        slot = slots.get()
        try:
            return run_one(job, spec, slot)
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grading-job") as pool:
        futures = {}
        try:
            for key, job, spec in jobs:
                futures[pool.submit(in_slot, job, spec)] = key
            for future in as_completed(futures):
                done(futures[future], future.result())
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # the running ones end on their own
            raise
