"""Lesson 4's experiments: what activation checkpointing buys under a memory budget, and costs.

The budget in this lesson is memory *above the weights* for one training step (the memory
model's :func:`~course_lib.memory.activation_bytes` ``total``). :func:`budget_fit` sweeps the
predicted peak over ``seq_len`` with and without checkpointing (lesson 4's explorer);
:func:`max_batch_under_budget` and :func:`max_seq_len_under_budget` search what fits
(:func:`course_lib.fit.find_largest` over the prediction); :func:`recompute_trade` sets the
measured peaks beside the measured step-time ratios of whole-block and attention-only
recomputation (each ratio the median of interleaved pairs, with the pairs' range: on a shared
CPU the range is what to read); :func:`stride_rows` compares checkpointing strides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from .. import _checks
from .._checks import Checkpointing, checkpointing_mode, positive_int
from ..checkpointing import StepTimes, time_checkpointing
from ..fit import largest_or_zero
from ..memory import ShapeComparison, activation_bytes, compare_checkpointing
from ..memory.meter import Device
from ..model import TinyGPTConfig
from ..units import format_bytes

FIT_MODES: tuple[Checkpointing, ...] = ("off", "blocks")  # no checkpointing, every block
TRADE_MODES: tuple[Checkpointing, ...] = ("off", "blocks", "attention")


@dataclass
class BudgetFit:
    """Predicted peak bytes of one step per checkpointing mode: ``peaks[mode][i]`` at
    ``seq_lens[i]``, ``at_seq_len[mode]`` at the chosen ``seq_len``. ``fits[mode]``: that peak is
    within ``memory_budget`` (bytes). ``checkpoint_every``: the checkpointed side's stride
    (blocks ``0, k, 2k, ...``)."""

    batch_size: int
    seq_len: int
    n_layers: int
    attn_impl: str
    memory_budget: int
    seq_lens: list[int]
    peaks: dict[Checkpointing, list[int]]
    at_seq_len: dict[Checkpointing, int]
    checkpoint_every: int = 1

    @property
    def fits(self) -> dict[Checkpointing, bool]:
        """Whether each mode's peak at ``seq_len`` is within the budget.

        Returns:
            ``{mode: peak <= memory_budget}`` for ``"off"`` and ``"blocks"``.
        """
        return {mode: peak <= self.memory_budget for mode, peak in self.at_seq_len.items()}

    @property
    def verdict(self) -> str:
        """Which of the two fits at ``seq_len``, in words.

        Returns:
            ``"fits without checkpointing"``, ``"fits only with checkpointing"`` or ``"does not
            fit, even with checkpointing"``.
        """
        if self.fits["off"]:
            return "fits without checkpointing"
        if self.fits["blocks"]:
            return "fits only with checkpointing"
        return "does not fit, even with checkpointing"


def budget_fit(
    config: TinyGPTConfig,
    seq_len: int,
    n_layers: int,
    memory_budget: int | str,
    batch_size: int = 1,
    seq_lens: Sequence[int] | None = None,
    attn_impl: str | None = None,
) -> BudgetFit:
    """Does one step of ``config`` with ``n_layers`` blocks (and ``attn_impl``, if given) fit
    ``memory_budget`` at ``batch_size x seq_len``, plain or checkpointed?

    Args:
        config: the model; its ``checkpoint_every`` applies to the checkpointed side.
        seq_len: the row length the verdict is about (tokens).
        n_layers: the depth to predict (replaces ``config.n_layers``).
        memory_budget: bytes, or an amount with its unit (``"16MiB"``).
        batch_size: rows per step.
        seq_lens: the row lengths to sweep (default: powers of two from 64 to ``4 * seq_len``,
            and ``seq_len``).
        attn_impl: ``"eager"`` or ``"sdpa"``; ``None`` keeps ``config.attn_impl``.

    Returns:
        :class:`BudgetFit`: the predicted peaks (bytes) per mode over ``seq_lens`` and at
        ``seq_len``.

    Raises:
        ValueError: a size that is not a positive int, a budget that is not an amount of memory,
            or an empty ``seq_lens``.
    """
    positive_int("seq_len", seq_len)
    positive_int("n_layers", n_layers)
    positive_int("batch_size", batch_size)
    budget = _checks.memory_budget(memory_budget)
    if seq_lens is None:
        # From 64 tokens: below that the weights' gradients, not activations, set the peak.
        seq_lens = sorted({2**k for k in range(6, 16) if 2**k <= 4 * seq_len} | {seq_len})
    lens = [positive_int("seq_lens[i]", t) for t in seq_lens]
    if not lens:
        raise ValueError("budget_fit needs at least one seq_len to sweep")
    cfg = replace(config, n_layers=n_layers, max_seq_len=max(config.max_seq_len, *lens, seq_len),
                  attn_impl=attn_impl or config.attn_impl)  # fmt: skip

    def peak(mode: Checkpointing, t: int) -> int:
        return activation_bytes(cfg, batch_size, t, checkpointing=mode).total

    return BudgetFit(
        batch_size, seq_len, n_layers, cfg.attn_impl, budget, lens,
        peaks={mode: [peak(mode, t) for t in lens] for mode in FIT_MODES},
        at_seq_len={mode: peak(mode, seq_len) for mode in FIT_MODES},
        checkpoint_every=cfg.checkpoint_every,
    )  # fmt: skip


def max_batch_under_budget(
    config: TinyGPTConfig,
    seq_len: int,
    memory_budget: int | str,
    checkpointing: Checkpointing | bool | None = None,
    dtype: torch.dtype = torch.float32,
    limit: int = 1 << 20,
) -> int:
    """The largest micro-batch whose predicted step peak (above the weights: activations,
    gradients in flight, the weights' gradients) stays within ``memory_budget``.

    Args:
        config: the model.
        seq_len: tokens per row (at most ``config.max_seq_len``).
        memory_budget: bytes, or an amount with its unit (``"16MiB"``).
        checkpointing: ``"off"``, ``"blocks"``, ``"attention"`` (or a bool); ``None`` uses
            ``config.checkpointing``.
        dtype: the activations' dtype.
        limit: the largest micro-batch tried.

    Returns:
        Rows per step (0 when not even one row fits).

    Raises:
        ValueError: a ``seq_len`` that is not positive or longer than ``max_seq_len``, or a
            budget that is not an amount of memory.
    """
    positive_int("seq_len", seq_len)
    budget = _checks.memory_budget(memory_budget)
    mode = None if checkpointing is None else checkpointing_mode(checkpointing)

    def fits(batch_size: int) -> bool:
        return activation_bytes(config, batch_size, seq_len, dtype, mode).total <= budget

    return largest_or_zero(fits, limit)


def max_seq_len_under_budget(
    config: TinyGPTConfig,
    batch_size: int,
    memory_budget: int | str,
    checkpointing: Checkpointing | bool | None = None,
    dtype: torch.dtype = torch.float32,
    limit: int = 1 << 20,
) -> int:
    """The longest row (up to ``limit`` tokens) whose predicted step peak fits the budget.

    Predicts with ``max_seq_len`` raised to ``limit``: RoPE needs no table of learned positions,
    so only memory bounds the length.

    Args:
        config: the model.
        batch_size: rows per step.
        memory_budget: bytes, or an amount with its unit (``"16MiB"``).
        checkpointing: ``"off"``, ``"blocks"``, ``"attention"`` (or a bool); ``None`` uses
            ``config.checkpointing``.
        dtype: the activations' dtype.
        limit: the longest row tried (tokens).

    Returns:
        Tokens per row (0 when not even one token fits).

    Raises:
        ValueError: a size that is not a positive int, or a budget that is not an amount of
            memory.
    """
    positive_int("batch_size", batch_size)
    budget = _checks.memory_budget(memory_budget)
    long = replace(config, max_seq_len=positive_int("limit", limit))
    mode = None if checkpointing is None else checkpointing_mode(checkpointing)

    def fits(seq_len: int) -> bool:
        return activation_bytes(long, batch_size, seq_len, dtype, mode).total <= budget

    return largest_or_zero(fits, limit)


@dataclass
class RecomputeTrade:
    """One shape and attention path: the measured peak per mode (``"off"``, ``"blocks"``,
    ``"attention"``) and the step-time ratio of each recomputation mode against none (the
    median of interleaved pairs), with the range of those pairs (``time_ranges``: low, high)."""

    name: str
    peaks: dict[Checkpointing, int]
    time_ratios: dict[Checkpointing, float]
    time_ranges: dict[Checkpointing, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, name: str, rows: Sequence[ShapeComparison], times: Sequence[StepTimes]
    ) -> RecomputeTrade:
        """The trade from measured rows and timings.

        Args:
            name: how the table names the shape (``"sdpa 2 × 1024"``).
            rows: one measured step per mode (:func:`~course_lib.memory.compare_checkpointing`).
            times: one timing per recomputation mode (:func:`time_checkpointing`).

        Returns:
            The :class:`RecomputeTrade`.
        """
        peaks = {r.checkpointing: r.measured_bytes for r in rows}
        ratios = {t.checkpointing: t.ratio for t in times}
        ranges = {t.checkpointing: (min(t.pair_ratios), max(t.pair_ratios)) for t in times}
        return cls(name, peaks, ratios, ranges)

    @property
    def attention_share(self) -> float:
        """What recomputing only attention saves, as a share of what whole blocks save.

        Returns:
            ``(off - attention) / (off - blocks)`` of the measured peaks.
        """
        p = self.peaks
        return (p["off"] - p["attention"]) / (p["off"] - p["blocks"])


def recompute_trade(
    config: TinyGPTConfig, batch_size: int, seq_len: int, repeats: int = 3,
    device: Device = None, seed: int = 0,
) -> RecomputeTrade:  # fmt: skip
    """Measure :class:`RecomputeTrade` at ``batch_size x seq_len``.

    Args:
        config: the model (its ``attn_impl`` names the trade).
        batch_size: rows per step.
        seq_len: tokens per row.
        repeats: interleaved timed pairs per recomputation mode.
        device: where to run (``None``: CUDA when there is one, else the CPU).
        seed: the weights' and the batch's seed.

    Returns:
        One measured step per mode, and the step-time ratio of each recomputation mode.

    Raises:
        ValueError: a size that is not a positive int, or ``seq_len`` beyond
            ``config.max_seq_len`` (from the measurement).
    """
    rows = compare_checkpointing(config, [(batch_size, seq_len)], modes=TRADE_MODES,
                                 device=device, seed=seed)  # fmt: skip
    times = [time_checkpointing(config, batch_size, seq_len, checkpointing=mode, repeats=repeats,
                                device=device, seed=seed) for mode in TRADE_MODES[1:]]  # fmt: skip
    return RecomputeTrade.of(f"{config.attn_impl} {batch_size} × {seq_len}", rows, times)


def trade_table(trades: Sequence[RecomputeTrade], times: bool = True) -> str:
    """Peaks and time ratios side by side, then what attention-only recomputation saves.

    Args:
        trades: one :class:`RecomputeTrade` per row.
        times: whether to show the time ratios (median, and the pairs' range in brackets);
            ``False`` shows the memory side only (a lesson waiting for a prediction).

    Returns:
        The table, one line per trade, then one line per trade on the attention half's share.
    """
    head = f"{'':24} {'off':>10} {'blocks':>10} {'attention':>10}"
    lines = [head + ("   time ×, blocks / attention (range of the pairs)" if times else "")]
    for t in trades:
        p = t.peaks
        line = (
            f"{t.name:24} {format_bytes(p['off']):>10} {format_bytes(p['blocks']):>10} "
            f"{format_bytes(p['attention']):>10}"
        )
        if times:
            line += "   " + " / ".join(_ratio_text(t, mode) for mode in TRADE_MODES[1:])
        lines.append(line)
    for t in trades:
        lines.append(
            f"{t.name.split()[0]}: the attention half alone saves {t.attention_share:.0%} of what "
            "checkpointing whole blocks saves"
        )
    return "\n".join(lines)


def _ratio_text(trade: RecomputeTrade, mode: Checkpointing) -> str:
    low, high = trade.time_ranges.get(mode, (math.nan, math.nan))
    return f"×{trade.time_ratios[mode]:.2f} ({low:.2f}-{high:.2f})"


@dataclass
class StrideRow:
    """Checkpointing blocks ``0, k, 2k, ...`` (``checkpoint_every = k``; 0: none): the blocks
    recomputed, the full memory model's peak and the measured one (bytes)."""

    checkpoint_every: int
    recomputed: int
    predicted: int
    measured: int


def stride_rows(
    config: TinyGPTConfig, batch_size: int, seq_len: int, measured: dict[int, int],
    strides: Sequence[int], device: Device = None, seed: int = 0,
) -> list[StrideRow]:  # fmt: skip
    """One :class:`StrideRow` per stride, predicted by the full memory model beside a measured
    step.

    Args:
        config: the model (plain blocks for stride 0).
        batch_size: rows per step.
        seq_len: tokens per row.
        measured: bytes already measured, by stride (0: no checkpointing).
        strides: strides to measure here, one real step each.
        device: where to run (``None``: CUDA when there is one, else the CPU).
        seed: the weights' and the batch's seed.

    Returns:
        One :class:`StrideRow` per stride, those of ``measured`` first.

    Raises:
        ValueError: a size that is not a positive int, or ``seq_len`` beyond
            ``config.max_seq_len`` (from the measurement or the memory model).
    """
    steps = dict(measured)
    for k in strides:
        (row,) = compare_checkpointing(replace(config, checkpoint_every=k), [(batch_size, seq_len)],
                                       modes=("blocks",), device=device, seed=seed)  # fmt: skip
        steps[k] = row.measured_bytes
    out = []
    for k, meas in steps.items():
        cfg = replace(config, checkpointing="blocks" if k else "off", checkpoint_every=max(k, 1))
        predicted = activation_bytes(cfg, batch_size, seq_len).total
        out.append(StrideRow(k, -(-config.n_layers // k) if k else 0, predicted, meas))
    return out
