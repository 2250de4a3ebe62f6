"""What fits: the one search for the largest value that fits a memory budget.

Every "how many rows fit" question in the library (the largest micro-batch for the TinyGPT plan
and the Hugging Face planner, the longest row or largest batch under a budget in lesson 4, lesson
5's measured search) is :func:`find_largest` over a monotone probe ``fits(n)``: if ``n`` fits,
every smaller value fits. A probe is either

* **measured**: a real training step at ``n`` (:class:`course_lib.memory.MemoryProbe`); an
  out-of-memory error counts as "does not fit" and memory is freed before the next probe; or
* **predicted**: a memory model's bytes at ``n`` against the budget (:class:`PredictedProbe`).

No torch here: ``course_lib.budget`` builds on this module and lesson 1 imports it first.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from ._checks import memory_budget, positive_int

Fits = Callable[[int], bool]


class NoBatchFitsError(RuntimeError):
    """Even a value of one (one row, one token) does not fit."""


@dataclass
class SearchResult:
    """What a search found.

    ``batch_size``: the largest value that fitted; ``tries``: probes made; ``history``: each probe
    ``(n, fitted)`` in order; ``capped``: stopped at ``limit`` (a larger value may fit).
    """

    batch_size: int
    tries: int
    history: list[tuple[int, bool]]
    capped: bool = False


@dataclass
class PredictedProbe:
    """``fits(n)``: does a memory model's prediction at ``n`` stay within the budget?

    ``needed_at(n)`` returns bytes; ``needed`` keeps every prediction made, by ``n`` (as
    :class:`course_lib.memory.MemoryProbe` keeps its measurements), so a figure can draw either.
    """

    needed_at: Callable[[int], int]
    memory_budget: int
    needed: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.memory_budget = memory_budget(self.memory_budget)

    def __call__(self, n: int) -> bool:
        """Predict the bytes at ``n`` (kept in ``needed``); True when they fit the budget.

        Args:
            n: the value tried (rows, or tokens per row).

        Returns:
            True when ``needed_at(n)`` bytes are at most ``memory_budget`` bytes.
        """
        self.needed[n] = int(self.needed_at(n))
        return self.needed[n] <= self.memory_budget


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an error means "this size did not fit".

    Args:
        exc: the error a probe raised.

    Returns:
        True for ``torch.OutOfMemoryError`` (CUDA), ``MemoryError``, and the CPU allocator's
        ``RuntimeError("... can't allocate memory ...")``; False for anything else (a real bug,
        which the search re-raises).
    """
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def free_memory() -> None:
    """Collect unreachable tensors and return cached GPU blocks, so the next probe starts clean.

    Without torch imported there is no GPU cache to return (and no tensor to collect but Python
    objects), so torch is never imported here for it.
    """
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _prober(fits: Fits, history: list[tuple[int, bool]]) -> Fits:
    def probe(n: int) -> bool:
        assert all(m != n for m, _ in history), f"value {n} probed twice"
        oom = False
        try:
            fitted = bool(fits(n))
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            fitted, oom = False, True
        if oom:  # outside the except block, so the traceback's tensors can be collected
            free_memory()
        history.append((n, fitted))
        return fitted

    return probe


def _no_fit(history: list[tuple[int, bool]]) -> NoBatchFitsError:
    return NoBatchFitsError(
        f"even batch size 1 does not fit (probes: {history}); turn on activation checkpointing, "
        "shorten seq_len, use attn_impl='sdpa' instead of 'eager', or get more memory"
    )


def find_largest(fits: Fits, start: int = 1, limit: int | None = None) -> SearchResult:
    """The exact largest ``n <= limit`` with ``fits(n)``, for a monotone ``fits``.

    Double from ``start`` while it fits (``start, 2 start, 4 start, ...``, capped at ``limit``);
    at the first failure, bisect between the last fit and that failure. If ``start`` itself fails,
    bisect in ``[1, start)``. For a threshold ``L`` and ``start=1``: at most
    ``2 * ceil(log2 L) + 2`` probes, none repeated.

    Args:
        fits: the probe, measured or predicted (module docstring). An out-of-memory error from it
            (:func:`is_out_of_memory`) counts as "does not fit".
        start: the first value tried (a good guess saves probes).
        limit: the largest value worth trying (``None``: no cap).

    Returns:
        :class:`SearchResult`; ``capped`` when ``limit`` itself fitted.

    Raises:
        ValueError: ``start`` or ``limit`` is not a positive int, or ``limit < start``.
        NoBatchFitsError: not even 1 fits.
    """
    positive_int("start", start)
    if limit is not None and positive_int("limit", limit) < start:
        raise ValueError(f"limit={limit} is below start={start}; raise limit or lower start")
    history: list[tuple[int, bool]] = []
    probe = _prober(fits, history)
    lo, hi = 0, None  # lo: largest size known to fit (0: none yet); hi: smallest known to fail
    if probe(start):
        lo = start
        while hi is None and lo != limit:
            n = 2 * lo if limit is None else min(2 * lo, limit)
            lo, hi = (n, None) if probe(n) else (lo, n)
    else:
        hi = start
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if probe(mid) else (lo, mid)
    if lo == 0:
        raise _no_fit(history)
    return SearchResult(lo, len(history), history, capped=hi is None)


def largest_or_zero(fits: Fits, limit: int) -> int:
    """:func:`find_largest` from 1 up to ``limit``, or 0 when not even 1 fits.

    Args:
        fits: the probe, measured or predicted: True when ``n`` fits (an out-of-memory error
            counts as False).
        limit: the largest value worth trying.

    Returns:
        The largest fitting value in ``1 .. limit``; 0 when 1 does not fit (a table's "does not
        fit" entry, instead of an error).
    """
    try:
        return find_largest(fits, start=1, limit=limit).batch_size
    except NoBatchFitsError:
        return 0


def shrink_search(fits: Fits, start: int = 128, factor: float = 0.9) -> SearchResult:
    """accelerate's rule, for comparison: try ``start``, and after each failure
    ``n = int(n * factor)`` until a size fits. Neither exact nor logarithmic.

    Args:
        fits: the probe, measured or predicted: True when ``n`` fits (an out-of-memory error
            counts as False).
        start: the first size tried.
        factor: how much each failure shrinks the size (accelerate uses 0.9).

    Returns:
        :class:`SearchResult` of the first size that fitted (not always the largest: the steps can
        skip over it).

    Raises:
        ValueError: ``start`` is not a positive int, or ``factor`` is not in (0, 1).
        NoBatchFitsError: the sizes reached 0 without a fit.
    """
    positive_int("start", start)
    if not 0 < factor < 1:
        raise ValueError(f"factor must lie strictly between 0 and 1, got {factor}")
    history: list[tuple[int, bool]] = []
    probe, n = _prober(fits, history), start
    while n > 0:
        if probe(n):
            return SearchResult(n, len(history), history)
        n = int(n * factor)
    raise _no_fit(history)
