"""The plan for a real fine-tune: a Hugging Face config, LoRA or full, on your GPU.

Memory per device for AdamW training, from the config's fields alone (no model is built)::

    weights            P x b       every parameter in the model's dtype (frozen under LoRA)
    adapters           A x 4       LoRA's A and B matrices (PEFT keeps them in fp32)
    gradients          W x g       the W trainable parameters': g = b (full) or 4 (adapters)
    optimiser states   W x 8       AdamW's two moments per trainable parameter, in fp32
    step peak          activations, gradients and buffers of one forward + backward
                       (course_lib.memory.predict_hf_step), with every gradient already there:
                       the steady state of gradient accumulation

Mixed precision as assumed here: weights, activations and (full fine-tune) gradients in the
model's dtype, AdamW moments in fp32. A full fine-tune in fp32 is the quoted 16 bytes per
parameter (4 + 4 + 8); in bf16 it is 12. Mixed-precision training with fp32 master weights
(``autocast``) costs 16 bytes per parameter plus bf16 activations: plan it with
``dtype="float32"`` for the states and read the activations from a bf16 plan.

The step peak is a line in the micro-batch (:func:`~course_lib.hf.scaling.peak_line`), so each
probe of the "what fits" search (:func:`course_lib.fit.find_largest`) is a prediction that costs
microseconds and the plan answers in a fraction of a second. :func:`plan_finetune` returns a
:class:`FinetunePlan` (its shared fields named as :class:`course_lib.plan.Plan`'s); print it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from . import _checks
from ._checks import Checkpointing, checkpointing_mode, one_of, positive_int
from .fit import largest_or_zero
from .hf.arch import arch_parameter_count, architecture, config_dict, lora_parameter_count
from .hf.predict import notes_for, step_spec
from .hf.scaling import PeakLine, peak_line
from .hf_configs import load_config
from .units import ADAMW_STATE_BYTES, FP32, format_bytes, table

ADAPTER_BYTES = FP32  # PEFT autocasts bf16/fp16 adapters to fp32
MAX_ROWS = 10**9  # the search's cap: no plan needs a micro-batch of a billion rows
MODES: tuple[Checkpointing, ...] = ("off", "blocks")  # HF models checkpoint whole layers


@dataclass
class FinetunePlan:
    """What :func:`plan_finetune` chose, the bytes behind it, and warnings in plain words.

    The fields it shares with :class:`course_lib.plan.Plan` have the same names and meaning:
    ``seq_len``, ``memory_budget`` (bytes per device), ``micro_batch``, ``grad_accum_steps``,
    ``checkpointing``, ``max_micro_batch`` (the largest that fits with the plan's
    checkpointing), ``tokens_per_step``, ``effective_batch_size``, ``weights``, ``gradients``,
    ``optimizer_state``, ``notes``, ``warnings``. Sizes are bytes.
    """

    model: str
    config: dict
    dtype: str
    finetune: str
    lora_rank: int | None
    attn_impl: str
    seq_len: int
    memory_budget: int
    target_tokens: int | None
    n_params: int
    n_trainable: int
    weights: int
    adapters: int
    gradients: int
    optimizer_state: int
    activations_per_row: dict[Checkpointing, int]  # bytes one more row adds at the peak
    logits_per_row: int
    max_micro_batch_by_mode: dict[Checkpointing, int]  # the most rows that fit (0: none)
    checkpointing: Checkpointing = "off"
    micro_batch: int = 0
    grad_accum_steps: int = 0
    step_peak: int = 0  # predicted step peak at the plan, gradients included
    peak_at: str = ""
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def fixed(self) -> int:
        """Bytes that do not depend on the batch: weights, adapters and optimiser state."""
        return self.weights + self.adapters + self.optimizer_state

    @property
    def total(self) -> int:
        """Predicted bytes per device at the plan (0 when nothing fits)."""
        return self.fixed + self.step_peak if self.micro_batch else 0

    @property
    def max_micro_batch(self) -> int:
        """The largest micro-batch that fits with the plan's checkpointing."""
        return self.max_micro_batch_by_mode[self.checkpointing]

    @property
    def effective_batch_size(self) -> int:
        """Examples per optimiser step on the one device planned."""
        return self.micro_batch * self.grad_accum_steps

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimiser step, full rows."""
        return self.effective_batch_size * self.seq_len

    def to_table(self) -> str:
        """The plan as text (what ``print(plan)`` shows)."""
        return table(self.rows(), self.notes, self.warnings)

    __str__ = to_table

    def rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, text)`` rows: the model, the bytes, the numbers chosen."""
        fb, T, arch = format_bytes, self.seq_len, architecture(self.config)
        if self.finetune == "lora":
            share = 100 * self.n_trainable / self.n_params
            tuning = f"LoRA rank {self.lora_rank} on every attention and MLP projection"
            tuning += f": {self.n_trainable:,} trainable ({share:.2f}%)"
        else:
            tuning = f"full: all {self.n_trainable:,} parameters train"
        size, grad = self.weights // self.n_params, self.gradients // self.n_trainable
        per_row, fits = self.activations_per_row, self.max_micro_batch_by_mode
        model = f"{self.model} ({self.config['model_type']}, {arch.num_hidden_layers} layers)"
        act = f"{fb(per_row['off'])} without checkpointing, {fb(per_row['blocks'])} with"
        logits = f"{fb(self.logits_per_row)} (fp32 log-probabilities, {T:,} x {arch.vocab_size:,}"
        out = [
            ("model", f"{model}: {self.n_params:,} parameters in {self.dtype}"),
            ("fine-tune", tuning),
            ("rows", f"{T:,} tokens each, {self.attn_impl} attention"),
            ("GPU memory", fb(self.memory_budget)),
            ("weights", f"{fb(self.weights)} ({self.n_params:,} x {size} bytes)"),
            ("adapters", f"{fb(self.adapters)} (fp32)" if self.adapters else "none"),
            ("gradients", f"{fb(self.gradients)} ({self.n_trainable:,} x {grad} bytes)"),
            ("optimiser state", f"{fb(self.optimizer_state)} (AdamW: 2 fp32 moments each)"),
            ("activations per row", f"{act} (what one more row adds to the step's peak)"),
            ("logits per row", f"{logits}; the loss's backward holds three at once)"),
            ("largest micro-batch", f"{fits['off']} without checkpointing, {fits['blocks']} with"),
        ]
        if not self.micro_batch:
            return out + [("plan", "nothing fits (see the warning)")]
        steps = f"{self.grad_accum_steps} accumulation step{'s' * (self.grad_accum_steps > 1)}"
        target = f" (target {self.target_tokens:,})" if self.target_tokens else ""
        used = f"{100 * self.total / self.memory_budget:.0f}%"
        memory = f"{fb(self.total)} of {fb(self.memory_budget)} ({used}), peak at {self.peak_at}"
        return out + [
            (
                "plan",
                f"micro-batch {self.micro_batch} x {steps}, checkpointing {self.checkpointing}",
            ),
            ("tokens per step", f"{self.tokens_per_step:,}{target}"),
            ("memory at the plan", memory),
        ]


