"""Sizes for people: bytes in binary units. No torch here, so the command line stays fast."""

from __future__ import annotations


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``: binary units, three significant figures (``'1002 MiB'``, not
    ``'1e+03 MiB'``, just below the next unit)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            if unit == "B" or abs(n) >= 1000:
                return f"{n:.0f} {unit}"
            return f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
