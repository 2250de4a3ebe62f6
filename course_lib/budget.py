"""Budget: the three numbers that multiply, and the search for the largest micro-batch that fits.

With ``B`` the per-device micro-batch, ``A`` the gradient accumulation steps, ``D`` the devices
and ``T`` the sequence length, the optimiser sees per step::

    effective_batch_size = B * A * D            (examples)
    tokens_per_step      = B * A * D * T        (tokens, counting full rows)

Memory is paid for ``B x T`` tokens at a time on each device; the update behaves like
``B * A * D`` examples. :func:`find_max_batch_size` finds the largest ``B`` by doubling then
bisection, with a measured probe (:class:`MemoryProbe`) or any ``fits(n)``; :mod:`course_lib.plan`
turns these into a training plan.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import memory
from ._checks import positive_int
from .model import TinyGPT, TinyGPTConfig

ADAMW_STATE_BYTES = 8  # two fp32 moments (exp_avg, exp_avg_sq) per parameter


def effective_batch_size(
    per_device_batch_size: int, grad_accum_steps: int, n_devices: int = 1
) -> int:
    """Examples per optimiser step: ``per_device_batch_size * grad_accum_steps * n_devices``.

    A common fine-tuning config, ``per_device_train_batch_size=2`` with
    ``gradient_accumulation_steps=8`` on one GPU: ``effective_batch_size(2, 8) == 16``.
    """
    positive_int("per_device_batch_size", per_device_batch_size)
    positive_int("grad_accum_steps", grad_accum_steps)
    return per_device_batch_size * grad_accum_steps * positive_int("n_devices", n_devices)


def tokens_per_step(
    micro_batch_size: int, seq_len: int, grad_accum_steps: int = 1, n_devices: int = 1
) -> int:
    """Tokens per optimiser step: ``micro_batch_size * seq_len * grad_accum_steps * n_devices``.

    Counts full rows of ``seq_len`` tokens (packed data, or the worst case). With padding the real
    count is lower: log the non-pad tokens during training too.
    """
    positive_int("seq_len", seq_len)
    return effective_batch_size(micro_batch_size, grad_accum_steps, n_devices) * seq_len


def steps_per_epoch(dataset_size: int, effective_batch: int, drop_last: bool = False) -> int:
    """Optimiser steps in one pass over ``dataset_size`` examples.

    ``drop_last=False``: the final partial window is a step too, ``ceil(N / E)``.
    ``drop_last=True``: full steps only, ``N // E``. The small-dataset trap in numbers: 800
    examples at an effective batch of 64 is ``800 // 64 == 12`` full optimiser steps; the last 32
    examples make a thirteenth, half-sized step unless they are dropped.
    """
    positive_int("dataset_size", dataset_size)
    positive_int("effective_batch", effective_batch)
    return dataset_size // effective_batch if drop_last else -(-dataset_size // effective_batch)


def choose_shape(m_max, n_devices, seq_len, dataset_size, tmin, tmax, min_tokens, min_steps):
    """Best ``(micro, accum, devices)`` with ``tmin <= m*a*d <= tmax``, ranked by: tokens per step
    reach ``min_tokens``; at least ``min_steps`` full steps per epoch; more devices; a larger
    micro-batch; fewer accumulation steps. ``a`` is the least meeting both lower targets."""
    best, best_key = None, None
    for d in range(min(n_devices, tmax), 0, -1):
        for m in range(min(m_max, tmax // d), 0, -1):
            md = m * d
            a_lo, a_hi = max(1, -(-tmin // md)), tmax // md
            if a_lo > a_hi:
                continue
            a = min(max(a_lo, -(-min_tokens // (md * seq_len))), a_hi)
            key = (md * a * seq_len >= min_tokens, dataset_size // (md * a) >= min_steps, d, m, -a)
            if best_key is None or key > best_key:
                best, best_key = (m, a, d), key
            if key[0] and key[1]:  # the first fully satisfying one in (d, m) order is the best
                return best
    return best


class NoBatchFitsError(RuntimeError):
    """Even a batch of one does not fit."""


def is_out_of_memory(exc: BaseException) -> bool:
    """True for errors that mean "this size did not fit": ``torch.OutOfMemoryError`` (CUDA),
    ``MemoryError``, and the CPU allocator's ``RuntimeError("... can't allocate memory ...")``."""
    if isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def free_memory() -> None:
    """Collect unreachable tensors and return cached GPU blocks, so the next probe starts clean."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass
class SearchResult:
    """``batch_size``: the largest size that fitted; ``tries``: probes made; ``history``: each
    probe ``(n, fitted)`` in order; ``capped``: stopped at ``limit`` (a larger size may fit)."""

    batch_size: int
    tries: int
    history: list[tuple[int, bool]]
    capped: bool = False


def _prober(fits: Callable[[int], bool], history: list) -> Callable[[int], bool]:
    def probe(n: int) -> bool:
        assert all(m != n for m, _ in history), f"batch size {n} probed twice"
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


def _no_fit(history: list) -> NoBatchFitsError:
    return NoBatchFitsError(
        f"even batch size 1 does not fit (probes: {history}); turn on activation checkpointing, "
        "shorten seq_len, use attn_impl='sdpa' instead of 'eager', or get more memory"
    )


def find_max_batch_size(
    fits: Callable[[int], bool], start: int = 1, limit: int | None = None
) -> SearchResult:
    """The exact largest ``n <= limit`` with ``fits(n)``, for a monotone ``fits`` (if ``n`` fits,
    every smaller size fits).

    Double from ``start`` while it fits (``start, 2 start, 4 start, ...``, capped at ``limit``);
    at the first failure, bisect between the last fit and that failure. If ``start`` itself fails,
    bisect in ``[1, start)``. For a threshold ``L`` and ``start=1``: at most
    ``2 * ceil(log2 L) + 2`` probes, none repeated. A probe that raises an out-of-memory error
    (:func:`is_out_of_memory`) counts as "does not fit" and memory is freed before the next one.
    Raises :class:`NoBatchFitsError` when size 1 fails.

    Threshold 37: ``start=1`` finds 37 in 12 probes (1, 2, 4, ..., 64, then 48, 40, 36, 38, 37);
    ``start=128`` in 8 (128, 64, 32, 48, 40, 36, 38, 37). accelerate's
    ``find_executable_batch_size`` from 128 (``n = int(0.9 * n)`` after each OOM; see
    :func:`shrink_search`) needs 12 probes and stops at 36, because its steps skip over 37.
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


