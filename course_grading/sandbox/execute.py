"""Run one submission's notebook in a fresh kernel, sandboxed, and leave nothing running.

    python -m course_grading.sandbox.execute --serve     # job folders on stdin, one a line
    python -m course_grading.sandbox.execute JOB_DIR     # one job

The grader keeps one of these per parallel slot (``jobs.py``), outside the sandbox; each job
gets a fresh kernel in a fresh sandbox. ``JOB_DIR`` holds ``job.json`` (``jobs.JobSpec``),
``in.ipynb`` (the notebook as nbgrader prepared it, hidden regions removed: the kernel receives
the cells one by one and never sees this file), ``stage/`` (the student's folder as the kernel
may see it) and ``runtime/`` (the connection file, which the kernel sees read-only). It writes
``out.ipynb`` (the executed notebook), ``result.json`` and, when ``JobSpec.values`` names any,
``values.json`` (those names taken out after the last cell: ``evidence.py``).

Before any cell runs, the probe (``probe.py``) checks from inside the kernel that the sandbox
holds. While cells run, ``watch.py`` limits each cell's CPU time (the wall clock is only a
backstop) and, without a cgroup (``cgroup.py``), the sandbox's memory (resident and tmpfs pages
together); ``messages.py`` refuses
kernel messages over the cap before reading them. The whole notebook has ``notebook_timeout``
seconds (its budget, ``budgets.py``). When the kernel ends, its PID namespace ends and every
process in it: the worker only checks that the namespace is gone.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import DeadKernelError

from course_grading.judge.evidence import take_values
from course_grading.sandbox import bwrap as sandbox
from course_grading.sandbox import processes
from course_grading.sandbox.cgroup import Cgroup
from course_grading.sandbox.client import GradingClient, grading_client
from course_grading.sandbox.jobs import JobSpec, Outcome
from course_grading.sandbox.kernel import GivenSpecKernelManager, kernel_manager
from course_grading.sandbox.probe import SandboxBroken
from course_grading.sandbox.processes import become_subreaper


async def _execute(client: GradingClient, km: GivenSpecKernelManager, spec: JobSpec, job: Path):
    """Start the kernel, check the sandbox, run every cell; always shut the kernel down."""
    home = job / "home"
    if not spec.sandbox:  # the same private copy, on the host
        shutil.copytree(job / "stage", home / spec.lesson)
    env = sandbox.kernel_environment(sandbox.Limits(**spec.limits), home)
    with open(job / "kernel.log", "wb") as log:
        try:
            await client.async_execute(
                cwd=str(job / "runtime" if spec.sandbox else home / spec.lesson),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            if spec.values and client.guard and not client.guard.fatal():
                await take_values(client, spec.values, job / "values.json")
        finally:
            if client.watch is not None:
                client.watch.finish()
            if client.guard is not None:
                client.guard.stop()
            try:
                await asyncio.wait_for(km.shutdown_kernel(now=False), timeout=10)
            except Exception:  # noqa: BLE001 (a dead or stuck kernel: killed, and its namespace)
                await km.shutdown_kernel(now=True)


def _failure(err: Exception, client: GradingClient, spec: JobSpec, job: Path) -> Outcome:
    """What a failed execution means; a sandboxed kernel that never started is the sandbox's."""
    if isinstance(err, SandboxBroken):
        return Outcome(status="sandbox failed", reason=str(err))
    if spec.sandbox and client.probe is None:  # no student code has run yet
        log = (job / "kernel.log").read_text(errors="replace").strip().splitlines()
        why = log[-1] if log else f"{type(err).__name__}: {err}"
        return Outcome(status="sandbox failed", reason=f"the sandboxed kernel did not start: {why}")
    if isinstance(err, asyncio.TimeoutError):
        over = f"its {spec.budget}" if spec.budget else f"{spec.notebook_timeout} s in all"
        return Outcome(status="timeout", reason=f"over {over}")
    fatal = client.guard.fatal() if client.guard else None
    if fatal:
        return Outcome(status="error", reason=fatal)
    if isinstance(err, DeadKernelError):
        return Outcome(status="dead", reason="the kernel died while running it")
    return Outcome(status="error", reason=f"{type(err).__name__}: {err}".strip(": "))


