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
import secrets
import select
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.judge import plain
from course_grading.sandbox import bwrap as sandbox
from course_grading.sandbox import processes

RUNNER_DIR = Path(__file__).resolve().parents[1] / "sandbox" / "inside"
INSIDE = "/run/shapes"  # where the runner and the staged package are, inside the sandbox
ANSWER_BYTES = plain.MAX_BYTES
STDERR_TAIL = 4000


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


# --- running ---------------------------------------------------------------------------------


def _drain(stream, keep: bytearray, limit: int) -> None:
    """Read ``stream`` to its end, keeping its last ``limit`` bytes in ``keep``."""
    for chunk in iter(lambda: stream.read(65536), b""):
        keep += chunk
        del keep[:-limit]


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


# --- the judge's side of a call ------------------------------------------------------------------

HEADER = struct.Struct(">I")
POLL = 0.05  # seconds between looks at a running call's CPU time
ASKS_PER_CALL = 10_000  # questions one call may put to its proxies
BYTES_PER_CALL = 4 * ANSWER_BYTES  # everything one call may send the judge


@dataclass(frozen=True)
class CallLimit:
    """What one call may take: CPU seconds, wall-clock seconds, and why (for the row)."""

    cpu: float
    wall: float
    why: str


class Stopped(Exception):
    """A call (or the cell's definition) was stopped; ``kind`` names why, the message says it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Predicate:
    """``fits(n)``, judged here: the limit and every probe stay in the judge's process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.probes: list = []

    def ask(self, method: str, args: list) -> object:
        if method != "call" or len(args) != 1:
            raise TypeError("fits() takes exactly one argument, a number")
        n = args[0]
        if type(n) in (int, float):
            self.probes.append(n)
        else:
            self.probes.append(plain.describe(n, 40))
        if type(n) not in (int, float, bool, Fraction, Decimal):
            raise TypeError(f"fits() takes a number, not {type(n).__name__}")
        return 1 <= n <= self.limit


class _Recorder:
    """The optimiser stand-in, judged here: it keeps every step's gradient and counts."""

    def __init__(self) -> None:
        self.steps: list = []
        self.zero_grads = 0

    def ask(self, method: str, args: list) -> object:
        if method == "zero_grad" and not args:
            self.zero_grads += 1
            return None
        if method == "step" and len(args) == 1 and isinstance(args[0], plain.Tensor):
            self.steps.append(args[0])
            return None
        raise TypeError(f"the optimiser has no {method}() taking these arguments")


def _judge_side(call: dict, proxies: dict[int, object]) -> dict:
    """``call`` as the runner gets it: every predicate and recorder replaced by a proxy whose
    state stays in ``proxies`` (id -> the judge's object)."""
    args = []
    for spec in call.get("args", []):
        if isinstance(spec, dict) and "predicate" in spec:
            proxies[len(args)] = _Predicate(spec["predicate"]["limit"])
            spec = {"proxy": {"kind": "predicate", "id": len(args)}}
        elif isinstance(spec, dict) and "recorder" in spec:
            proxies[len(args)] = _Recorder()
            of = spec["recorder"]["params_of"]
            spec = {"proxy": {"kind": "recorder", "id": len(args), "params_of": of}}
        args.append(spec)
    return dict(call, op="call", args=args)


def _collected(what: dict, sent: object, proxies: dict[int, object]) -> object:
    """One ``after`` entry: the judge's own record for a proxy, the runner's for a gradient."""
    ((kind, index),) = what.items()
    proxy = proxies.get(index)
    if kind == "probes" and isinstance(proxy, _Predicate):
        return list(proxy.probes)
    if kind == "steps" and isinstance(proxy, _Recorder):
        return list(proxy.steps)
    if kind == "grads":
        try:
            return plain.decode(sent, tensors=True)
        except plain.NotPlain as err:
            return err
    raise GradingError(f"the check collects {what!r}, which its call does not have")


