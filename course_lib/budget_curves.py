"""Predicted memory and the planning rules swept over one knob, against a budget.

The data behind three figures, each a sweep of the memory model or of a rule of thumb:

* :func:`budget_fit` (lesson 4): the predicted peak of one step over ``seq_len``, plain and with
  every block checkpointed, and which of the two fits the budget at the chosen length;
* :func:`plan_curve` (lesson 5): the bytes of one AdamW step over the micro-batch size
  (:func:`~course_lib.plan.training_memory`) beside the :func:`~course_lib.plan.plan` made for
  that budget;
* :func:`small_dataset_trap` (lesson 5): full optimiser steps per epoch and loss tokens per step
  over the effective batch, and where each rule of thumb holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ._checks import positive_int, positive_number
from .budget import NoBatchFitsError, steps_per_epoch
from .memory import activation_bytes
from .model import TinyGPTConfig
from .plan import Plan, plan, training_memory

MIB = 2**20
FIT_MODES = ("none", "blocks")  # lesson 4 compares no checkpointing with every block checkpointed


@dataclass
class BudgetFit:
    """Predicted peak bytes of one step (:func:`~course_lib.memory.activation_bytes`) per
    checkpointing mode: ``peaks[mode][i]`` at ``seq_lens[i]``, ``at_seq_len[mode]`` at the chosen
    ``seq_len``. ``fits[mode]``: that peak is within ``budget_bytes``."""

    batch_size: int
    seq_len: int
    n_layers: int
    attn_impl: str
    budget_bytes: int
    seq_lens: list[int]
    peaks: dict[str, list[int]]
    at_seq_len: dict[str, int]

    @property
    def fits(self) -> dict[str, bool]:
        return {mode: peak <= self.budget_bytes for mode, peak in self.at_seq_len.items()}

    @property
    def verdict(self) -> str:
        """Which of the two fits at ``seq_len``, in words."""
        if self.fits["none"]:
            return "fits without checkpointing"
        if self.fits["blocks"]:
            return "fits only with checkpointing"
        return "does not fit, even with checkpointing"


def budget_fit(
    config: TinyGPTConfig,
    seq_len: int,
    n_layers: int,
    budget_mib: float,
    batch_size: int = 1,
    seq_lens: Sequence[int] | None = None,
    attn_impl: str | None = None,
) -> BudgetFit:
    """Does one step of ``config`` with ``n_layers`` blocks (and ``attn_impl``, if given) fit
    ``budget_mib`` MiB at ``batch_size x seq_len``, plain or checkpointed? Peaks are also swept
    over ``seq_lens`` (default: powers of two from 64 to ``4 * seq_len``, and ``seq_len``)."""
    positive_int("seq_len", seq_len)
    positive_int("n_layers", n_layers)
    positive_int("batch_size", batch_size)
    budget_bytes = int(positive_number("budget_mib", budget_mib) * MIB)
    if seq_lens is None:
        # From 64 tokens: below that the weights' gradients, not activations, set the peak.
        seq_lens = sorted({2**k for k in range(6, 16) if 2**k <= 4 * seq_len} | {seq_len})
    seq_lens = [positive_int("seq_lens[i]", t) for t in seq_lens]
    if not seq_lens:
        raise ValueError("budget_fit needs at least one seq_len to sweep")
    cfg = replace(
        config,
        n_layers=n_layers,
        max_seq_len=max(config.max_seq_len, *seq_lens, seq_len),
        attn_impl=attn_impl or config.attn_impl,
    )

    def peak(mode: str, t: int) -> int:
        return activation_bytes(cfg, batch_size, t, checkpointing=mode).total

    return BudgetFit(
        batch_size=batch_size,
        seq_len=seq_len,
        n_layers=n_layers,
        attn_impl=cfg.attn_impl,
        budget_bytes=budget_bytes,
        seq_lens=seq_lens,
        peaks={mode: [peak(mode, t) for t in seq_lens] for mode in FIT_MODES},
        at_seq_len={mode: peak(mode, seq_len) for mode in FIT_MODES},
    )


@dataclass
class PlanCurve:
    """One frame of lesson 5's planner at ``memory_bytes`` per device.

    ``plan``: what :func:`~course_lib.plan.plan` chose, or ``None`` with ``error`` saying why
    nothing fits. ``totals[i]``: :func:`~course_lib.plan.training_memory` bytes of one step at
    micro-batch ``micro_batch_sizes[i]``; ``fixed_bytes`` of that are weights, gradients and
    AdamW state. ``probes``: ``(n, fitted, bytes)`` for every probe of the plan's search.
    ``checkpointing``: the mode the curve is drawn for (the plan's, when there is one).
    """

    memory_bytes: int
    seq_len: int
    plan: Plan | None
    error: str
    checkpointing: str
    micro_batch_sizes: list[int]
    totals: list[int]
    fixed_bytes: int
    probes: list[tuple[int, bool, int]]


def plan_curve(
    config: TinyGPTConfig, memory_mib: float, seq_len: int, dataset_size: int, **plan_kwargs
) -> PlanCurve:
    """:func:`~course_lib.plan.plan` at ``memory_mib`` MiB per device (``max_seq_len`` raised to
    ``seq_len`` when needed), and the memory model over micro-batches ``1 .. 2 x`` the largest
    that fits (at least 2), in the plan's config."""
    memory_bytes = int(positive_number("memory_mib", memory_mib) * MIB)
    positive_int("seq_len", seq_len)
    cfg = replace(config, max_seq_len=max(config.max_seq_len, seq_len))
    try:
        p, error = plan(cfg, memory_bytes, seq_len, dataset_size, **plan_kwargs), ""
    except NoBatchFitsError as exc:
        p, error = None, str(exc)
    if p is not None:
        cfg = p.config
    top = max(2, 2 * (p.max_micro_batch_size if p else 1))
    sizes = list(range(1, top + 1))
    steps = [training_memory(cfg, n, seq_len) for n in sizes]
    history = p.search.history if p else []
    return PlanCurve(
        memory_bytes=memory_bytes,
        seq_len=seq_len,
        plan=p,
        error=error,
        checkpointing=cfg.checkpointing,
        micro_batch_sizes=sizes,
        totals=[m.total for m in steps],
        fixed_bytes=steps[0].total - steps[0].activations,
        probes=[(n, fitted, training_memory(cfg, n, seq_len).total) for n, fitted in history],
    )


@dataclass
class SmallDatasetTrap:
    """Two rules of thumb over the effective batch ``E``: ``steps[i]`` full optimiser steps per
    epoch and ``tokens[i]`` loss tokens per step at ``effective_batches[i]``."""

    dataset_size: int
    loss_tokens_per_example: float
    min_tokens: int
    min_steps: int
    effective_batches: list[int]
    steps: list[int]
    tokens: list[float]

    @property
    def max_effective_for_steps(self) -> float:
        """Enough steps per epoch while ``E <= dataset_size / min_steps``."""
        return self.dataset_size / self.min_steps

    @property
    def min_effective_for_tokens(self) -> float:
        """Enough loss tokens per step once ``E >= min_tokens / loss_tokens_per_example``."""
        return self.min_tokens / self.loss_tokens_per_example


def small_dataset_trap(
    dataset_size: int,
    loss_tokens_per_example: float,
    effective_batches: Sequence[int],
    min_tokens: int = 4000,
    min_steps: int = 25,
) -> SmallDatasetTrap:
    """Full steps per epoch (``dataset_size // E``) and loss tokens per step
    (``E * loss_tokens_per_example``) for every effective batch ``E`` (sorted)."""
    positive_int("dataset_size", dataset_size)
    positive_number("loss_tokens_per_example", loss_tokens_per_example)
    positive_int("min_tokens", min_tokens)
    positive_int("min_steps", min_steps)
    es = sorted(positive_int("effective batch", e) for e in effective_batches)
    if not es:
        raise ValueError("small_dataset_trap needs at least one effective batch")
    return SmallDatasetTrap(
        dataset_size=dataset_size,
        loss_tokens_per_example=float(loss_tokens_per_example),
        min_tokens=min_tokens,
        min_steps=min_steps,
        effective_batches=es,
        steps=[steps_per_epoch(dataset_size, e, drop_last=True) for e in es],
        tokens=[e * loss_tokens_per_example for e in es],
    )
