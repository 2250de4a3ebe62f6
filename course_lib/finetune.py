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

The step peak is a line in the micro-batch (:func:`~course_lib.hf.scaling.peak_line`),
so the largest micro-batch that fits is a closed form, not a search, and the plan answers in a
fraction of a second. :func:`plan_finetune` returns a :class:`FinetunePlan`; print it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ._checks import one_of, positive_int
from .hf.models import lora_parameter_count, parameter_count
from .hf.predict import architecture, config_dict, notes_for, step_spec
from .hf.scaling import peak_line
from .hf_configs import load_config
from .units import format_bytes, table

ADAMW_STATE_BYTES = 8  # two fp32 moments per trainable parameter
ADAPTER_BYTES = 4  # PEFT autocasts bf16/fp16 adapters to fp32
UNITS = {"": 2**30, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}  # fmt: skip


def parse_bytes(text) -> int:
    """``"24GiB"`` -> ``25769803776``; ``"80GB"`` is decimal; a bare number is GiB."""
    if isinstance(text, int) and not isinstance(text, bool):
        return positive_int("gpu_memory", text)
    s = str(text).strip().lower().replace(" ", "")
    number = s.rstrip("kmgtib")
    unit = s[len(number) :]
    try:
        value = float(number)
    except ValueError:
        value = float("nan")
    if unit not in UNITS or not 0 < value < float("inf"):
        raise ValueError(f"memory {text!r} is not a size like 24GiB, 80GB or 24 (GiB)")
    return int(value * UNITS[unit])


@dataclass
class FinetunePlan:
    """What :func:`plan_finetune` chose, the bytes behind it, and warnings in plain words."""

    model: str
    config: dict
    dtype: str
    finetune: str
    lora_rank: int | None
    attn_impl: str
    seq_len: int
    gpu_memory: int
    target_tokens: int | None
    n_params: int
    n_trainable: int
    weights: int
    adapters: int
    gradients: int
    optimizer_states: int
    activations_per_row: dict[str, int]  # "none" / "blocks" -> bytes per extra row at the peak
    logits_per_row: int
    max_micro_batch: dict[str, int]  # "none" / "blocks" -> the most rows that fit (0: none)
    checkpointing: bool = False
    micro_batch_size: int = 0
    grad_accum_steps: int = 0
    step_peak: int = 0  # predicted step peak at the plan, gradients included
    peak_at: str = ""
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def fixed(self) -> int:
        """Bytes that do not depend on the batch: weights, adapters and optimiser states."""
        return self.weights + self.adapters + self.optimizer_states

    @property
    def total(self) -> int:
        """Predicted bytes per device at the plan (0 when nothing fits)."""
        return self.fixed + self.step_peak if self.micro_batch_size else 0

    @property
    def tokens_per_step(self) -> int:
        return self.micro_batch_size * self.grad_accum_steps * self.seq_len

    def to_table(self) -> str:
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
        per_row, fits = self.activations_per_row, self.max_micro_batch
        model = f"{self.model} ({self.config['model_type']}, {arch.num_hidden_layers} layers)"
        out = [
            ("model", f"{model}: {self.n_params:,} parameters in {self.dtype}"),
            ("fine-tune", tuning),
            ("rows", f"{T:,} tokens each, {self.attn_impl} attention"),
            ("GPU memory", fb(self.gpu_memory)),
            ("weights", f"{fb(self.weights)} ({self.n_params:,} x {size} bytes)"),
            ("adapters", f"{fb(self.adapters)} (fp32)" if self.adapters else "none"),
            ("gradients", f"{fb(self.gradients)} ({self.n_trainable:,} x {grad} bytes)"),
            ("optimiser states", f"{fb(self.optimizer_states)} (AdamW: 2 fp32 moments each)"),
            (
                "activations per row",
                f"{fb(per_row['none'])} without checkpointing, {fb(per_row['blocks'])} with "
                "(what one more row adds to the step's peak)",
            ),
            (
                "logits per row",
                f"{fb(self.logits_per_row)} (fp32 log-probabilities, {T:,} x "
                f"{arch.vocab_size:,}; the loss's backward holds three at once)",
            ),
            ("largest micro-batch", f"{fits['none']} without checkpointing, {fits['blocks']} with"),
        ]
        if not self.micro_batch_size:
            return out + [("plan", "nothing fits (see the warning)")]
        steps = f"{self.grad_accum_steps} accumulation step{'s' * (self.grad_accum_steps > 1)}"
        ckpt = "on" if self.checkpointing else "off"
        target = f" (target {self.target_tokens:,})" if self.target_tokens else ""
        share = 100 * self.total / self.gpu_memory
        return out + [
            ("plan", f"micro-batch {self.micro_batch_size} x {steps}, checkpointing {ckpt}"),
            ("tokens per step", f"{self.tokens_per_step:,}{target}"),
            (
                "memory at the plan",
                f"{fb(self.total)} of {fb(self.gpu_memory)} ({share:.0f}%), peak at {self.peak_at}",
            ),
        ]