class _Session:
    """One runner process and the framed pipe to it; every read bounded and timed."""

    def __init__(self, argv: list[str], settings: FunctionSandbox) -> None:
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd="/",
                env={} if settings.bwrap else {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            )
        except OSError as err:
            raise GradingError(f"cannot start the function sandbox: {err}") from None
        self.errors = bytearray()
        self._drain = threading.Thread(
            target=_drain, args=(self.proc.stderr, self.errors, STDERR_TAIL), daemon=True
        )
        self._drain.start()
        self.out = self.proc.stdout.fileno()
        self.buffer = bytearray()
        self.received = 0  # bytes of every frame read so far
        self.settings = settings

    def pending(self) -> bool:
        """Whether the runner wrote anything nobody asked for yet."""
        if self.buffer:
            return True
        ready, _, _ = select.select([self.out], [], [], 0)
        return bool(ready) and self._peek()

    def _peek(self) -> bool:
        chunk = os.read(self.out, 65536)
        self.buffer += chunk
        return bool(chunk)

    def send(self, message: dict) -> None:
        data = json.dumps(message).encode()
        try:
            self.proc.stdin.write(HEADER.pack(len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._ended() from None

    def _ended(self) -> Stopped:
        status = self.proc.wait()
        text = bytes(self.errors).decode("utf-8", "replace")
        if "MemoryError" in text:
            return Stopped("memory", "it ran out of memory")
        if status in (-9, 137, -24, 152) or "CPU time limit" in text:
            return Stopped(
                "time",
                f"its process reached its CPU-time limit ({self.settings.cpu_seconds} s for "
                "the cell and every call together) and was stopped",
            )
        return Stopped("exit", f"its process ended during the call (exit status {status})")

    def cpu(self) -> float:
        return processes.usage(self.proc.pid).cpu

    def receive(self, nonce: str, limit: CallLimit, cpu0: float, started: float) -> dict:
        """The runner's next frame as JSON data, once it is whole; :class:`Stopped` when the
        call reaches ``limit``, the process ends, or the frame is too large or not an answer to
        the message ``nonce``."""
        while True:
            if len(self.buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(self.buffer)
                if size > ANSWER_BYTES:
                    raise Stopped(
                        "size", f"it sent the grader more than {ANSWER_BYTES // 2**20} MiB at once"
                    )
                if len(self.buffer) >= HEADER.size + size:
                    frame = bytes(self.buffer[HEADER.size : HEADER.size + size])
                    del self.buffer[: HEADER.size + size]
                    self.received += size
                    return self._message(frame, nonce)
            if time.monotonic() - started > limit.wall:
                raise Stopped(
                    "wall", f"it took more than {limit.wall:g} s of wall-clock time ({limit.why})"
                )
            if self.cpu() - cpu0 > limit.cpu:
                raise Stopped("cpu", f"it used more than {limit.cpu:g} s of CPU time ({limit.why})")
            ready, _, _ = select.select([self.out], [], [], POLL)
            if ready and not self._peek():
                raise self._ended()

    @staticmethod
    def _message(frame: bytes, nonce: str) -> dict:
        try:
            message = plain.parse(frame)
        except plain.NotPlain as err:
            raise Stopped(
                "forged", f"it sent the grader something that is not an answer ({err})"
            ) from None
        if not isinstance(message, dict) or message.get("nonce") != nonce:
            raise Stopped("forged", "it sent the grader a message that answers no question asked")
        return message

    def close(self) -> bool:
        """End the runner; whether it wrote anything after its last answer."""
        extra = bool(self.buffer)
        try:
            self.send({"op": "end"})
            self.proc.stdin.close()
        except (Stopped, OSError):
            pass
        deadline = time.monotonic() + 2.0
        while self.proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([self.out], [], [], POLL)
            if ready:
                extra = self._peek() or extra
        if self.proc.poll() is None:
            self.kill()
        self.proc.wait()
        extra = extra or bool(self.proc.stdout.read(1))
        self._drain.join(timeout=5)
        return extra

    def kill(self) -> None:
        processes.kill(processes.tree(self.proc.pid))
        self.proc.kill()


def _nonce() -> str:
    return secrets.token_hex(12)


def _define(session: _Session, request: dict, limit: CallLimit) -> dict:
    nonce = _nonce()
    started, cpu0 = time.monotonic(), 0.0
    session.send(dict(request, op="define", nonce=nonce))
    reply = session.receive(nonce, limit, cpu0, started)
    if reply.get("op") != "defined":
        raise Stopped("forged", "it sent the grader a message that answers no question asked")
    error = reply.get("error")
    return {
        "defined": reply.get("defined") is True,
        "error": _exception(error) if isinstance(error, dict) else None,
    }


def _serve(session: _Session, call: dict, limit: CallLimit) -> dict:
    """Make one call: answer its proxies' questions until its result comes; the result decoded."""
    proxies: dict[int, object] = {}
    wire = _judge_side(call, proxies)
    nonce = _nonce()
    if session.pending():
        raise Stopped("extra", "it wrote to the grader's channel before it was asked")
    started, cpu0, before = time.monotonic(), session.cpu(), session.received
    session.send(dict(wire, nonce=nonce))
    for _ in range(ASKS_PER_CALL + 1):
        message = session.receive(nonce, limit, cpu0, started)
        if session.received - before > BYTES_PER_CALL:
            raise Stopped("size", f"it sent more than {BYTES_PER_CALL // 2**20} MiB in one call")
        if message.get("op") == "result":
            out = _result(message, call, proxies)
            out["cpu"] = max(0.0, session.cpu() - cpu0)
            out["wall"] = time.monotonic() - started
            return out
        if message.get("op") != "ask":
            raise Stopped("forged", "it sent the grader a message that answers no question asked")
        session.send(_answer(message, proxies, nonce))
    raise Stopped("size", f"it asked its proxies more than {ASKS_PER_CALL:,} questions in one call")


def _answer(message: dict, proxies: dict[int, object], nonce: str) -> dict:
    """The judge's answer to a proxy question (a refusal raises ``TypeError`` in the call)."""
    proxy = proxies.get(message.get("proxy")) if type(message.get("proxy")) is int else None
    try:
        if proxy is None or not isinstance(message.get("method"), str):
            raise TypeError("no such object")
        args = message.get("args")
        if not isinstance(args, list):
            raise TypeError("malformed arguments")
        decoded = [plain.decode(a, tensors=True) for a in args]
        value = proxy.ask(message["method"], decoded)  # type: ignore[attr-defined]
    except (TypeError, plain.NotPlain) as err:
        return {"op": "refuse", "nonce": nonce, "message": str(err)[:200]}
    return {"op": "answer", "nonce": nonce, "value": value}


def _result(message: dict, call: dict, proxies: dict[int, object]) -> dict:
    after = message.get("after") if isinstance(message.get("after"), list) else []
    out: dict = {}
    if "returned" in message:
        try:
            out["returned"] = plain.decode(message["returned"], tensors=True)
        except plain.NotPlain as err:
            out["not_plain"] = str(err)
        wanted = call.get("after", [])
        sent = after + [None] * (len(wanted) - len(after))
        out["after"] = [_collected(w, s, proxies) for w, s in zip(wanted, sent)]
    elif isinstance(message.get("raised"), dict):
        out["raised"] = _exception(message["raised"])
        out["after"] = []
    else:
        raise Stopped("forged", "it sent the grader a result with neither a value nor an error")
    return out


def call_limit(settings: FunctionSandbox, key: tuple[str, str] | None) -> CallLimit:
    """The limit of each call of item ``key`` (``(lesson, grade_id)``): from the solution's own
    slowest call where it was measured in this run, else the settings' cap."""
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

    ``calls`` are in the request form of ``sandbox/inside/runner.py`` (``predicate`` and
    ``recorder`` inputs become proxies answered here). ``key``, the item's ``(lesson,
    grade_id)``, picks each call's limit (:func:`call_limit`). Never raises for the student's
    sake: a cell that cannot be defined is a ``Ran`` with a ``failure``; a call that is stopped
    is ``{"stopped": why, "kind": ...}`` in its place, and the calls after it are not made. A
    ``GradingError`` means the grader cannot run functions here at all.
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
        session = _Session(_argv(settings, folder), settings)
        return _calls(session, request, calls, limit, define_limit)


def _calls(
    session: _Session, request: dict, calls: list[dict], limit: CallLimit, define: CallLimit
) -> Ran:
    try:
        try:
            answer: dict = dict(_define(session, request, define), calls=[])
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
                answer["calls"].append(_serve(session, call, limit))
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
