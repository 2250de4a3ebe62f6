"""The memory model carried to real Hugging Face architectures: one training step's peak, predicted.

:func:`predict_hf_step` reads a ``transformers`` config (a ``PretrainedConfig`` or its dict,
``model_type`` in :data:`SUPPORTED_MODEL_TYPES`) and predicts the peak bytes, above the
parameters, of ``model(input_ids=..., labels=..., use_cache=False).loss.backward()`` after
``zero_grad(set_to_none=True)``: what the forward keeps for backward, the gradients made so far,
the backward's buffers in flight, and the loss's fp32 log-probabilities.

How: :mod:`~course_lib.hf.models` writes the step as the autograd nodes the installed stack
creates (what each saves, what each backward allocates, read from the ``transformers``, ``peft``
and PyTorch sources and checked op by op with the meter's timeline), and
:mod:`~course_lib.hf.replay` replays PyTorch's rules for when each tensor is freed. The
prediction is exact by construction where the recipe is: on tiny models of every family it
matches the CPU meter to the byte (``tests/library/test_hf_memory.py``). Assumed unless a keyword
says otherwise: full rows (no padding), the model's own dropout off (a config that sets one gets
a note), LoRA via PEFT with its defaults (adapters kept in fp32, ``lora_dropout=0``, the family's
default targets), checkpointing as ``model.gradient_checkpointing_enable()`` does it (every
layer, non-reentrant). :mod:`~course_lib.hf.settings` checks the settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._checks import Checkpointing, one_of, positive_int
from ..units import DTYPE_BYTES, FP32, dtype_name
from .arch import SUPPORTED_MODEL_TYPES, Arch, StepSpec, architecture, config_dict
from .families import lora_targets_for, saved_modules
from .moe import IMPLEMENTATIONS
from .scaling import replay_step
from .settings import (
    ATTENTION,
    DEVICES,
    LOOPS,
    LOSSES,
    WEIGHTS,
    checkpoint_mode,
    config_dtype,
    expert_counts,
    nf4_keeps_input,
    notes_for,
    packed_documents,
    refuse_unmodelled,
)

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "HFStepBreakdown",
    "predict_hf_step",
    "architecture",
    "config_dict",
    "notes_for",
    "step_spec",
    "lora_targets_for",
]

CHECKED_WITH = "transformers 5.24, peft 0.21, torch 2.13 (CPU)"  # where the recipes were read


@dataclass
class HFStepBreakdown:
    """Predicted bytes of one training step (:func:`predict_hf_step`), above the parameters.

    At the peak, ``activations`` (tensors kept for backward, or still referenced),
    ``logits_and_loss`` (the loss's fp32 log-probabilities and labels), ``gradients`` (the
    parameters' or adapters' gradients made so far) and ``transient`` (gradients flowing back and
    the backward's temporaries) add up to ``total``; ``peak_at`` names the op that reached it.
    ``saved`` is what the forward pass kept for backward, by what each tensor is: the output
    of a norm counts under ``norms`` whichever projection keeps it; ``attention_scores`` is
    eager attention's ``seq_len**2`` part; ``checkpointed inputs`` what checkpointed layers keep.
    """

    model_type: str
    batch_size: int
    seq_len: int
    dtype: str
    attn_impl: str
    lora_rank: int | None
    checkpointing: Checkpointing
    activations: int
    logits_and_loss: int
    gradients: int
    transient: int
    total: int
    peak_at: str
    forward_peak: int
    saved: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # the step's floating-point operations by phase and element size ("forward@2", ...)
    flops: dict[str, float] = field(default_factory=dict)
    lora_targets: tuple = ()  # the projections that got an adapter
    settings: dict = field(default_factory=dict)  # every keyword as the prediction read it

    def components(self) -> dict[str, int]:
        """The four parts of ``total``, in bytes.

        Returns:
            ``activations``, ``logits_and_loss``, ``gradients``, ``transient`` (name -> bytes).
        """
        names = ("activations", "logits_and_loss", "gradients", "transient")
        return {name: getattr(self, name) for name in names}

    @property
    def saved_total(self) -> int:
        return sum(self.saved.values())


def step_spec(
    config: Any, batch_size: int, seq_len: int, attn_impl: str, dtype: object,
    lora_rank: int | None, checkpointing: Checkpointing | bool | None, **kw: Any,
) -> tuple[Arch, StepSpec, str, Checkpointing]:  # fmt: skip
    """Check the arguments of :func:`predict_hf_step`: ``(Arch, StepSpec, dtype name, mode)``.

    Without keywords (the planner's call) LoRA goes on every projection; :func:`predict_hf_step`
    passes ``lora_targets`` and the other settings through ``kw``.

    Args:
        config: a ``PretrainedConfig`` or its dict.
        batch_size: rows.
        seq_len: tokens per row.
        attn_impl: ``"sdpa"``, ``"eager"`` or ``"flash"``.
        dtype: the model's dtype (``None``: the config's).
        lora_rank: LoRA's rank, or ``None``.
        checkpointing: the checkpointing mode.
        **kw: the other settings of :func:`predict_hf_step`.

    Returns:
        ``(Arch, StepSpec, dtype name, mode)``.

    Raises:
        ValueError: see :func:`predict_hf_step`.
    """
    arch = architecture(config)
    positive_int("batch_size", batch_size)
    positive_int("seq_len", seq_len)
    attn_impl = "flash" if attn_impl == "flash_attention_2" else attn_impl
    one_of("attn_impl", attn_impl, ATTENTION)
    if lora_rank is not None:
        positive_int("lora_rank", lora_rank, "or None for a full fine-tune")
    mode = checkpoint_mode(checkpointing)
    name = dtype_name(dtype if dtype is not None else config_dtype(config_dict(config)))
    b = DTYPE_BYTES[name]
    weights = one_of("weights", kw.get("weights", "16bit"), WEIGHTS)
    upcast = kw.get("kbit_prepare")
    upcast = weights != "16bit" if upcast is None else bool(upcast)
    refuse_unmodelled(arch, seq_len, attn_impl, weights, lora_rank)
    every = positive_int("checkpoint_every", kw.get("checkpoint_every", 1))
    dropout = float(kw.get("lora_dropout", 0.0))
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"lora_dropout={dropout!r} must be in [0, 1)")
    spec = StepSpec(
        batch_size, seq_len, FP32 if upcast else b, attn_impl == "eager", lora_rank, mode,
        lora_targets=kw.get("targets", ()),
        lora_dropout=dropout > 0,
        adapter_b=DTYPE_BYTES[dtype_name(kw.get("adapter_dtype") or "float32")],
        flash=attn_impl == "flash",
        loss=one_of("loss", kw.get("loss", "standard"), LOSSES),
        loop=one_of("loop", kw.get("loop", "trainer"), LOOPS),
        device=one_of("device", kw.get("device", "cpu"), DEVICES),
        checkpoint_every=every,
        quant="" if weights == "16bit" else weights,
        upcast=upcast,
        compute_b=b,
        expert_tokens=expert_counts(arch, batch_size * seq_len, kw.get("expert_tokens")),
        half=name == "float16" and not upcast,
        experts=one_of("experts", kw.get("experts", "grouped_mm"), IMPLEMENTATIONS),
        documents=packed_documents(kw.get("documents"), seq_len, arch),
        saved_modules=saved_modules(arch, kw.get("modules_to_save")),
        nf4_keeps_input=weights == "nf4" and nf4_keeps_input(kw.get("bnb_version")),
        reentrant=bool(kw.get("reentrant")) and mode == "blocks",
    )  # fmt: skip
    if spec.saved_modules and lora_rank is None:
        raise ValueError("modules_to_save is PEFT's: a full fine-tune trains every module already")
    return arch, spec, name, mode


def predict_hf_step(
    config: Any,
    batch_size: int,
    seq_len: int,
    *,
    attn_impl: str = "sdpa",
    dtype: object = None,
    lora_rank: int | None = None,
    checkpointing: Checkpointing | bool | None = "off",
    lora_targets: str | tuple[str, ...] | list[str] | None = None,
    lora_dropout: float = 0.0,
    adapter_dtype: object = "float32",
    weights: str = "16bit",
    kbit_prepare: bool | None = None,
    loss: str = "standard",
    loop: str = "trainer",
    device: str = "cpu",
    checkpoint_every: int = 1,
    expert_tokens: str | list | tuple | None = None,
    experts: str = "grouped_mm",
    documents: int | None = None,
    modules_to_save: str | list[str] | tuple[str, ...] | None = None,
    bnb_version: str | None = None,
    reentrant: bool = False,
) -> HFStepBreakdown:
    """Predict the peak bytes of one training step of a Hugging Face causal LM.

    Args:
        config: a ``PretrainedConfig`` or its dict, ``model_type`` in
            :data:`SUPPORTED_MODEL_TYPES`.
        batch_size: the micro-batch: rows in one step, each full and every token a label.
        seq_len: the tokens in each row.
        attn_impl: ``"sdpa"`` (fused: no ``seq_len**2`` tensor kept), ``"eager"`` (keeps the
            ``batch x heads x seq_len**2`` probabilities per layer; in bf16 also their fp32 copy)
            or ``"flash"`` (FlashAttention-2 on CUDA: the log-sum-exp kept, its backward's
            workspaces counted).
        dtype: the model's dtype (``torch.bfloat16`` or ``"bf16"``...); default: the config's.
            With 4/8-bit weights: the compute dtype.
        lora_rank: PEFT LoRA of this rank (base frozen); ``None``: a full fine-tune.
        checkpointing: ``"off"``/``False`` or ``"blocks"``/``True`` (every decoder layer, or
            every ``checkpoint_every``-th).
        lora_targets: ``None`` (PEFT's default for the family, e.g. ``q_proj, v_proj``),
            ``"all-linear"``, or module names.
        lora_dropout: PEFT's ``lora_dropout`` (> 0 adds a dropout on each adapter's input).
        adapter_dtype: the adapters' dtype (``"float32"``: PEFT's autocast of 16-bit adapters).
        weights: ``"16bit"``, ``"int8"`` (LLM.int8) or ``"nf4"`` (QLoRA; storage is
            :mod:`~course_lib.hf.quant`'s).
        kbit_prepare: ``prepare_model_for_kbit_training`` casts the unquantised weights
            (embeddings, norms, head) to fp32, so the hidden states are fp32; default: on for
            4/8-bit weights.
        loss: ``"standard"`` (fp32 log-probabilities of the full logits) or ``"chunked"``
            (fused linear cross-entropy, :mod:`~course_lib.hf.losses`).
        loop: ``"trainer"`` (the outputs are dropped before backward, as ``Trainer`` does) or
            ``"plain"`` (``outputs = model(...)`` held: its logits live through backward).
        device: ``"cpu"`` (the counted bytes on the CPU) or ``"cuda"`` (CUDA's kernels: a
            one-byte dropout mask, fp32 LayerNorm statistics, eager attention's transient).
        checkpoint_every: with checkpointing, every ``n``-th decoder layer (0, n, 2n...).
        expert_tokens: mixture of experts: tokens each expert receives, ``"worst"`` (every
            token to the same ``top_k`` experts; the default), ``"uniform"``, or counts (one
            list for every layer, or one per layer); see :mod:`~course_lib.hf.moe`.
        documents: rows packed with this many documents each, position ids reset per
            document (``DataCollatorWithFlattening``, TRL's packing): sdpa then takes a
            block-diagonal boolean mask (its float copy saved in every layer), flash its
            varlen path (:mod:`~course_lib.hf.packing_plan` plans rows from a length
            distribution); ``None``: one sequence a row.
        experts: mixture of experts: ``transformers``' ``experts_implementation``,
            ``"grouped_mm"`` (its default; the routing changes no tensor's size) or ``"eager"``
            (one matmul per expert: its transients follow the most loaded expert).
        modules_to_save: PEFT's ``modules_to_save`` with LoRA: a trainable copy of the input
            embedding (``embed_tokens``; GPT-2 ``wte``) and/or of ``lm_head``.
        bnb_version: bitsandbytes' version with ``weights="nf4"``: before 0.43.2 every 4-bit
            projection kept its input for the backward (``None``: a current one).
        reentrant: checkpointing with ``use_reentrant=True`` (every transformers 4 release's
            default; ``gradient_checkpointing_kwargs={"use_reentrant": True}`` in 5): a block's
            first forward keeps nothing, and its recomputation runs the whole block.

    Returns:
        :class:`HFStepBreakdown`, ``.total`` in bytes above the parameters.

    Raises:
        ValueError: an unsupported model type (naming the nearest supported one), a bad size,
            dtype, attention path, LoRA target or setting.
    """
    arch = architecture(config)
    targets = lora_targets_for(arch, lora_targets) if lora_rank is not None else ()
    kw = dict(
        targets=targets, lora_dropout=lora_dropout, adapter_dtype=adapter_dtype, weights=weights,
        kbit_prepare=kbit_prepare, loss=loss, loop=loop, device=device,
        checkpoint_every=checkpoint_every, expert_tokens=expert_tokens, experts=experts,
        documents=documents, modules_to_save=modules_to_save, bnb_version=bnb_version,
        reentrant=reentrant,
    )  # fmt: skip
    arch, spec, name, mode = step_spec(
        config, batch_size, seq_len, attn_impl, dtype, lora_rank, checkpointing, **kw
    )
    notes = notes_for(config, seq_len, spec.attn)
    if lora_rank is not None and lora_targets is None:
        notes.append(f"LoRA on {', '.join(targets)}: PEFT's default for {arch.model_type}")
    r = replay_step(arch, spec)
    settings = {"attn_impl": spec.attn, "checkpoint_every": spec.checkpoint_every, **kw}
    return HFStepBreakdown(
        arch.model_type, batch_size, seq_len, name, spec.attn, lora_rank, mode, r.activations,
        r.logits_and_loss, r.gradients, r.transient, total=r.peak, peak_at=r.peak_at,
        forward_peak=r.forward_peak, saved=r.saved, notes=notes, lora_targets=targets,
        settings=settings, flops=dict(r.flops or {}),
    )  # fmt: skip
