"""The training plan: a common four-step recipe for choosing the numbers, run on the memory model.

1. the largest micro-batch that fits the memory budget at the sequence length (doubling, then
   bisection: :func:`course_lib.budget.find_max_batch_size`);
2. gradient accumulation so the effective batch lands in a target range (16-64 examples is the
   usual advice for a LoRA on instruction data);
3. enough tokens per step (below about 4,000 tokens per optimiser step, raise accumulation rather
   than the learning rate);
4. activation checkpointing only when not even one row fits without it.

:func:`plan` returns a :class:`Plan` (print it for a table) with notes and warnings in plain
words; :func:`training_memory` is the bytes per device it plans with.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from . import memory
from ._checks import positive_int
from .budget import (
    ADAMW_STATE_BYTES,
    NoBatchFitsError,
    SearchResult,
    choose_shape,
    find_max_batch_size,
)
from .finetune import plan_finetune  # noqa: F401  (the plan for a real fine-tune, also here)
from .model import TinyGPTConfig
from .units import table


@dataclass
class TrainingMemory:
    """Bytes per device for one AdamW training step (plain data parallel: every device holds a
    full replica). ``weights``, ``gradients``: one ``dtype`` element per parameter each;
    ``optimizer_state``: two fp32 moments per parameter; ``activations``: the memory model's peak
    above the parameters (:func:`memory.activation_bytes`).

    Exact when gradients stay allocated between steps (``zero_grad(set_to_none=False)``). With
    ``set_to_none=True`` the activation peak already holds the gradients made by then, so the sum
    over-counts by at most ``gradients``, the safe side: on small TinyGPTs the measured peak
    (:class:`MemoryProbe`) was 90-99% of this sum. The AdamW step's temporaries are not counted."""

    weights: int
    gradients: int
    optimizer_state: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer_state + self.activations


def training_memory(
    config: TinyGPTConfig, micro_batch_size: int, seq_len: int, dtype: torch.dtype = torch.float32
) -> TrainingMemory:
    """``P * (s + s + 8) + activations(B, T)`` bytes, for ``P`` parameters of ``s`` bytes."""
    n_params, size = memory.parameter_count(config), torch.empty(0, dtype=dtype).element_size()
    act = memory.activation_bytes(config, micro_batch_size, seq_len, dtype=dtype).total
    return TrainingMemory(n_params * size, n_params * size, n_params * ADAMW_STATE_BYTES, int(act))


@dataclass
class Plan:
    """What :func:`plan` chose, the figures behind it, and warnings in plain words. ``print()`` it
    for a table."""

    config: TinyGPTConfig
    seq_len: int
    dataset_size: int
    micro_batch_size: int
    grad_accum_steps: int
    n_devices: int
    max_micro_batch_size: int
    memory: TrainingMemory
    memory_bytes: int
    target_effective: tuple[int, int]
    min_tokens_per_step: int
    search: SearchResult
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dtype: torch.dtype = torch.float32

    @property
    def effective_batch_size(self) -> int:
        return self.micro_batch_size * self.grad_accum_steps * self.n_devices

    @property
    def tokens_per_step(self) -> int:
        return self.effective_batch_size * self.seq_len

    @property
    def steps_per_epoch(self) -> int:
        """Full optimiser steps per epoch: ``dataset_size // effective_batch_size``."""
        return self.dataset_size // self.effective_batch_size

    def rows(self) -> list[tuple[str, str]]:
        c, mem, fb, e = self.config, self.memory, memory.format_bytes, self.effective_batch_size
        (lo, hi), fixed = self.target_effective, mem.total - mem.activations
        return [
            (
                "model",
                f"d_model={c.d_model} n_layers={c.n_layers} n_heads={c.n_heads} "
                f"vocab={c.vocab_size} attn={c.attn_impl} ({memory.parameter_count(c):,} params, "
                f"{str(self.dtype).removeprefix('torch.')})",
            ),
            ("sequence length", f"{self.seq_len:,} tokens per row"),
            (
                "micro-batch",
                f"{self.micro_batch_size} per device (largest that fits: "
                f"{self.max_micro_batch_size}{'+' if self.search.capped else ''})",
            ),
            (
                "grad accumulation",
                f"{self.grad_accum_steps} micro-batch"
                f"{'es' * (self.grad_accum_steps > 1)} per optimiser step",
            ),
            ("devices", f"{self.n_devices}"),
            (
                "effective batch",
                f"{e} = {self.micro_batch_size} x {self.grad_accum_steps} x "
                f"{self.n_devices} (target {lo}-{hi})",
            ),
            (
                "tokens per step",
                f"{self.tokens_per_step:,} (full rows; target >= {self.min_tokens_per_step:,})",
            ),
            (
                "steps per epoch",
                f"{self.steps_per_epoch} full ({self.dataset_size:,} // {e}; "
                f"{self.dataset_size % e} examples left over)",
            ),
            (
                "memory per device",
                f"{fb(mem.total)} of {fb(self.memory_bytes)} "
                f"({100 * mem.total / self.memory_bytes:.0f}%): {fb(fixed)} weights+grads+AdamW, "
                f"{fb(mem.activations)} activations",
            ),
            ("checkpointing", "off" if c.checkpointing == "none" else c.checkpointing),
        ]

    def to_table(self) -> str:
        return table(self.rows(), self.notes, self.warnings)

    __str__ = to_table


