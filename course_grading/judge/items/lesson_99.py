"""Trusted checks of the fixture lesson (``tests/grading/fixtures/solutions/99_fixture``).

The grading tests' fast lesson: one graded function and one value, no torch. Its visible tests
are plain asserts, declared nowhere (no ``visible=``): the grading tests read them as they are.
"""

from __future__ import annotations

import math

from course_grading.judge.items import Evidence, Exact, Lesson, call, describe

ITEMS = Lesson("99_fixture")


@ITEMS.item("test_tokens", answer="answer_tokens", points=2, function="tokens_per_batch")
def tokens(ev: Evidence) -> str:
    """``tokens_per_batch(b, s) == b * s`` on the visible case's sibling and fresh cases.

    Args:
        ev: the submission's evidence: ``tokens_per_batch`` is called on 2 fixed and 4 drawn
            ``(b, s)``.

    Returns:
        The full-marks message.

    Raises:
        Reject: a call fails, or returns anything but the number of tokens (an ``int`` or
            ``float`` equal to ``b * s``).
    """
    cases = [(2, 8192), (3, 5)]
    cases += [(ev.rng.randint(1, 64), ev.rng.randint(1, 4096)) for _ in range(4)]
    for (b, s), result in zip(cases, ev.call([call(b, s) for b, s in cases])):
        got = result.value()
        ev.require(
            type(got) in (int, float) and got == b * s,
            f"{result.shown} returned {describe(got)}: that is not the number of tokens in a "
            f"{b} × {s} micro-batch",
        )
    return f"tokens_per_batch: right on {len(cases)} micro-batch shapes"


@ITEMS.item(
    "test_ratio",
    answer="answer_ratio",
    points=1,
    values={"attention_ratio": Exact()},
    own_work=True,
)
def ratio(ev: Evidence) -> str:
    """The attention scores' growth factor, exact (``math.isclose`` at its default 1e-9), worked out
    without ``course_lib`` in the answer cell.

    Args:
        ev: the submission's evidence: ``attention_ratio``, a number (read by ``Exact()``).

    Returns:
        The full-marks message.

    Raises:
        Reject: the value is missing, not a number, or not the factor.
    """
    got = ev.read("attention_ratio")
    ev.require(
        math.isclose(got, 8.0),
        f"attention_ratio: your value {describe(got)}; the check needs the exact factor",
    )
    return "attention_ratio: right"
