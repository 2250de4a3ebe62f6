"""The student's side of grading: instant feedback on an answer without giving the answer away.

The grade is decided outside the student's kernel, by the course's trusted checks
(``course_grading.judge.items``). The test cell under an answer gives instant feedback only,
in one of two ways, and says which:

* **a property check** says ``plausible``: it reads the answer as the grader does
  (:func:`read_answer`, one normalisation for both sides, :mod:`course_lib.forms`), checks what
  the right answer must satisfy without determining it, and prints :func:`plausible`::

      ratio = read_answer("predicted_ratio", predicted_ratio, Exact())
      assert ratio > 1, "predicted_ratio: 2 × 1024 keeps more, so the factor is above 1"
      plausible("predicted_ratio", "a number above 1", Exact())

* **a digest** says ``right``: :func:`check` compares a slow, memory-hard digest (``scrypt``) of
  the answer, read and normalised by the item's :class:`~course_lib.forms.Form`, with the digest
  of the right one; the digest names the forms it was made with, so the visible test compares
  exactly as the grader does::

      check("real-scale", (scores_gb_per_layer, fused_mb_per_layer), "scrypt:sig3;sig3:9f…")

  One digest costs about 0.3 s of one core and 64 MiB, so trying candidates one by one is slow:
  each item's candidate space and the cost of searching it are in ``docs/instructors.md``.
  Instructors make a digest from the item's registration: ``python -m course_grading digest
  --item LESSON TEST_ID``.

Older lessons' tests call ``check(name, value, "<16 hex digits>", sig=N)``: a PBKDF2 digest of
:func:`normalise`'s text, salted with ``name`` (:func:`digest`). In an answer cell,
:func:`ensure_answered` turns a blank (``name = ...``) into a ``NotImplementedError`` naming what
to set.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .forms import (
    Exact,
    Form,
    Integer,
    Ordered,
    Shape,
    Sig,
    Truth,
    Unordered,
    Unreadable,
    Word,
    form_of,
    plain,
    shown,
)

__all__ = [
    "Between",
    "Exact",
    "Integer",
    "Ordered",
    "Shape",
    "Sig",
    "Truth",
    "Unordered",
    "Word",
    "check",
    "digest",
    "ensure_answered",
    "normalise",
    "plausible",
    "predicted",
    "read_answer",
    "secret_digest",
]

PACKAGE_DIR = Path(__file__).resolve().parent

ITERATIONS = 100_000  # the older PBKDF2 digests: about 30 ms each
DIGEST_CHARS = 16
#: scrypt's cost: 2**16 blocks of 1 KiB (64 MiB), about 0.3 s on one core of the course's machine.
SCRYPT = {"n": 2**16, "r": 8, "p": 1}
SCHEME = "scrypt"


def normalise(value: object, sig: int | None = None) -> str:
    """The canonical text of an answer in the older digests (see the module docstring).

    ``sig=None`` keeps integers exact and floats to 12 significant figures; ``sig=N`` rounds every
    number to ``N`` significant figures, so ``0.6349`` and ``0.635`` agree at ``sig=3``.

    Args:
        value: the answer (a number, bool, text, a numpy/torch scalar, or a list/tuple/set of
            those).
        sig: significant figures every number is rounded to; ``None`` keeps integers exact.

    Returns:
        The text the older digest hashes: ``"16"``, ``"0.635"``, ``"true"``, lower-cased text with
        single spaces, ``"[a,b]"`` for a sequence, ``"{a,b}"`` (sorted) for a set.

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
    """The older salted PBKDF2 hash of ``value`` normalised to ``sig`` significant figures.

    Args:
        name: the answer's variable name (the salt: the same value hashes differently per item).
        value: the answer.
        sig: significant figures to compare at; ``None`` is exact (floats to 12 figures).

    Returns:
        The first 16 hex digits of PBKDF2-SHA256 (100,000 iterations) of :func:`normalise`'s text.

    Raises:
        ValueError, TypeError: see :func:`normalise`.
    """
    text = normalise(value, sig).encode()
    salt = f"shapes-course:{name}".encode()
    return hashlib.pbkdf2_hmac("sha256", text, salt, ITERATIONS).hex()[:DIGEST_CHARS]


def _scrypt(label: str, text: str) -> str:
    salt = f"shapes-course:v2:{label}".encode()
    raw = hashlib.scrypt(text.encode(), salt=salt, maxmem=2**27, dklen=16, **SCRYPT)
    return raw.hex()


