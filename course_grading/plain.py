"""Plain data from a sandbox, re-validated in the grader: exact types, bounded, nothing else.

Values leave the student's kernel, and results leave the function sandbox, as JSON in the form
``course_grading/sandboxed/encode.py`` writes. That code runs where the student's code runs, so
its output proves nothing: everything is decoded again here, strictly. Only ``None``, ``bool``,
``int``, ``float``, ``str`` and ``list``/``tuple``/``dict``/``set``/``frozenset`` of them come
out (tuple and list stay distinct), plus ``Tensor`` (shape, dtype and flat data) where tensors
are allowed; depth, item count and text are bounded, NaN and infinities arrive only in their
tagged form. Anything else is a :class:`NotPlain` with a reason a student can read ("not a
plain value: Always").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

MAX_BYTES = 16 * 2**20  # JSON text accepted from one sandbox answer
MAX_DEPTH = 24
MAX_ITEMS = 2_000_000
MAX_CHARS = 4_000_000
_CONTAINERS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32"}
_DTYPES |= {"float64"}


class NotPlain(Exception):
    """What came out is not plain data; the message says what it was instead."""


@dataclass(frozen=True)
class Tensor:
    """A tensor as plain data: its dtype name, shape and row-major flat values."""

    dtype: str
    shape: tuple[int, ...]
    data: tuple

    def nested(self) -> list:
        """The values as nested lists of the tensor's shape."""

        def build(flat: list, shape: tuple[int, ...]):
            if not shape:
                return flat[0]
            step = len(flat) // shape[0] if shape[0] else 0
            return [build(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]

        return build(list(self.data), self.shape) if self.shape else self.data[0]


def _clean_name(text: object) -> str:
    """A type name from the sandbox, safe to show: printable, short."""
    name = "".join(ch for ch in str(text) if ch.isprintable())[:80]
    return name or "?"


class _Decoder:
    def __init__(self, tensors: bool) -> None:
        self.tensors, self.items, self.chars = tensors, 0, 0

    def _count(self, items: int = 1, chars: int = 0) -> None:
        self.items += items
        self.chars += chars
        if self.items > MAX_ITEMS or self.chars > MAX_CHARS:
            raise NotPlain("too large to be graded (more than the grader reads)")

    def decode(self, data: object, depth: int = 0) -> object:
        if depth > MAX_DEPTH:
            raise NotPlain(f"nested more than {MAX_DEPTH} deep")
        self._count()
        kind = type(data)
        if data is None or kind in (bool, int):
            return data
        if kind is float:
            if not math.isfinite(data):
                raise NotPlain("a malformed number")
            return data
        if kind is str:
            self._count(0, len(data))
            return data
        if kind is not dict or len(data) != 1:
            raise NotPlain("malformed data")
        ((tag, body),) = data.items()
        if tag == "not_plain":
            raise NotPlain(f"not a plain value: {_clean_name(body)}")
        if tag == "unset":
            raise NotPlain("still blank (...)")
        if tag == "missing":
            raise NotPlain("not set: your notebook never defined it")
        if tag == "too_large":
            raise NotPlain(f"too large to be graded ({_clean_name(body)})")
        if tag == "float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag in _CONTAINERS and type(body) is list:
            items = [self.decode(x, depth + 1) for x in body]
            if tag in ("set", "frozenset"):
                return _CONTAINERS[tag](self._hashable(x) for x in items)
            return _CONTAINERS[tag](items)
        if tag == "dict" and type(body) is list:
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise NotPlain("malformed data")
                key = self._hashable(self.decode(pair[0], depth + 1))
                out[key] = self.decode(pair[1], depth + 1)
            return out
        if tag == "tensor" and self.tensors and type(body) is dict:
            return self._tensor(body, depth)
        raise NotPlain("malformed data")

    @staticmethod
    def _hashable(value: object) -> object:
        if isinstance(value, (list, dict, set)):
            raise NotPlain("malformed data (an unhashable key)")
        return value

    def _tensor(self, body: dict, depth: int) -> Tensor:
        dtype, shape, data = body.get("dtype"), body.get("shape"), body.get("data")
        if dtype not in _DTYPES or type(shape) is not list or type(data) is not list:
            raise NotPlain(f"a tensor the grader does not read (dtype {_clean_name(dtype)})")
        if not all(type(n) is int and n >= 0 for n in shape):
            raise NotPlain("malformed data (a tensor's shape)")
        if math.prod(shape) != len(data):
            raise NotPlain("malformed data (a tensor's size)")
        values = tuple(self.decode(x, depth + 1) for x in data)
        if not all(type(x) in (bool, int, float) for x in values):
            raise NotPlain("malformed data (a tensor's values)")
        return Tensor(dtype, tuple(shape), values)


def _reject_constant(name: str) -> object:
    raise NotPlain("malformed data (a bare NaN or infinity)")


def parse(text: str | bytes) -> object:
    """The JSON text of a sandbox's answer, bounded; :class:`NotPlain` if it is not JSON."""
    if len(text) > MAX_BYTES:
        raise NotPlain(f"too large to be graded (over {MAX_BYTES // 2**20} MiB)")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        raise NotPlain(f"malformed data ({type(err).__name__})") from None


def decode(data: object, *, tensors: bool = False) -> object:
    """The plain value encoded in ``data`` (module docstring), or :class:`NotPlain`."""
    try:
        return _Decoder(tensors).decode(data)
    except RecursionError:
        raise NotPlain(f"nested more than {MAX_DEPTH} deep") from None


def encode(value: object) -> object:
    """A plain value (as :func:`decode` returns) as data, for requests to a sandbox."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": str(value)}
    for tag, container in _CONTAINERS.items():
        if kind is container:
            return {tag: [encode(x) for x in value]}
    if kind is dict:
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    raise TypeError(f"not a plain value: {kind.__name__}")


def describe(value: object, limit: int = 60) -> str:
    """A short, safe rendering of a student's plain value for a message (``16.04``, ``'B'``)."""
    text = repr(value) if not isinstance(value, float) else f"{value:.6g}"
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
