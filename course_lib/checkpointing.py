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
import warnings
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

__all__ = ["StepTimes", "step_flops", "time_checkpointing"]


@dataclass
class StepTimes:
    """Forward + backward wall time with and without checkpointing, from one interleaved run.

    ``off_seconds`` / ``checkpointed_seconds``: every timed repeat in seconds (warm-up
    excluded), the same model with ``checkpointing="off"`` and with ``checkpointing``.
    ``ratio``: the median over repeats of checkpointed / off, each pair timed back to back, so a
    neighbour's burst of load slows both halves of a pair rather than one side of the median.
    ``plain_seconds`` / ``plain_median`` are the names of one earlier release, deprecated.
    """

    checkpointing: Checkpointing
    checkpoint_every: int
    attn_impl: str
    n_layers: int
    batch_size: int
    seq_len: int
    device: str
    off_seconds: list[float] = field(repr=False)
    checkpointed_seconds: list[float] = field(repr=False)

    @property
    def off_median(self) -> float:
        """Median seconds of one step without checkpointing."""
        return statistics.median(self.off_seconds)

    @property
    def checkpointed_median(self) -> float:
        """Median seconds of one step with checkpointing."""
        return statistics.median(self.checkpointed_seconds)

    @property
    def pair_ratios(self) -> list[float]:
        """checkpointed / off for every back-to-back pair, in the order they ran."""
        return [c / p for c, p in zip(self.checkpointed_seconds, self.off_seconds)]

    @property
    def ratio(self) -> float:
        """Median of :attr:`pair_ratios`: how many times longer a checkpointed step takes."""
        return statistics.median(self.pair_ratios)

    @property
    def repeats(self) -> int:
        """Number of timed pairs."""
        return len(self.off_seconds)

    @property
    def plain_seconds(self) -> list[float]:
        """Deprecated name of :attr:`off_seconds` (kept for one release)."""
        _renamed("plain_seconds", "off_seconds")
        return self.off_seconds

    @property
    def plain_median(self) -> float:
        """Deprecated name of :attr:`off_median` (kept for one release)."""
        _renamed("plain_median", "off_median")
        return self.off_median

    def summary(self) -> str:
        """One line: the shape, both medians, the ratio and its range over the pairs.

        Returns:
            e.g. ``"2 × 128, 4 blocks, sdpa, cpu: off 12.0 ms, blocks 15.9 ms, ratio ×1.32
            (median of 5 pairs, range 1.29-1.36)"`` (milliseconds per forward + backward).
        """
        label = mode_label(self.checkpointing, self.checkpoint_every)
        return (
            f"{self.batch_size} × {self.seq_len}, {self.n_layers} blocks, {self.attn_impl}, "
            f"{self.device}: off {1e3 * self.off_median:.1f} ms, {label} "
            f"{1e3 * self.checkpointed_median:.1f} ms, ratio ×{self.ratio:.2f} "
            f"(median of {self.repeats} pairs, range {min(self.pair_ratios):.2f}-"
            f"{max(self.pair_ratios):.2f})"
        )


def _renamed(old: str, new: str) -> None:
    warnings.warn(
        f"StepTimes.{old} is deprecated: read StepTimes.{new} (the course calls that side 'off')",
        DeprecationWarning,
        stacklevel=3,
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

    Args:
        config: the model to time; its ``checkpointing`` is ignored, ``checkpoint_every`` and
            ``attn_impl`` are used.
        batch_size: rows of the random batch.
        seq_len: tokens per row, at most ``config.max_seq_len``.
        checkpointing: the checkpointed side's mode, ``"blocks"`` or ``"attention"`` (``True``
            means ``"blocks"``).
        repeats: timed pairs.
        warmup: untimed steps of each side first (allocator and kernel warm-up).
        device: where to run (default: CUDA when available, else the CPU).
        seed: the weights' and the batch's seed (both sides get the same).
        progress: show a progress bar.

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
    sides: dict[str, Checkpointing] = {"off": "off", "checkpointed": mode}
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
        off_seconds=timings.seconds["off"],
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


def step_flops(config: TinyGPTConfig, batch_size: int, seq_len: int, seed: int = 0) -> int:
    """The floating-point operations of one training step, counted, not timed.

    PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` adds up the FLOPs of every matrix
    multiply and attention kernel a step runs (``model(**batch).loss.backward()``), recomputed
    forward passes included: the same count on every machine and every run, where a wall-clock
    ratio moves with the load. It counts what recomputation adds to the work, not how long the
    machine takes over it (small kernels and bookkeeping are free here and are not on a CPU).

    Args:
        config: the model (its ``checkpointing`` and ``checkpoint_every`` included).
        batch_size: rows of the random full-row batch.
        seq_len: tokens per row (at most ``config.max_seq_len``).
        seed: the weights' and the batch's seed.

    Returns:
        FLOPs of the step (a multiply-add counts 2).

    Raises:
        ValueError: a size that is not positive, or ``seq_len`` above ``max_seq_len``.
    """
    from torch.utils.flop_counter import FlopCounterMode

    positive_int("batch_size", batch_size)
    seq_len_within(seq_len, config.max_seq_len)
    torch.manual_seed(seed)
    model = TinyGPT(config)
    batch = random_batch(config.vocab_size, batch_size, seq_len, seed)
    with FlopCounterMode(display=False) as counter:
        model(**batch).loss.backward()
    return int(counter.get_total_flops())