def secret_digest(label: str, values: Sequence[object], forms: Sequence[Form]) -> str:
    """The memory-hard digest of ``values``, each read by its form: ``scrypt:<specs>:<hex>``.

    Args:
        label: the item's label (the salt): an answer's digest differs from item to item.
        values: the right answer's values, one per form.
        forms: how each value is compared (:mod:`course_lib.forms`).

    Returns:
        ``"scrypt:<spec;spec…>:<32 hex digits>"``: the forms' specs in clear (so the visible test
        reads the answer as the grader does), then 16 bytes of scrypt (64 MiB, about 0.3 s).

    Raises:
        Unreadable: a value its form cannot read.
        ValueError: not one form per value.
    """
    if len(values) != len(forms) or not forms:
        raise ValueError(f"{label}: give one form per value ({len(values)} values)")
    text = "\x1f".join(f.canonical(plain(v)) for v, f in zip(values, forms))
    specs = ";".join(f.spec for f in forms)
    return f"{SCHEME}:{specs}:{_scrypt(label, text)}"


def forms_of_digest(expected: str) -> list[Form]:
    """The forms a :func:`secret_digest` was made with (its middle part).

    Args:
        expected: a ``"scrypt:<specs>:<hex>"`` digest.

    Returns:
        One :class:`~course_lib.forms.Form` per compared value, in order.

    Raises:
        ValueError: not such a digest.
    """
    scheme, _, rest = expected.partition(":")
    specs, _, hexed = rest.rpartition(":")
    if scheme != SCHEME or not specs or not hexed:
        raise ValueError(f"not a {SCHEME} digest: {expected[:40]!r}")
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(specs):
        depth += (ch == "(") - (ch == ")")
        if ch == ";" and depth == 0:
            parts.append(specs[start:i])
            start = i + 1
    return [form_of(p) for p in [*parts, specs[start:]]]


def ensure_answered(**answers: object) -> None:
    """Raise ``NotImplementedError`` naming every answer still left as ``...`` (or ``None``).

    Args:
        **answers: each answer by its variable name (``ensure_answered(q1_ratio=q1_ratio)``).

    Raises:
        NotImplementedError: an answer is still blank, naming what to set.
    """
    missing = [name for name, value in answers.items() if value is Ellipsis or value is None]
    if missing:
        names = ", ".join(missing)
        raise NotImplementedError(
            f"set {names}: replace the ... on the line `{missing[0]} = ...` with your answer"
        )


def read_answer(name: str, value: object, form: Form) -> object:
    """``value`` read as the grader reads it: a Python number, text or tuple (``Form.value``).

    Args:
        name: the answer's variable name, for the messages.
        value: the student's answer.
        form: how the item reads it.

    Returns:
        :meth:`Form.value <course_lib.forms.Form.value>` of the plain value: an ``int`` or
        ``float`` for a number, ``str`` for a word or shape, ``bool``, or a tuple/frozenset.

    Raises:
        NotImplementedError: the answer is still blank.
        AssertionError: it cannot be read at all (the reason says what to write instead).
    """
    ensure_answered(**{name: value})
    try:
        return form.value(plain(value))
    except Unreadable as why:
        raise AssertionError(f"{name}: {why}") from None


def plausible(name: str, checked: str, *forms: Form) -> None:
    """Print that ``name`` passed the visible property check ``checked``, and what the grade
    needs. Never "right": a property check does not determine the answer.

    Args:
        name: the answer's variable name.
        checked: what the visible test checked, in words (``"a number above 1"``).
        *forms: how the grade compares the answer (their :attr:`~course_lib.forms.Form.needs`
            are printed); none means ``"exact"``.
    """
    needs = ", ".join(dict.fromkeys(f.needs for f in forms)) or "exact"
    print(f"{name}: plausible ({checked}); the grade checks it outside your notebook ({needs})")


@dataclass(frozen=True)
class Between:
    """What makes a prediction plausible: a number in a range that holds the right one and many
    wrong ones, so the rule says nothing about which is right.

    The one rule of a prediction item, applied alike by the visible test (:func:`predicted`, in
    the student's kernel) and by the trusted check (``Evidence.recorded``, in the grader), each
    on the value its form reads. ``Between(1)`` is "above 1"; ``Between(0, 1, low_in=True)`` is
    "at least 0 and below 1".
    """

    low: float | None = None
    high: float | None = None
    low_in: bool = False  # whether ``low`` itself is plausible
    high_in: bool = False  # whether ``high`` itself is plausible

    def holds(self, x: object) -> bool:
        """Whether ``x`` (a value as its form reads it) is a plausible prediction.

        Args:
            x: the value read by the item's form (an ``int`` or ``float`` for a number).

        Returns:
            True for a finite number inside the range; False for anything else.
        """
        if type(x) not in (int, float) or not math.isfinite(x):  # type: ignore[arg-type]
            return False
        above = self.low is None or x > self.low or (self.low_in and x == self.low)  # type: ignore[operator]
        below = self.high is None or x < self.high or (self.high_in and x == self.high)  # type: ignore[operator]
        return above and below

    @property
    def words(self) -> str:
        """The rule in words, for the messages (``"a number above 1"``)."""
        parts = []
        if self.low is not None:
            parts.append(f"{'at least' if self.low_in else 'above'} {self.low:g}")
        if self.high is not None:
            parts.append(f"{'at most' if self.high_in else 'below'} {self.high:g}")
        return "a number " + " and ".join(parts) if parts else "a number"