def run_job(job: Path) -> tuple[Outcome, int | None]:
    """Execute ``job`` (see module), write ``out.ipynb``; return the outcome and the host pid
    of the sandbox's init (``None`` unsandboxed).

    A failure of the notebook (a broken sandbox, a dead kernel, the notebook's time budget
    spent, a refused message) is not raised: it is the outcome's status and reason. The
    outcome also carries what the client and the watch (or the memory cgroup) saw.

    Args:
        job: the job folder (module docstring).

    Returns:
        The outcome (its ``leftovers`` counted by the watch only; ``run_one`` completes it),
        and the sandbox init's host pid, so the caller can check that the namespace ended.
    """
    spec = JobSpec.load(job)
    nb = nbformat.read(str(job / "in.ipynb"), as_version=4)
    limits = sandbox.Limits(**spec.limits)
    cgroup = None
    if spec.sandbox:
        name = f"shapes-{os.getpid()}-{job.name}"
        cgroup = Cgroup.make(name, limits.memory_bytes, limits.processes)
    km = kernel_manager(spec, job, cgroup.procs if cgroup else [])
    client = grading_client(nb, spec, km, memory_watched=cgroup is None)
    start = time.perf_counter()
    try:
        asyncio.run(asyncio.wait_for(_execute(client, km, spec, job), spec.notebook_timeout))
        outcome = Outcome(status="ok")
    except Exception as err:  # noqa: BLE001 (reported per submission, or stops the run)
        # past the budget, nbclient has turned wait_for's cancellation into a DeadKernelError
        late = time.perf_counter() - start >= spec.notebook_timeout
        outcome = _failure(asyncio.TimeoutError() if late else err, client, spec, job)
    outcome.seconds = time.perf_counter() - start
    outcome.hidden_errors, outcome.output_cut = client.hidden_errors, client.output_cut
    outcome.probe, outcome.wall_stopped = client.probe, client.wall_stopped
    if client.guard is not None:
        outcome.refused = sorted({cell for _, cell in client.guard.refused if cell is not None})
    if client.watch is not None:
        seen = client.watch.seen
        outcome.cpu_stopped, outcome.cpu_seconds = seen.cpu_stopped, seen.cpu_seconds
        outcome.leftovers, outcome.memory_kills = seen.left_running, seen.memory_kills
        outcome.memory, outcome.memory_peak = "watched", seen.memory_peak
        outcome.memory_over = seen.memory_over
    if cgroup is not None:
        outcome.memory, outcome.memory_peak = cgroup.version, cgroup.peak()
        outcome.memory_kills = cgroup.oom_kills()
    nbformat.write(nb, str(job / "out.ipynb"))
    if cgroup is not None:
        _ended(getattr(km, "sandbox_init", None))
        cgroup.remove()
    return outcome, getattr(km, "sandbox_init", None)


def _ended(init: int | None, wait: float = 10.0) -> bool:
    """Whether the sandbox whose init is ``init`` has ended (waiting up to ``wait`` s)."""
    deadline = time.monotonic() + wait
    while init is not None and processes.alive(init):
        if time.monotonic() > deadline:
            return False
        processes.reap()
        time.sleep(0.02)
    return True


def run_one(job: Path) -> None:
    """Run one job, check that nothing of it is left running, write its ``result.json``.

    Sandboxed, the job's PID namespace must end with its kernel; if it outlives it, the
    sandbox does not hold and the outcome says ``sandbox failed``. Unsandboxed, the kernel's
    leftover processes are killed (after 2 s of grace) and counted. One line for the
    worker's log goes to stderr.

    Args:
        job: the job folder (module docstring).
    """
    spec = JobSpec.load(job)
    if not spec.sandbox:
        processes.kill_leftovers()  # a grader killed mid-run may have left some
    outcome, init = run_job(job)
    if not spec.sandbox:
        outcome.leftovers = processes.kill_leftovers(grace=2.0) or outcome.leftovers
    elif not _ended(init):  # the namespace outlived its kernel: the sandbox does not hold
        processes.kill([init] if init else [])
        outcome = Outcome(status="sandbox failed", reason="the sandbox outlived its kernel")
    processes.reap()
    outcome.grader_rss = _peak_rss()
    outcome.save(job)
    print(f"{job.name}: {_summary(outcome)}", file=sys.stderr, flush=True)


def _peak_rss() -> int:
    """This worker's peak resident memory since it started (``VmHWM``; ``ru_maxrss`` would
    count the grader's pages from before the worker's ``exec``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _summary(outcome: Outcome) -> str:
    """One line for the worker's log: what the job cost."""
    return (
        f"{outcome.status}, {outcome.seconds:.1f} s, {outcome.cpu_seconds:.1f} s of CPU, "
        f"memory {outcome.memory or 'unwatched'} peak {outcome.memory_peak / 2**20:.0f} MiB "
        f"(over its limit {outcome.memory_over} sample(s) in a row), "
        f"worker peak RSS {outcome.grader_rss / 2**20:.0f} MiB"
    )


def _end_with_parent() -> None:
    """Kill this worker as soon as the process that started it is gone (a grader or a Dask
    worker killed mid-job): its bwrap dies with it (``--die-with-parent``), and so its sandbox,
    instead of running the notebook on for nobody. Polled: a parent-death signal would follow
    the thread that started the worker, which a thread pool may end. The parent is the one
    named in ``SHAPES_PARENT_PID`` where the starter set it: a parent killed while this worker
    was still importing (seconds on a loaded machine) is then noticed too."""
    parent = int(os.environ.get("SHAPES_PARENT_PID") or os.getppid())

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


def serve() -> None:
    """Run the jobs whose folders arrive on stdin, one a line; answer each with a line."""
    _end_with_parent()
    for line in sys.stdin:
        job = Path(line.strip())
        try:
            run_one(job)
            print(f"done {job}", flush=True)
        except Exception as err:  # noqa: BLE001 (the grader reads the job's result or this)
            print(f"failed {job} {type(err).__name__}: {err}".replace("\n", " "), flush=True)


def main(argv: list[str] | None = None) -> int:
    """``--serve``: jobs from stdin (the grader's workers); ``JOB_DIR``: one job.

    The worker first becomes a child subreaper, so orphans of an unsandboxed kernel (and of
    a killed bwrap) are reparented to it and can be found and reaped.

    Args:
        argv: the arguments after the program name; ``sys.argv[1:]`` when ``None``.

    Returns:
        0: a job's own failure is in its ``result.json``, not in the exit status.
    """
    args = argv if argv is not None else sys.argv[1:]
    become_subreaper()  # orphans of unsandboxed kernels, and of a killed bwrap, come here
    if args == ["--serve"]:
        serve()
    else:
        run_one(Path(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