def plan(
    config: TinyGPTConfig,
    memory_bytes: int,
    seq_len: int,
    dataset_size: int,
    target_effective: tuple[int, int] = (16, 64),
    min_tokens_per_step: int = 4000,
    n_devices: int = 1,
    dtype: torch.dtype = torch.float32,
    min_steps_per_epoch: int = 25,
) -> Plan:
    """The four-step recipe (module docstring) on the memory model (:func:`training_memory`,
    bytes per device).

    1. Micro-batch ``B``: the largest with ``training_memory(B) <= memory_bytes``
       (:func:`find_max_batch_size`, capped at ``min(target max, dataset_size)``). If ``B = 1``
       does not fit, retry with ``checkpointing="blocks"`` and warn; if that fails too, raise
       :class:`NoBatchFitsError`. The target range is clipped to ``dataset_size``.
    2. Accumulation ``A`` and devices ``D``: ``tmin <= B*A*D <= tmax`` with the least ``A`` that
       also gives ``B*A*D*seq_len >= min_tokens_per_step``
       (:func:`~course_lib.budget.choose_shape`). ``B`` drops below the largest that fits only
       to meet the targets; a note says so.
    3. Warnings: tokens per step below target (raise accumulation, not the learning rate); fewer
       than ``min_steps_per_epoch`` full steps per epoch (this course's rule of thumb: 800
       examples at an effective batch of 64 give only 12); checkpointing switched on; devices
       left idle.
    """
    tmin, tmax = _check_plan_args(
        config,
        memory_bytes,
        seq_len,
        dataset_size,
        target_effective,
        min_tokens_per_step,
        n_devices,
        min_steps_per_epoch,
    )
    notes: list[str] = []
    warnings: list[str] = []
    lo, hi = min(tmin, dataset_size), min(tmax, dataset_size)  # a step never sees more than N
    if dataset_size < tmin:
        warnings.append(
            f"the dataset has {dataset_size} examples, fewer than the smallest target "
            f"effective batch ({tmin}): one optimiser step per epoch at most; get "
            "more data or lower the target"
        )
    config, result = _fit_micro_batch(config, memory_bytes, seq_len, hi, dtype, warnings)
    m_max = result.batch_size
    m, a, d = choose_shape(
        m_max, n_devices, seq_len, dataset_size, lo, hi, min_tokens_per_step, min_steps_per_epoch
    )
    p = Plan(
        config,
        seq_len,
        dataset_size,
        m,
        a,
        d,
        m_max,
        training_memory(config, m, seq_len, dtype),
        memory_bytes,
        (tmin, tmax),
        min_tokens_per_step,
        result,
        notes,
        warnings,
        dtype,
    )
    if m < m_max:
        notes.append(
            f"micro-batch {m} is below the largest that fits ({m_max}) to keep the "
            f"effective batch within {lo}-{hi} and the steps per epoch up"
        )
    warnings += _shape_warnings(p, n_devices, hi, min_steps_per_epoch)
    return p


