"""What the model computes on under each batching scheme, for the same example lengths (lesson 2).

Three schemes see the same examples in an epoch: random batches padded to their longest,
length-grouped batches (:class:`~course_lib.collate.LengthGroupedSampler`) padded the same way,
and rows of ``capacity`` tokens packed by best-fit decreasing (:func:`~course_lib.packing.
pack_lengths`). :func:`batch_layouts` picks a representative batch of each and the padding
fraction of that batch and of the whole epoch; :func:`course_lib.figures.padding.
plot_batch_layouts` draws it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import positive_int
from .collate import LengthGroupedSampler, padding_stats, random_batches
from .packing import pack_lengths

SCHEMES = ("random", "length-grouped", "packed")


@dataclass
class Layout:
    """One scheme's representative rows: ``rows[r]`` lists the lengths (tokens) of the documents
    in row ``r``, each row padded to ``width``. ``waste``: padding fraction of these rows;
    ``epoch_waste``: of the whole epoch."""

    scheme: str
    rows: list[list[int]]
    width: int
    waste: float
    epoch_waste: float


@dataclass
class BatchLayouts:
    """:func:`batch_layouts`: one :class:`Layout` per scheme, in :data:`SCHEMES` order."""

    n_examples: int
    mean_length: float
    batch_size: int
    capacity: int
    layouts: list[Layout]


def _typical_padded_batch(scheme: str, lengths: np.ndarray, batches) -> Layout:
    """The batch with the median waste of the epoch, one example per row, longest first."""
    as_lengths = [lengths[b].tolist() for b in batches]
    waste = [padding_stats([b]).waste_fraction for b in as_lengths]
    median = int(np.argsort(waste, kind="stable")[len(waste) // 2])
    typical = as_lengths[median]
    return Layout(
        scheme=scheme,
        rows=[[n] for n in sorted(typical, reverse=True)],
        width=max(typical),
        waste=waste[median],
        epoch_waste=padding_stats(as_lengths).waste_fraction,
    )


def _packed_sample(lengths: np.ndarray, capacity: int, real_tokens: int, seed: int) -> Layout:
    """As many packed rows (picked at random with ``seed``) as hold ``real_tokens``."""
    packed = [lengths[r].tolist() for r in pack_lengths(lengths, capacity)]
    k = min(len(packed), max(1, -(-real_tokens // capacity)))
    picked = sorted(np.random.default_rng(seed).choice(len(packed), size=k, replace=False))
    shown = [packed[i] for i in picked]
    return Layout(
        scheme="packed",
        rows=shown,
        width=capacity,
        waste=1 - sum(map(sum, shown)) / (k * capacity),
        epoch_waste=1 - int(lengths.sum()) / (len(packed) * capacity),
    )


def batch_layouts(lengths, batch_size: int, capacity: int, seed: int = 0) -> BatchLayouts:
    """Representative rows of the three schemes over one epoch of examples of ``lengths`` tokens.

    Random and length-grouped: the batch of ``batch_size`` examples with the median padding
    waste of the epoch (``seed`` shuffles both). Packed: as many rows of ``capacity`` as hold the
    real tokens of that random batch, picked at random (``seed``).
    """
    positive_int("batch_size", batch_size)
    positive_int("capacity", capacity)
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1 or lengths.size == 0:
        raise ValueError(f"lengths must be a non-empty 1-D sequence, got shape {lengths.shape}")
    random_layout = _typical_padded_batch(
        "random", lengths, random_batches(lengths.size, batch_size, seed=seed)
    )
    grouped = _typical_padded_batch(
        "length-grouped", lengths, LengthGroupedSampler(lengths, batch_size, seed=seed).batches()
    )
    real = sum(n for row in random_layout.rows for n in row)
    packed = _packed_sample(lengths, capacity, real, seed)
    return BatchLayouts(
        n_examples=int(lengths.size),
        mean_length=float(lengths.mean()),
        batch_size=batch_size,
        capacity=capacity,
        layouts=[random_layout, grouped, packed],
    )
