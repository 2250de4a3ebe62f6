"""Activation checkpointing: memory against recompute, measured on both sides.

A checkpointed block keeps only its input for the backward pass and runs its forward again
when the gradient reaches it. Two numbers describe the trade, and this module measures both:

* **Memory.** :func:`~course_lib.memory.compare_checkpointing` measures the peak of one training
  step with and without checkpointing beside the prediction of
  :func:`~course_lib.memory.activation_bytes`; :func:`max_batch_under_budget` and
  :func:`max_seq_len_under_budget` turn the prediction into
  "how much more fits".
* **Time.** :func:`time_checkpointing` times forward + backward with and without checkpointing in
  one run, interleaved (:func:`course_lib.timing.interleave`) so that a busy machine slows both
  sides alike, and reports the ratio.

Counting the extra compute: a block's backward costs about twice its forward, so a step costs
``F + 2F = 3F``; recomputing every block adds one more ``F``, a ratio of ``4/3 ≈ 1.33`` when the
blocks are all of the compute (less when the head, which is never recomputed, is a large part).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

import torch

from ._checks import checkpointing_mode, non_negative_int, positive_int, positive_number
from .budget import NoBatchFitsError, find_max_batch_size
from .memory import activation_bytes, mode_label, pick_device
from .memory.sweep import random_batch
from .model import TinyGPT, TinyGPTConfig
from .timing import interleave

__all__ = [
    "StepTimes",
    "time_checkpointing",
    "max_batch_under_budget",
    "max_seq_len_under_budget",
]


# --------------------------------------------------------------------------------------------
# Time
# --------------------------------------------------------------------------------------------


@dataclass
class StepTimes:
    """Forward + backward wall time with and without checkpointing, from one interleaved run.

    ``plain_seconds`` / ``checkpointed_seconds``: every timed repeat (warm-up excluded).
    ``ratio``: the median over repeats of checkpointed / plain, each pair timed back to back, so
    a neighbour's burst of load slows both halves of a pair rather than one side of the median.
    """

    checkpointing: str
    checkpoint_every: int
    attn_impl: str
    n_layers: int
    batch_size: int
    seq_len: int
    device: str
    plain_seconds: list[float] = field(repr=False)
    checkpointed_seconds: list[float] = field(repr=False)

    @property
    def plain_median(self) -> float:
        return statistics.median(self.plain_seconds)

    @property
    def checkpointed_median(self) -> float:
        return statistics.median(self.checkpointed_seconds)

    @property
    def pair_ratios(self) -> list[float]:
        """checkpointed / plain for every back-to-back pair, in the order they ran."""
        return [c / p for c, p in zip(self.checkpointed_seconds, self.plain_seconds)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.pair_ratios)

    @property
    def repeats(self) -> int:
        return len(self.plain_seconds)

    def summary(self) -> str:
        label = mode_label(self.checkpointing, self.checkpoint_every)
        return (
            f"{self.batch_size} × {self.seq_len}, {self.n_layers} blocks, {self.attn_impl}, "
            f"{self.device}: plain {1e3 * self.plain_median:.1f} ms, {label} "
            f"{1e3 * self.checkpointed_median:.1f} ms, ratio ×{self.ratio:.2f} "
            f"(median of {self.repeats} pairs, range {min(self.pair_ratios):.2f}-"
            f"{max(self.pair_ratios):.2f})"
        )


def time_checkpointing(
    config: TinyGPTConfig,
    batch_size: int,
    seq_len: int,
    checkpointing="blocks",
    repeats: int = 5,
    warmup: int = 1,
    device=None,
    seed: int = 0,
    progress: bool = False,
) -> StepTimes:
    """Time ``model(**batch).loss.backward()`` with and without ``checkpointing``, interleaved.

    Two models with the same weights; ``warmup`` untimed steps each, then ``repeats`` pairs in
    alternating order (:func:`course_lib.timing.interleave`). Gradients are cleared before every
    step.
    """
    mode = checkpointing_mode(checkpointing)
    if mode == "none":
        raise ValueError(
            "checkpointing='none' has nothing to compare: pass 'blocks' or 'attention'"
        )
    positive_int("batch_size", batch_size)
    positive_int("seq_len", seq_len)
    positive_int("repeats", repeats)
    non_negative_int("warmup", warmup)
    if seq_len > config.max_seq_len:
        raise ValueError(f"seq_len={seq_len} is longer than max_seq_len={config.max_seq_len}")
    dev = pick_device(device)
    models = {}
    for name, m in (("plain", "none"), ("checkpointed", mode)):
        torch.manual_seed(seed)  # the same weights on both sides
        models[name] = TinyGPT(replace(config, checkpointing=m)).to(dev)
    batch = random_batch(config, batch_size, seq_len, seed, dev)

    def step(model):
        def run(_round: int) -> None:
            model.zero_grad(set_to_none=True)
            model(**batch).loss.backward()

        return run

    timings = interleave(
        {name: step(model) for name, model in models.items()},
        repeats,
        warmup,
        device=dev,
        progress=progress,
        desc="timing steps",
    )
    for model in models.values():
        model.zero_grad(set_to_none=True)
    return StepTimes(
        checkpointing=mode,
        checkpoint_every=config.checkpoint_every,
        attn_impl=config.attn_impl,
        n_layers=config.n_layers,
        batch_size=batch_size,
        seq_len=seq_len,
        device=str(dev),
        plain_seconds=timings.seconds["plain"],
        checkpointed_seconds=timings.seconds["checkpointed"],
    )


# --------------------------------------------------------------------------------------------
# What fits under a budget
# --------------------------------------------------------------------------------------------


def _largest_fitting(fits, limit: int) -> int:
    """The largest ``n <= limit`` with ``fits(n)`` (lesson 5's doubling-then-bisection search)."""
    try:
        return find_max_batch_size(fits, start=1, limit=limit).batch_size
    except NoBatchFitsError:
        return 0


def max_batch_under_budget(
    config: TinyGPTConfig,
    seq_len: int,
    budget_bytes: int,
    checkpointing=None,
    dtype: torch.dtype = torch.float32,
    limit: int = 1 << 20,
) -> int:
    """The largest micro-batch whose predicted step peak stays within ``budget_bytes``.

    The peak is :func:`~course_lib.memory.activation_bytes`' ``total``: bytes above the weights
    (activations, gradients in flight, the weights' gradients), and it only grows with the batch,
    so :func:`~course_lib.budget.find_max_batch_size` (doubling, then bisection) finds the answer
    in ``O(log batch)`` predictions.
    ``checkpointing=None`` uses ``config.checkpointing``. Returns 0 when not even one row fits.
    """
    positive_int("seq_len", seq_len)
    positive_number("budget_bytes", budget_bytes)
    if checkpointing is not None:
        checkpointing = checkpointing_mode(checkpointing)

    def fits(batch_size: int) -> bool:
        peak = activation_bytes(config, batch_size, seq_len, dtype, checkpointing).total
        return peak <= budget_bytes

    return _largest_fitting(fits, limit)


def max_seq_len_under_budget(
    config: TinyGPTConfig,
    batch_size: int,
    budget_bytes: int,
    checkpointing=None,
    dtype: torch.dtype = torch.float32,
    limit: int = 1 << 20,
) -> int:
    """The longest sequence (up to ``limit`` tokens) whose predicted step peak fits the budget.

    Predicts with ``max_seq_len`` raised to ``limit``: RoPE needs no table of learned positions,
    so only memory bounds the length. Returns 0 when not even one token fits.
    """
    positive_int("batch_size", batch_size)
    positive_number("budget_bytes", budget_bytes)
    positive_int("limit", limit)
    if checkpointing is not None:
        checkpointing = checkpointing_mode(checkpointing)
    long = replace(config, max_seq_len=limit)

    def fits(seq_len: int) -> bool:
        peak = activation_bytes(long, batch_size, seq_len, dtype, checkpointing).total
        return peak <= budget_bytes

    return _largest_fitting(fits, limit)
