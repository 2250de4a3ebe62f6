"""Text for people: bytes in binary units, plans as tables. No torch here, so the command line
stays fast."""

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


def table(rows, notes=(), warnings=()) -> str:
    """``(label, text)`` rows as two aligned columns, then ``note:`` and ``warning:`` lines."""
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines + [f"note: {n}" for n in notes] + [f"warning: {w}" for w in warnings])
