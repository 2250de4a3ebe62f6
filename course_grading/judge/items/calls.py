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
    """A torch tensor built in the sandbox from nested lists.

    Args:
        data: the tensor's values as nested lists of plain numbers.
        dtype: the name of a ``torch`` dtype (``"int64"``, ``"float32"``, ``"bool"``).

    Returns:
        The input, shown as ``tensor(…)`` in messages.
    """
    return _Built({"tensor": {"data": plain.encode(data), "dtype": dtype}}, "tensor(…)")


def new(
    target: str, *args: object, seed: int | None = None, shown: str = "…", **kwargs: object
) -> _Built:
    """An object built in the sandbox: ``module:name`` called with ``args`` (seeded torch).

    Args:
        target: what to call, as ``"module:name"`` (``"course_lib.model:TinyGPT"``); the module
            must be importable in the sandbox (an item's ``allowed``).
        *args: its positional arguments: plain data, or inputs built by these functions (an
            earlier ``new``, a ``tensor``).
        seed: ``torch.manual_seed`` before the call (the same weights in the sandbox as in a
            trusted copy built here with that seed); ``None``: not seeded.
        shown: how the object is shown in messages (``"model"``).
        **kwargs: its keyword arguments, as ``args``.

    Returns:
        The input, shown as ``shown``.
    """
    spec = {
        "callable": target,
        "args": [_input(a) for a in args],
        "kwargs": {k: _input(v) for k, v in kwargs.items()},
        "seed": seed,
    }
    return _Built({"new": spec}, shown)


def predicate(limit: int) -> _Built:
    """``fits(n)``: True for ``1 <= n <= limit``; every call is recorded (``probes``).

    The limit never enters the sandbox: the function gets a proxy whose calls the judge answers
    (``judge/proxies.py``).

    Args:
        limit: the largest ``n`` that fits (a card's limit, in rows).

    Returns:
        The input, shown as ``fits``.
    """
    return _Built({"predicate": {"limit": limit}}, "fits")


def recorder(params_of: int) -> _Built:
    """An optimiser stand-in recording the flat gradient of argument ``params_of`` at step().

    Args:
        params_of: the position of the call's argument (a model) whose parameters' flat
            gradient each ``step()`` sends the judge.

    Returns:
        The input, shown as ``optimizer``.
    """
    return _Built({"recorder": {"params_of": params_of}}, "optimizer")


def call(
    *args: object,
    seed: int | None = None,
    take: str | None = None,
    after: tuple[dict, ...] = (),
    **kwargs: object,
) -> dict:
    """One call of the graded function, in the runner's request form (``sandbox/inside/runner.py``).

    Args:
        *args: the call's positional arguments: plain data, or inputs built by :func:`tensor`,
            :func:`new`, :func:`predicate`, :func:`recorder` (in containers too).
        seed: Python's ``random.seed`` in the sandbox before the call; ``None``: not seeded.
        take: an attribute path of the result to return (``"logits"``); ``None``: the result.
        after: what to collect once it returned: ``{"grads": k}`` (argument ``k``'s flat
            gradient), ``{"probes": k}`` (the ``fits`` calls), ``{"steps": k}`` (the optimiser's
            steps).
        **kwargs: the call's keyword arguments, as ``args``.

    Returns:
        The request, with ``"shown"``: its arguments as messages name them (taken out before the
        request is sent).
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
        """The value the call returned, once it is known to be one.

        Returns:
            The returned plain value, decoded (``plain.decode``).

        Raises:
            Reject: the call was stopped (or not made), raised, or returned no plain value; the
                message names the call.
        """
        if self.stopped:
            raise Reject(f"{self.shown} was stopped: {self.stopped}")
        if self.raised:
            raise Reject(f"{self.shown} raised {exception_text(self.raised)}")
        if self.not_plain:
            raise Reject(f"{self.shown} returned something that is {self.not_plain}")
        return self.returned


def exception_text(raised: dict) -> str:
    """An exception raised in the sandbox, in words for the student.

    Args:
        raised: the exception as the judge decoded it: ``{"type", "message", "name", "stage"}``.

    Returns:
        ``"Type: message"``; for a name defined in another cell, or an import of ``course_lib``
        that the sandbox does not have, what to do about it.
    """
    text = raised["type"] + (f": {raised['message']}" if raised["message"] else "")
    if raised["type"] == "NameError" and raised.get("name"):
        return (
            f"NameError: your function uses `{raised['name']}`, which is defined in another "
            "cell: a graded function's cell must hold everything it needs, imports included"
        )
    if raised["type"] in ("ModuleNotFoundError", "ImportError") and "course_lib" in text:
        return f"{text} (graded functions run where course_lib is not available: write it yourself)"
    return text
