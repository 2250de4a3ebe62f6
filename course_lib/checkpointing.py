"""Activation checkpointing's price: the step time of recomputation, measured.

A checkpointed block keeps only its input for the backward pass and runs its forward again
when the gradient reaches it. Two numbers describe the trade. Its memory side is measured by
:func:`~course_lib.memory.compare_checkpointing` (beside the prediction of
:func:`~course_lib.memory.activation_bytes`; what then fits a budget is lesson 4's
:mod:`course_lib.lessons.checkpointing`). Its time side is here: :func:`time_checkpointing`
times forward + backward with and without checkpointing in one run, interleaved
(:func:`course_lib.timing.interleave`) so that a busy machine slows both sides alike, and reports
the ratio.

Counting the extra compute: a block's backward costs about twice its forward, so a step costs
``F + 2F = 3F``; recomputing every block adds one more ``F``, a ratio of ``4/3 ≈ 1.33`` when the
blocks are all of the compute (less when the head, which is never recomputed, is a large part).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

import torch

from ._checks import (
    Checkpointing,
    checkpointing_mode,
    non_negative_int,
    positive_int,
    seq_len_within,
)
from .batch import random_batch
from .memory import mode_label, pick_device
from .memory.meter import Device
from .model import TinyGPT, TinyGPTConfig
from .timing import Step, interleave

__all__ = ["StepTimes", "time_checkpointing"]


@dataclass
class StepTimes:
    """Forward + backward wall time with and without checkpointing, from one interleaved run.

    ``plain_seconds`` / ``checkpointed_seconds``: every timed repeat (warm-up excluded).
    ``ratio``: the median over repeats of checkpointed / plain, each pair timed back to back, so
    a neighbour's burst of load slows both halves of a pair rather than one side of the median.
    """

    checkpointing: Checkpointing
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
        """One line: the shape, both medians, the ratio and its range over the pairs."""
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
    checkpointing: Checkpointing | bool = "blocks",
    repeats: int = 5,
    warmup: int = 1,
    device: Device = None,
    seed: int = 0,
    progress: bool = False,
) -> StepTimes:
    """Time ``model(**batch).loss.backward()`` with and without ``checkpointing``, interleaved.

    Two models with the same weights; ``warmup`` untimed steps each, then ``repeats`` pairs in
    alternating order (:func:`course_lib.timing.interleave`). Gradients are cleared before every
    step. ``config.checkpoint_every`` applies to the checkpointed side.

    Returns:
        :class:`StepTimes` with every timed repeat of both sides.

    Raises:
        ValueError: ``checkpointing`` is ``"off"`` (nothing to compare), a count that is not a
            positive int, or ``seq_len`` longer than ``config.max_seq_len``.
    """
    mode = checkpointing_mode(checkpointing)
    if mode == "off":
        raise ValueError("checkpointing='off' has nothing to compare: pass 'blocks' or 'attention'")
    positive_int("batch_size", batch_size)
    seq_len_within(seq_len, config.max_seq_len)
    positive_int("repeats", repeats)
    non_negative_int("warmup", warmup)
    dev = pick_device(device)
    batch = random_batch(config.vocab_size, batch_size, seq_len, seed, dev)
    sides: dict[str, Checkpointing] = {"plain": "off", "checkpointed": mode}
    steps = {
        side: _training_step(replace(config, checkpointing=m), batch, seed, dev)
        for side, m in sides.items()
    }
    timings = interleave(steps, repeats, warmup, device=dev, progress=progress, desc="timing steps")
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


def _training_step(config: TinyGPTConfig, batch: dict, seed: int, device: torch.device) -> Step:
    """A TinyGPT from ``seed`` (the same weights for every config) and its timed step: clear the
    gradients, then forward + backward."""
    torch.manual_seed(seed)
    model = TinyGPT(config).to(device)

    def run(_round: int) -> None:
        model.zero_grad(set_to_none=True)
        model(**batch).loss.backward()

    return run