def _check_plan_args(
    config,
    memory_bytes,
    seq_len,
    dataset_size,
    target_effective,
    min_tokens_per_step,
    n_devices,
    min_steps_per_epoch,
) -> tuple[int, int]:
    for name, value in (
        ("memory_bytes", memory_bytes),
        ("seq_len", seq_len),
        ("dataset_size", dataset_size),
        ("min_tokens_per_step", min_tokens_per_step),
        ("n_devices", n_devices),
        ("min_steps_per_epoch", min_steps_per_epoch),
    ):
        positive_int(name, value)
    if seq_len > config.max_seq_len:
        raise ValueError(
            f"seq_len={seq_len} exceeds config.max_seq_len={config.max_seq_len}; "
            "build the config with max_seq_len >= seq_len"
        )
    if len(target_effective) != 2:
        raise ValueError(f"target_effective must be (min, max), got {target_effective!r}")
    tmin, tmax = (positive_int(f"target_effective[{i}]", v) for i, v in enumerate(target_effective))
    if tmin > tmax:
        raise ValueError(f"target_effective={target_effective}: min {tmin} exceeds max {tmax}")
    return tmin, tmax


def _fit_micro_batch(config, memory_bytes, seq_len, limit, dtype, warnings):
    """Step 1 (and 4): the largest micro-batch, turning on checkpointing only if none fits."""
    fb = memory.format_bytes

    def search(cfg: TinyGPTConfig) -> SearchResult:
        fits = lambda n: training_memory(cfg, n, seq_len, dtype).total <= memory_bytes
        return find_max_batch_size(fits, start=1, limit=limit)

    try:
        return config, search(config)
    except NoBatchFitsError:
        pass
    plain = training_memory(config, 1, seq_len, dtype)
    ckpt = replace(config, checkpointing="blocks")
    with_ckpt = training_memory(ckpt, 1, seq_len, dtype)
    fixed = with_ckpt.total - with_ckpt.activations
    if config.checkpointing == "blocks" or with_ckpt.total > memory_bytes:
        raise NoBatchFitsError(
            f"micro-batch 1 at seq_len={seq_len} needs {fb(plain.total)} without activation "
            f"checkpointing and {fb(with_ckpt.total)} with it ({fb(fixed)} of that is "
            "weights, gradients and AdamW state), more than "
            f"the {fb(memory_bytes)} budget; shorten seq_len, use attn_impl='sdpa' or a "
            "smaller model, or get more memory"
        ) from None
    warnings.append(
        f"micro-batch 1 does not fit without activation checkpointing ({fb(plain.total)} > "
        f"{fb(memory_bytes)}), so the plan turns on checkpointing='blocks': each block is "
        "recomputed in the backward pass, about 1.3x the time per step (lesson 4 measures it)"
    )
    return ckpt, search(ckpt)


def _shape_warnings(p: Plan, n_devices: int, hi: int, min_steps_per_epoch: int) -> list[str]:
    """Step 3: the plan's weak spots, in plain words."""
    out = []
    e = p.effective_batch_size
    if p.n_devices < n_devices:
        out.append(
            f"only {p.n_devices} of {n_devices} devices are used: a batch of 1 on each of "
            f"more would push the effective batch past {hi}"
        )
    if p.tokens_per_step < p.min_tokens_per_step:
        out.append(
            f"tokens per step is {p.tokens_per_step:,}, below {p.min_tokens_per_step:,} even at "
            f"effective batch {hi}, the top of the range: gradients will be noisy. Raise gradient "
            f"accumulation (a larger target max), not the learning rate"
        )
    if p.steps_per_epoch < min_steps_per_epoch:
        out.append(
            f"one epoch of {p.dataset_size:,} examples at effective batch {e} is only "
            f"{p.steps_per_epoch} full optimiser step{'s' * (p.steps_per_epoch != 1)} "
            f"({p.dataset_size:,} // {e}), too few to move "
            "an adapter anywhere useful: lower the effective batch (a smaller target) or train "
            "more epochs; do not chase a large effective batch on a small dataset"
        )
    return out
