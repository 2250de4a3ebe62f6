"""Activation checkpointing: memory against recompute, measured on both sides.

A checkpointed block keeps only its input for the backward pass and runs its forward again
when the gradient reaches it. Two numbers describe the trade, and this module measures both:

* **Memory.** :func:`compare_checkpointing` measures the peak of one training step with and
  without checkpointing beside :func:`~course_lib.memory.activation_bytes`' prediction;
  :func:`max_batch_under_budget` and :func:`max_seq_len_under_budget` turn the prediction into
  "how much more fits".
* **Time.** :func:`time_checkpointing` times forward + backward with and without checkpointing in
  one run, interleaved so that a busy machine slows both sides alike, and reports the ratio.

Counting the extra compute: a block's backward costs about twice its forward, so a step costs
``F + 2F = 3F``; recomputing every block adds one more ``F``, a ratio of ``4/3 ≈ 1.33`` when the
blocks are all of the compute (less when the head, which is never recomputed, is a large part).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace

import torch

from .budget import NoBatchFitsError, find_max_batch_size
from .memory import _pick_device, activation_bytes, measure_step
from .model import CHECKPOINTING, TinyGPT, TinyGPTConfig

__all__ = [
    "CheckpointingRow",
    "StepTimes",
    "compare_checkpointing",
    "time_checkpointing",
    "max_batch_under_budget",
    "max_seq_len_under_budget",
    "mode_label",
]


def _check_mode(checkpointing) -> None:
    if checkpointing not in CHECKPOINTING:
        raise ValueError(f"checkpointing={checkpointing!r} is not one of {CHECKPOINTING}")


def _check_positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def mode_label(checkpointing, every: int = 1) -> str:
    """``False`` -> ``'plain'``, ``True`` -> ``'blocks'``, with ``every`` -> ``'blocks/2'``."""
    _check_mode(checkpointing)
    if not checkpointing:
        return "plain"
    name = "blocks" if checkpointing is True else checkpointing
    return name if every == 1 else f"{name}/{every}"


def _random_batch(config: TinyGPTConfig, batch_size: int, seq_len: int, seed: int, device):
    gen = torch.Generator().manual_seed(seed + batch_size * 100003 + seq_len)
    ids = torch.randint(0, config.vocab_size, (batch_size, seq_len), generator=gen)  # (B, T)
    ids = ids.to(device)
    return {"input_ids": ids, "labels": ids}


def _twin_models(config: TinyGPTConfig, modes, seed: int, device) -> dict:
    """One TinyGPT per checkpointing mode, all with the same weights (the same seed)."""
    models = {}
    for mode in modes:
        torch.manual_seed(seed)
        models[mode] = TinyGPT(replace(config, checkpointing=mode)).to(device)
    return models


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


@dataclass
class CheckpointingRow:
    """One training step at one shape and one checkpointing mode. Sizes in bytes.

    ``predicted_bytes``/``measured_bytes``: the peak above the weights (activations, gradients in
    flight and the weights' gradients); ``saved_bytes``: what the forward pass kept for backward
    (measured); ``method``: ``"CPU: counted bytes"`` or ``"GPU: allocator peak"``.
    """

    checkpointing: object
    checkpoint_every: int
    attn_impl: str
    n_layers: int
    batch_size: int
    seq_len: int
    predicted_bytes: int
    measured_bytes: int
    predicted_saved_bytes: int
    saved_bytes: int
    peak_at: str
    method: str

    @property
    def ratio(self) -> float:
        """Predicted / measured peak (1.0 = the model is exact)."""
        return self.predicted_bytes / self.measured_bytes

    @property
    def label(self) -> str:
        return mode_label(self.checkpointing, self.checkpoint_every)


def compare_checkpointing(
    config: TinyGPTConfig,
    shapes,
    modes=(False, True),
    device=None,
    seed: int = 0,
    progress: bool = False,
) -> list[CheckpointingRow]:
    """Measure one training step at every ``(batch_size, seq_len)`` in ``shapes`` for every mode.

    Each mode gets its own TinyGPT built from the same seed (so the same weights); the mode's
    ``checkpoint_every`` is ``config.checkpoint_every``. Rows come mode by mode, shape by shape.
    """
    shapes = [(int(b), int(t)) for b, t in shapes]
    if not shapes:
        raise ValueError("compare_checkpointing needs at least one (batch_size, seq_len) shape")
    for mode in modes:
        _check_mode(mode)
    for b, t in shapes:
        _check_positive("batch_size", b)
        _check_positive("seq_len", t)
        if t > config.max_seq_len:
            raise ValueError(f"seq_len={t} is longer than max_seq_len={config.max_seq_len}")
    dev = _pick_device(device)
    models = _twin_models(config, modes, seed, dev)
    jobs = [(mode, b, t) for mode in modes for b, t in shapes]
    if progress:
        from tqdm.auto import tqdm

        jobs = tqdm(jobs, desc="measuring peaks")
    rows = []
    for mode, b, t in jobs:
        model = models[mode]
        report = measure_step(model, _random_batch(config, b, t, seed, dev), device=dev)
        predicted = activation_bytes(model.config, b, t)
        rows.append(
            CheckpointingRow(
                checkpointing=mode,
                checkpoint_every=config.checkpoint_every,
                attn_impl=config.attn_impl,
                n_layers=config.n_layers,
                batch_size=b,
                seq_len=t,
                predicted_bytes=predicted.total,
                measured_bytes=report.peak_bytes,
                predicted_saved_bytes=predicted.saved_total,
                saved_bytes=report.saved_bytes,
                peak_at=predicted.peak_at,
                method=report.method,
            )
        )
    return rows


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

    checkpointing: object
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


def _timed_step(model: TinyGPT, batch: dict, device: torch.device) -> float:
    model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    model(**batch).loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def time_checkpointing(
    config: TinyGPTConfig,
    batch_size: int,
    seq_len: int,
    checkpointing=True,
    repeats: int = 5,
    warmup: int = 1,
    device=None,
    seed: int = 0,
    progress: bool = False,
) -> StepTimes:
    """Time ``model(**batch).loss.backward()`` with and without ``checkpointing``, interleaved.

    Two models with the same weights; ``warmup`` untimed steps each, then ``repeats`` pairs.
    The order inside a pair alternates (plain first, then checkpointed first) so neither side
    always runs on a warmer cache. Gradients are cleared before every step.
    """
    _check_mode(checkpointing)
    if not checkpointing:
        raise ValueError(
            "checkpointing=False has nothing to compare: pass True, 'blocks' or 'attention'"
        )
    _check_positive("batch_size", batch_size)
    _check_positive("seq_len", seq_len)
    _check_positive("repeats", repeats)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if seq_len > config.max_seq_len:
        raise ValueError(f"seq_len={seq_len} is longer than max_seq_len={config.max_seq_len}")
    dev = _pick_device(device)
    models = _twin_models(config, (False, checkpointing), seed, dev)
    plain, ckpt = models[False], models[checkpointing]
    batch = _random_batch(config, batch_size, seq_len, seed, dev)
    for _ in range(warmup):
        _timed_step(plain, batch, dev)
        _timed_step(ckpt, batch, dev)
    pairs = range(repeats)
    if progress:
        from tqdm.auto import tqdm

        pairs = tqdm(pairs, desc="timing steps")
    plain_s, ckpt_s = [], []
    for r in pairs:
        if r % 2 == 0:
            plain_s.append(_timed_step(plain, batch, dev))
            ckpt_s.append(_timed_step(ckpt, batch, dev))
        else:
            ckpt_s.append(_timed_step(ckpt, batch, dev))
            plain_s.append(_timed_step(plain, batch, dev))
    plain.zero_grad(set_to_none=True)
    ckpt.zero_grad(set_to_none=True)
    return StepTimes(
        checkpointing=checkpointing,
        checkpoint_every=config.checkpoint_every,
        attn_impl=config.attn_impl,
        n_layers=config.n_layers,
        batch_size=batch_size,
        seq_len=seq_len,
        device=str(dev),
        plain_seconds=plain_s,
        checkpointed_seconds=ckpt_s,
    )


# --------------------------------------------------------------------------------------------
# What fits under a budget
# --------------------------------------------------------------------------------------------


def _check_budget(budget_bytes) -> int:
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, float)):
        raise ValueError(f"budget_bytes must be a number of bytes, got {budget_bytes!r}")
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
    return budget_bytes


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
    _check_positive("seq_len", seq_len)
    _check_budget(budget_bytes)
    if checkpointing is not None:
        _check_mode(checkpointing)

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
    _check_positive("batch_size", batch_size)
    _check_budget(budget_bytes)
    _check_positive("limit", limit)
    if checkpointing is not None:
        _check_mode(checkpointing)
    long = replace(config, max_seq_len=limit)

    def fits(seq_len: int) -> bool:
        peak = activation_bytes(long, batch_size, seq_len, dtype, checkpointing).total
        return peak <= budget_bytes

    return _largest_fitting(fits, limit)
