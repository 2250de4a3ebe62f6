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
from .._checks import Checkpointing, one_of, positive_int, positive_number
from ..accumulation import accumulate_gradients
from ..budget import steps_per_epoch
from ..collate import PaddingCollator, random_batches
from ..data import PAD_ID
from ..fit import NoBatchFitsError, SearchResult, find_largest
from ..hf.cards import card_name
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
        """Every probe: the size, whether it fitted, measured and predicted bytes.

        Returns:
            One line per probe, in probe order, under a header.
        """
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

    Args:
        config: the model.
        seq_len: tokens per row (full rows, every token a label: the worst case).
        memory_budget: the card's memory per device, bytes or a string with a unit (``"24MiB"``).
        device: where the steps run (default: CUDA when there is one, else the CPU).
        seed: the probe's seed (weights and tokens).
        progress: show a progress bar of the probes.

    Returns:
        :class:`MeasuredSearch`: the search, its probe and the model's bytes at each probe.

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

    Args:
        config: the model.
        memory_budget: the card's memory per device, bytes or a string with a unit.
        seq_len: tokens per row.
        dataset_size: examples in the dataset (for the steps per epoch).
        **plan_kwargs: passed to :func:`~course_lib.plan.plan` (``min_tokens_per_step``...).

    Returns:
        :class:`PlanCurve`.

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

    Args:
        config: the model.
        examples: instruction examples (``make_instruction_dataset``).
        micro_batch: examples per micro-batch.
        grad_accum_steps: micro-batches per optimiser step.
        steps: optimiser steps to run.
        threshold: the logger's tokens-per-step warning threshold.
        lr: AdamW's learning rate.
        seed: the seed of the batch order and the model's weights.
        device: where it runs (default: CUDA when there is one, else the CPU).
        progress: show a progress bar of the steps.

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
    epoch and ``tokens[i]`` loss tokens per step at ``effective_batches[i]``; ``chosen``: one
    effective batch to mark (an explorer's micro-batch × accumulation), or ``None``."""

    dataset_size: int
    loss_tokens_per_example: float
    min_tokens: int
    min_steps: int
    effective_batches: list[int]
    steps: list[int]
    tokens: list[float]
    chosen: int | None = None

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
    chosen: int | None = None,
) -> SmallDatasetTrap:
    """Full steps per epoch (``dataset_size // E``) and loss tokens per step
    (``E * loss_tokens_per_example``) for every effective batch ``E`` (sorted), and for
    ``chosen`` (tabulated too, and marked by the figure).

    Args:
        dataset_size: examples in the dataset.
        loss_tokens_per_example: mean loss tokens per example (measured).
        effective_batches: the effective batches ``E`` to tabulate.
        min_tokens: the tokens-per-step rule of thumb.
        min_steps: the steps-per-epoch rule of thumb.
        chosen: an effective batch to mark (micro-batch × accumulation), or ``None``.

    Returns:
        :class:`SmallDatasetTrap`.

    Raises:
        ValueError: a count that is not a positive int, or no effective batch.
    """
    positive_int("dataset_size", dataset_size)
    positive_number("loss_tokens_per_example", loss_tokens_per_example)
    positive_int("min_tokens", min_tokens)
    positive_int("min_steps", min_steps)
    es = sorted({positive_int("effective batch", e) for e in effective_batches})
    if chosen is not None:
        es = sorted({*es, positive_int("chosen", chosen)})
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
        chosen=chosen,
    )


# --- section 9: a real model on a real card ---------------------------------------------------

GiB = 2**30
#: How the planner's components are grouped for the lesson's table, in the table's order.
PARTS = ("weights", "gradients", "optimizer state", "activations", "logits", "in flight", "other")
FINETUNES = ("qlora", "lora", "full")