def resolve_model(model) -> tuple[str, dict]:
    """``(label, config dict)`` for a shipped name, a ``config.json`` path, a dict or a
    ``PretrainedConfig``."""
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        return str(model), load_config(model)
    config = config_dict(model)
    return config.get("_name_or_path") or config.get("model_type", "model"), config


def plan_finetune(
    model,
    gpu_memory,
    seq_len: int,
    *,
    dtype=None,
    finetune: str = "lora",
    lora_rank: int = 16,
    attn_impl: str = "sdpa",
    target_tokens: int | None = None,
) -> FinetunePlan:
    """Plan a fine-tune of ``model`` on a GPU with ``gpu_memory`` (bytes or ``"24GiB"``).

    1. The fixed bytes (module docstring) and the step peak as a line in the micro-batch, with
       and without activation checkpointing (every decoder layer).
    2. The largest micro-batch that fits each way; checkpointing only if one row does not fit
       without it (the course's recipe: recomputation costs time).
    3. Accumulation: the fewest tokens per step that reach ``target_tokens`` (then the largest
       micro-batch); without a target, the largest micro-batch and no accumulation.

    Raises ``ValueError`` for a bad value (naming it); a model that does not fit is a plan with
    ``micro_batch_size == 0`` and a warning saying why.
    """
    label, config = resolve_model(model)
    one_of("finetune", finetune, ("lora", "full"))
    rank = positive_int("lora_rank", lora_rank) if finetune == "lora" else None
    if target_tokens is not None:
        positive_int("target_tokens", target_tokens)
    budget = parse_bytes(gpu_memory)
    arch, spec, name, _ = step_spec(config, 2, seq_len, attn_impl, dtype, rank, "none")
    n_params = parameter_count(arch)
    n_train = lora_parameter_count(arch, rank) if rank else n_params
    grad_bytes = ADAPTER_BYTES if rank else spec.b
    p = FinetunePlan(
        label, config, name, finetune, rank, attn_impl, seq_len, budget, target_tokens,
        n_params, n_train, n_params * spec.b, n_train * ADAPTER_BYTES if rank else 0,
        n_train * grad_bytes, n_train * ADAMW_STATE_BYTES, {}, seq_len * arch.vocab_size * 4, {},
        notes=notes_for(config, seq_len),
    )  # fmt: skip
    modes = ("none", "blocks")
    lines = {m: peak_line(arch, replace(spec, checkpointing=m == "blocks")) for m in modes}
    room = budget - p.fixed
    for mode, line in lines.items():
        p.max_micro_batch[mode] = line.max_rows(room, p.gradients) if room > 0 else 0
        p.activations_per_row[mode] = line.peak(2, p.gradients)[2]
    _choose(p, lines)
    return p


def _choose(p: FinetunePlan, lines: dict) -> None:
    """Steps 2 and 3 of :func:`plan_finetune`, and the warnings."""
    fb, fits = format_bytes, p.max_micro_batch
    mode = "none" if fits["none"] else "blocks"
    one_row = {m: p.fixed + line.peak(1, p.gradients)[0] for m, line in lines.items()}
    if not fits[mode]:
        p.warnings.append(_nothing_fits(p, one_row))
        return
    if mode == "blocks":
        p.warnings.append(
            f"one row of {p.seq_len:,} tokens does not fit without activation checkpointing (it "
            f"needs {fb(one_row['none'])}), so the plan turns it on: every layer's forward runs "
            "twice, about 1.3x the time per step"
        )
    p.checkpointing = mode == "blocks"
    m_max = fits[mode]
    if p.target_tokens:
        rows = -(-p.target_tokens // p.seq_len)
        p.micro_batch_size, p.grad_accum_steps = min(
            ((m, -(-rows // m)) for m in range(1, min(m_max, rows) + 1)),
            key=lambda ma: (ma[0] * ma[1], -ma[0]),
        )
    else:
        p.micro_batch_size, p.grad_accum_steps = m_max, 1
    p.step_peak, p.peak_at, _ = lines[mode].peak(p.micro_batch_size, p.gradients)
    if p.attn_impl == "eager":
        p.notes.append(
            "eager attention keeps batch x heads x seq_len^2 scores per layer; sdpa does not"
        )
    p.notes.append(
        "the prediction counts tensors, not the CUDA allocator: keep some memory free for the "
        "CUDA context, fragmentation and kernels' workspaces"
    )


def _nothing_fits(p: FinetunePlan, one_row: dict) -> str:
    fb = format_bytes
    if p.fixed >= p.gpu_memory:
        return (
            f"nothing fits: the weights, adapters and optimiser states alone need {fb(p.fixed)}, "
            f"more than the {fb(p.gpu_memory)} of the GPU; "
            + ("fine-tune with LoRA instead, or " if p.finetune == "full" else "")
            + "use a smaller model, or a GPU with more memory"
        )
    return (
        f"nothing fits: one row of {p.seq_len:,} tokens needs {fb(one_row['none'])} without "
        f"activation checkpointing and {fb(one_row['blocks'])} with it, more than the "
        f"{fb(p.gpu_memory)} of the GPU; shorten the rows"
        + (", use sdpa attention" if p.attn_impl == "eager" else "")
        + (", fine-tune with LoRA" if p.finetune == "full" else "")
        + " or get more memory"
    )
