"""Byte sizes, dtypes and memory amounts: the numbers every memory figure is written in.

One home for the element sizes the memory models count with (``FP32``, ``INT64``, AdamW's state
per parameter), the dtype names people type (``"bf16"``, ``torch.bfloat16``, ``"bfloat16"``) and a
memory budget as people write it (``"24GiB"``, ``"80GB"``, ``"500MiB"``). No torch here, so the
command line and lesson 1's first import stay fast.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

KIB, MIB, GIB, TIB = 2**10, 2**20, 2**30, 2**40

FP32 = 4  # bytes of a float32 element: norm statistics, log-sum-exp, log-probabilities
INT64 = 8  # bytes of an int64 element: labels, position ids
ADAMW_STATE_BYTES = 8  # AdamW's two fp32 moments (exp_avg, exp_avg_sq) per trained parameter

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16",
                 "half": "float16"}  # fmt: skip

# Binary units are powers of 1024, decimal ones powers of 1000: "80GB" is 80e9 bytes, less than
# "80GiB" (85.9e9). Keys are lower-case; "b" alone is bytes.
BYTE_UNITS = {"b": 1, "kib": KIB, "mib": MIB, "gib": GIB, "tib": TIB,
              "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}  # fmt: skip
_AMOUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def dtype_name(dtype: object) -> str:
    """The canonical name of a floating dtype the memory models know.

    Args:
        dtype: ``torch.bfloat16``, ``"bf16"`` or ``"bfloat16"`` (also fp32/float32, fp16/float16).

    Returns:
        ``"float32"``, ``"bfloat16"`` or ``"float16"``.

    Raises:
        ValueError: any other dtype, naming the accepted spellings.
    """
    name = str(dtype).removeprefix("torch.")
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise ValueError(
            f"dtype={dtype!r} is not one of float32, bfloat16, float16 (or fp32, bf16, fp16)"
        )
    return name


def parse_bytes(amount: object, name: str = "memory_budget") -> int:
    """A memory amount in bytes: an int is bytes, a string carries its unit.

    Args:
        amount: an int (bytes) or a string with a unit: ``"24GiB"`` (binary, 24 * 2**30),
            ``"80GB"`` (decimal, 80 * 10**9), ``"500MiB"``, ``"1.5 GiB"``; case and spaces are
            ignored.
        name: what the amount is, for the error message.

    Returns:
        The amount in whole bytes (rounded down), at least 1.

    Raises:
        ValueError: a bare number in a string (``"24"``: GiB or GB?), an unknown unit, a float
            or bool instead of an int, or an amount that is not positive.
    """
    if isinstance(amount, int) and not isinstance(amount, bool):
        if amount <= 0:
            raise ValueError(f"{name} must be a positive number of bytes, got {amount}")
        return amount
    if not isinstance(amount, str):
        raise ValueError(
            f"{name}={amount!r}: give bytes as an int, or a string with a unit such as "
            "'24GiB' or '80GB'"
        )
    match = _AMOUNT.match(amount)
    if match is None:
        raise ValueError(f"{name}={amount!r} is not an amount like '24GiB', '80GB' or '500MiB'")
    number, unit = float(match.group(1)), match.group(2).lower()
    if not unit:
        raise ValueError(
            f"{name}={amount!r} has no unit: add one, e.g. '{match.group(1)}GiB' "
            f"(2**30 bytes) or '{match.group(1)}GB' (10**9 bytes)"
        )
    if unit not in BYTE_UNITS:
        raise ValueError(
            f"{name}={amount!r}: unknown unit {match.group(2)!r}; use B, KiB, MiB, GiB, TiB "
            "(binary) or kB, MB, GB, TB (decimal)"
        )
    total = math.floor(number * BYTE_UNITS[unit])
    if total <= 0:
        raise ValueError(f"{name}={amount!r} is not a positive amount of memory")
    return total


def format_bytes(n: float) -> str:
    """Bytes in binary units, three significant figures.

    Args:
        n: a number of bytes (negative for a difference).

    Returns:
        ``1536`` -> ``'1.5 KiB'``; ``'1002 MiB'`` rather than ``'1e+03 MiB'`` just below the next
        unit.

    Raises:
        AssertionError: never (every number has a unit); kept as a guard.
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            if unit == "B" or abs(n) >= 1000:
                return f"{n:.0f} {unit}"
            return f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def table(
    rows: Sequence[tuple[str, str]], notes: Sequence[str] = (), warnings: Sequence[str] = ()
) -> str:
    """A plan as text: ``(label, text)`` rows in two aligned columns, then ``note:`` and
    ``warning:`` lines.

    Args:
        rows: the ``(label, text)`` pairs, in order.
        notes: lines printed after the rows as ``note: ...``.
        warnings: lines printed last as ``warning: ...``.

    Returns:
        The table, lines joined by newlines.
    """
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines + [f"note: {n}" for n in notes] + [f"warning: {w}" for w in warnings])
