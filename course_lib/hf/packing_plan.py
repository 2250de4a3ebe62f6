"""Packed and padding-free micro-batches planned from a length distribution: the worst one and
the expected one.

Two ways to batch documents without padding (position ids reset per document):

* **packed rows** (``capacity`` given): the course's best-fit-decreasing packer
  (:func:`course_lib.bins.pack_lengths`, numpy only: no torch) fills rows of ``capacity``
  tokens from a sample of the distribution; a micro-batch is ``micro_batch`` such rows.
* **padding-free** (``capacity=None``, ``DataCollatorWithFlattening``): a micro-batch is
  ``micro_batch`` documents laid end to end in one row.

What that costs depends on the attention path (:func:`~course_lib.hf.predict.predict_hf_step`'s
``documents``): FlashAttention-2 takes the flattened tokens through its varlen kernel
(``cu_seq_lens``), so only the token count matters: the worst micro-batch is the fullest rows
(packed) or the longest documents (padding-free), the expected one the mean. sdpa and eager
attention take a block-diagonal ``seq_len x seq_len`` mask instead: a packed row costs its full
``capacity`` whatever it holds (worst = expected), and a padding-free row of ``n`` tokens costs
``n**2`` per layer in the mask alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..bins import pack_lengths
from .memory import HFMemory, predict_hf_memory


@dataclass
class MicroBatch:
    """One planned micro-batch: ``rows`` of ``seq_len`` tokens, ``documents`` in each row."""

    rows: int
    seq_len: int
    documents: int
    memory: HFMemory


@dataclass
class PackingPlan:
    """:func:`plan_packing`'s answer: the worst and the expected micro-batch, and the sample's
    statistics (``fill``: tokens per packed row or per padding-free micro-batch)."""

    worst: MicroBatch
    expected: MicroBatch
    fill_mean: float
    fill_max: int
    documents_mean: float
    sample: int  # documents drawn from the distribution


def document_lengths(
    lengths: str | Sequence[int] | Any, n: int = 20_000, seed: int = 0, scale: int = 1
) -> Any:
    """Lengths as an int64 array: a shipped histogram's name (``"wikipedia_512"``,
    ``"squad_1_1_384"``), a ``length,count`` CSV path (``n`` draws from either, seeded) or the
    lengths themselves.

    Args:
        lengths: a histogram name, a CSV path, or the lengths.
        n: draws from a histogram or CSV.
        seed: the draw's seed.
        scale: multiply every drawn length by this.

    Returns:
        The lengths, an int64 array.

    Raises:
        ValueError: lengths that are not a non-empty list of positive ints, or a histogram or
            CSV that :mod:`course_lib.data` cannot read.
    """
    import numpy as np

    from .. import data

    if isinstance(lengths, str):
        if lengths in data.LENGTH_HISTOGRAMS:
            hist = data.load_length_histogram(lengths)
        else:
            hist = data.length_histogram_from_csv(lengths)
        return data.lengths_from_histogram(*hist, n=n, seed=seed, scale=scale)
    arr = np.asarray(lengths, dtype=np.int64)
    if arr.ndim != 1 or arr.size == 0 or (arr <= 0).any():
        raise ValueError("lengths must be a non-empty list of positive document lengths")
    return arr


@dataclass
class Packed:
    """A sample of a length distribution, batched without padding (:func:`pack_sample`).

    ``capacity``: tokens per packed row (``None``: padding-free, one document after another);
    ``fills``: tokens in each packed row, or each document's length (padding-free);
    ``counts``: documents in each packed row (padding-free: ones); ``sample``: documents drawn.
    """

    capacity: int | None
    fills: Any
    counts: Any
    sample: int

    def shapes(self, micro_batch: int, flat: bool) -> tuple[Shape, Shape, float]:
        """The worst and the expected micro-batch of ``micro_batch`` rows (padding-free:
        documents) as ``(rows, seq_len, documents per row)``, and the expected tokens in it.

        Args:
            micro_batch: packed rows (padding-free: documents) in the micro-batch.
            flat: the attention path flattens the rows into one varlen row (FlashAttention-2).

        Returns:
            ``(worst, expected, expected tokens)``.
        """
        m, fills, counts = micro_batch, self.fills, self.counts
        if self.capacity is None:  # padding-free: m documents end to end in one row
            longest = int(fills[:m].sum())  # the longest documents (fills: longest first)
            mean_tokens = m * float(fills.mean())
            return (1, longest, m), (1, max(1, round(mean_tokens)), m), mean_tokens
        tokens = m * float(fills.mean())
        if flat:  # the rows are flattened into one varlen row
            worst = (1, m * int(fills.max()), m * int(counts.max()))
            mean = (1, max(1, round(tokens)), max(1, round(m * float(counts.mean()))))
            return worst, mean, tokens
        # full rows of capacity tokens with a block-diagonal mask, whatever they hold
        cap = self.capacity
        return (m, cap, int(counts.max())), (m, cap, max(1, round(float(counts.mean())))), tokens


Shape = tuple[int, int, int]


def pack_sample(
    lengths: str | Sequence[int] | Any, capacity: int | None, sample: int = 20_000, seed: int = 0,
    scale: int = 1,
) -> Packed:  # fmt: skip
    """Draw ``sample`` documents from ``lengths`` and pack them into rows of ``capacity`` tokens
    (best-fit decreasing, long documents split into full rows), or keep them as they come
    (``capacity=None``: padding-free, every document whole, longest first).

    Args:
        lengths: a shipped histogram's name, a ``length,count`` CSV path, or the lengths
            (:func:`document_lengths`).
        capacity: tokens per packed row, or ``None`` (padding-free).
        sample: documents drawn from a histogram or CSV.
        seed: the draw's seed.
        scale: multiply every drawn length by this.

    Returns:
        :class:`Packed`.

    Raises:
        ValueError: bad ``lengths`` (:func:`document_lengths`) or ``capacity``.
    """
    import numpy as np

    docs = document_lengths(lengths, sample, seed, scale)
    if capacity is None:
        return Packed(None, np.sort(docs)[::-1], np.ones(len(docs), dtype=np.int64), len(docs))
    rows = pack_lengths(docs, capacity, split="chunk")
    fills = np.array([sum(min(int(docs[i]), capacity) for i in row) for row in rows])
    counts = np.array([len(row) for row in rows])
    return Packed(capacity, fills, counts, len(docs))


def plan_packing(
    config: Any,
    lengths: str | Sequence[int] | Any,
    *,
    micro_batch: int,
    capacity: int | None = None,
    attn_impl: str = "flash",
    sample: int = 20_000,
    seed: int = 0,
    scale: int = 1,
    **memory_kwargs: Any,
) -> PackingPlan:
    """Plan packed (``capacity``) or padding-free (``capacity=None``) micro-batches of
    ``micro_batch`` rows (documents, padding-free) drawn from ``lengths`` (module docstring).

    Args:
        config: a ``PretrainedConfig`` or its dict.
        lengths: a shipped histogram's name, a ``length,count`` CSV path, or the lengths.
        micro_batch: packed rows (padding-free: documents) per micro-batch.
        capacity: tokens per packed row; ``None``: padding-free.
        attn_impl: ``"flash"`` (varlen: only the tokens count), ``"sdpa"`` or ``"eager"``
            (a block-diagonal mask over each full row).
        sample: documents drawn from a histogram or CSV.
        seed: the draw's seed.
        scale: multiply every drawn length by this.
        **memory_kwargs: passed to :func:`~course_lib.hf.memory.predict_hf_memory`.

    Returns:
        :class:`PackingPlan`.

    Raises:
        ValueError: a bad ``micro_batch`` or ``lengths``, or a setting the memory model refuses.
    """
    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or micro_batch < 1:
        raise ValueError(f"micro_batch must be a positive int, got {micro_batch!r}")
    packed = pack_sample(lengths, capacity, sample, seed, scale)
    flat = attn_impl in ("flash", "flash_attention_2")

    def memory(shape: Shape) -> MicroBatch:
        rows, seq_len, documents = shape
        documents = max(1, min(documents, seq_len))
        m = predict_hf_memory(config, rows, seq_len, attn_impl=attn_impl, documents=documents,
                              **memory_kwargs)  # fmt: skip
        return MicroBatch(rows, seq_len, documents, m)

    worst, expected, tokens = packed.shapes(micro_batch, flat)
    if capacity is None:
        fill_max, docs_mean = worst[1], float(micro_batch)
    else:
        fill_max, docs_mean = int(packed.fills.max()), float(packed.counts.mean())
    return PackingPlan(memory(worst), memory(expected), tokens if capacity is None else
                       float(packed.fills.mean()), fill_max, docs_mean, packed.sample)  # fmt: skip
