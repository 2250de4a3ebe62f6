"""Plain data from a sandbox, re-validated in the grader: exact types, bounded before built.

Values leave the student's kernel, and results leave the function sandbox, as JSON in the form
``course_grading/sandbox/inside/encode.py`` writes. That code runs where the student's code runs, so
its output proves nothing: everything is decoded again here, strictly, and every byte from a
student process goes through :func:`parse` (or :func:`load`). Only ``None``, ``bool``, ``int``,
``float``, ``str``, ``fractions.Fraction``, ``decimal.Decimal`` (finite, of sensible size) and
``list``/``tuple``/``dict``/``set``/``frozenset`` of them come out (tuple and list stay
distinct), plus ``Tensor`` (shape, dtype and flat data) where tensors are allowed; NaN and
infinities arrive only in their tagged form. Anything else is a :class:`NotPlain` with a
reason a student can read ("not a plain value: Always").

Bounded before built: :func:`parse` first reads the bytes with a few linear passes made of
C-level operations (a regular expression that blanks every string, byte counts, and at most
``MAX_JSON_DEPTH`` passes that drop innermost bracket pairs) and refuses text that is too long,
nested too deep, holds too many values or containers, too much text or a number of more than
``MAX_DIGITS`` digits. Only then does ``json.loads`` build anything, and what it can build is
bounded by those counts (tens of MiB at most). :func:`decode` counts again as it builds, checks
a tensor's every dimension and the lists :meth:`Tensor.nested` would make, and refuses an
unhashable member or key (a tuple holding a list) by name, so no ``TypeError`` escapes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

MAX_BYTES = 16 * 2**20  # JSON text accepted from one sandbox answer
MAX_DEPTH = 24  # plain containers inside one another
MAX_JSON_DEPTH = 3 * MAX_DEPTH + 16  # JSON brackets: a tagged container is two or three deep
MAX_ITEMS = 2_000_000  # values (numbers, strings, containers) in one answer
MAX_CONTAINERS = 200_000  # JSON arrays and objects in one answer
MAX_CHARS = 4_000_000  # bytes of all strings in one answer
MAX_DIGITS = 300  # an integer's decimal digits (and a Decimal's exponent): a float holds it
MAX_BITS = 1000  # a Fraction's numerator and denominator
MAX_EXPONENT = MAX_DIGITS
MAX_DIMS = 16  # a tensor's dimensions
_CONTAINERS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32"}
_DTYPES |= {"float64"}
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.S)
_LONG_NUMBER = re.compile(rb"[0-9]{%d}" % (MAX_DIGITS + 1))
_PAIR = re.compile(rb"\[\]|\{\}")
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


class NotPlain(Exception):
    """What came out is not plain data; the message says what it was instead."""


@dataclass(frozen=True)
class Tensor:
    """A tensor as plain data: its dtype name, shape and row-major flat values."""

    dtype: str
    shape: tuple[int, ...]
    data: tuple

    def nested(self) -> list:
        """The values as nested lists of the tensor's shape.

        Returns:
            ``data`` as lists ``shape[0]`` long, each of ``shape[1]``, ..., with the values at the
            bottom (the one value of a 0-d tensor).

        Raises:
            NotPlain: the shape does not hold the data, or would build more lists than
                ``MAX_ITEMS`` (``(2**62, 1, 0)`` holds no value but 2**62 lists).
        """
        _check_shape(self.shape, len(self.data))

        def build(flat: list, shape: tuple[int, ...]):
            if not shape:
                return flat[0]
            step = len(flat) // shape[0] if shape[0] else 0
            return [build(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]

        return build(list(self.data), self.shape) if self.shape else self.data[0]


def _check_shape(shape: tuple[int, ...] | list, size: int) -> None:
    """Refuse a shape that is not ``size`` values or whose nested lists would be too many."""
    if len(shape) > MAX_DIMS or not all(type(n) is int and n >= 0 for n in shape):
        raise NotPlain(f"malformed data (a tensor's shape: at most {MAX_DIMS} dimensions)")
    if any(n > MAX_ITEMS for n in shape):
        raise NotPlain(f"too large to be graded (a tensor dimension over {MAX_ITEMS:,})")
    lists, rows = 0, 1
    for n in shape[:-1]:
        rows *= n
        lists += rows
        if lists > MAX_ITEMS:
            raise NotPlain(f"too large to be graded (a tensor of shape {tuple(shape)[:8]})")
    if math.prod(shape) != size:
        raise NotPlain("malformed data (a tensor's size)")


def _clean_name(text: object) -> str:
    """A type name from the sandbox, safe to show: printable, short."""
    name = "".join(ch for ch in str(text)[:200] if ch.isprintable())[:80]
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
        if data is None or kind is bool:
            return data
        if kind is int:
            return _integer(data)  # type: ignore[arg-type]
        if kind is float:
            if not math.isfinite(data):  # type: ignore[arg-type]
                raise NotPlain("a malformed number")
            return data
        if kind is str:
            self._count(0, len(data))  # type: ignore[arg-type]
            return data
        if kind is not dict or len(data) != 1:  # type: ignore[arg-type]
            raise NotPlain("malformed data")
        ((tag, body),) = data.items()  # type: ignore[union-attr]
        return self._tagged(tag, body, depth)

    def _tagged(self, tag: object, body: object, depth: int) -> object:
        if tag == "not_plain":
            raise NotPlain(f"not a plain value: {_clean_name(body)}")
        if tag == "unset":
            raise NotPlain("still blank (...)")
        if tag == "missing":
            raise NotPlain("not set: your notebook never defined it")
        if tag == "too_large":
            raise NotPlain(f"too large to be graded ({_clean_name(body)})")
        if tag == "float" and body in ("nan", "inf", "-inf"):
            return float(body)  # type: ignore[arg-type]
        if tag == "fraction":
            return _fraction(body)
        if tag == "decimal":
            return _decimal(body)
        if tag in _CONTAINERS and type(body) is list:
            items = [self.decode(x, depth + 1) for x in body]
            if tag in ("set", "frozenset"):
                return _CONTAINERS[tag](_hashable(x) for x in items)  # type: ignore[index]
            return _CONTAINERS[tag](items)  # type: ignore[index]
        if tag == "dict" and type(body) is list:
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise NotPlain("malformed data")
                key = _hashable(self.decode(pair[0], depth + 1))
                out[key] = self.decode(pair[1], depth + 1)
            return out
        if tag == "tensor" and self.tensors and type(body) is dict:
            return self._tensor(body, depth)
        raise NotPlain("malformed data")

    def _tensor(self, body: dict, depth: int) -> Tensor:
        dtype, shape, data = body.get("dtype"), body.get("shape"), body.get("data")
        if dtype not in _DTYPES or type(shape) is not list or type(data) is not list:
            raise NotPlain(f"a tensor the grader does not read (dtype {_clean_name(dtype)})")
        _check_shape(shape, len(data))
        values = tuple(self.decode(x, depth + 1) for x in data)
        if not all(type(x) in (bool, int, float) for x in values):
            raise NotPlain("malformed data (a tensor's values)")
        return Tensor(dtype, tuple(shape), values)


def _hashable(value: object) -> object:
    """``value``, if it can be a set's member or a dict's key (plain values hash safely)."""
    try:
        hash(value)
    except TypeError:
        raise NotPlain("malformed data (an unhashable member or key)") from None
    return value


def _integer(value: int) -> int:
    if value.bit_length() > MAX_BITS:
        raise NotPlain(f"a malformed number (more than {MAX_DIGITS} digits)")
    return value


def _fraction(body: object) -> Fraction:
    if type(body) is not list or len(body) != 2 or not all(type(x) is int for x in body):
        raise NotPlain("malformed data (a fraction)")
    numerator, denominator = body
    if denominator <= 0 or max(abs(numerator), denominator).bit_length() > MAX_BITS:
        raise NotPlain(f"a malformed number (a fraction over {MAX_BITS} bits)")
    return Fraction(numerator, denominator)


def _decimal(body: object) -> Decimal:
    if type(body) is not str or len(body) > 2 * MAX_EXPONENT:
        raise NotPlain("malformed data (a decimal)")
    try:
        value = Decimal(body)
    except InvalidOperation:
        raise NotPlain("malformed data (a decimal)") from None
    if not value.is_finite() or abs(value.adjusted()) > MAX_EXPONENT:
        raise NotPlain("a malformed number (a decimal that is not finite or too large)")
    return value


def _reject_constant(name: str) -> object:
    raise NotPlain("malformed data (a bare NaN or infinity)")


def _prescan(data: bytes) -> None:
    """Refuse JSON text whose parse would be too large or too deep, before it is parsed."""
    bare = _STRING.sub(b"", data)  # what is left: brackets, commas, numbers, literals
    if len(data) - len(bare) > 2 * MAX_CHARS:  # quotes and escapes take room too
        raise NotPlain(f"too large to be graded (over {MAX_CHARS:,} characters of text)")
    if b'"' in bare:
        raise NotPlain("malformed data (a string left open)")
    if bare.count(b",") + 1 > MAX_ITEMS:
        raise NotPlain(f"too large to be graded (more than {MAX_ITEMS:,} values)")
    brackets = bare.translate(None, _NOT_BRACKET)
    if len(brackets) > 2 * MAX_CONTAINERS:
        raise NotPlain(f"too large to be graded (more than {MAX_CONTAINERS:,} containers)")
    if _LONG_NUMBER.search(bare):
        raise NotPlain(f"a malformed number (more than {MAX_DIGITS} digits)")
    for _ in range(MAX_JSON_DEPTH):
        if not brackets:
            return
        brackets, dropped = _PAIR.subn(b"", brackets)
        if not dropped:
            raise NotPlain("malformed data (brackets that do not match)")
    if brackets:
        raise NotPlain(f"nested more than {MAX_DEPTH} deep")


def parse(data: str | bytes) -> object:
    """The JSON text of a sandbox's answer as JSON data, bounded before it is built.

    Args:
        data: the bytes (or text) a student process wrote.

    Returns:
        The parsed JSON (dicts, lists, numbers, strings), for :func:`decode`.

    Raises:
        NotPlain: too large, too deep, too many values, a number too long, or not JSON.
    """
    if len(data) > MAX_BYTES:
        raise NotPlain(f"too large to be graded (over {MAX_BYTES // 2**20} MiB)")
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    _prescan(raw)
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        raise NotPlain(f"malformed data ({type(err).__name__})") from None


def decode(data: object, *, tensors: bool = False) -> object:
    """The plain value encoded in ``data`` (module docstring).

    Args:
        data: JSON data as :func:`parse` returns it, in ``encode.py``'s tagged form.
        tensors: accept tagged tensors (a :class:`Tensor`); False: a tensor is not plain.

    Returns:
        The value: ``None``, ``bool``, ``int``, ``float``, ``str``, ``Fraction``, ``Decimal``,
        containers of them, or a ``Tensor`` where allowed.

    Raises:
        NotPlain: a type, tag, size or depth outside the bounds, with a reason a student can
            read.
    """
    try:
        return _Decoder(tensors).decode(data)
    except RecursionError:
        raise NotPlain(f"nested more than {MAX_DEPTH} deep") from None


def load(data: str | bytes, *, tensors: bool = False) -> object:
    """:func:`parse` then :func:`decode`: the plain value in a student process's bytes.

    Args:
        data: the bytes (or text) a student process wrote.
        tensors: accept tagged tensors (:func:`decode`).

    Returns:
        The decoded plain value.

    Raises:
        NotPlain: the bytes are not a plain value within the bounds (module docstring).
    """
    return decode(parse(data), tensors=tensors)


def encode(value: object) -> object:
    """A plain value (as :func:`decode` returns) as data, for requests to a sandbox.

    Args:
        value: a plain value of exact type: ``None``, ``bool``, ``int``, ``float``, ``str``,
            ``Fraction``, ``Decimal``, or a list, tuple, set, frozenset or dict of them.

    Returns:
        JSON-able data in ``encode.py``'s tagged form (``{"tuple": [...]}``, ``{"float":
        "nan"}``), which :func:`decode` reads back to an equal value.

    Raises:
        TypeError: a value of another type (a subclass included).
    """
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": str(value)}
    if kind is Fraction:
        return {"fraction": [value.numerator, value.denominator]}
    if kind is Decimal:
        return {"decimal": str(value)}
    for tag, container in _CONTAINERS.items():
        if kind is container:
            return {tag: [encode(x) for x in value]}
    if kind is dict:
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    raise TypeError(f"not a plain value: {kind.__name__}")


def describe(value: object, limit: int = 60) -> str:
    """A short, safe rendering of a student's plain value for a message (``16.04``, ``'B'``).

    Args:
        value: a plain value (anything has a rendering; a float is shown to 6 significant
            figures).
        limit: the most characters shown; a longer rendering is cut and ends with ``…``.

    Returns:
        The rendering, every unprintable character replaced by ``?``.
    """
    if type(value) in (Fraction, Decimal):
        text = str(value)
    elif isinstance(value, float):
        # short where that is the value (16.04), every digit where it is not (4.0000000001)
        text = f"{value:.6g}" if float(f"{value:.6g}") == value else repr(value)
    else:
        text = repr(value)
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
