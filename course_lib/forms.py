"""How an answer is read and compared: one normalisation for the visible test and the grader.

An answer is compared in two places: in the student's kernel by the visible test
(:mod:`course_lib.answers`), for instant feedback, and in the grader's process by the item's
trusted check (``course_grading.judge.items``), which decides the points. Both read it here,
the same way, so that a right answer in any reasonable form passes both and the visible test
can never call "right" a value the grade rejects.

**Reading.** :func:`plain` turns what a student may reasonably hand in into a plain value of an
exact type: Python ``int``, ``float``, ``str``, ``bool``, ``fractions.Fraction``,
``decimal.Decimal``, and ``list``/``tuple``/``set``/``frozenset`` of them; a numpy scalar, a 0-d
numpy array or a 0-d torch tensor becomes its Python scalar (an ``np.longdouble`` the nearest
float). Anything else, a subclass of any of these included (an ``int`` whose ``__eq__`` always
says yes), is "not a plain value": the grader takes values out of the kernel by the same rules
(``course_grading/sandbox/inside/encode.py``).

**Comparing.** A :class:`Form` says how one answer is compared, as the canonical text both sides
compare::

    Exact()          16, 16.0, Fraction(16), Decimal("16"), np.int64(16)   -> "16"
                     (non-integers to 12 significant figures: float rounding is not an error)
    Integer()        like Exact, but only a whole number can be right      -> "16"
    Sig(2)           8.59, 8.6, np.float32(8.59)                           -> "8.6"
    Word("A", "B")   " a ", "A"                                            -> "a"
    Shape()          "8x2048", "8 x 2048", "8×2048", "8X2048", (8, 2048)   -> "8x2048"
    Truth()          True, np.bool_(True)                                  -> "true"
    Ordered(f, g)    a tuple or a list, in order                           -> "(…;…)"
    Unordered(f)     a set, frozenset, list or tuple, order and repeats aside -> "{…;…}"

:meth:`Form.canonical` raises :class:`Unreadable` with a reason a student can act on ("a number
is needed, got the text '16': write it without quotes") when a value cannot be compared at all.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import ClassVar

#: Exact types a plain answer may have (``bool`` before ``int``: it is not a number here).
SCALARS = (type(None), bool, int, float, str, Fraction, Decimal)
CONTAINERS = (list, tuple, set, frozenset)
MAX_EXPONENT = 400  # a Decimal or Fraction beyond 10**±400 is no answer to any question here
_SHAPE = re.compile(r"\s*\d[\d,_]*(\s*[x×X*]\s*\d[\d,_]*)+\s*")


class Unreadable(ValueError):
    """The value cannot be compared at all; the message says why and what to write instead."""


def plain(value: object) -> object:
    """``value`` as a plain value of an exact type (module docstring).

    Args:
        value: what the student set (an answer variable's value, taken from their kernel).

    Returns:
        The same value with exact builtin types: a scalar as it is, a container rebuilt
        from plain members, a numpy/torch 0-d value as its Python scalar.

    Raises:
        Unreadable: not a plain value (a subclass, an object, an array of more than one value).
    """
    kind = type(value)
    if kind in SCALARS:
        return value
    if isinstance(value, (list, tuple, set, frozenset)) and kind in CONTAINERS:
        return kind(plain(v) for v in value)
    scalar = _scalar(value)
    if scalar is not None:
        return scalar[0]
    raise Unreadable(f"not a plain value: {_type_name(value)} (give a number, text or a tuple)")


def _scalar(value: object) -> tuple[object] | None:
    """``(x,)`` for a numpy scalar, a 0-d numpy array or a 0-d torch tensor, else ``None``."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and type(value).__module__ == "numpy":
        if isinstance(value, numpy.generic) or (
            isinstance(value, numpy.ndarray) and type(value) is numpy.ndarray and value.ndim == 0
        ):
            item = value.item()
            if not isinstance(item, numpy.generic):
                return (item,)
            # .item() keeps an np.longdouble as itself: read as the nearest float, as the grader
            return (float(item),) if isinstance(item, numpy.floating) else None
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) and type(value) is torch.Tensor:
        if value.dim() == 0:
            return (value.item(),)
    return None


