"""The one set of argument checks at the library's public boundary.

Every public function validates its arguments here, once, so a bad value gets the same clear
message everywhere (``ValueError: batch_size must be a positive int, got 0``) instead of a
traceback from deep inside torch or numpy.
"""

from __future__ import annotations

from typing import Literal

Checkpointing = Literal["none", "blocks", "attention"]
CHECKPOINTING_MODES: tuple[str, ...] = ("none", "blocks", "attention")


def positive_int(name: str, value, hint: str = "") -> int:
    """``value`` as an int >= 1, or a ``ValueError`` naming ``name`` (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        extra = f" ({hint})" if hint else ""
        raise ValueError(f"{name} must be a positive int{extra}, got {value!r}")
    return int(value)


def non_negative_int(name: str, value) -> int:
    """``value`` as an int >= 0, or a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return int(value)


def positive_number(name: str, value) -> float:
    """``value`` as a finite float > 0, or a ``ValueError`` naming ``name``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value < float("inf")
    ):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def one_of(name: str, value, choices):
    """``value`` if it is one of ``choices``, else a ``ValueError`` listing them."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {tuple(choices)}")
    return value


def checkpointing_mode(value) -> Checkpointing:
    """Normalise a checkpointing setting to ``"none"``, ``"blocks"`` or ``"attention"``.

    Accepted spellings: ``False``/``None``/``"none"`` (keep every activation), ``True``/``"blocks"``
    (recompute each whole block), ``"attention"`` (recompute only the attention half).
    """
    if value is None or value is False:
        return "none"
    if value is True:
        return "blocks"
    if isinstance(value, str) and value in CHECKPOINTING_MODES:
        return value  # type: ignore[return-value]
    raise ValueError(
        f"checkpointing={value!r} is not one of {CHECKPOINTING_MODES} (True means 'blocks', "
        "False means 'none')"
    )
