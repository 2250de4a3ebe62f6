"""Budget: the three numbers that multiply, in examples and in tokens. No torch here.

With ``B`` the per-device micro-batch, ``A`` the gradient accumulation steps, ``D`` the devices
and ``T`` the sequence length, the optimiser sees per step::

    effective_batch_size = B * A * D            (examples)
    tokens_per_step      = B * A * D * T        (tokens, counting full rows)

Memory is paid for ``B x T`` tokens at a time on each device; the update behaves like
``B * A * D`` examples. :func:`find_max_batch_size` finds the largest ``B`` that fits (the search
lives in :mod:`course_lib.fit`); :mod:`course_lib.plan` turns these numbers into a training plan.
"""

from __future__ import annotations

import warnings

from ._checks import positive_int
from .fit import Fits, NoBatchFitsError, SearchResult, find_largest

# find_max_batch_size returns a SearchResult and raises NoBatchFitsError: importable from here too.
__all__ = [
    "NoBatchFitsError",
    "SearchResult",
    "effective_batch_size",
    "find_max_batch_size",
    "steps_per_epoch",
    "tokens_per_step",
]


def effective_batch_size(
    micro_batch_size: int | None = None,
    grad_accum_steps: int | None = None,
    n_devices: int = 1,
    *,
    per_device_batch_size: int | None = None,
) -> int:
    """Examples per optimiser step: ``micro_batch_size * grad_accum_steps * n_devices``.

    A common fine-tuning config, ``per_device_train_batch_size=2`` with
    ``gradient_accumulation_steps=8`` on one GPU: ``effective_batch_size(2, 8) == 16``.

    Args:
        micro_batch_size: rows per forward/backward pass on one device.
        grad_accum_steps: micro-batches per optimiser step.
        n_devices: data-parallel replicas.
        per_device_batch_size: the old name of ``micro_batch_size``, accepted for this release
            with a ``DeprecationWarning``.

    Returns:
        The effective batch, in examples.

    Raises:
        ValueError: a value that is not a positive int, or a missing one.
    """
    if per_device_batch_size is not None:
        warnings.warn(
            "effective_batch_size(per_device_batch_size=...) is now micro_batch_size=...",
            DeprecationWarning,
            stacklevel=2,
        )
        if micro_batch_size is not None:
            raise ValueError("pass micro_batch_size or per_device_batch_size, not both")
        micro_batch_size = per_device_batch_size
    positive_int("micro_batch_size", micro_batch_size)
    positive_int("grad_accum_steps", grad_accum_steps)
    assert micro_batch_size is not None and grad_accum_steps is not None  # checked above
    return micro_batch_size * grad_accum_steps * positive_int("n_devices", n_devices)


def tokens_per_step(
    micro_batch_size: int, seq_len: int, grad_accum_steps: int = 1, n_devices: int = 1
) -> int:
    """Tokens per optimiser step: ``micro_batch_size * seq_len * grad_accum_steps * n_devices``.

    Counts full rows of ``seq_len`` tokens (packed data, or the worst case). With padding the real
    count is lower: log the non-pad tokens during training too.

    Args:
        micro_batch_size: rows per forward/backward pass on one device.
        seq_len: tokens per row.
        grad_accum_steps: micro-batches per optimiser step.
        n_devices: data-parallel replicas.

    Returns:
        Tokens per optimiser step (``tokens_per_step(2, 1024, 8) == 16384``).

    Raises:
        ValueError: a value that is not a positive int.
    """
    positive_int("seq_len", seq_len)
    return effective_batch_size(micro_batch_size, grad_accum_steps, n_devices) * seq_len


def steps_per_epoch(dataset_size: int, effective_batch: int, drop_last: bool = False) -> int:
    """Optimiser steps in one pass over ``dataset_size`` examples.

    ``drop_last=False``: the final partial window is a step too, ``ceil(N / E)``.
    ``drop_last=True``: full steps only, ``N // E``. The small-dataset trap in numbers: 800
    examples at an effective batch of 64 is ``800 // 64 == 12`` full optimiser steps; the last 32
    examples make a thirteenth, half-sized step unless they are dropped.

    Args:
        dataset_size: examples in the dataset ``N``.
        effective_batch: examples per optimiser step ``E`` (:func:`effective_batch_size`).
        drop_last: count only full steps.

    Returns:
        Optimiser steps per epoch: ``ceil(N / E)``, or ``N // E`` with ``drop_last``.

    Raises:
        ValueError: a size that is not a positive int.
    """
    positive_int("dataset_size", dataset_size)
    positive_int("effective_batch", effective_batch)
    return dataset_size // effective_batch if drop_last else -(-dataset_size // effective_batch)


def find_max_batch_size(fits: Fits, start: int = 1, limit: int | None = None) -> SearchResult:
    """The exact largest ``n <= limit`` with ``fits(n)``, for a monotone ``fits``: doubling from
    ``start``, then bisection (:func:`course_lib.fit.find_largest`, which this calls).

    Threshold 37: ``start=1`` finds 37 in 12 probes (1, 2, 4, ..., 64, then 48, 40, 36, 38, 37);
    ``start=128`` in 8 (128, 64, 32, 48, 40, 36, 38, 37). accelerate's
    ``find_executable_batch_size`` from 128 (``n = int(0.9 * n)`` after each OOM; see
    :func:`course_lib.fit.shrink_search`) needs 12 probes and stops at 36, because its steps skip
    over 37.

    Args:
        fits: ``fits(n)``: does a step at micro-batch ``n`` fit? Monotone; an out-of-memory error
            counts as False (a :class:`~course_lib.memory.MemoryProbe` or a
            :class:`~course_lib.fit.PredictedProbe`).
        start: the first micro-batch tried.
        limit: the largest worth trying (``None``: no cap).

    Returns:
        :class:`SearchResult`: ``batch_size`` the largest micro-batch that fits, ``tries`` and
        ``history`` the probes, ``capped`` when ``limit`` itself fitted.

    Raises:
        ValueError: ``start`` or ``limit`` is not a positive int, or ``limit < start``.
        NoBatchFitsError: size 1 does not fit.
    """
    return find_largest(fits, start, limit)
