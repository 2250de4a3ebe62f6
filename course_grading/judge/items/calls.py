"""A graded function's calls as a check writes them, and what each call gave.

The input builders (:func:`tensor`, :func:`new`, :func:`predicate`, :func:`recorder`) and
:func:`call` write a call in the request form of ``sandbox/inside/runner.py``; the judge
(``judge/functions.py``) makes it and each answer becomes a :class:`Result`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from course_grading.judge import plain
from course_grading.judge.items.model import Reject
from course_grading.judge.plain import describe


def _input(value: object) -> object:
    """An input in the runner's form: built ones as they are, containers of them, plain data."""
    if isinstance(value, _Built):
        return value.spec
    if type(value) in (list, tuple):
        return {type(value).__name__: [_input(x) for x in value]}
    if type(value) is dict:
        return {"dict": [[_input(k), _input(v)] for k, v in value.items()]}
    return plain.encode(value)


@dataclass(frozen=True)
class _Built:
    """An input the runner builds (a tensor, a model, a predicate...) and how to show it."""

    spec: dict
    shown: str = "…"


def tensor(data: list, dtype: str = "int64") -> _Built:
    """A torch tensor built in the sandbox from nested lists."""
    return _Built({"tensor": {"data": plain.encode(data), "dtype": dtype}}, "tensor(…)")


def new(target: str, *args: object, seed: int | None = None, shown: str = "…", **kwargs) -> _Built:
    """An object built in the sandbox: ``module:name`` called with ``args`` (seeded torch)."""
    spec = {
        "callable": target,
        "args": [_input(a) for a in args],
        "kwargs": {k: _input(v) for k, v in kwargs.items()},
        "seed": seed,
    }
    return _Built({"new": spec}, shown)


def predicate(limit: int) -> _Built:
    """``fits(n)``: True for ``1 <= n <= limit``; every call is recorded (``probes``)."""
    return _Built({"predicate": {"limit": limit}}, "fits")


def recorder(params_of: int) -> _Built:
    """An optimiser stand-in recording the flat gradient of argument ``params_of`` at step()."""
    return _Built({"recorder": {"params_of": params_of}}, "optimizer")


def call(
    *args: object,
    seed: int | None = None,
    take: str | None = None,
    after: tuple[dict, ...] = (),
    **kwargs: object,
) -> dict:
    """One call of the graded function, in the runner's request form (``sandbox/inside/runner.py``).

    ``take``: an attribute path of the result to return (``"logits"``); ``after``: what to
    collect once it returned: ``{"grads": k}``, ``{"probes": k}``, ``{"steps": k}``.
    """
    shown = ", ".join(a.shown if isinstance(a, _Built) else describe(a, 30) for a in args)
    return {
        "args": [_input(a) for a in args],
        "kwargs": {k: _input(v) for k, v in kwargs.items()},
        "seed": seed,
        "take": take,
        "after": list(after),
        "shown": shown,
    }


@dataclass
class Result:
    """What one call gave: a plain value, or the exception it raised."""

    shown: str  # ``tokens_per_batch(2, 8192)``, for messages
    returned: object = None
    raised: dict | None = None  # {"type", "message", "name", "stage"}
    not_plain: str | None = None
    after: list = field(default_factory=list)
    stopped: str | None = None  # why the judge stopped the call (or did not make it)

    def value(self) -> object:
        """The returned value; :class:`Reject` if the call was stopped, raised or returned no
        plain value."""
        if self.stopped:
            raise Reject(f"{self.shown} was stopped: {self.stopped}")
        if self.raised:
            raise Reject(f"{self.shown} raised {exception_text(self.raised)}")
        if self.not_plain:
            raise Reject(f"{self.shown} returned something that is {self.not_plain}")
        return self.returned


def exception_text(raised: dict) -> str:
    text = raised["type"] + (f": {raised['message']}" if raised["message"] else "")
    if raised["type"] == "NameError" and raised.get("name"):
        return (
            f"NameError: your function uses `{raised['name']}`, which is defined in another "
            "cell: a graded function's cell must hold everything it needs, imports included"
        )
    if raised["type"] in ("ModuleNotFoundError", "ImportError") and "course_lib" in text:
        return f"{text} (graded functions run where course_lib is not available: write it yourself)"
    return text