def resolve_model(model: Any) -> tuple[str, dict]:
    """``(label, config dict)`` for a shipped name, a ``config.json`` path, a dict or a
    ``PretrainedConfig``.

    Raises:
        ValueError: an unknown name or a file that is not a config (:func:`load_config`).
    """
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        return str(model), load_config(model)
    config = config_dict(model)
    return config.get("_name_or_path") or config.get("model_type", "model"), config


def plan_finetune(
    model: Any,
    gpu_memory: int | str,
    seq_len: int,
    *,
    dtype: object = None,
    finetune: str = "lora",
    lora_rank: int = 16,
    attn_impl: str = "sdpa",
    target_tokens: int | None = None,
    checkpointing: Checkpointing | bool | None = None,
) -> FinetunePlan:
    """Plan a fine-tune of ``model`` on a GPU with ``gpu_memory`` bytes.

    1. The fixed bytes (module docstring) and the step peak as a line in the micro-batch, with
       and without activation checkpointing (every decoder layer).
    2. The largest micro-batch that fits each way (:func:`course_lib.fit.find_largest` over the
       predicted peak); checkpointing only if one row does not fit without it (the course's
       recipe: recomputation costs time), unless ``checkpointing`` fixes it.
    3. Accumulation: the fewest tokens per step that reach ``target_tokens`` (then the largest
       micro-batch); without a target, the largest micro-batch and no accumulation.

    Args:
        model: a shipped name (``"Llama-3.1-8B"``), a ``config.json`` path, a config dict or a
            ``PretrainedConfig``.
        gpu_memory: the card's memory, the plan's ``memory_budget``: bytes (an int) or a string
            with a unit (``"24GiB"``, ``"80GB"``).
        seq_len: tokens per row (full rows: the worst case).
        dtype: the model's dtype (default: the config's).
        finetune: ``"lora"`` or ``"full"``.
        lora_rank: LoRA's rank on every attention and MLP projection.
        attn_impl: ``"sdpa"`` or ``"eager"``.
        target_tokens: tokens per optimiser step to reach, or ``None``.
        checkpointing: ``"off"`` or ``"blocks"`` to fix it; ``None``: the recipe chooses.

    Returns:
        :class:`FinetunePlan`; a model that does not fit is a plan with ``micro_batch == 0`` and
        a warning saying why.

    Raises:
        ValueError: a bad value, naming it.
    """
    label, config = resolve_model(model)
    one_of("finetune", finetune, ("lora", "full"))
    rank = positive_int("lora_rank", lora_rank) if finetune == "lora" else None
    if target_tokens is not None:
        positive_int("target_tokens", target_tokens)
    budget = _checks.memory_budget(gpu_memory, "gpu_memory")
    fixed_mode = None if checkpointing is None else checkpointing_mode(checkpointing)
    arch, spec, name, _ = step_spec(config, 2, seq_len, attn_impl, dtype, rank, fixed_mode)
    n_params = arch_parameter_count(arch)
    n_train = lora_parameter_count(arch, rank) if rank else n_params
    grad_bytes = ADAPTER_BYTES if rank else spec.b
    p = FinetunePlan(
        label, config, name, finetune, rank, attn_impl, seq_len, budget, target_tokens,
        n_params, n_train, n_params * spec.b, n_train * ADAPTER_BYTES if rank else 0,
        n_train * grad_bytes, n_train * ADAMW_STATE_BYTES, {}, seq_len * arch.vocab_size * FP32,
        {}, notes=notes_for(config, seq_len),
    )  # fmt: skip
    lines = {m: peak_line(arch, replace(spec, checkpointing=m)) for m in MODES}
    for mode, line in lines.items():
        p.max_micro_batch_by_mode[mode] = _largest(p, line)
        p.activations_per_row[mode] = line.peak(2, p.gradients)[2]
    _choose(p, lines, fixed_mode)
    return p


