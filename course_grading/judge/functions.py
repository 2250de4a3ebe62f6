"""Graded functions, re-created from the submitted file's source and called in a fresh sandbox.

A graded function is never taken from the student's kernel. Its answer cell's source, as stored
in the submitted file, goes to a fresh process that runs ``sandbox/inside/runner.py`` inside a
sandbox of its own (``sandbox.command_argv``): read-only system and venv, no network, a private
``/tmp``, its own PID namespace, memory, process and CPU-time limits, a cleared environment.
``course_lib`` and ``course_grading`` cannot be imported there (Python starts without ``site``,
so no editable-install hook runs, and an installed copy in the venv is covered); only the
``course_lib`` modules an item allows are staged, as a minimal package holding those modules and
the ``course_lib`` modules they import, and a closure that reaches a forbidden module is
refused. The runner calls the function on the checker's inputs and writes the results as plain
data, which are decoded and re-validated here (``plain.decode``); the comparison happens in the
grader's process (``items``).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.judge import plain
from course_grading.sandbox import bwrap as sandbox

RUNNER_DIR = Path(__file__).resolve().parents[1] / "sandbox" / "inside"
INSIDE = "/run/shapes"  # where the runner and the staged package are, inside the sandbox
ANSWER_BYTES = plain.MAX_BYTES
STDERR_TAIL = 4000


@dataclass(frozen=True)
class FunctionSandbox:
    """How graded functions run: sandboxed (``bwrap``) or not (``--no-sandbox``), and limits."""

    bwrap: str | None = None  # None: no sandbox (``--no-sandbox``; unsafe)
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)
    cpu_seconds: int = 60  # CPU time of one run (every call of one item)
    wall_seconds: int = 180  # a generous backstop for one run
    uid: int | None = None  # a root grader's uid for these sandboxes

    @classmethod
    def default(cls, *, sandboxed: bool = True, limits: sandbox.Limits | None = None):
        """Sandboxed with bubblewrap, checked once: a ``GradingError`` where it cannot run."""
        limits = limits or sandbox.Limits()
        if not sandboxed:
            return cls(None, limits)
        uid = sandbox.sandbox_uid(sandbox.MAX_SLOTS - 1)
        settings = cls(sandbox.check_available(), limits, uid=uid)
        settings.check()
        return settings

    def check(self) -> None:
        """Run a one-line function here; a ``GradingError`` saying why if that fails.

        Checked before any student's code runs, so that nothing a student's code prints can
        pass for a broken sandbox later.
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
    """``modules`` and every ``course_lib`` module they import, transitively (sorted)."""
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
    Raises ``GradingError`` when the closure reaches a module in ``forbidden``.
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


# --- running ----------------------------------------------------------------------------------


def _drain(stream, keep: bytearray, limit: int) -> None:
    """Read ``stream`` to its end, keeping its last ``limit`` bytes in ``keep``."""
    for chunk in iter(lambda: stream.read(65536), b""):
        keep += chunk
        del keep[:-limit]


def _read_answer(proc: subprocess.Popen, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of ``proc``'s stdout; whether it wrote more (it is then killed)."""
    data = bytearray()
    for chunk in iter(lambda: proc.stdout.read(65536), b""):
        data += chunk
        if len(data) > limit:
            proc.kill()
            return bytes(data[:limit]), True
    return bytes(data), False


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


def run(
    source: str,
    function: str,
    calls: list[dict],
    *,
    allowed: tuple[str, ...] = (),
    forbidden: tuple[str, ...] = (),
    settings: FunctionSandbox,
) -> Ran:
    """Define ``function`` from ``source`` in a fresh sandbox and make every call in ``calls``.

    ``calls`` are in the runner's request form (``sandbox/inside/runner.py``). Never raises for the
    student's sake: a crash, a time-out or an answer that is not plain data is a ``Ran`` with a
    ``failure``; a ``GradingError`` means the grader cannot run functions here at all.
    """
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
            "calls": calls,
        }
        return _run(_argv(settings, folder), json.dumps(request).encode(), settings)


def _run(argv: list[str], request: bytes, settings: FunctionSandbox) -> Ran:
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            env={} if settings.bwrap else {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
    except OSError as err:
        raise GradingError(f"cannot start the function sandbox: {err}") from None
    errors = bytearray()
    drain = threading.Thread(target=_drain, args=(proc.stderr, errors, STDERR_TAIL))
    drain.start()
    timer = threading.Timer(settings.wall_seconds, proc.kill)
    timer.start()
    try:
        try:
            proc.stdin.write(request)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        data, cut = _read_answer(proc, ANSWER_BYTES)
        proc.wait()
    finally:
        timer.cancel()
        drain.join()
    if cut:
        return Ran(None, "it returned more data than the grader reads")
    if not data:
        return Ran(None, _why_no_answer(proc.returncode, bytes(errors), settings))
    try:
        answer = plain.parse(data)
        return Ran(_decoded(answer))
    except plain.NotPlain as err:
        return Ran(None, f"its results could not be read ({err})")


def _why_no_answer(status: int, errors: bytes, settings: FunctionSandbox) -> str:
    text = errors.decode("utf-8", "replace")
    if status in (-9, 137) or "CPU time limit" in text or status in (-24, 152):
        return (
            f"it ran out of time (at most {settings.cpu_seconds} s of CPU time for every "
            "call together) or was stopped"
        )
    if "MemoryError" in text:
        return "it ran out of memory"
    return f"the process ended without an answer (exit status {status})"


def _decoded(answer: object) -> dict:
    """The runner's answer with every returned and collected value decoded (plain data)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("calls"), list):
        raise plain.NotPlain("malformed answer")
    calls = []
    for call in answer["calls"]:
        if not isinstance(call, dict):
            raise plain.NotPlain("malformed answer")
        out: dict = {"after": []}
        if "returned" in call:
            try:
                out["returned"] = plain.decode(call["returned"], tensors=True)
            except plain.NotPlain as err:
                out["not_plain"] = str(err)
        elif isinstance(call.get("raised"), dict):
            out["raised"] = _exception(call["raised"])
        else:
            raise plain.NotPlain("malformed answer")
        for collected in call.get("after", []) if isinstance(call.get("after"), list) else []:
            try:
                out["after"].append(plain.decode(collected, tensors=True))
            except plain.NotPlain as err:
                out["after"].append(err)
        calls.append(out)
    error = answer.get("error")
    return {
        "defined": answer.get("defined") is True,
        "error": _exception(error) if isinstance(error, dict) else None,
        "calls": calls,
    }


def _exception(raw: dict) -> dict:
    def text(key: str, limit: int) -> str | None:
        value = raw.get(key)
        if not isinstance(value, str):
            return None
        return "".join(ch if ch.isprintable() else " " for ch in value)[:limit]

    return {
        "type": text("type", 80) or "Exception",
        "message": text("message", 300) or "",
        "name": text("name", 80),
        "stage": text("stage", 10) or "call",
    }
