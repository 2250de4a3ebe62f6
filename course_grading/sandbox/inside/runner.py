"""Run one graded function in a fresh sandbox: exec its cell, build the inputs, call, serialise.

    python -I -S runner.py < request.json        (the result: JSON on the original stdout)

This file runs *inside* the function sandbox (``course_grading.judge.functions``), next to the
student's code, which can read it. It holds no expected value and no checking code: it only
executes the answer cell's source as submitted, builds the inputs the grader asks for, calls the
function, and writes what came back as plain data (``encode.py``). The grader compares.

The request (JSON)::

    {"source": cell source, "function": name, "site": site-packages folder, "stage": folder
     holding the staged course_lib (or null), "threads": 1,
     "calls": [{"args": [input, ...], "kwargs": {name: input}, "seed": int or null,
                "take": attribute path of the result or null, "after": [collect, ...]}]}

An input is plain data as ``encode.py`` writes it, or one of::

    {"tensor": {"data": nested lists, "dtype": "int64"}}       a torch tensor
    {"new": {"callable": "module:name", "args": [...], "kwargs": {...}, "seed": int or null}}
    {"predicate": {"limit": n}}       fits(n): 1 <= n <= limit, every call recorded
    {"recorder": {"params_of": k}}    an optimiser stand-in: step() records the flat gradient
                                      of argument k's parameters, zero_grad() clears them

and ``after`` collects, once the call returned: ``{"grads": k}`` (argument k's flat gradient),
``{"probes": k}`` (what predicate k was asked), ``{"steps": k}`` (what recorder k recorded).

The answer: ``{"defined": bool, "error": exception or null, "calls": [{"returned": value} or
{"raised": exception}, plus "after": [...]]}``; an exception is ``{"type", "message", "name"}``
(``name``: the missing name of a ``NameError``) and the ``stage`` it happened in (``inputs``:
building the inputs, after the cell ran; ``call``; ``after``: collecting).
"""

import importlib
import json
import os
import sys

MESSAGE_CHARS = 300


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


class Predicate:
    """``fits(n)``: True for 1 <= n <= limit; remembers every ``n`` it was asked about."""

    def __init__(self, limit):
        self._limit = limit
        self.probes = []

    def __call__(self, n):
        self.probes.append(n if type(n) in (int, float) else repr(n)[:40])
        return 1 <= n <= self._limit


class Recorder:
    """An optimiser stand-in: ``step()`` records the flat gradient, ``zero_grad()`` clears it."""

    def __init__(self, params):
        self.params, self.steps = list(params), []

    def step(self):
        import torch

        grads = [
            p.grad.flatten() if p.grad is not None else torch.zeros_like(p).flatten()
            for p in self.params
        ]
        self.steps.append(torch.cat(grads).clone())

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None


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
    if tag == "predicate":
        return Predicate(body["limit"])
    if tag == "recorder":
        return Recorder(built[body["params_of"]].parameters())
    raise ValueError(f"unknown input kind {tag!r}")


def _collect(what, args, encode):
    ((kind, index),) = what.items()
    target = args[index]
    if kind == "probes":
        return encode(target.probes)
    if kind == "steps":
        return encode(target.steps, tensors=True)
    if kind == "grads":
        import torch

        params = list(target.parameters())
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        return encode(torch.cat([g.flatten() for g in grads]), tensors=True)
    raise ValueError(f"unknown collection {kind!r}")


def _take(value, path):
    for attribute in path.split(".") if path else []:
        value = getattr(value, attribute)
    return value


def _call(function, call, encode):
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
        answer = {"returned": encode(result, tensors=True)}
        stage = "after"
        answer["after"] = [_collect(what, built, encode) for what in call.get("after", [])]
        return answer
    except BaseException as err:  # noqa: BLE001 (whatever the student's code raised)
        return {"raised": dict(_exception(err), stage=stage), "after": []}


def main():
    request = json.loads(sys.stdin.read())
    sys.stdin.close()
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [p for p in (request.get("stage"), here) if p]
    sys.path.append(request["site"])  # the venv's packages, without running any .pth file
    from encode import encode

    answer_fd = os.dup(1)  # the answer goes here; the student's prints go to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    os.environ.setdefault("OMP_NUM_THREADS", str(request.get("threads", 1)))
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    answer = {"defined": False, "error": None, "calls": []}
    try:
        exec(compile(request["source"], "<your answer cell>", "exec"), namespace)
    except BaseException as err:  # noqa: BLE001
        answer["error"] = _exception(err)
    function = namespace.get(request["function"])
    if answer["error"] is None and callable(function):
        answer["defined"] = True
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(request.get("threads", 1))
        answer["calls"] = [_call(function, call, encode) for call in request["calls"]]
    with os.fdopen(answer_fd, "w") as out:
        json.dump(answer, out)
    os._exit(0)  # no atexit hook or thread of the student's runs after the answer


if __name__ == "__main__":
    main()
