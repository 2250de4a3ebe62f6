"""Graded functions, re-created from the submitted file's source and called in a fresh sandbox.

A graded function is never taken from the student's kernel. Its answer cell's source, as stored
in the submitted file, goes to a fresh process that runs ``sandbox/inside/runner.py`` inside a
sandbox of its own (``sandbox.command_argv``): read-only system and venv, no network, a private
``/tmp``, its own PID namespace, memory, process and CPU-time limits, a cleared environment.
``course_lib`` and ``course_grading`` cannot be imported there (Python starts without ``site``,
so no editable-install hook runs, and an installed copy in the venv is covered); only the
``course_lib`` modules an item allows are staged, as a minimal package holding those modules and
the ``course_lib`` modules they import, and a closure that reaches a forbidden module is
refused (``staging.py``). The runner calls the function on the checker's inputs, one call at a
time over the framed protocol whose judge's side is ``protocol.py`` (``fits`` and the optimiser
stay here as proxies, ``proxies.py``), each call limited from the solution's own slowest call
(:func:`call_limit`); its results are decoded and re-validated there (``plain.decode``), and the
comparison happens in the grader's process (``items``).

The sandbox's envelope is the kernel's: a cgroup of its own where the host gives one
(``sandbox/cgroup.py``: memory, tmpfs pages included, and processes), else the session watches
its resident and tmpfs memory itself; a uid of its own while it runs (two slots' functions never
share a process count); the seccomp allow-list. Its time is held three ways at once: each call
(:func:`call_limit`), every run of one item together (:func:`item_budget`) and every item of one
submission together (:func:`submission_budget`), each budget from the solution's own time in this
run, so no pattern of calls under the per-call limit holds a slot longer than the item's budget.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.judge.protocol import CallLimit, Session, Stopped, define, serve
from course_grading.judge.staging import stage
from course_grading.sandbox import bwrap as sandbox
from course_grading.sandbox.cgroup import Cgroup

RUNNER_DIR = Path(__file__).resolve().parents[1] / "sandbox" / "inside"
INSIDE = "/run/shapes"  # where the runner and the staged package are, inside the sandbox


@dataclass
class TimeBudget:
    """Wall-clock seconds that several runs share: every call of one item, or every item of one
    submission (:func:`run` charges each run's time to each budget it was given)."""

    seconds: float
    why: str  # what it is, in the words of a reason ("the item's time budget (30 s)")
    spent: float = 0.0  # seconds its runs took so far

    def left(self) -> float:
        """Seconds still to spend.

        Returns:
            ``seconds - spent``; 0 or less once the budget is used up.
        """
        return self.seconds - self.spent


@dataclass(frozen=True)
class FunctionSandbox:
    """How graded functions run: sandboxed (``bwrap``) or not (``--no-sandbox``), and limits."""

    bwrap: str | None = None  # None: no sandbox (``--no-sandbox``; unsafe)
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)
    cpu_seconds: int = 60  # CPU time of one run (the cell and every call of one item)
    uid: int | None = None  # the first of the uids these sandboxes take (``_envelope``)
    call_floor: float = 2.0  # CPU seconds any call may take, however fast the solution is
    call_factor: float = 20.0  # a call may take this many times the solution's slowest call
    call_cap: float = 20.0  # CPU seconds of a call where the solution was not measured
    call_wall_factor: float = 3.0  # wall-clock seconds: this times the CPU limit, plus 1 s
    budget_factor: float = 5.0  # an item's (a submission's) runs: this times the solution's
    item_floor: float = 30.0  # wall-clock seconds every run of one item may take, at least
    submission_floor: float = 60.0  # ...every function item of one submission, at least
    budget_cap: float = 300.0  # an item's budget where the solution was not measured
    #: (lesson, grade_id) -> (CPU seconds of the solution's slowest call, wall-clock seconds of
    #: every run of the item), measured in this run (a bare number: the CPU seconds alone)
    solution_cpu: Mapping[tuple[str, str], float | Sequence[float]] = field(default_factory=dict)

    @classmethod
    def default(
        cls, *, sandboxed: bool = True, limits: sandbox.Limits | None = None
    ) -> FunctionSandbox:
        """Sandboxed with bubblewrap and checked once, or unsandboxed.

        Args:
            sandboxed: run graded functions in bubblewrap (False: ``--no-sandbox``, unsafe).
            limits: the sandbox's limits; ``None``: ``bwrap.Limits()``'s defaults.

        Returns:
            The settings, sandboxed ones run as the last worker slot's uid and already checked
            (:meth:`check`).

        Raises:
            GradingError: bubblewrap is not available, or a one-line function cannot run in it.
        """
        limits = limits or sandbox.Limits()
        if not sandboxed:
            return cls(None, limits)
        uid = sandbox.sandbox_uid(sandbox.MAX_SLOTS - 1)
        settings = cls(sandbox.check_available(), limits, uid=uid)
        settings.check()
        return settings

    def check(self) -> None:
        """Run a one-line function here, before any student's code runs.

        Checked first, so that nothing a student's code prints can pass for a broken sandbox later.

        Raises:
            GradingError: the function did not return 1; the message says why.
        """
        ran = run("def one():\n    return 1\n", "one", [{}], settings=self)
        calls = (ran.answer or {}).get("calls") or [{}]
        if calls[0].get("returned") != 1:
            why = ran.failure or f"it answered {ran.answer!r}"
            raise GradingError(
                f"graded functions cannot run in a sandbox here ({why}); check bubblewrap and "
                "the grader's account, or pass --no-sandbox knowingly"
            )


