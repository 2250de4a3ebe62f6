"""Serve one graded function in a fresh sandbox, one call at a time, over a framed pipe.

    python -I -S runner.py        (frames on stdin and on the original stdout)

This file runs *inside* the function sandbox (``course_grading.judge.functions``), next to the
student's code, which can read it and change anything in this process. So it holds no expected
value, no checking code, no hidden input but the arguments of the call it is serving, and no
counter of what the function did: ``fits`` and the optimiser stand-in are proxies whose state
lives in the judge's process, and every message this process writes is read there as the
student's answer to one question, never as evidence of anything else.

A frame is a 4-byte big-endian length and that many bytes of JSON. The judge writes::

    {"op": "define", "nonce", "source", "function", "site", "stage", "threads"}
    {"op": "call", "nonce", "args": [input, ...], "kwargs": {name: input}, "seed",
     "take": attribute path or null, "after": [collect, ...]}
    {"op": "answer", "nonce", "value"} or {"op": "refuse", "nonce", "message"}   (to an "ask")
    {"op": "end"}

and this process answers each ``define`` with ``{"op": "defined", "nonce", "defined": bool,
"error": exception or null}`` and each ``call`` with ``{"op": "result", "nonce", "returned":
value}`` (or ``"raised": exception``) plus ``"after": [value or null, ...]``. While a call runs,
the function may ask a proxy: ``{"op": "ask", "nonce", "proxy": id, "method": "call" | "step" |
"zero_grad", "args": [value, ...]}``, and waits for the judge's answer.

An input is plain data as ``encode.py`` writes it, or one of::

    {"tensor": {"data": nested lists, "dtype": "int64"}}       a torch tensor
    {"new": {"callable": "module:name", "args": [...], "kwargs": {...}, "seed": int or null}}
    {"proxy": {"kind": "predicate", "id": k}}                  fits(n), answered by the judge
    {"proxy": {"kind": "recorder", "id": k, "params_of": i}}   step() sends argument i's flat
                                                               gradient; zero_grad() clears it

and ``after`` asks, once the call returned, for ``{"grads": i}`` (argument i's flat gradient);
any other entry is the judge's own (``null`` here). An exception is ``{"type", "message",
"name"}`` (``name``: the missing name of a ``NameError``) and the ``stage`` it happened in
(``inputs``, ``call`` or ``after``).
"""

import importlib
import json
import os
import struct
import sys
from collections.abc import Iterable

MESSAGE_CHARS = 300
HEADER = struct.Struct(">I")


class Channel:
    """The framed pipe to the judge (private descriptors: the student's prints go to stderr)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        """The channel over two private descriptors.

        Args:
            read_fd: the descriptor the judge's frames arrive on (a copy of the original stdin).
            write_fd: the descriptor this process answers on (a copy of the original stdout).
        """
        self.read_fd, self.write_fd = read_fd, write_fd
        self.nonce = None

    def _exactly(self, size):
        data = bytearray()
        while len(data) < size:
            chunk = os.read(self.read_fd, size - len(data))
            if not chunk:
                raise EOFError("the grader closed the channel")
            data += chunk
        return bytes(data)

    def receive(self) -> dict:
        """The judge's next frame; its nonce becomes the one every answer carries.

        Returns:
            The frame's JSON message.

        Raises:
            EOFError: the judge closed the channel.
        """
        (size,) = HEADER.unpack(self._exactly(HEADER.size))
        message = json.loads(self._exactly(size))
        self.nonce = message.get("nonce", self.nonce)
        return message

    def send(self, message: dict) -> None:
        """Write ``message`` as one frame, with the nonce of the last frame received.

        Args:
            message: a JSON-able message (``defined``, ``result``, ``ask``).
        """
        data = json.dumps(dict(message, nonce=self.nonce)).encode()
        view = memoryview(HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(self.write_fd, view) :]


CHANNEL = None  # set by main()
ENCODE = None


def _exception(err):
    try:
        message = str(err)[:MESSAGE_CHARS]
    except BaseException:  # noqa: BLE001 (a student's exception may fail to print)
        message = "(its message could not be printed)"
    name = getattr(err, "name", None) if isinstance(err, NameError) else None
    return {
        "type": type(err).__name__[:80],
        "message": message,
        "name": name if type(name) is str else None,
    }


def _ask(proxy, method, args):
    """One question to the judge about proxy ``proxy``; its answer, or the judge's refusal."""
    CHANNEL.send({"op": "ask", "proxy": proxy, "method": method, "args": args})
    reply = CHANNEL.receive()
    if reply.get("op") == "refuse":
        raise TypeError(reply.get("message", "refused"))
    return reply.get("value")


class Predicate:
    """``fits(n)``: the judge decides and remembers every ``n`` it was asked about."""

    def __init__(self, proxy: int) -> None:
        """The proxy of the judge's predicate number ``proxy``.

        Args:
            proxy: the predicate's id in the judge (its argument position).
        """
        self._proxy = proxy

    def __call__(self, n: object) -> bool:
        """Ask the judge whether ``n`` fits; the judge records the question.

        Args:
            n: the size asked about, as the student's code passes it.

        Returns:
            The judge's answer: whether ``1 <= n <= limit``.

        Raises:
            TypeError: ``n`` is not plain data, or the judge refused the question (not a number).
        """
        encoded = ENCODE(n)
        if isinstance(encoded, dict) and ("not_plain" in encoded or "too_large" in encoded):
            raise TypeError(f"fits() takes a number, not {type(n).__name__}")
        return _ask(self._proxy, "call", [encoded])

    def __repr__(self):
        return "<fits>"