def _type_name(value: object) -> str:
    kind = type(value)
    name = f"{kind.__module__}.{kind.__qualname__}"
    return name.removeprefix("builtins.")[:80]


def shown(value: object, limit: int = 40) -> str:
    """A short rendering of a student's value for a message (``16.04``, ``'8 x 2048'``).

    Args:
        value: the student's value.
        limit: most characters shown; longer renderings end in ``…``.

    Returns:
        At most ``limit`` printable characters: a float to 6 significant figures, anything
        else by ``repr``, unprintable characters as ``?``.
    """
    text = f"{value:.6g}" if type(value) is float else repr(value)
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def number(value: object) -> Fraction | float:
    """A finite number read exactly (``int``, ``Fraction`` and ``Decimal`` as a ``Fraction``).

    Args:
        value: a plain scalar (see :func:`plain`).

    Returns:
        A ``float`` as given, or an exact ``Fraction`` for an ``int``, ``Fraction`` or
        ``Decimal`` (so ``Decimal("0.1")`` is exactly one tenth).

    Raises:
        Unreadable: a bool, text, NaN, an infinity, a number too large, or not a number.
    """
    if type(value) not in (int, float, Fraction, Decimal):
        if isinstance(value, str) and type(value) is str:
            raise Unreadable(
                f"a number is needed, got the text {shown(value)}: write it without quotes"
            )
        raise Unreadable(f"a number is needed, got {_type_name(value)} {shown(value)}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unreadable(f"a finite number is needed, got {value!r}")
        return value
    if isinstance(value, Decimal):
        if not value.is_finite() or abs(value.adjusted()) > MAX_EXPONENT:
            raise Unreadable(f"a finite number of sensible size is needed, got {shown(value)}")
        return Fraction(value)
    assert isinstance(value, (int, Fraction))
    exact = Fraction(value)
    too_long = max(abs(exact.numerator), exact.denominator).bit_length() > 4 * MAX_EXPONENT
    if too_long or abs(exact) > _FLOAT_MAX:  # a float could not hold it (OverflowError)
        raise Unreadable("a number this large is no answer here")
    return exact


_FLOAT_MAX = Fraction(sys.float_info.max)


def _integral(x: Fraction | float) -> bool:
    return x.denominator == 1 if isinstance(x, Fraction) else float(x).is_integer()


def _python(x: Fraction | float) -> int | float:
    return int(x) if _integral(x) else float(x)


@dataclass(frozen=True)
class Form:
    """How one answer is compared (module docstring); subclasses say how."""

    _needs: ClassVar[str] = ""

    @property
    def needs(self) -> str:
        """What the comparison needs, in words for a message (``"exact"``): plain words without
        parentheses, since messages put it in parentheses or after "needs it"."""
        return self._needs

    def canonical(self, value: object) -> str:
        """The text both sides compare.

        Args:
            value: what the student handed in (any object; only plain values can be read).

        Returns:
            The canonical text; two answers are the same exactly when their texts are equal.

        Raises:
            Unreadable: the value cannot be compared (a reason a student can act on).
        """
        raise NotImplementedError

    def value(self, value: object) -> object:
        """The answer as a Python value for arithmetic (``int``/``float``, ``str``, ``tuple``).

        Args:
            value: what the student handed in.

        Returns:
            For a numeric form, an ``int`` when the number is whole, else a ``float``.

        Raises:
            Unreadable: as :meth:`canonical`.
        """
        self.canonical(value)
        return _python(number(value))

    def same(self, value: object, expected: object) -> bool:
        """Whether ``value`` compares equal to ``expected``.

        Args:
            value: the student's answer.
            expected: the right answer, readable by this form.

        Returns:
            True when both canonical texts are equal.

        Raises:
            Unreadable: ``value`` cannot be compared.
        """
        return self.canonical(value) == self.canonical(expected)


@dataclass(frozen=True)
class Exact(Form):
    """The same number; non-integers to 12 significant figures (float rounding aside)."""

    _needs = "exact"

    def canonical(self, value: object) -> str:
        """See :meth:`Form.canonical`.

        Args:
            value: what the student handed in (any object; only plain values can be read).

        Returns:
            A whole number as its decimal digits (``16.0`` -> ``"16"``), anything else to 12
            significant figures (``0.1 + 0.2`` -> ``"0.3"``).

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        x = number(value)
        return str(int(x)) if _integral(x) else f"{float(x):.12g}"


@dataclass(frozen=True)
class Integer(Form):
    """The same whole number (``4.0`` and ``Fraction(4)`` are 4; ``4.5`` is never right)."""

    _needs = "exact and whole"

    def canonical(self, value: object) -> str:
        """See :meth:`Form.canonical`.

        Args:
            value: what the student handed in (any object; only plain values can be read).

        Returns:
            A whole number's digits (``4.0`` -> ``"4"``); a non-integer as ``"~4.5"``, a text no
            right answer has.

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        x = number(value)
        return str(int(x)) if _integral(x) else f"~{float(x)!r}"


@dataclass(frozen=True)
class Sig(Form):
    """The same number to ``digits`` significant figures (both sides rounded alike)."""

    digits: int = 3

    @property
    def needs(self) -> str:
        return f"right to {self.digits} significant figures"

    def canonical(self, value: object) -> str:
        """See :meth:`Form.canonical`.

        Args:
            value: what the student handed in (any object; only plain values can be read).

        Returns:
            The number rounded to ``digits`` significant figures in ``%g`` style
            (``Sig(2)``: ``8.59`` -> ``"8.6"``, ``123456`` -> ``"1.2e+05"``).

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        return f"{float(number(value)):.{self.digits}g}"


def _text(value: object) -> str:
    if type(value) is not str:
        raise Unreadable(f"a text (a str) is needed, got {_type_name(value)} {shown(value)}")
    return " ".join(value.lower().split())


@dataclass(frozen=True)
class Word(Form):
    """The same text, case and spaces aside; one of ``choices`` when they are given."""

    choices: tuple[str, ...] = ()

    def __init__(self, *choices: str) -> None:
        """Accept only ``choices`` when any are given.

        Args:
            *choices: the words a right answer is one of (any case); none means any text reads.
        """
        object.__setattr__(self, "choices", tuple(choices))

    _needs = "the right one in any case and spacing"

    def canonical(self, value: object) -> str:
        """See :meth:`Form.canonical`.

        Args:
            value: what the student handed in (any object; only plain values can be read).

        Returns:
            The text in lower case with runs of white space as one space (``" A  b"`` -> ``"a b"``).

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        text = _text(value)
        allowed = [_text(c) for c in self.choices]
        if allowed and text not in allowed:
            raise Unreadable(
                f"one of {', '.join(map(repr, self.choices))} is needed, got {shown(value)}"
            )
        return text

    def value(self, value: object) -> object:
        """See :meth:`Form.value`.

        Args:
            value: what the student handed in.

        Returns:
            The canonical text (a ``str``).

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        return self.canonical(value)


@dataclass(frozen=True)
class Shape(Form):
    """The same shape written ``8x2048``, ``8 x 2048``, ``8×2048``, ``8X2048`` or ``(8, 2048)``."""

    choices: tuple[str, ...] = ()

    def __init__(self, *choices: str) -> None:
        """Accept only ``choices`` when any are given.

        Args:
            *choices: shapes a right answer is one of, written as a student may (``"8x2048"``);
                none means any shape reads.
        """
        object.__setattr__(self, "choices", tuple(choices))

    _needs = "the right shape"

    def canonical(self, value: object) -> str:
        """See :meth:`Form.canonical`.

        Args:
            value: what the student handed in (any object; only plain values can be read).

        Returns:
            The dimensions as whole numbers joined by ``x`` (``(8, 2048)``, ``"8 × 2,048"`` ->
            ``"8x2048"``).

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        if isinstance(value, (tuple, list)) and type(value) in (tuple, list) and value:
            text = "x".join(Integer().canonical(v) for v in value)
        elif type(value) is str and _SHAPE.fullmatch(value):
            parts = re.split(r"[x×X*]", value.replace(",", "").replace("_", ""))
            text = "x".join(str(int(p)) for p in parts)
        else:
            raise Unreadable(f'a shape such as "8x2048" is needed, got {shown(value)}')
        allowed = [Shape().canonical(c) for c in self.choices]
        if allowed and text not in allowed:
            raise Unreadable(f"one of {', '.join(self.choices)} is needed, got {shown(value)}")
        return text

    def value(self, value: object) -> object:
        """See :meth:`Form.value`.

        Args:
            value: what the student handed in.

        Returns:
            The canonical text (``"8x2048"``).

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        return self.canonical(value)


@dataclass(frozen=True)
class Truth(Form):
    """``True`` or ``False`` (a numpy bool too); not 0/1, not text."""

    _needs = "the right one of True and False"

    def canonical(self, value: object) -> str:
        """See :meth:`Form.canonical`.

        Args:
            value: what the student handed in (any object; only plain values can be read).

        Returns:
            ``"true"`` or ``"false"``.

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        if type(value) is not bool:
            raise Unreadable(f"True or False is needed, got {shown(value)}")
        return "true" if value else "false"

    def value(self, value: object) -> object:
        """See :meth:`Form.value`.

        Args:
            value: what the student handed in.

        Returns:
            The answer as a Python ``bool``.

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        return self.canonical(value) == "true"


@dataclass(frozen=True)
class Ordered(Form):
    """A tuple (a list is as good) whose parts compare by ``parts``, in order."""

    parts: tuple[Form, ...] = ()

    def __init__(self, *parts: Form) -> None:
        """Compare a tuple place by place.

        Args:
            *parts: one form per place of the tuple, in order (``Ordered(Integer(), Sig(2))``).
        """
        object.__setattr__(self, "parts", tuple(parts))

    @property
    def needs(self) -> str:
        needs = list(dict.fromkeys(p.needs for p in self.parts))
        if len(needs) == 1:
            return f"right in every place, each {needs[0]}"
        return "right in every place: " + "; ".join(p.needs for p in self.parts)

    def _items(self, value: object) -> list:
        if not isinstance(value, (tuple, list)) or type(value) not in (tuple, list):
            raise Unreadable(f"a tuple of {len(self.parts)} values is needed, got {shown(value)}")
        if len(value) != len(self.parts):
            raise Unreadable(f"a tuple of {len(self.parts)} values is needed, got {shown(value)}")
        return list(value)

    def canonical(self, value: object) -> str:
        """See :meth:`Form.canonical`.

        Args:
            value: what the student handed in (any object; only plain values can be read).

        Returns:
            Each place's canonical text by its part, joined by ``;`` in parentheses
            (``"(8;2048)"``).

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        items = self._items(value)
        return "(" + ";".join(p.canonical(v) for p, v in zip(self.parts, items)) + ")"

    def value(self, value: object) -> object:
        """See :meth:`Form.value`.

        Args:
            value: what the student handed in.

        Returns:
            A tuple of each place's value by its part.

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        return tuple(p.value(v) for p, v in zip(self.parts, self._items(value)))


@dataclass(frozen=True)
class Unordered(Form):
    """A collection whose members compare by ``part``, order and repeats aside."""

    part: Form = Word()

    @property
    def needs(self) -> str:
        return f"the same members in any order, each {self.part.needs}"

    def _members(self, value: object) -> list:
        if not isinstance(value, (list, tuple, set, frozenset)) or type(value) not in CONTAINERS:
            raise Unreadable(f"a set (or list) of answers is needed, got {shown(value)}")
        return list(value)

    def canonical(self, value: object) -> str:
        """See :meth:`Form.canonical`.

        Args:
            value: what the student handed in (any object; only plain values can be read).

        Returns:
            The members' distinct canonical texts, sorted, joined by ``;`` in braces
            (``["b", "a", "a"]`` -> ``"{a;b}"``).

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        return "{" + ";".join(sorted({self.part.canonical(v) for v in self._members(value)})) + "}"

    def value(self, value: object) -> object:
        """See :meth:`Form.value`.

        Args:
            value: what the student handed in.

        Returns:
            A ``frozenset`` of each member's value by ``part``.

        Raises:
            Unreadable: the value cannot be read by this form.
        """
        return frozenset(self.part.value(v) for v in self._members(value))
