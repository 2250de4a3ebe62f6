"""The training plan for TinyGPT: a common four-step recipe for choosing the numbers.

1. the largest micro-batch that fits the memory budget at the sequence length (the memory
   model's bytes, searched by :func:`course_lib.fit.find_largest`);
2. gradient accumulation so the effective batch lands in a target range (16-64 examples is the
   usual advice for a LoRA on instruction data);
3. enough tokens per step (below about 4,000, raise accumulation rather than the learning rate);
4. activation checkpointing only when not even one row fits without it.

:func:`plan` returns a :class:`Plan`; :func:`training_memory` is the bytes per device it plans
with. A real Hugging Face fine-tune: :func:`course_lib.finetune.plan_finetune` (also here).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from . import _checks, memory
from ._checks import Checkpointing, checkpointing_mode, positive_int, seq_len_within
from .finetune import plan_finetune  # noqa: F401  (the plan for a real fine-tune, also here)
from .fit import NoBatchFitsError, PredictedProbe, SearchResult, find_largest
from .model import TinyGPTConfig
from .units import ADAMW_STATE_BYTES, format_bytes, table


@dataclass
class TrainingMemory:
    """Bytes per device for one AdamW step (data parallel: each device holds a full replica):
    ``weights``, ``gradients`` (one ``dtype`` element per parameter each), ``optimizer_state``
    (two fp32 moments per parameter), ``activations`` (:func:`memory.activation_bytes`).

    Exact when gradients stay allocated between steps (``zero_grad(set_to_none=False)``); with
    ``set_to_none=True`` it over-counts by at most ``gradients`` (the measured peak of
    :class:`~course_lib.memory.MemoryProbe` was 90-99% of it). AdamW's temporaries are not
    counted."""

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
    """``P * (s + s + 8) + activations(B, T)`` bytes, for ``P`` parameters of ``s`` bytes.

    Args:
        config: the TinyGPT config.
        micro_batch_size: rows per micro-batch.
        seq_len: tokens per row.
        dtype: the training dtype.

    Returns:
        The :class:`TrainingMemory`.

    Raises:
        ValueError: see :func:`course_lib.memory.activation_bytes`.
    """
    n_params, size = memory.parameter_count(config), torch.empty(0, dtype=dtype).element_size()
    act = memory.activation_bytes(config, micro_batch_size, seq_len, dtype=dtype).total
    return TrainingMemory(n_params * size, n_params * size, n_params * ADAMW_STATE_BYTES, int(act))


@dataclass
class Plan:
    """What :func:`plan` chose, the figures behind it, and warnings in plain words (``print()``
    it). Shared with :class:`course_lib.finetune.FinetunePlan`, under the same names:
    ``seq_len``, ``memory_budget``, ``micro_batch``, ``grad_accum_steps``, ``checkpointing``,
    ``max_micro_batch``, ``tokens_per_step``, ``effective_batch_size``, ``notes``,
    ``warnings``. ``search`` found ``max_micro_batch``; ``probe.needed``: bytes per probe."""

    config: TinyGPTConfig
    seq_len: int
    dataset_size: int
    micro_batch: int
    grad_accum_steps: int
    n_devices: int
    max_micro_batch: int
    memory: TrainingMemory
    memory_budget: int
    target_effective: tuple[int, int]
    min_tokens_per_step: int
    search: SearchResult
    probe: PredictedProbe
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dtype: torch.dtype = torch.float32

    @property
    def checkpointing(self) -> Checkpointing:
        return self.config.checkpointing

    @property
    def effective_batch_size(self) -> int:  # examples per optimiser step
        return self.micro_batch * self.grad_accum_steps * self.n_devices

    @property
    def tokens_per_step(self) -> int:  # full rows
        return self.effective_batch_size * self.seq_len

    @property
    def steps_per_epoch(self) -> int:
        """Full optimiser steps per epoch: ``dataset_size // effective_batch_size``."""
        return self.dataset_size // self.effective_batch_size

    def rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, text)`` rows.

        Returns:
            ``(label, text)`` pairs, in print order.
        """
        c, mem, fb, e = self.config, self.memory, format_bytes, self.effective_batch_size
        (lo, hi), fixed = self.target_effective, mem.total - mem.activations
        n_params, dtype = memory.parameter_count(c), str(self.dtype).removeprefix("torch.")
        accum = f"{self.grad_accum_steps} micro-batch{'es' * (self.grad_accum_steps > 1)}"
        share = f"{100 * mem.total / self.memory_budget:.0f}%"
        return [
            ("model", f"d_model={c.d_model} n_layers={c.n_layers} n_heads={c.n_heads} "
                      f"vocab={c.vocab_size} attn={c.attn_impl} ({n_params:,} params, {dtype})"),
            ("sequence length", f"{self.seq_len:,} tokens per row"),
            ("micro-batch", f"{self.micro_batch} per device (largest that fits: "
                            f"{self.max_micro_batch}{'+' if self.search.capped else ''})"),
            ("grad accumulation", f"{accum} per optimiser step"),
            ("devices", f"{self.n_devices}"),
            ("effective batch", f"{e} = {self.micro_batch} x {self.grad_accum_steps} x "
                                f"{self.n_devices} (target {lo}-{hi})"),
            ("tokens per step", f"{self.tokens_per_step:,} (full rows; target >= "
                                f"{self.min_tokens_per_step:,})"),
            ("steps per epoch", f"{self.steps_per_epoch} full ({self.dataset_size:,} // {e}; "
                                f"{self.dataset_size % e} examples left over)"),
            ("memory per device", f"{fb(mem.total)} of {fb(self.memory_budget)} ({share}): "
                                  f"{fb(fixed)} weights+grads+AdamW, {fb(mem.activations)} "
                                  "activations"),
            ("checkpointing", self.checkpointing),
        ]  # fmt: skip

    def to_table(self) -> str:
        """The plan as text: what ``print(plan)`` shows.

        Returns:
            The rows, notes and warnings, as text.
        """
        return table(self.rows(), self.notes, self.warnings)

    __str__ = to_table


def plan(
    config: TinyGPTConfig,
    memory_budget: int | str,
    seq_len: int,
    dataset_size: int,
    target_effective: tuple[int, int] = (16, 64),
    min_tokens_per_step: int = 4000,
    n_devices: int = 1,
    dtype: torch.dtype = torch.float32,
    min_steps_per_epoch: int = 25,
    checkpointing: Checkpointing | bool | None = None,
) -> Plan:
    """The four-step recipe (module docstring) on the memory model (:func:`training_memory`,
    bytes per device).

    1. Micro-batch ``B``: the largest with ``training_memory(B) <= memory_budget``, capped at
       ``min(target max, dataset_size)``; if ``B = 1`` does not fit, ``checkpointing="blocks"``
       and a warning. The target range is clipped to ``dataset_size``.
    2. Accumulation ``A`` and devices ``D``: ``tmin <= B*A*D <= tmax`` with the least ``A`` that
       also gives ``B*A*D*seq_len >= min_tokens_per_step`` (:func:`choose_shape`). ``B`` drops
       below the largest that fits only to meet the targets; a note says so.
    3. Warnings: too few tokens per step (raise accumulation, not the learning rate); fewer than
       ``min_steps_per_epoch`` full steps per epoch (800 examples at 64 give 12); checkpointing
       switched on; devices left idle.

    Args:
        config: the ``TinyGPT`` being trained (its checkpointing mode unless ``checkpointing``).
        memory_budget: bytes per device, or a string with a unit (``"24GiB"``).
        seq_len: tokens in the longest row the run must survive (every row planned at it).
        dataset_size: examples in one epoch.
        target_effective: the smallest and largest effective batch (examples per step).
        min_tokens_per_step: the least tokens one optimiser step should see.
        n_devices: data-parallel devices available (each holds the whole step).
        dtype: the parameters' and activations' dtype.
        min_steps_per_epoch: the fewest full optimiser steps per epoch before a warning.
        checkpointing: ``None`` lets step 4 decide; a mode fixes it (``config``'s is replaced).

    Returns:
        The :class:`Plan`.

    Raises:
        ValueError: a bad value, naming it.
        NoBatchFitsError: not even one row fits (with checkpointing, when it was free to choose).
    """
    budget = _checks.memory_budget(memory_budget)
    tmin, tmax = _check_plan_args(
        config, seq_len, dataset_size, target_effective, (min_tokens_per_step, n_devices,
        min_steps_per_epoch),
    )  # fmt: skip
    if checkpointing is not None:
        config = replace(config, checkpointing=checkpointing_mode(checkpointing))
    warnings: list[str] = []
    lo, hi = min(tmin, dataset_size), min(tmax, dataset_size)  # a step never sees more than N
    config, probe, result = _fit_micro_batch(
        config, budget, seq_len, hi, dtype, warnings, checkpointing is None
    )
    m_max, targets = result.batch_size, (lo, hi, min_tokens_per_step, min_steps_per_epoch)
    m, a, d = choose_shape(m_max, n_devices, seq_len, dataset_size, *targets)
    p = Plan(
        config, seq_len, dataset_size, m, a, d, m_max, training_memory(config, m, seq_len, dtype),
        budget, (tmin, tmax), min_tokens_per_step, result, probe, [], warnings, dtype,
    )  # fmt: skip
    if m < m_max:
        p.notes.append(smaller_micro_batch_note(m_max, (m, a, d), seq_len, dataset_size, targets))
    warnings += _shape_warnings(p, n_devices, hi, min_steps_per_epoch)
    return p


def _check_plan_args(
    config: TinyGPTConfig, seq_len: int, dataset_size: int, target_effective: tuple[int, int],
    counts: tuple[int, int, int],
) -> tuple[int, int]:  # fmt: skip
    """The argument checks of :func:`plan`; returns ``target_effective`` checked."""
    seq_len_within(seq_len, config.max_seq_len)
    positive_int("dataset_size", dataset_size)
    for name, value in zip(("min_tokens_per_step", "n_devices", "min_steps_per_epoch"), counts):
        positive_int(name, value)
    if len(target_effective) != 2:
        raise ValueError(f"target_effective must be (min, max), got {target_effective!r}")
    tmin, tmax = (positive_int(f"target_effective[{i}]", v) for i, v in enumerate(target_effective))
    if tmin > tmax:
        raise ValueError(f"target_effective={target_effective}: min {tmin} exceeds max {tmax}")
    return tmin, tmax


def choose_shape(
    m_max: int, n_devices: int, seq_len: int, dataset_size: int, tmin: int, tmax: int,
    min_tokens: int, min_steps: int,
) -> tuple[int, int, int]:  # fmt: skip
    """Best ``(micro, accum, devices)`` with ``tmin <= m*a*d <= tmax``, ranked by: tokens per step
    reach ``min_tokens``; at least ``min_steps`` full steps per epoch; more devices; a larger
    micro-batch; fewer accumulation steps. ``a`` is the least meeting both lower targets.

    Args:
        m_max: the largest micro-batch that fits.
        n_devices: devices available.
        seq_len: tokens per row.
        dataset_size: training examples.
        tmin: the smallest effective batch.
        tmax: the largest effective batch.
        min_tokens: tokens per step to reach.
        min_steps: full steps per epoch to reach.

    Returns:
        ``(micro-batch, accumulation steps, devices)``.
    """
    best, best_key = (1, 1, 1), None
    for d in range(min(n_devices, tmax), 0, -1):
        for m in range(min(m_max, tmax // d), 0, -1):
            md = m * d
            a_lo, a_hi = max(1, -(-tmin // md)), tmax // md
            if a_lo > a_hi:
                continue
            a = min(max(a_lo, -(-min_tokens // (md * seq_len))), a_hi)
            key = (md * a * seq_len >= min_tokens, dataset_size // (md * a) >= min_steps, d, m, -a)
            if best_key is None or key > best_key:
                best, best_key = (m, a, d), key
            if key[0] and key[1]:  # the first fully satisfying one in (d, m) order is the best
                return best
    return best


def smaller_micro_batch_note(
    m_max: int, chosen: tuple[int, int, int], seq_len: int, dataset_size: int,
    targets: tuple[int, int, int, int],
) -> str:  # fmt: skip
    """Why the plan takes a micro-batch below the largest that fits: the target the largest
    one misses on the same devices, with its least accumulation (the rule of
    :func:`choose_shape`), named with its numbers.

    Args:
        m_max: the largest micro-batch that fits.
        chosen: the plan's ``(micro-batch, accumulation steps, devices)``.
        seq_len: tokens per row.
        dataset_size: training examples.
        targets: ``(smallest effective batch, largest, tokens per step, steps per epoch)``.

    Returns:
        The note, e.g. "micro-batch 8 is below the largest that fits (11): 11 x 3 = 33 examples
        per step leave 24 full steps per epoch, fewer than 25; 8 x 4 = 32 is the plan's shape".
    """
    m, a, d = chosen
    lo, hi, min_tokens, min_steps = targets
    md, dev = m_max * d, f" x {d}" if d > 1 else ""
    a_lo, a_hi = max(1, -(-lo // md)), hi // md
    if a_lo > a_hi:
        why = f"no accumulation puts {m_max} x A{dev} examples per step within {lo}-{hi}"
    else:
        big = min(max(a_lo, -(-min_tokens // (md * seq_len))), a_hi)
        e, misses = md * big, []
        if e * seq_len < min_tokens:
            misses.append(f"reach only {e * seq_len:,} tokens per step, below {min_tokens:,}")
        if dataset_size // e < min_steps:
            misses.append(f"leave {dataset_size // e} full steps per epoch, fewer than {min_steps}")
        why = f"{m_max} x {big}{dev} = {e} examples per step " + (
            " and ".join(misses) or "rank below it (fewer devices or more accumulation)"
        )
    return (
        f"micro-batch {m} is below the largest that fits ({m_max}): {why}; "
        f"{m} x {a}{f' x {d}' if d > 1 else ''} = {m * a * d} is the plan's shape"
    )


def _fit_micro_batch(
    config: TinyGPTConfig, budget: int, seq_len: int, limit: int, dtype: torch.dtype,
    warnings: list[str], may_checkpoint: bool,
) -> tuple[TinyGPTConfig, PredictedProbe, SearchResult]:  # fmt: skip
    """Step 1 (and 4): the largest micro-batch, turning on checkpointing only if none fits."""
    fb = format_bytes

    def search(cfg: TinyGPTConfig) -> tuple[TinyGPTConfig, PredictedProbe, SearchResult]:
        probe = PredictedProbe(lambda n: training_memory(cfg, n, seq_len, dtype).total, budget)
        return cfg, probe, find_largest(probe, start=1, limit=limit)

    try:
        return search(config)
    except NoBatchFitsError:
        pass  # step 4
    plain = training_memory(replace(config, checkpointing="off"), 1, seq_len, dtype)
    ckpt = replace(config, checkpointing="blocks")
    with_ckpt = training_memory(ckpt, 1, seq_len, dtype)
    fixed = with_ckpt.total - with_ckpt.activations
    if not may_checkpoint or config.checkpointing == "blocks" or with_ckpt.total > budget:
        raise NoBatchFitsError(
            f"micro-batch 1 at seq_len={seq_len} needs {fb(plain.total)} without activation "
            f"checkpointing and {fb(with_ckpt.total)} with it ({fb(fixed)} of that is "
            f"weights, gradients and AdamW state), more than the {fb(budget)} budget; "
            "shorten seq_len, use attn_impl='sdpa' or a smaller model, or get more memory"
        ) from None
    warnings.append(
        f"micro-batch 1 does not fit without activation checkpointing ({fb(plain.total)} > "
        f"{fb(budget)}), so the plan turns on checkpointing='blocks': each block is "
        "recomputed in the backward pass: a third more compute by the count, often quoted as "
        "about 1.3x the time per step (lesson 4 measures it on your machine)"
    )
    return search(ckpt)


def _shape_warnings(p: Plan, n_devices: int, hi: int, min_steps_per_epoch: int) -> list[str]:
    """Step 3: the plan's weak spots, in plain words."""
    out, e, tmin = [], p.effective_batch_size, p.target_effective[0]
    if p.dataset_size < tmin:
        out.append(
            f"the dataset has {p.dataset_size} examples, fewer than the smallest target "
            f"effective batch ({tmin}): one optimiser step per epoch at most; get more data or "
            "lower the target"
        )
    if p.n_devices < n_devices:
        out.append(
            f"only {p.n_devices} of {n_devices} devices are used: a batch of 1 on each of "
            f"more would push the effective batch past {hi}"
        )
    if p.tokens_per_step < p.min_tokens_per_step:
        out.append(
            f"tokens per step is {p.tokens_per_step:,}, below {p.min_tokens_per_step:,} even at "
            f"effective batch {hi}, the top of the range: gradients will be noisy. Raise gradient "
            "accumulation (a larger target max), not the learning rate"
        )
    if p.steps_per_epoch < min_steps_per_epoch:
        out.append(
            f"one epoch of {p.dataset_size:,} examples at effective batch {e} is only "
            f"{p.steps_per_epoch} full optimiser step{'s' * (p.steps_per_epoch != 1)} "
            f"({p.dataset_size:,} // {e}), too few to move an adapter anywhere useful: lower the "
            "effective batch (a smaller target) or train more epochs; do not chase a large "
            "effective batch on a small dataset"
        )
    return out