class Recorder:
    """An optimiser stand-in: ``step()`` sends the flat gradient, ``zero_grad()`` clears it."""

    def __init__(self, proxy: int, params: Iterable) -> None:
        """The proxy of the judge's recorder number ``proxy``, over a model's parameters.

        Args:
            proxy: the recorder's id in the judge (its argument position).
            params: the model's parameters (torch tensors), whose gradients a step sends.
        """
        self._proxy, self.params = proxy, list(params)

    def step(self) -> None:
        """Send the judge the parameters' flat gradient (zeros where a parameter has none).

        Raises:
            TypeError: the judge refused it.
        """
        import torch

        grads = [
            p.grad.flatten() if p.grad is not None else torch.zeros_like(p).flatten()
            for p in self.params
        ]
        _ask(self._proxy, "step", [ENCODE(torch.cat(grads).detach(), tensors=True)])

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Set every parameter's gradient to ``None`` and tell the judge.

        Args:
            set_to_none: accepted as torch's optimisers take it; the gradients are always set to
                ``None``.

        Raises:
            TypeError: the judge refused it.
        """
        for p in self.params:
            p.grad = None
        _ask(self._proxy, "zero_grad", [])


def _build(spec, built):
    """One input from its request form (module docstring); ``built``: this call's arguments."""
    if isinstance(spec, list):
        raise ValueError("a bare JSON list is not an input: tag it")
    if not isinstance(spec, dict):
        return spec
    ((tag, body),) = spec.items()
    if tag == "list":
        return [_build(x, built) for x in body]
    if tag == "tuple":
        return tuple(_build(x, built) for x in body)
    if tag == "set":
        return {_build(x, built) for x in body}
    if tag == "frozenset":
        return frozenset(_build(x, built) for x in body)
    if tag == "dict":
        return {_build(k, built): _build(v, built) for k, v in body}
    if tag == "float":
        return float(body)
    if tag == "tensor":
        import torch

        return torch.tensor(_build(body["data"], built), dtype=getattr(torch, body["dtype"]))
    if tag == "new":
        module, _, name = body["callable"].partition(":")
        target = getattr(importlib.import_module(module), name)
        if body.get("seed") is not None:
            import torch

            torch.manual_seed(body["seed"])
        args = [_build(x, built) for x in body.get("args", [])]
        kwargs = {k: _build(v, built) for k, v in body.get("kwargs", {}).items()}
        return target(*args, **kwargs)
    if tag == "proxy":
        if body["kind"] == "predicate":
            return Predicate(body["id"])
        return Recorder(body["id"], built[body["params_of"]].parameters())
    raise ValueError(f"unknown input kind {tag!r}")


def _grads(model):
    import torch

    params = list(model.parameters())
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    return ENCODE(torch.cat([g.flatten() for g in grads]).detach(), tensors=True)


def _take(value, path):
    for attribute in path.split(".") if path else []:
        value = getattr(value, attribute)
    return value


def _call(function, call):
    """One call: build its inputs, call, take the result, collect; never raises."""
    stage = "inputs"
    try:
        built = []
        for spec in call.get("args", []):
            built.append(_build(spec, built))
        kwargs = {k: _build(v, built) for k, v in call.get("kwargs", {}).items()}
        if call.get("seed") is not None:
            import random

            random.seed(call["seed"])
        stage = "call"
        result = _take(function(*built, **kwargs), call.get("take"))
        answer = {"returned": ENCODE(result, tensors=True)}
        stage = "after"
        answer["after"] = [
            _grads(built[what["grads"]]) if "grads" in what else None
            for what in call.get("after", [])
        ]
        return answer
    except BaseException as err:  # noqa: BLE001 (whatever the student's code raised)
        return {"raised": dict(_exception(err), stage=stage), "after": []}


def _define(request):
    """Run the answer cell; the function it defines (or ``None``) and the reply to send."""
    sys.path[:0] = [p for p in (request.get("stage"),) if p]
    sys.path.append(request["site"])  # the venv's packages, without running any .pth file
    os.environ.setdefault("OMP_NUM_THREADS", str(request.get("threads", 1)))
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    reply = {"op": "defined", "defined": False, "error": None}
    try:
        exec(compile(request["source"], "<your answer cell>", "exec"), namespace)
    except BaseException as err:  # noqa: BLE001
        reply["error"] = _exception(err)
        return None, reply
    function = namespace.get(request["function"])
    if callable(function):
        reply["defined"] = True
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(request.get("threads", 1))
    return (function if reply["defined"] else None), reply


def main() -> None:
    """Serve the judge until it ends: define the function once, then make each call it asks for.

    The channel keeps copies of stdin and stdout; the student's ``input()`` then reads nothing
    and its prints go to stderr. The process exits with ``os._exit(0)``, so no hook or thread of
    the student's runs after the last answer.
    """
    global CHANNEL, ENCODE
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from encode import encode

    ENCODE = encode
    CHANNEL = Channel(os.dup(0), os.dup(1))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the student's input() reads nothing; its prints go to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path.remove(here)  # the student's own ``import encode`` finds nothing of ours
    function = None
    while True:
        try:
            request = CHANNEL.receive()
        except EOFError:
            break
        op = request.get("op")
        if op == "define":
            function, reply = _define(request)
            CHANNEL.send(reply)
        elif op == "call" and function is not None:
            CHANNEL.send(dict(_call(function, request), op="result"))
        else:
            break
    os._exit(0)  # no atexit hook or thread of the student's runs after the last answer


if __name__ == "__main__":
    main()
