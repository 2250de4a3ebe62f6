"""Graded functions, re-created from the submitted file's source and called in a fresh sandbox.

A graded function is never taken from the student's kernel. Its answer cell's source, as stored
in the submitted file, goes to a fresh process that runs ``sandbox/inside/runner.py`` inside a
sandbox of its own (``sandbox.command_argv``): read-only system and venv, no network, a private
``/tmp``, its own PID namespace, memory, process and CPU-time limits, a cleared environment.
``course_lib`` and ``course_grading`` cannot be imported there (Python starts without ``site``,
so no editable-install hook runs, and an installed copy in the venv is covered); only the
``course_lib`` modules an item allows are staged, as a minimal package holding those modules and
the ``course_lib`` modules they import, and a closure that reaches a forbidden module is
refused. The runner calls the function on the checker's inputs, one call at a time over the
framed protocol whose judge's side is ``protocol.py`` (``fits`` and the optimiser stay here as
proxies, ``proxies.py``), each call limited from the solution's own slowest call
(:func:`call_limit`); its results are decoded and re-validated there (``plain.decode``), and the
comparison happens in the grader's process (``items``).
"""

from __future__ import annotations

import ast
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.judge.protocol import CallLimit, Session, Stopped, define, serve
from course_grading.sandbox import bwrap as sandbox

RUNNER_DIR = Path(__file__).resolve().parents[1] / "sandbox" / "inside"
INSIDE = "/run/shapes"  # where the runner and the staged package are, inside the sandbox


@dataclass(frozen=True)
class FunctionSandbox:
    """How graded functions run: sandboxed (``bwrap``) or not (``--no-sandbox``), and limits."""

    bwrap: str | None = None  # None: no sandbox (``--no-sandbox``; unsafe)
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)
    cpu_seconds: int = 60  # CPU time of one run (the cell and every call of one item)
    wall_seconds: int = 180  # a generous backstop for one run
    uid: int | None = None  # a root grader's uid for these sandboxes
    call_floor: float = 2.0  # CPU seconds any call may take, however fast the solution is
    call_factor: float = 20.0  # a call may take this many times the solution's slowest call
    call_cap: float = 20.0  # CPU seconds of a call where the solution was not measured
    call_wall_factor: float = 3.0  # wall-clock seconds: this times the CPU limit, plus 1 s
    #: (lesson, grade_id) -> CPU seconds of the solution's slowest call, measured in this run
    solution_cpu: Mapping[tuple[str, str], float] = field(default_factory=dict)

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


# --- staging course_lib modules ---------------------------------------------------------------