def shrink_search(
    fits: Callable[[int], bool], start: int = 128, factor: float = 0.9
) -> SearchResult:
    """accelerate's rule, for comparison: try ``start``, and after each failure
    ``n = int(n * factor)`` until a size fits. Neither exact nor logarithmic."""
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


class MemoryProbe:
    """``fits(n)``: does one training step of :class:`TinyGPT` at ``n x seq_len`` fit the budget?

    Runs a real forward + backward at the *worst-case* shape (``n`` full rows of ``seq_len``
    tokens, every token a label) under :func:`memory.measure` and adds what exists before it::

        needed(n) = weights + AdamW state (8 bytes/param) + measured peak (activations + grads)

    On the CPU the peak is counted exactly and compared with ``budget_bytes``. On a GPU the
    attempt is real (the AdamW state is allocated too, so an OOM is honest; ``budget_bytes=None``
    lets the card decide); an out-of-memory error propagates and :func:`find_max_batch_size`
    counts it as "does not fit". ``needed`` keeps every figure, by ``n``.
    """

    def __init__(
        self,
        config: TinyGPTConfig,
        seq_len: int,
        budget_bytes: int | None = None,
        device=None,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
    ) -> None:
        if positive_int("seq_len", seq_len) > config.max_seq_len:
            raise ValueError(f"seq_len={seq_len} exceeds config.max_seq_len={config.max_seq_len}")
        self.config, self.seq_len, self.budget_bytes = config, seq_len, budget_bytes
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        with torch.random.fork_rng(devices=[]):  # seeded weights, the caller's RNG untouched
            torch.manual_seed(seed)
            self.model = TinyGPT(config).to(self.device, dtype)
        params = list(self.model.parameters())
        self.fixed_bytes = sum(p.numel() * (p.element_size() + ADAMW_STATE_BYTES) for p in params)
        on_gpu = self.device.type == "cuda"
        self._adamw_state = [torch.zeros(2, *p.shape, device=self.device) for p in params if on_gpu]
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.needed: dict[int, int] = {}

    def __call__(self, n: int) -> bool:
        ids = torch.randint(
            self.config.vocab_size, (n, self.seq_len), device=self.device, generator=self.generator
        )  # (n, T): full rows, the worst case
        batch = {"input_ids": ids, "labels": ids}
        report = memory.measure_step(self.model, batch, device=self.device)
        self.needed[n] = self.fixed_bytes + report.peak_bytes
        return self.budget_bytes is None or self.needed[n] <= self.budget_bytes


def memory_probe(
    config: TinyGPTConfig,
    seq_len: int,
    budget_bytes: int | None = None,
    device=None,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> MemoryProbe:
    """A measured ``fits(n)`` for :func:`find_max_batch_size`; see :class:`MemoryProbe`."""
    return MemoryProbe(config, seq_len, budget_bytes, device, dtype, seed)