@dataclass
class Ran:
    """What one run of the runner gave: its answer (decoded), or why there is none."""

    answer: dict | None  # {"defined", "error", "calls"} with every returned value decoded
    failure: str = ""  # why there is no answer (time, crash, output), in a student's words
    seconds: float = 0.0  # wall-clock time of the run, sandbox start to end
    budget: TimeBudget | None = None  # the budget that stopped it, if one did
    memory_kills: int = 0  # processes its cgroup killed at the memory limit (1: the watch stopped)


# --- running ---------------------------------------------------------------------------------


def _argv(
    settings: FunctionSandbox, folder: Path, uid: int | None, group: Cgroup | None
) -> list[str]:
    python = [sys.executable, "-I", "-S"]
    env = {
        "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": str(max(1, settings.limits.threads)),
        "MKL_NUM_THREADS": str(max(1, settings.limits.threads)),
        "MPLCONFIGDIR": "/tmp/matplotlib",
    }
    if settings.bwrap is None:
        return [*python, str(folder / "runner.py")]
    argv = sandbox.command_argv(
        bwrap=settings.bwrap,
        argv=[*python, f"{INSIDE}/runner.py"],
        binds=[(folder, INSIDE)],
        limits=settings.limits,
        cpu_seconds=settings.cpu_seconds,
        uid=uid,
        env=env,
    )
    return sandbox.join(argv, group.procs if group else [])


_RUNS = itertools.count()
_TAKEN: set[int] = set()  # offsets from FunctionSandbox.uid of the sandboxes running now
_TAKING = threading.Lock()


@contextmanager
def _envelope(settings: FunctionSandbox) -> Iterator[tuple[int | None, Cgroup | None]]:
    """A uid no other running function sandbox has (``settings.uid`` and below, within the
    upper half of the slots' uids), and a cgroup where the host gives one; both freed after."""
    if settings.bwrap is None:
        yield None, None
        return
    with _TAKING:
        offset = next(n for n in itertools.count() if n not in _TAKEN)
        if offset >= sandbox.MAX_SLOTS // 2:
            raise GradingError("more graded functions at once than sandbox uids; use fewer --jobs")
        _TAKEN.add(offset)
    limits = settings.limits
    name = f"shapes-{os.getpid()}-f{next(_RUNS)}"
    group = Cgroup.make(name, limits.memory_bytes, limits.processes)
    try:
        yield (None if settings.uid is None else settings.uid - offset), group
    finally:
        if group is not None:
            group.remove()
        with _TAKING:
            _TAKEN.discard(offset)


