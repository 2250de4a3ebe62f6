"""The judge's side of the call protocol: one runner process, one framed question at a time.

Every message either way is a length-prefixed JSON frame (``HEADER``, at most ``ANSWER_BYTES``)
carrying a fresh nonce. :func:`define` sends the answer cell and reads whether it defined the
function; :func:`serve` makes one call, answers its proxies' questions (``proxies.py``) until its
result comes, and decodes that result with the bounded decoder (``plain.py``). Anything else the
runner writes (a frame too large, not JSON, another nonce, a frame before a question) stops the
call as :class:`Stopped`, as does reaching the call's :class:`CallLimit` or the process ending.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import struct
import subprocess
import threading
import time
from dataclasses import dataclass

from course_grading.errors import GradingError
from course_grading.judge import plain
from course_grading.judge.proxies import collected, judge_side
from course_grading.sandbox import processes
from course_grading.sandbox.cgroup import Cgroup

ANSWER_BYTES = plain.MAX_BYTES  # the largest frame the runner may send
STDERR_TAIL = 4000  # bytes of the runner's stderr kept, to tell why it ended


def _drain(stream, keep: bytearray, limit: int) -> None:
    """Read ``stream`` to its end, keeping its last ``limit`` bytes in ``keep``."""
    for chunk in iter(lambda: stream.read(65536), b""):
        keep += chunk
        del keep[:-limit]


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
        """A stop of kind ``kind``, said in ``message``.

        Args:
            kind: why, in one word for the row's data: ``"cpu"``, ``"wall"``, ``"time"`` (the
                process's own CPU-time limit), ``"budget"`` (an item's or a submission's time
                budget), ``"memory"``, ``"exit"``, ``"size"``, ``"forged"``, ``"extra"``.
            message: what happened, in the student's words (``"it used more than 2 s of CPU
                time ..."``).
        """
        super().__init__(message)
        self.kind = kind


class Session:
    """One runner process and the framed pipe to it; every read bounded and timed."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cpu_seconds: int,
        *,
        memory: tuple[Cgroup | None, int | None] = (None, None),
        deadline: tuple[float, str] | None = None,
    ) -> None:
        """Start the runner with ``argv``; its stderr is drained in a thread (the last
        ``STDERR_TAIL`` bytes kept).

        Args:
            argv: the command: the sandboxed runner (``bwrap.command_argv``) or, unsandboxed, Python
                on ``runner.py``.
            env: the process's environment (empty under bubblewrap, which sets its own).
            cpu_seconds: the process's own CPU-time limit in seconds, quoted when it is reached.
            memory: the sandbox's cgroup, which holds it to its memory (``None``: none), and the
                memory limit the session watches itself where there is no cgroup (resident and
                tmpfs bytes, ``processes.Usage.memory``; ``None``: not watched).
            deadline: ``time.monotonic()`` at which the run's time budget runs out, and the
                budget in words (``functions.TimeBudget``'s ``why``): every read stops there.

        Raises:
            GradingError: the process cannot be started.
        """
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd="/",
                env=env,
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
        # nonces whose question was answered: a frame still carrying one was written before the
        # next question (the runner stamps the last nonce it read), however the pipe's timing
        # falls: after the answer's frame, or still in flight when the next question went out
        self.spent: set[str] = set()
        self.cpu_seconds = cpu_seconds  # the process's own CPU-time limit, for the message
        self.cgroup, self.memory_bytes = memory
        self.deadline = deadline
        self.out_of_time = False  # whether the deadline stopped a call
        self.over_memory = False  # whether the watched memory limit stopped the run
        self._init: int | None = None  # the sandbox's init, once found (its tmpfs folders)

    def pending(self) -> bool:
        """Whether the runner wrote anything nobody asked for yet.

        Returns:
            True when bytes are buffered or waiting on the pipe (read without blocking).
        """
        if self.buffer:
            return True
        ready, _, _ = select.select([self.out], [], [], 0)
        return bool(ready) and self._peek()

    def _peek(self) -> bool:
        chunk = os.read(self.out, 65536)
        self.buffer += chunk
        return bool(chunk)

    def send(self, message: dict) -> None:
        """Write ``message`` as one frame: a 4-byte big-endian length, then its JSON.

        Args:
            message: a JSON-able message for the runner (``define``, ``call``, ``answer``, ``end``).

        Raises:
            Stopped: the runner is gone (its pipe is closed); the kind says why it ended.
        """
        data = json.dumps(message).encode()
        try:
            self.proc.stdin.write(HEADER.pack(len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._ended() from None

    def _ended(self) -> Stopped:
        status = self.proc.wait()
        text = bytes(self.errors).decode("utf-8", "replace")
        if self.cgroup is not None and self.cgroup.oom_kills():
            return Stopped("memory", "its sandbox reached its memory limit and was killed")
        if "MemoryError" in text:
            return Stopped("memory", "it ran out of memory")
        if status in (-9, 137, -24, 152) or "CPU time limit" in text:
            return Stopped(
                "time",
                f"its process reached its CPU-time limit ({self.cpu_seconds} s for "
                "the cell and every call together) and was stopped",
            )
        return Stopped("exit", f"its process ended during the call (exit status {status})")

    def cpu(self) -> float:
        """The CPU time the runner's process tree has used.

        Returns:
            Seconds of CPU time, user and system, since the process started (``processes.usage``).
        """
        return processes.usage(self.proc.pid).cpu

    def _held(self, limit: CallLimit, cpu0: float, started: float) -> None:
        """Stop the call at its limits, the run's deadline, or (watched) the sandbox's memory."""
        now = time.monotonic()
        if self.deadline is not None and now > self.deadline[0]:
            self.out_of_time = True
            raise Stopped("budget", f"its calls used {self.deadline[1]} and were stopped")
        if now - started > limit.wall:
            raise Stopped(
                "wall", f"it took more than {limit.wall:g} s of wall-clock time ({limit.why})"
            )
        used, self._init = processes.sandbox_usage(self.proc.pid, self._init, self.memory_bytes)
        if self.memory_bytes is not None and used.memory > self.memory_bytes:
            self.over_memory, gib = True, self.memory_bytes / 2**30
            raise Stopped("memory", f"its sandbox held more than {gib:g} GiB and was stopped")
        if used.cpu - cpu0 > limit.cpu:
            raise Stopped("cpu", f"it used more than {limit.cpu:g} s of CPU time ({limit.why})")

    def receive(self, nonce: str, limit: CallLimit, cpu0: float, started: float) -> dict:
        """The runner's next frame as JSON data, once it is whole.

        Args:
            nonce: the nonce of the message it must answer.
            limit: the call's limits.
            cpu0: the process's CPU seconds when the call began (:meth:`cpu`).
            started: ``time.monotonic()`` when the call began.

        Returns:
            The frame's message, a dict carrying ``nonce``.

        Raises:
            Stopped: the call reaches ``limit`` (CPU or wall-clock), the run's deadline or (watched)
                the sandbox's memory limit, the process ends, or the frame is over
                ``ANSWER_BYTES``, not plain JSON, or not an answer to ``nonce``.
        """
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
                    message = self._message(frame, nonce, self.spent)
                    if message.get("op") in ("defined", "result"):
                        self.spent.add(nonce)  # the question is answered
                    return message
            self._held(limit, cpu0, started)
            ready, _, _ = select.select([self.out], [], [], POLL)
            if ready and not self._peek():
                raise self._ended()

    @staticmethod
    def _message(frame: bytes, nonce: str, spent: set[str]) -> dict:
        try:
            message = plain.parse(frame)
        except plain.NotPlain as err:
            raise Stopped(
                "forged", f"it sent the grader something that is not an answer ({err})"
            ) from None
        if isinstance(message, dict) and message.get("nonce") in spent:
            raise Stopped("extra", "it wrote to the grader's channel before it was asked")
        if not isinstance(message, dict) or message.get("nonce") != nonce:
            raise Stopped("forged", "it sent the grader a message that answers no question asked")
        return message

    def close(self) -> bool:
        """End the runner: ask it to end, give it 2 s, then kill what is left.

        Returns:
            Whether it wrote anything after its last answer (a stop of kind ``"extra"``).
        """
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
        """Kill the runner's process tree now, then the process itself."""
        processes.kill(processes.tree(self.proc.pid))
        self.proc.kill()


def _nonce() -> str:
    return secrets.token_hex(12)


def define(session: Session, request: dict, limit: CallLimit) -> dict:
    """Send the answer cell and read whether it defined the function.

    Args:
        session: the runner's session, before any call.
        request: ``{"source", "function", "site", "stage", "threads"}``
            (``functions.run``).
        limit: the limits of running the cell; its CPU time counts from the process's start.

    Returns:
        ``{"defined": bool, "error": exception or None}``, the exception's text made printable
        and bounded.

    Raises:
        Stopped: the cell reached ``limit``, the process ended, or its reply answers no
            question asked.
    """
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


def serve(session: Session, call: dict, limit: CallLimit) -> dict:
    """Make one call: answer its proxies' questions until its result comes.

    Args:
        session: the runner's session, its function defined (:func:`define`).
        call: the call as a check wrote it (``items.call``; proxies made here).
        limit: the call's limits (``functions.call_limit``).

    Returns:
        ``{"returned": value, "after": [...]}`` or ``{"raised": exception, "after": []}`` (or
        ``"not_plain"``: why the value is not plain data), with the call's ``"cpu"`` and
        ``"wall"`` seconds.

    Raises:
        Stopped: the runner wrote before it was asked, the call reached ``limit``, sent more
            than ``BYTES_PER_CALL`` or asked more than ``ASKS_PER_CALL`` questions, the process
            ended, or a message answers no question asked.
    """
    proxies: dict[int, object] = {}
    wire = judge_side(call, proxies)
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
        out["after"] = [collected(w, s, proxies) for w, s in zip(wanted, sent)]
    elif isinstance(message.get("raised"), dict):
        out["raised"] = _exception(message["raised"])
        out["after"] = []
    else:
        raise Stopped("forged", "it sent the grader a result with neither a value nor an error")
    return out


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
