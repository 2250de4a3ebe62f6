"""The student's side of grading: instant feedback on an answer without giving the answer away.

A visible test in a lesson compares a *digest* of the student's value with the digest of the right
one: the value is normalised to a stated precision (numbers to ``sig`` significant figures, text
lower-cased with single spaces, choices sorted), then hashed with a salt that is the answer's
name, slowly (PBKDF2), so the notebook holds no answer and trying candidates one by one is slow.
The grade itself comes from the hidden tests, which compare values directly.

In an answer cell, :func:`ensure_answered` turns a blank (``name = ...``) into a clear
``NotImplementedError`` that names what to set::

    predicted_ratio = ...  # a number: how many times more score memory
    ensure_answered(predicted_ratio=predicted_ratio)

and in the test cell below, :func:`check` says right or wrong::

    check("predicted_ratio", predicted_ratio, "5c0d4f2e9a1b7c3d", sig=3)

Instructors make a digest with ``python -m course_grading digest NAME VALUE [--sig N]`` (the
instructors' package, which imports :func:`digest` from here so both sides hash alike).

The grade itself is decided outside the student's kernel, by the course's trusted checks
(``course_grading.items``), which also make sure graded work is the student's own.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent

ITERATIONS = 100_000  # about 30 ms per digest: instant for one check, slow for a brute force
DIGEST_CHARS = 16


def normalise(value: object, sig: int | None = None) -> str:
    """The canonical text of an answer (see the module docstring).

    ``sig=None`` keeps integers exact and floats to 12 significant figures; ``sig=N`` rounds every
    number to ``N`` significant figures, so ``0.6349`` and ``0.635`` agree at ``sig=3``.

    Raises:
        ValueError: the answer is still blank (``...`` or ``None``).
        TypeError: a value that is not a number, bool, string or list/tuple/set of those.
    """
    if value is None or value is Ellipsis:
        raise ValueError("there is no answer yet: the value is still empty (...)")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral) and sig is None:
        return str(int(value))
    if isinstance(value, numbers.Real):
        v = float(value)
        if not math.isfinite(v):
            return str(v)
        return f"{v:.{sig or 12}g}"
    if isinstance(value, str):
        return " ".join(value.lower().split())
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(normalise(v, sig) for v in value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(normalise(v, sig) for v in value) + "]"
    if hasattr(value, "item") and callable(value.item):  # a numpy or torch scalar
        return normalise(value.item(), sig)
    raise TypeError(
        f"an answer must be a number, a bool, a string, or a list/tuple/set of those; "
        f"got {type(value).__name__}"
    )


def digest(name: str, value: object, sig: int | None = None) -> str:
    """The salted, slow hash of ``value`` normalised to ``sig`` significant figures.

    Raises:
        ValueError, TypeError: see :func:`normalise`.
    """
    text = normalise(value, sig).encode()
    salt = f"shapes-course:{name}".encode()
    return hashlib.pbkdf2_hmac("sha256", text, salt, ITERATIONS).hex()[:DIGEST_CHARS]


def ensure_answered(**answers: object) -> None:
    """Raise ``NotImplementedError`` naming every answer still left as ``...`` (or ``None``).

    Raises:
        NotImplementedError: an answer is still blank, naming what to set.
    """
    missing = [name for name, value in answers.items() if value is Ellipsis or value is None]
    if missing:
        names = ", ".join(missing)
        raise NotImplementedError(
            f"set {names}: replace the ... on the line `{missing[0]} = ...` with your answer"
        )


def check(name: str, value: object, expected: str, sig: int | None = None) -> None:
    """Say whether ``value`` is right without revealing the right value; prints one line if it is.

    Raises:
        NotImplementedError: the answer is still blank.
        AssertionError: it is wrong (with a hint at the precision compared).
    """
    ensure_answered(**{name: value})
    try:
        got = digest(name, value, sig)
    except TypeError as exc:
        raise AssertionError(f"{name}: {exc}") from None
    precision = f" (compared to {sig} significant figures)" if sig else ""
    if got != expected:
        raise AssertionError(f"{name} is not right yet{precision}: look again at how you got it")
    print(f"{name}: right{precision}")