@dataclass
class CardPlan:
    """A fine-tune of a real model's config planned on a shipped card (:func:`card_plan`).

    ``allocated[n]`` is the tensors' peak at micro-batch ``n`` (``max_memory_allocated``),
    ``device[n]`` what the card shows then (the allocator's reserve and the CUDA context added),
    ``parts[n]`` the allocated peak split into :data:`PARTS` (they add up to ``allocated[n]``)
    and ``moment[n]`` when the peak falls (``"backward"`` or ``"optimizer.step"``), for every
    ``n`` the search probed and for 1 and 2 rows. ``max_micro_batch`` is 0 when not even one
    row fits the card. What the card must hold is the top of the device band
    (:mod:`course_lib.hf.cards`): ``fixed_bytes + int(reserve * (allocated - fixed_bytes)) +
    context_bytes``, where ``fixed_bytes`` are the weights, adapters and optimiser state
    (allocated once and kept: they do not fragment), ``reserve`` the caching allocator's worst
    measured ratio for the attention backend over the rest, and ``context_bytes`` the CUDA
    context at the top of its range.
    """

    model: str
    card: str
    card_bytes: int
    finetune: str
    seq_len: int
    settings: dict[str, Any]
    max_micro_batch: int
    allocated: dict[int, int]
    device: dict[int, int]
    parts: dict[int, dict[str, int]]
    moment: dict[int, str]
    reserve: float
    context_bytes: int
    fixed_bytes: int

    @property
    def decides(self) -> str:
        """The part whose growth limits the plan: the one that grows most from the largest
        micro-batch that fits to one row more (when none fits, the largest part of one row)."""
        n = self.max_micro_batch
        if n and n + 1 in self.parts:
            now, more = self.parts[n], self.parts[n + 1]
            return max(more, key=lambda k: more[k] - now[k])
        parts = self.parts[max(1, n)]
        return max(parts, key=lambda k: parts[k])

    def table(self, rows: Sequence[int] = (1, 2)) -> str:
        """The allocated peak by part at each micro-batch of ``rows``, in GiB.

        Args:
            rows: micro-batch sizes to show (each must have been predicted: 1 and 2 always are).

        Returns:
            One line per part and the total, one column per micro-batch (bytes / 2**30).
        """
        head = "".join(f"{f'{n} row' + ('s' if n > 1 else ''):>16}" for n in rows)
        lines = [f"{self.finetune} of {self.model} on {self.card}, rows of {self.seq_len} tokens",
                 f"{'part (GiB, allocated)':<24}{head}"]  # fmt: skip
        for part in PARTS:
            lines.append(
                f"{part:<24}" + "".join(f"{self.parts[n][part] / GiB:>16.4f}" for n in rows)
            )
        total = "".join(f"{self.allocated[n] / GiB:>16.4f}" for n in rows)
        lines.append(f"{'= allocated peak':<24}{total}")
        lines.append(f"{'peak falls in':<24}" + "".join(f"{self.moment[n]:>16}" for n in rows))
        return "\n".join(lines)

    def verdict(self) -> str:
        """What the plan decides, in words: the largest micro-batch, what the card shows, what
        is left and which part decides.

        Returns:
            Two lines of text.
        """
        n, head = self.max_micro_batch, f"{self.model} ({self.finetune}) on {self.card}"
        shown = self.device[max(n, 1)] / GiB
        first = (f"{head}: not even one row fits; one row shows {shown:.2f} GiB of "
                 f"{self.card_bytes / GiB:.0f} GiB" if n == 0 else
                 f"{head}: largest micro-batch {n}, the card shows {shown:.2f} GiB, "
                 f"{self.card_bytes / GiB - shown:.2f} GiB spare")  # fmt: skip
        what = "what grows most with one more row" if n else "the largest part of one row"
        return first + f"\n{what}: {self.decides}"  # fmt: skip


