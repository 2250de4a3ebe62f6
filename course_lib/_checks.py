"""The one set of argument checks at the library's public boundary.

Every public function validates its arguments here, once, so a bad value gets the same clear
message everywhere (``ValueError: batch_size must be a positive int, got 0``) instead of a
traceback from deep inside torch or numpy. The checkpointing mode is defined here too: one
``Literal`` type and one function that reads what people pass.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from typing import Literal, TypeVar

from .units import parse_bytes

T = TypeVar("T")

#: What a training step recomputes in its backward pass: ``"off"`` nothing (every activation is
#: kept), ``"blocks"`` each whole transformer block, ``"attention"`` only a block's attention half
#: (TinyGPT only). Which blocks are checkpointed is the separate ``checkpoint_every`` stride.
Checkpointing = Literal["off", "blocks", "attention"]
CHECKPOINTING_MODES: tuple[Checkpointing, ...] = ("off", "blocks", "attention")


def positive_int(name: str, value: object, hint: str = "") -> int:
    """``value`` as an int >= 1.

    Raises:
        ValueError: ``value`` is not an int (bools are not ints here) or is below 1.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        extra = f" ({hint})" if hint else ""
        raise ValueError(f"{name} must be a positive int{extra}, got {value!r}")
    return int(value)


def non_negative_int(name: str, value: object) -> int:
    """``value`` as an int >= 0.

    Raises:
        ValueError: ``value`` is not an int or is negative.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return int(value)


def positive_number(name: str, value: object) -> float:
    """``value`` as a finite float > 0.

    Raises:
        ValueError: ``value`` is not a number, or is 0, negative, infinite or NaN.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value < float("inf")
    ):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def one_of(name: str, value: T, choices: Collection[T]) -> T:
    """``value`` if it is one of ``choices``.

    Raises:
        ValueError: it is not, listing the choices.
    """
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {tuple(choices)}")
    return value


def seq_len_within(seq_len: object, max_seq_len: int, name: str = "seq_len") -> int:
    """``seq_len`` as a positive int no longer than ``max_seq_len`` (the model's RoPE tables).

    Raises:
        ValueError: ``seq_len`` is not a positive int, or exceeds ``max_seq_len`` (naming both
            and the two ways out).
    """
    n = positive_int(name, seq_len)
    if n > max_seq_len:
        raise ValueError(
            f"{name}={n} is longer than max_seq_len={max_seq_len}; build the config with "
            "max_seq_len >= seq_len, or use shorter rows"
        )
    return n


def memory_budget(value: object, name: str = "memory_budget") -> int:
    """A memory budget in bytes: an int, or a string with a unit (``"24GiB"``, ``"80GB"``).

    Raises:
        ValueError: see :func:`course_lib.units.parse_bytes` (a bare number has no unit).
    """
    return parse_bytes(value, name)


def checkpointing_mode(value: object) -> Checkpointing:
    """Read a checkpointing setting as one of :data:`CHECKPOINTING_MODES`.

    Args:
        value: ``"off"``, ``"blocks"`` or ``"attention"``; ``True`` means ``"blocks"``,
            ``False`` and ``None`` mean ``"off"``. The old spelling ``"none"`` still reads as
            ``"off"`` for this release, with a ``DeprecationWarning``.

    Returns:
        The mode, one of ``"off"``, ``"blocks"``, ``"attention"``.

    Raises:
        ValueError: any other value, listing the accepted ones.
    """
    if value is None or value is False:
        return "off"
    if value is True:
        return "blocks"
    if value == "none":
        warnings.warn(
            "checkpointing='none' is now spelled 'off'; 'none' stops working in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
        return "off"
    if value in CHECKPOINTING_MODES:
        return value
    raise ValueError(
        f"checkpointing={value!r} is not one of {CHECKPOINTING_MODES} (True means 'blocks', "
        "False means 'off')"
    )
