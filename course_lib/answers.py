"""The student's side of grading: instant feedback on an answer without giving the answer away.

The grade is decided outside the student's kernel, by the course's trusted checks
(``course_grading.judge.items``). The test cell under an answer gives instant feedback only, and
never says *right*: a visible check that could confirm an answer would let a student find it by
trying values (issue 27 found a search over formulas of the question's own numbers confirming
lesson 1's real-scale figures, behind a slow scrypt digest, in 33 seconds). Two kinds:

* **a property check** says ``plausible``: it reads the answer as the grader does
  (:func:`read_answer`, one normalisation for both sides, :mod:`course_lib.forms`), checks what
  the right answer must satisfy without determining it, and prints :func:`plausible`::

      per = read_answer("scores_gb_per_layer", scores_gb_per_layer, Sig(3))
      assert per > 0, "real-scale: bytes kept are a positive amount"
      plausible("real-scale", "positive figures, all layers 32 times one layer", Sig(3))

* **a prediction** (:func:`predicted`) reads the value the same way, checks the item's
  plausibility rule (a :class:`Between`, the very rule the trusted check applies) and says the
  prediction was recorded: a plausible prediction earns its point whether or not the measurement
  agrees, and the points are on the written comparison after the measurement::

      predicted("predicted_ratio", predicted_ratio, Exact(), Between(1))

In an answer cell, :func:`ensure_answered` turns a blank (``name = ...``) into a
``NotImplementedError`` naming what to set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    "ensure_answered",
    "plausible",
    "predicted",
    "read_answer",
]


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


def predicted(name: str, value: object, form: Form, rule: Between, hint: str = "") -> None:
    """A prediction's visible test: read as the grader reads it, checked by the item's rule, and
    recorded. It never says whether the prediction is right: a prediction earns its point for
    being plausible, and the points of the comparison with the measurement are for the student's
    written reasoning.

    It returns nothing, on purpose: the call ends its test cell, and a value there would be the
    cell's result (``Out: 16``), which nbgrader's Validate reads as a partial-credit score and
    stops on (``partial credit cannot be greater than maximum points for cell``).

    Args:
        name: the answer's variable name.
        value: the student's prediction.
        form: how the item reads it.
        rule: the item's plausibility rule (the trusted check applies the same one).
        hint: why a value outside the rule cannot be right, in the lesson's words.

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