def _largest(p: FinetunePlan, line: PeakLine) -> int:
    """The most rows whose predicted step peak, on top of the fixed bytes, fits the budget."""

    def fits(rows: int) -> bool:
        return p.fixed + line.peak(rows, p.gradients)[0] <= p.memory_budget

    return largest_or_zero(fits, MAX_ROWS)


def _choose(
    p: FinetunePlan, lines: dict[Checkpointing, PeakLine], fixed_mode: Checkpointing | None
) -> None:
    """Steps 2 and 3 of :func:`plan_finetune`, and the warnings."""
    fb, fits = format_bytes, p.max_micro_batch_by_mode
    mode = fixed_mode or ("off" if fits["off"] else "blocks")
    one_row = {m: p.fixed + line.peak(1, p.gradients)[0] for m, line in lines.items()}
    p.checkpointing = mode
    if not fits[mode]:
        p.warnings.append(_nothing_fits(p, one_row))
        return
    if mode == "blocks" and fixed_mode is None:
        p.warnings.append(
            f"one row of {p.seq_len:,} tokens does not fit without activation checkpointing (it "
            f"needs {fb(one_row['off'])}), so the plan turns it on: every layer's forward runs "
            "twice, about 1.3x the time per step"
        )
    m_max = fits[mode]
    if p.target_tokens:
        rows = -(-p.target_tokens // p.seq_len)
        p.micro_batch, p.grad_accum_steps = min(
            ((m, -(-rows // m)) for m in range(1, min(m_max, rows) + 1)),
            key=lambda ma: (ma[0] * ma[1], -ma[0]),
        )
    else:
        p.micro_batch, p.grad_accum_steps = m_max, 1
    p.step_peak, p.peak_at, _ = lines[mode].peak(p.micro_batch, p.gradients)
    if p.attn_impl == "eager":
        p.notes.append(
            "eager attention keeps batch x heads x seq_len^2 scores per layer; sdpa does not"
        )
    p.notes.append(
        "the prediction counts tensors, not the CUDA allocator: keep some memory free for the "
        "CUDA context, fragmentation and kernels' workspaces"
    )


def _nothing_fits(p: FinetunePlan, one_row: dict[Checkpointing, int]) -> str:
    fb = format_bytes
    if p.fixed >= p.memory_budget:
        return (
            f"nothing fits: the weights, adapters and optimiser state alone need {fb(p.fixed)}, "
            f"more than the {fb(p.memory_budget)} of the GPU; "
            + ("fine-tune with LoRA instead, or " if p.finetune == "full" else "")
            + "use a smaller model, or a GPU with more memory"
        )
    return (
        f"nothing fits: one row of {p.seq_len:,} tokens needs {fb(one_row['off'])} without "
        f"activation checkpointing and {fb(one_row['blocks'])} with it, more than the "
        f"{fb(p.memory_budget)} of the GPU; shorten the rows"
        + (", use sdpa attention" if p.attn_impl == "eager" else "")
        + (", fine-tune with LoRA" if p.finetune == "full" else "")
        + " or get more memory"
    )