def card_plan(
    model: str, card: str, finetune: str, *, seq_len: int = 2048, lora_rank: int = 16,
    dtype: str = "bfloat16", optimizer: str = "adamw", checkpointing: Checkpointing = "blocks",
    attn_impl: str = "sdpa", loss: str = "standard", fused: bool = False, limit: int = 512,
) -> CardPlan:  # fmt: skip
    """Plan ``finetune`` of a shipped model on a shipped card, from the config alone.

    The plan is :func:`course_lib.finetune.plan_finetune`'s (the ``Trainer``'s loop, PEFT's
    default LoRA targets, the card's reserve and CUDA context), with ``checkpointing`` fixed:
    its largest micro-batch is the largest ``n`` whose step the card shows within its memory
    (the top of :func:`course_lib.hf.cards.device_band`). This adds, for 1, 2, ... that
    micro-batch and one more row, each prediction split into the parts the lesson names.

    Args:
        model: a shipped config name (:func:`course_lib.hf_configs.available`).
        card: a shipped card name (:data:`course_lib.hf.cards.CARDS`: ``"RTX 4090"``...).
        finetune: ``"qlora"`` (NF4 base weights, double quantisation, LoRA), ``"lora"``
            (16-bit base weights) or ``"full"`` (every parameter trained).
        seq_len: tokens per row (full rows: the worst case).
        lora_rank: the adapters' rank (``"qlora"`` and ``"lora"``).
        dtype: the model's (compute) dtype.
        optimizer: :data:`course_lib.hf.states.OPTIMIZERS` (``"adamw"``: moments in the
            parameters' dtype, ``"adamw-8bit"``...).
        checkpointing: ``"blocks"`` (every decoder layer) or ``"off"``.
        attn_impl: ``"sdpa"``, ``"eager"`` or ``"flash"``.
        loss: ``"standard"`` (full fp32 log-probabilities) or ``"chunked"`` (fused).
        fused: AdamW's step: ``False`` is ``torch.optim.AdamW``'s multi-tensor step, its
            default on CUDA when you build the optimiser yourself (one more copy of the second
            moment while it runs); ``True`` the fused kernel, the ``Trainer``'s default
            (``adamw_torch_fused``: no copy).
        limit: the largest micro-batch shown beside the plan's (rows past it are not listed).

    Returns:
        :class:`CardPlan`.

    Raises:
        ValueError: an unknown model, card, fine-tune or setting (naming it).
    """
    from ..finetune import plan_finetune  # the fine-tune planner (torch-free, imported late)

    one_of("finetune", finetune, FINETUNES)
    card = card_name(card)
    mode = _checks.checkpointing_mode(checkpointing)
    plan = plan_finetune(
        model, seq_len=seq_len, gpu=card, finetune=finetune, lora_rank=lora_rank, dtype=dtype,
        optimizer=optimizer, checkpointing=mode, attn_impl=attn_impl, loss=loss,
        fused=fused, foreach=not fused,
    )  # fmt: skip
    largest = plan.max_micro_batch_by_mode[mode]
    rows = sorted({1, 2, *range(1, min(largest, limit) + 2)})
    memo = {n: plan.predictor(mode, n) for n in rows}
    band = memo[1].band
    assert band is not None  # predict_hf_memory always sets it
    return CardPlan(
        model, card, plan.memory_budget, finetune, seq_len, plan.settings.as_dict(), largest,
        allocated={n: m.peak_bytes for n, m in memo.items()},
        device={n: m.device_bytes for n, m in memo.items()},
        parts={n: _parts(m) for n, m in memo.items()},
        moment={n: "optimizer.step" if m.peak_at == "optimizer.step" else "backward"
                for n, m in memo.items()},
        reserve=band.ratio[1], context_bytes=band.context[1],
        fixed_bytes=band.persistent,
    )  # fmt: skip


def _parts(memory: Any) -> dict[str, int]:
    """The allocated peak of a :class:`~course_lib.hf.memory.HFMemory` split into :data:`PARTS`:
    at the backward, the step's tensors (the gradients made so far; the transient counted with
    the logits when the peak is the loss's, whose gradients are logit-sized); at the optimiser
    step, every gradient, the step's temporaries with the state, and what a plain loop still
    holds as logits (the rest of the peak)."""
    c, at_step = memory.components, memory.peak_at == "optimizer.step"
    parts = dict.fromkeys(PARTS, 0)
    parts["weights"] = c["weights"] + c["adapters"] + (0 if at_step else c["gathered"])
    parts["gradients"] = c["gradients"] if at_step else memory.step.gradients
    parts["optimizer state"] = c["optimizer_state"] + (c["optimizer_step"] if at_step else 0)
    parts["other"] = c["cublas_workspaces"] + c["batch"] + c["ddp_buckets"]
    if not at_step:
        parts["activations"] = c["activations"]
        parts["logits"] = c["logits_and_loss"]
        parts["logits" if memory.step.peak_at == "loss" else "in flight"] += c["transient"]
    parts["logits"] += memory.peak_bytes - sum(parts.values())  # a plain loop's held logits
    return parts
