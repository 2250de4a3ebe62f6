"""The fine-tune plan's options: every value each one takes (one definition, which the command
line's flags read too), and the settings of one plan as :func:`predict_hf_memory` takes them,
checked, with the defaults the plan assumed said in words. No torch here."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .._checks import Checkpointing, one_of, positive_int
from ..hf.arch import architecture
from ..hf.cards import ALLOCATORS
from ..hf.families import lora_targets_for
from ..hf.states import OPTIMIZERS, SHARDING

FINETUNES = ("full", "lora", "qlora")
LOOPS = ("trainer", "plain")
LOSSES = ("standard", "chunked")
ATTENTION = ("eager", "sdpa", "flash")
PACKING = ("rows", "padding-free")
MODES: tuple[Checkpointing, ...] = ("off", "blocks")  # HF models checkpoint whole layers
Targets = str | list[str] | tuple[str, ...] | None


@dataclass(frozen=True)
class Run:
    """The plan's own choices, as :func:`~course_lib.finetune.plan_finetune` received them (its
    docstring says what each means)."""

    finetune: str
    lora_rank: int
    lora_targets: Targets
    optimizer: str
    loss: str
    loop: str
    devices: int
    sharding: str
    checkpoint_every: int
    target_tokens: int | None
    allocator: str
    packing: str | None

    @property
    def workload(self) -> str:
        """Which measured reserve applies (:mod:`course_lib.hf.cards`): full rows are
        ``"fixed"``, packed rows ``"packing"``, padding-free micro-batches ``"varying"``."""
        if self.packing is None:
            return "fixed"
        return "varying" if self.packing == "padding-free" else "packing"


@dataclass
class Settings:
    """:func:`~course_lib.hf.memory.predict_hf_memory`'s keywords for one plan (its docstring
    says what each means), the checkpointing aside: the predictor sets it per probe."""

    dtype: object
    attn_impl: str
    loss: str
    loop: str
    optimizer: str
    devices: int
    sharding: str
    card: str | None
    checkpoint_every: int
    lora_rank: int | None
    workload: str
    allocator: str
    lora_targets: Targets = None
    weights: str = "16bit"
    double_quant: bool = True
    foreach: bool = True
    fused: bool = False
    offload: bool = False
    kbit_prepare: bool | None = None
    adapter_dtype: object = "float32"
    lora_dropout: float = 0.0
    master_weights: object = None
    reduce_dtype: object = None
    device: str = "cuda"
    experts: str = "grouped_mm"
    modules_to_save: Targets = None
    bnb_version: str | None = None
    reentrant: bool = False
    sub_group_size: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The settings by name (what the JSON and the lesson show).

        Returns:
            ``{keyword: value}``.
        """
        return dataclasses.asdict(self)


def packing_mode(packing: bool | str) -> str | None:
    """``packing=`` as a mode: ``None``, ``"rows"`` (``True``) or ``"padding-free"``.

    Args:
        packing: ``False``, ``True``, ``"rows"`` or ``"padding-free"``.

    Returns:
        The mode, or ``None`` without packing.

    Raises:
        ValueError: another value.
    """
    mode = "rows" if packing is True else packing or None
    if mode is not None:
        one_of("packing", mode, PACKING)
    return mode


def attention(config: dict, seq_len: int, attn_impl: str | None) -> tuple[str, str | None]:
    """The attention path, and what was assumed in words when the caller named none: sdpa,
    unless the model is one sdpa cannot run at ``seq_len`` (then eager, transformers' advice
    for training Gemma 2 and 3).

    Args:
        config: the config dict.
        seq_len: tokens per row.
        attn_impl: the caller's choice, or ``None``.

    Returns:
        ``(attn_impl, why)``, ``why`` ``None`` unless the plan chose.
    """
    if attn_impl is not None:
        return attn_impl, None
    arch = architecture(config)
    short = [w for w in arch.windows if w and w <= seq_len]
    if not (arch.attn_softcap or short):
        return "sdpa", None
    why = (f"{arch.model_type} soft-caps its attention scores" if arch.attn_softcap else
           f"its sliding window ({min(short):,} tokens) is not longer than the rows")  # fmt: skip
    return "eager", (f"eager attention: {why}, which sdpa cannot run (transformers' advice for "
                     "training; --attention flash with FlashAttention-2 installed)")  # fmt: skip