def _measured(settings: FunctionSandbox, key: tuple[str, str] | None) -> tuple[float, float] | None:
    """The solution's (slowest call's CPU seconds, every run's wall seconds) for ``key``."""
    found = settings.solution_cpu.get(key) if key else None
    if found is None:
        return None
    if isinstance(found, (int, float)):
        return float(found), math.nan
    return float(found[0]), float(found[1])


def _rounded_up(seconds: float) -> float:
    return float(5 * math.ceil(seconds / 5))


def item_budget(settings: FunctionSandbox, key: tuple[str, str] | None) -> TimeBudget:
    """What every run of one item's function may take together (wall-clock seconds).

    Args:
        settings: the run's function settings (factor, floor, cap, the solutions' times).
        key: the item's ``(lesson, grade_id)``; ``None``: not an item of this run.

    Returns:
        ``budget_factor`` times the solution's runs of the item in this run, at least
        ``item_floor``, rounded up to 5 s (so a budget reads the same from run to run); the
        fixed ``budget_cap`` where the solution was not measured.
    """
    measured = _measured(settings, key)
    if measured is None or math.isnan(measured[1]):
        seconds = settings.budget_cap
    else:
        seconds = _rounded_up(max(settings.item_floor, settings.budget_factor * measured[1]))
    return TimeBudget(seconds, f"the item's time budget ({seconds:g} s)")


def submission_budget(settings: FunctionSandbox, lesson: str) -> TimeBudget:
    """What every graded function of one submission of ``lesson`` may take together.

    Args:
        settings: the run's function settings.
        lesson: the lesson's folder name.

    Returns:
        ``budget_factor`` times the solution's runs of all the lesson's function items in this
        run, at least ``submission_floor``, rounded up to 5 s; where one of them was not
        measured (or none), the fixed ``budget_cap``, at least ``submission_floor``.
    """
    times = [_measured(settings, key) for key in settings.solution_cpu if key[0] == lesson]
    spent = sum(t[1] for t in times if t is not None)
    if not times or math.isnan(spent):
        seconds = max(settings.submission_floor, settings.budget_cap)
    else:
        seconds = _rounded_up(max(settings.submission_floor, settings.budget_factor * spent))
    return TimeBudget(seconds, f"the submission's time budget for graded functions ({seconds:g} s)")


def call_limit(settings: FunctionSandbox, key: tuple[str, str] | None) -> CallLimit:
    """The limit of each call of one item.

    Args:
        settings: the run's function settings (its factors, floor, cap and the solutions'
            measured calls).
        key: the item's ``(lesson, grade_id)``; ``None``: not an item of this run.

    Returns:
        CPU seconds: ``call_factor`` times the solution's slowest call measured in this run, at
        least ``call_floor``, or ``call_cap`` where it was not measured; wall-clock seconds:
        ``call_wall_factor`` times that plus 1 s; and the reason in words, for the row.
    """
    measured = _measured(settings, key)
    if measured is None:
        cpu = settings.call_cap
        why = f"at most {cpu:g} s a call"
    else:
        cpu = max(settings.call_floor, settings.call_factor * measured[0])
        why = (
            f"{settings.call_factor:g} times the solution's slowest call, at least "
            f"{settings.call_floor:g} s"
        )
    return CallLimit(cpu, settings.call_wall_factor * cpu + 1.0, why)


