"""Lesson 5's experiments: the search on a measured card, the plan over the micro-batch, a logged
run, and the small-dataset trap.

* :func:`measured_search`: the largest micro-batch by real training steps
  (:class:`~course_lib.memory.MemoryProbe`) beside the memory model at every probe;
* :func:`plan_curve`: the bytes of one AdamW step over the micro-batch size
  (:func:`~course_lib.plan.training_memory`) beside the :func:`~course_lib.plan.plan` made for
  that budget;
* :func:`logged_run`: a short token-weighted run that logs its tokens per step;
* :func:`small_dataset_trap`: full optimiser steps per epoch and loss tokens per step over the
  effective batch, and where each rule of thumb holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from tqdm.auto import tqdm

from .. import _checks
from .._checks import Checkpointing, positive_int, positive_number
from ..accumulation import accumulate_gradients
from ..budget import steps_per_epoch
from ..collate import PaddingCollator, random_batches
from ..data import PAD_ID
from ..fit import NoBatchFitsError, SearchResult, find_largest
from ..memory import MemoryProbe
from ..memory.meter import Device, pick_device
from ..model import TinyGPT, TinyGPTConfig
from ..plan import Plan, plan, training_memory
from ..token_log import TokensPerStepLogger
from ..units import format_bytes


@dataclass
class MeasuredSearch:
    """:func:`measured_search`: the search, its probe (``probe.needed``: measured bytes at each
    size) and the memory model's bytes at each probed size (``predicted``)."""

    search: SearchResult
    probe: MemoryProbe
    predicted: dict[int, int]

    def table(self) -> str:
        """Every probe: the size, whether it fitted, measured and predicted bytes."""
        lines = [f"{'probe':>5} {'n':>4} {'fits':>5} {'measured':>10} {'model':>10} "
                 f"{'model/measured':>15}"]  # fmt: skip
        for i, (n, fitted) in enumerate(self.search.history, start=1):
            measured, predicted = self.probe.needed[n], self.predicted[n]
            lines.append(
                f"{i:>5} {n:>4} {str(fitted):>5} {format_bytes(measured):>10} "
                f"{format_bytes(predicted):>10} {predicted / measured:>15.3f}"
            )
        return "\n".join(lines)


def measured_search(
    config: TinyGPTConfig, seq_len: int, memory_budget: int | str, device: Device = None,
    seed: int = 0, progress: bool = False,
) -> MeasuredSearch:  # fmt: skip
    """The largest micro-batch of full ``seq_len`` rows whose real training step (weights,
    gradients and AdamW state included) fits ``memory_budget``: doubling then bisection from 1
    (:func:`course_lib.fit.find_largest`) over a :class:`~course_lib.memory.MemoryProbe`.

    Raises:
        ValueError: see :class:`~course_lib.memory.MemoryProbe`.
        NoBatchFitsError: not even one row fits.
    """
    probe = MemoryProbe(config, seq_len, memory_budget, device=device, seed=seed)
    bar = tqdm(desc="probes", unit="probe", disable=not progress)

    def fits(n: int) -> bool:
        bar.update()
        return probe(n)

    try:
        search = find_largest(fits)
    finally:
        bar.close()
    predicted = {n: training_memory(config, n, seq_len).total for n, _ in search.history}
    return MeasuredSearch(search, probe, predicted)


@dataclass
class PlanCurve:
    """One frame of lesson 5's planner at ``memory_budget`` bytes per device.

    ``plan``: what :func:`~course_lib.plan.plan` chose, or ``None`` with ``error`` saying why
    nothing fits. ``totals[i]``: :func:`~course_lib.plan.training_memory` bytes of one step at
    micro-batch ``micro_batch_sizes[i]``; ``fixed_bytes`` of that are weights, gradients and
    AdamW state. ``probes``: ``(n, fitted, bytes)`` for every probe of the plan's search.
    ``checkpointing``: the mode the curve is drawn for (the plan's, when there is one).
    """

    memory_budget: int
    seq_len: int
    plan: Plan | None
    error: str
    checkpointing: Checkpointing
    micro_batch_sizes: list[int]
    totals: list[int]
    fixed_bytes: int
    probes: list[tuple[int, bool, int]]


def plan_curve(
    config: TinyGPTConfig, memory_budget: int | str, seq_len: int, dataset_size: int,
    **plan_kwargs: Any,
) -> PlanCurve:  # fmt: skip
    """:func:`~course_lib.plan.plan` at ``memory_budget`` per device (``max_seq_len`` raised to
    ``seq_len`` when needed), and the memory model over micro-batches ``1 .. 2 x`` the largest
    that fits (at least 2), in the plan's config.

    Raises:
        ValueError: see :func:`~course_lib.plan.plan` (nothing fitting is a curve with ``error``).
    """
    budget = _checks.memory_budget(memory_budget)
    positive_int("seq_len", seq_len)
    cfg = replace(config, max_seq_len=max(config.max_seq_len, seq_len))
    p: Plan | None
    try:
        p, error = plan(cfg, budget, seq_len, dataset_size, **plan_kwargs), ""
    except NoBatchFitsError as exc:
        p, error = None, str(exc)
    if p is not None:
        cfg = p.config
    top = max(2, 2 * (p.max_micro_batch if p else 1))
    sizes = list(range(1, top + 1))
    steps = [training_memory(cfg, n, seq_len) for n in sizes]
    probes = [(n, fitted, p.probe.needed[n]) for n, fitted in p.search.history] if p else []
    return PlanCurve(
        memory_budget=budget,
        seq_len=seq_len,
        plan=p,
        error=error,
        checkpointing=cfg.checkpointing,
        micro_batch_sizes=sizes,
        totals=[m.total for m in steps],
        fixed_bytes=steps[0].total - steps[0].activations,
        probes=probes,
    )


def logged_run(
    config: TinyGPTConfig, examples: Sequence[dict], micro_batch: int, grad_accum_steps: int,
    steps: int, threshold: int, lr: float = 1e-3, seed: int = 0, device: Device = None,
    progress: bool = False,
) -> TokensPerStepLogger:  # fmt: skip
    """``steps`` optimiser steps of a TinyGPT (AdamW at ``lr``, gradient norm clipped to 1) on
    random micro-batches of ``examples`` (``drop_last``, completion-only labels), each window of
    ``grad_accum_steps`` accumulated token-weighted, every micro-batch's tokens logged.

    Returns:
        The :class:`~course_lib.token_log.TokensPerStepLogger` (``history``, ``summary()``).
    """
    dev, collate = pick_device(device), PaddingCollator(pad_token_id=PAD_ID)
    order = random_batches(len(examples), micro_batch, seed=seed, drop_last=True)
    torch.manual_seed(seed)
    model = TinyGPT(config).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    logger, a = TokensPerStepLogger(threshold=threshold), grad_accum_steps
    for step in tqdm(range(steps), desc="optimiser steps", disable=not progress):
        window = [collate([examples[i] for i in order[(step * a + k) % len(order)]])
                  for k in range(a)]  # fmt: skip
        window = [{k: v.to(dev) for k, v in mb.items()} for mb in window]
        for mb in window:
            logger.log_micro_batch(mb)
        accumulate_gradients(model, window)  # token-weighted over the window
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        logger.end_step()
    return logger


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
    (``E * loss_tokens_per_example``) for every effective batch ``E`` (sorted).

    Raises:
        ValueError: a count that is not a positive int, or no effective batch.
    """
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