def _qlora(extra: dict[str, object]) -> list[str]:
    """What a QLoRA plan assumes that the caller did not say.

    Raises:
        ValueError: other quantised weights than NF4.
    """
    if extra.get("weights", "nf4") != "nf4":
        raise ValueError(f"finetune='qlora' is NF4 weights; weights={extra['weights']!r} is "
                         "another recipe: finetune='lora' with it")  # fmt: skip
    said = [] if "double_quant" in extra else ["double quantisation (the QLoRA paper's)"]
    if "kbit_prepare" not in extra:
        said.append("prepare_model_for_kbit_training (the other weights in fp32)")
    return ["QLoRA: NF4 weights, " + ", ".join(said)] if said else []


def settings(
    config: dict, seq_len: int, dtype: object, attn_impl: str | None, card: str | None, run: Run,
    extra: dict[str, object],
) -> tuple[Settings, list[str]]:  # fmt: skip
    """The plan's settings, checked, and the defaults it assumed, in words.

    Args:
        config: the config dict.
        seq_len: tokens per row.
        dtype: the model's dtype (``None``: the config's).
        attn_impl: the attention path (``None``: :func:`attention` chooses).
        card: a shipped card's name, or ``None``.
        run: the plan's own choices.
        extra: more of :class:`Settings`'s fields, by name (``weights``, ``fused``, ...).

    Returns:
        ``(settings, assumed)``.

    Raises:
        ValueError: a value not among an option's, or a keyword :class:`Settings` lacks.
    """
    one_of("finetune", run.finetune, FINETUNES)
    one_of("optimizer", run.optimizer, OPTIMIZERS)
    one_of("sharding", run.sharding, SHARDING)
    one_of("loop", run.loop, LOOPS)
    one_of("allocator", run.allocator, ALLOCATORS)
    if run.target_tokens is not None:
        positive_int("target_tokens", run.target_tokens)
    lora = run.finetune != "full"
    attn, why = attention(config, seq_len, attn_impl)
    s = Settings(
        dtype=dtype, attn_impl=attn, loss=run.loss, loop=run.loop, optimizer=run.optimizer,
        devices=positive_int("devices", run.devices), sharding=run.sharding, card=card,
        checkpoint_every=positive_int("checkpoint_every", run.checkpoint_every),
        lora_rank=positive_int("lora_rank", run.lora_rank) if lora else None,
        workload=run.workload, allocator=run.allocator,
        lora_targets=run.lora_targets if lora else None,
    )  # fmt: skip
    assumed = [why] if why else []
    if dtype is None and not (config.get("dtype") or config.get("torch_dtype")):
        assumed.append("float32 weights: the config names no dtype (torch_dtype), and "
                       "from_pretrained then loads float32 (--dtype bf16 to change)")  # fmt: skip
    if lora:
        arch = architecture(config)
        targets = lora_targets_for(arch, run.lora_targets)  # checks names that were given
        if run.lora_targets is None:
            assumed.append(f"LoRA on {', '.join(targets)}: PEFT's default for "
                           f"{arch.model_type} (--lora-targets to change)")  # fmt: skip
    if run.finetune == "qlora":
        s.weights, s.double_quant = "nf4", True
        assumed += _qlora(extra)
    if "foreach" not in extra and "fused" not in extra and run.optimizer == "adamw":
        s.fused = run.loop == "trainer"
        assumed.append("AdamW's step: fused, the Trainer's default (adamw_torch_fused)"
                       if s.fused else "AdamW's step: foreach, torch.optim.AdamW's default on "
                       "CUDA (one more copy of the second moment)")  # fmt: skip
    if run.loop == "trainer":
        assumed.append("loop: the Trainer's (outputs dropped before backward); --loop plain "
                       "holds them, and their logits, through the backward")  # fmt: skip
    unknown = sorted(set(extra) - {f.name for f in dataclasses.fields(Settings)})
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}: see predict_hf_memory's keywords")
    for name, value in extra.items():  # the caller's own, as given
        setattr(s, name, value)
    return s, assumed
