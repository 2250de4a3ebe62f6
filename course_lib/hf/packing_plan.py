"""Packed and padding-free micro-batches planned from a length distribution: the worst one and
the expected one.

Two ways to batch documents without padding (position ids reset per document):

* **packed rows** (``capacity`` given): the course's best-fit-decreasing packer
  (:func:`course_lib.packing.pack_lengths`) fills rows of ``capacity`` tokens from a sample of
  the distribution; a micro-batch is ``micro_batch`` such rows.
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
    ``micro_batch`` rows (documents, padding-free) drawn from ``lengths`` (module docstring);
    ``memory_kwargs`` go to :func:`~course_lib.hf.memory.predict_hf_memory`.

    Raises:
        ValueError: a bad ``micro_batch`` or ``lengths``, or a setting the memory model refuses.
    """
    import numpy as np

    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or micro_batch < 1:
        raise ValueError(f"micro_batch must be a positive int, got {micro_batch!r}")
    docs = document_lengths(lengths, sample, seed, scale)
    flat = attn_impl in ("flash", "flash_attention_2")

    def memory(rows: int, seq_len: int, documents: int) -> MicroBatch:
        documents = max(1, min(documents, seq_len))
        m = predict_hf_memory(config, rows, seq_len, attn_impl=attn_impl, documents=documents,
                              **memory_kwargs)  # fmt: skip
        return MicroBatch(rows, seq_len, documents, m)

    if capacity is None:  # padding-free: micro_batch documents in one row
        longest = np.sort(docs)[::-1][:micro_batch]
        worst_tokens = int(longest.sum())
        mean_tokens = micro_batch * float(docs.mean())
        worst = memory(1, worst_tokens, micro_batch)
        expected = memory(1, max(1, round(mean_tokens)), micro_batch)
        return PackingPlan(worst, expected, mean_tokens, worst_tokens, float(micro_batch),
                           len(docs))  # fmt: skip
    from ..packing import pack_lengths

    rows = pack_lengths(docs, capacity, split="chunk")
    fills = np.array([sum(min(int(docs[i]), capacity) for i in row) for row in rows])
    counts = np.array([len(row) for row in rows])
    if flat:  # the rows are flattened into one varlen row
        worst = memory(1, micro_batch * int(fills.max()), micro_batch * int(counts.max()))
        expected = memory(1, max(1, round(micro_batch * float(fills.mean()))),
                          max(1, round(micro_batch * float(counts.mean()))))  # fmt: skip
    else:  # full rows of capacity tokens with a block-diagonal mask, whatever they hold
        worst = memory(micro_batch, capacity, int(counts.max()))
        expected = memory(micro_batch, capacity, max(1, round(float(counts.mean()))))
    return PackingPlan(worst, expected, float(fills.mean()), int(fills.max()),
                       float(counts.mean()), len(docs))  # fmt: skip