def _module_file(name: str, root: Path) -> Path | None:
    parts = name.split(".")
    base = root.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """``course_lib`` modules that ``module``'s code imports (absolute or relative)."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "course_lib"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "course_lib":
                continue
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}  # a submodule, if it is one
    return found


def closure(modules: tuple[str, ...], root: Path | None = None) -> list[str]:
    """``modules`` and every ``course_lib`` module they import, transitively.

    Args:
        modules: dotted ``course_lib`` module names (an item's ``allowed``).
        root: the ``course_lib`` package folder read; ``None``: the installed one.

    Returns:
        The module names, sorted, with every package on the way (``course_lib.hf`` for
        ``course_lib.hf.arch``).

    Raises:
        GradingError: one of ``modules`` has no file under ``root``.
    """
    root = root or _course_lib_root()
    seen: set[str] = set()
    pending = list(modules)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        path = _module_file(name, root)
        if path is None:
            if name in modules:
                raise GradingError(f"no module {name} in {root}: fix the item's allowed list")
            continue  # ``from course_lib.x import name``: a name, not a module
        seen.add(name)
        parents = name.split(".")
        pending += [".".join(parents[:i]) for i in range(2, len(parents))]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        pending += sorted(_imported(tree, name, path.name == "__init__.py"))
    return sorted(seen)


def _course_lib_root() -> Path:
    import course_lib

    return Path(course_lib.__file__).resolve().parent


def stage(allowed: tuple[str, ...], forbidden: tuple[str, ...], dest: Path) -> list[str]:
    """Copy the closure of ``allowed`` into ``dest/course_lib`` as a minimal package.

    Every package on the way gets an empty ``__init__.py`` (the real one may import more).

    Args:
        allowed: the ``course_lib`` modules the item allows.
        forbidden: modules (and their submodules) the closure must not reach.
        dest: the folder that becomes the sandbox's ``stage`` (``course_lib/`` is made in it).

    Returns:
        The staged module names (:func:`closure`); empty when nothing is allowed.

    Raises:
        GradingError: the closure reaches a module in ``forbidden``, or an allowed module does
            not exist.
    """
    if not allowed:
        return []
    modules = closure(allowed)
    bad = [m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden)]
    if bad:
        raise GradingError(
            f"the course_lib modules allowed for this item ({', '.join(allowed)}) import "
            f"{', '.join(bad)}, which the item forbids: change the item's allowed list or the "
            "library's imports"
        )
    root = _course_lib_root()
    for name in ["course_lib", *modules]:
        parts = name.split(".")
        source = _module_file(name, root)
        if source is not None and source.name != "__init__.py":
            target = dest.joinpath(*parts[:-1], f"{parts[-1]}.py")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        folder = dest.joinpath(*parts) if source is None or source.name == "__init__.py" else None
        for depth in range(1, len(parts) + (1 if folder else 0)):
            init = dest.joinpath(*parts[:depth], "__init__.py")
            init.parent.mkdir(parents=True, exist_ok=True)
            init.touch()
    return modules


# --- running ---------------------------------------------------------------------------------


def _argv(settings: FunctionSandbox, folder: Path) -> list[str]:
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
    return sandbox.command_argv(
        bwrap=settings.bwrap,
        argv=[*python, f"{INSIDE}/runner.py"],
        binds=[(folder, INSIDE)],
        limits=settings.limits,
        cpu_seconds=settings.cpu_seconds,
        uid=settings.uid,
        env=env,
    )


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
    measured = settings.solution_cpu.get(key) if key else None
    if measured is None:
        cpu = settings.call_cap
        why = f"at most {cpu:g} s a call"
    else:
        cpu = max(settings.call_floor, settings.call_factor * measured)
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
) -> Ran:
    """Define ``function`` from ``source`` in a fresh sandbox and make the calls one at a time.

    Never raises for the student's sake: a cell that cannot be defined is a ``Ran`` with a
    ``failure``; a call that is stopped is ``{"stopped": why, "kind": ...}`` in its place, and
    the calls after it are not made.

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

    Returns:
        The run's answer (``{"defined", "error", "calls"}``, each call's result decoded), or why
        there is none.

    Raises:
        GradingError: the grader cannot run functions here at all (the sandbox does not start,
            or the item's staging is wrong).
    """
    limit = call_limit(settings, key)
    define_limit = CallLimit(settings.call_cap, settings.call_wall_factor * settings.call_cap + 1,
                             f"at most {settings.call_cap:g} s to run the cell")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="shapes-function-") as tmp:
        folder = Path(tmp) / "run"
        folder.mkdir()
        for name in ("runner.py", "encode.py"):
            shutil.copyfile(RUNNER_DIR / name, folder / name)
        staged = stage(allowed, forbidden, folder / "pkg") if allowed else []
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)  # a dropped uid reads them
        os.chmod(tmp, 0o755)
        inside = INSIDE if settings.bwrap else str(folder)
        request = {
            "source": source,
            "function": function,
            "site": sysconfig.get_paths()["purelib"],
            "stage": f"{inside}/pkg" if staged else None,
            "threads": max(1, settings.limits.threads),
        }
        env = {} if settings.bwrap else {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        session = Session(_argv(settings, folder), env, settings.cpu_seconds)
        return _calls(session, request, calls, limit, define_limit)


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