def run(
    source: str,
    function: str,
    calls: list[dict],
    *,
    allowed: tuple[str, ...] = (),
    forbidden: tuple[str, ...] = (),
    settings: FunctionSandbox,
    key: tuple[str, str] | None = None,
    budgets: Sequence[TimeBudget] = (),
) -> Ran:
    """Define ``function`` from ``source`` in a fresh sandbox and make the calls one at a time.

    Never raises for the student's sake: a cell that cannot be defined is a ``Ran`` with a
    ``failure``; a call that is stopped is ``{"stopped": why, "kind": ...}`` in its place, and
    the calls after it are not made. The run's wall-clock time, sandbox start to end, is
    charged to every budget in ``budgets``; it stops when the first of them runs out, and a
    budget already spent keeps it from starting.

    Args:
        source: the answer cell's source, as Python.
        function: the name the cell must define.
        calls: the calls in the request form of ``sandbox/inside/runner.py`` (``predicate`` and
            ``recorder`` inputs become proxies answered here).
        allowed: the ``course_lib`` modules staged for it (:func:`stage`).
        forbidden: modules the staging must never include.
        settings: sandboxed or not, and the limits.
        key: the item's ``(lesson, grade_id)``, which picks each call's limit
            (:func:`call_limit`).
        budgets: the time budgets the run shares (:func:`item_budget`,
            :func:`submission_budget`); none: only the per-call limits hold it.

    Returns:
        The run's answer (``{"defined", "error", "calls"}``, each call's result decoded), or why
        there is none; its time, the budget that stopped it and the processes its cgroup
        killed at the memory limit.

    Raises:
        GradingError: the grader cannot run functions here at all (the sandbox does not start,
            or the item's staging is wrong).
    """
    limit = call_limit(settings, key)
    define_limit = CallLimit(settings.call_cap, settings.call_wall_factor * settings.call_cap + 1,
                             f"at most {settings.call_cap:g} s to run the cell")  # fmt: skip
    first = min(budgets, key=TimeBudget.left, default=None)
    if first is not None and first.left() <= 0:
        return Ran(None, f"not run: {first.why} was used up before this item", budget=first)
    with tempfile.TemporaryDirectory(prefix="shapes-function-") as tmp:
        folder = Path(tmp) / "run"
        folder.mkdir()
        for name in ("runner.py", "encode.py"):
            shutil.copyfile(RUNNER_DIR / name, folder / name)
        staged = stage(allowed, forbidden, folder / "pkg") if allowed else []
        for path in [Path(tmp), folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)  # a dropped uid reads them
        inside = INSIDE if settings.bwrap else str(folder)
        request = {
            "source": source,
            "function": function,
            "site": sysconfig.get_paths()["purelib"],
            "stage": f"{inside}/pkg" if staged else None,
            "threads": max(1, settings.limits.threads),
        }
        env = {} if settings.bwrap else {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        started = time.monotonic()
        deadline = (started + first.left(), first.why) if first is not None else None
        with _envelope(settings) as (uid, group):
            watched = settings.limits.memory_bytes if settings.bwrap and group is None else None
            session = Session(_argv(settings, folder, uid, group), env, settings.cpu_seconds,
                              memory=(group, watched), deadline=deadline)  # fmt: skip
            try:
                ran = _calls(session, request, calls, limit, define_limit)
            finally:
                ran_for = time.monotonic() - started
                for budget in budgets:
                    budget.spent += ran_for
            kills = group.oom_kills() if group is not None else 0
            ran.memory_kills = kills or int(session.over_memory)
    ran.seconds, ran.budget = ran_for, first if session.out_of_time else None
    return ran


def _calls(
    session: Session, request: dict, calls: list[dict], limit: CallLimit, define_limit: CallLimit
) -> Ran:
    try:
        try:
            answer: dict = dict(define(session, request, define_limit), calls=[])
        except Stopped as stop:
            return Ran(None, f"running your answer cell: {stop}")
        if answer["error"] or not answer["defined"]:
            return Ran(answer)
        stopped = None
        for call in calls:
            if stopped is not None:
                answer["calls"].append(
                    {"stopped": f"not made: call {stopped + 1} was stopped", "kind": "skipped"}
                )
                continue
            started = time.monotonic()
            try:
                answer["calls"].append(serve(session, call, limit))
            except Stopped as stop:
                session.kill()  # now: its stopped call must not run on while the rest are noted
                stopped = len(answer["calls"])
                wall = time.monotonic() - started
                answer["calls"].append({"stopped": str(stop), "kind": stop.kind, "wall": wall})
        if stopped is None and session.close() and answer["calls"]:
            answer["calls"][-1] = {
                "stopped": "it wrote to the grader's channel after its last answer",
                "kind": "extra",
            }
        return Ran(answer)
    finally:
        if session.proc.poll() is None:
            session.kill()
        session.proc.wait()