def predicted(name: str, value: object, form: Form, rule: Between, hint: str = "") -> object:
    """A prediction's visible test: read as the grader reads it, checked by the item's rule, and
    recorded. It never says whether the prediction is right: a prediction earns its point for
    being plausible, and the points of the comparison with the measurement are for the student's
    written reasoning.

    Args:
        name: the answer's variable name.
        value: the student's prediction.
        form: how the item reads it.
        rule: the item's plausibility rule (the trusted check applies the same one).
        hint: why a value outside the rule cannot be right, in the lesson's words.

    Returns:
        The prediction as its form reads it.

    Raises:
        NotImplementedError: the prediction is still blank.
        AssertionError: it cannot be read, or it is not plausible (the message says why).
    """
    got = read_answer(name, value, form)
    if not rule.holds(got):
        why = f" ({hint})" if hint else ""
        raise AssertionError(f"{name}: {shown(got)} is not {rule.words}{why}")
    print(
        f"{name}: plausible ({rule.words}): recorded. A plausible prediction earns its point "
        "whether or not the measurement agrees; compare the two in writing after the measurement"
    )
    return got


def check(name: str, value: object, expected: str, sig: int | None = None) -> None:
    """Say whether ``value`` is right without revealing the right value; prints one line if it is.

    ``expected`` is a :func:`secret_digest` (``value`` a tuple when it names several forms) or
    an older :func:`digest` compared at ``sig`` significant figures.

    Args:
        name: the answer's variable name (the digest's salt).
        value: the student's answer (a tuple when the digest names several forms).
        expected: the digest printed by ``python -m course_grading digest``.
        sig: significant figures for an older PBKDF2 digest; ignored by an scrypt one.

    Raises:
        NotImplementedError: the answer is still blank.
        AssertionError: it is wrong, or cannot be read (the message says which, never the answer).
    """
    if not expected.startswith(SCHEME + ":"):
        return _check_older(name, value, expected, sig)
    forms = forms_of_digest(expected)
    values = list(value) if len(forms) > 1 and isinstance(value, (tuple, list)) else [value]
    if len(values) != len(forms):
        raise AssertionError(f"{name}: {len(forms)} values are compared, got {len(values)}")
    for v in values:
        ensure_answered(**{name: v})
    try:
        text = "\x1f".join(f.canonical(plain(v)) for v, f in zip(values, forms))
    except Unreadable as why:
        raise AssertionError(f"{name}: {why}") from None
    needs = ", ".join(dict.fromkeys(f.needs for f in forms))
    print(f"checking {name} (a memory-hard digest: about a second)…", flush=True)
    if f"{SCHEME}:{expected.split(':', 2)[1]}:{_scrypt(name, text)}" != expected:
        raise AssertionError(f"{name} is not right yet ({needs}): look again at how you got it")
    print(f"{name}: right ({needs})")


def _check_older(name: str, value: object, expected: str, sig: int | None) -> None:
    ensure_answered(**{name: value})
    try:
        got = digest(name, value, sig)
    except TypeError as exc:
        raise AssertionError(f"{name}: {exc}") from None
    precision = f" (compared to {sig} significant figures)" if sig else ""
    if got != expected:
        raise AssertionError(f"{name} is not right yet{precision}: look again at how you got it")
    print(f"{name}: right{precision}")


def digest_seconds(repeat: int = 3) -> float:
    """The least CPU time one :func:`secret_digest` took in ``repeat`` tries: what one
    candidate costs a brute force on one core of this machine.

    Args:
        repeat: tries (at least one is made).

    Returns:
        Seconds of this process's CPU time (``time.process_time``), the minimum over the tries.
    """
    best = math.inf
    for i in range(max(1, repeat)):
        start = time.process_time()
        _scrypt("timing", f"candidate {i}")
        best = min(best, time.process_time() - start)
    return best
