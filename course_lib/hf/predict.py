"""The memory model carried to real Hugging Face architectures: one training step's peak, predicted.

:func:`predict_hf_step` reads a ``transformers`` config (a ``PretrainedConfig`` or its dict:
``llama``, ``mistral``, ``qwen2``, ``gpt2``) and predicts the peak bytes, above the parameters, of
``model(input_ids=..., labels=..., use_cache=False).loss.backward()`` after
``zero_grad(set_to_none=True)``: what the forward keeps for backward, the gradients made so far,
the backward's buffers in flight, and the loss's fp32 log-probabilities.

How: :mod:`~course_lib.hf.models` writes the step as the autograd nodes the installed stack
creates (what each saves, what each backward allocates, read from the ``transformers``, ``peft``
and PyTorch sources and checked op by op with the meter's timeline), and
:mod:`~course_lib.hf.tape` replays PyTorch's rules for when each tensor is freed. The
prediction is exact by construction where the recipe is: on tiny models of every family it matches
the CPU meter to the byte (``tests/test_hf_memory.py``). Assumed: full rows (no padding), no
dropout (fine-tuning usually turns it off; GPT-2's config says 0.1), LoRA via PEFT with its
defaults (adapters kept in fp32, ``lora_dropout=0``), checkpointing as
``model.activation_checkpointing_enable()`` does it (every layer, non-reentrant).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._checks import checkpointing_mode, one_of, positive_int
from . import families
from .families import SUPPORTED_MODEL_TYPES, lora_targets_for
from .models import Arch, StepSpec, record_step
from .moe import IMPLEMENTATIONS, routing
from .replay import replay

__all__ = ["SUPPORTED_MODEL_TYPES", "HFStepBreakdown", "predict_hf_step", "architecture"]

CHECKED_WITH = "transformers 5.24, peft 0.21, torch 2.13 (CPU)"  # where the recipes were read
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}
ATTENTION = ("eager", "sdpa", "flash")
WEIGHTS = ("16bit", "int8", "nf4")
LOSSES = ("standard", "chunked")
LOOPS = ("trainer", "plain")
DEVICES = ("cpu", "cuda")


def dtype_name(dtype) -> str:
    """``torch.bfloat16``, ``"bf16"`` or ``"bfloat16"`` -> ``"bfloat16"`` (also fp32, fp16)."""
    name = str(dtype).removeprefix("torch.")
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise ValueError(
            f"dtype={dtype!r} is not one of float32, bfloat16, float16 (or fp32, bf16)"
        )
    return name


def config_dict(config) -> dict:
    """A config as a plain dict: a ``PretrainedConfig`` (``.to_dict()``) or a dict."""
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    if not isinstance(config, dict):
        raise ValueError(
            f"config must be a transformers config or a dict, got {type(config).__name__}"
        )
    return config


def architecture(config) -> Arch:
    """The fields of ``config`` the memory model reads, checked
    (:func:`course_lib.hf.families.architecture`)."""
    return families.architecture(config_dict(config))


def notes_for(config, seq_len: int, attn_impl: str = "sdpa") -> list[str]:
    """What the prediction assumes that this config says otherwise; raises ``ValueError`` where
    the difference is too large to pass over.

    Sliding windows: eager attention builds one ``(batch, 1, seq_len, seq_len)`` mask per kind of
    layer (counted); flash takes the window natively (nothing to count); sdpa is refused when a
    window is not longer than ``seq_len``, because ``transformers`` then builds a dense mask
    that sdpa turns into a float copy per layer (``seq_len == window`` included: only a window
    longer than the rows lets it use ``is_causal`` and skip the mask).
    """
    c = config_dict(config)
    arch = architecture(c)
    short = [w for w in arch.windows if w and w <= seq_len]
    if short and attn_impl == "sdpa":
        raise ValueError(
            f"sliding-window attention over {min(short)} tokens with seq_len={seq_len} makes "
            "transformers build a seq_len x seq_len mask that sdpa copies in every layer; this "
            "is not modelled: use seq_len < sliding_window, attn_impl='eager' (masks counted) "
            "or 'flash' (the window is native)"
        )
    drops = {
        k: c[k]
        for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout")
        if c.get(k)
    }
    if drops:
        return [f"dropout is taken as off (the config says {drops}): set it to 0 for fine-tuning"]
    return []


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
    checkpointing: str
    activations: int
    logits_and_loss: int
    gradients: int
    transient: int
    total: int
    peak_at: str
    forward_peak: int
    saved: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    lora_targets: tuple = ()  # the projections that got an adapter
    settings: dict = field(default_factory=dict)  # every keyword as the prediction read it

    def components(self) -> dict[str, int]:
        """The four parts of ``total``, in bytes."""
        names = ("activations", "logits_and_loss", "gradients", "transient")
        return {name: getattr(self, name) for name in names}

    @property
    def saved_total(self) -> int:
        return sum(self.saved.values())


def _mode(checkpointing) -> str:
    """``"none"`` or ``"blocks"`` (``"off"``, ``False``, ``None`` / ``"on"``, ``True``)."""
    alias = {"off": False, "on": True}
    value = (
        alias.get(checkpointing, checkpointing) if isinstance(checkpointing, str) else checkpointing
    )
    mode = checkpointing_mode(value)
    if mode == "attention":
        raise ValueError(
            "checkpointing='attention' is TinyGPT's; Hugging Face models checkpoint whole decoder "
            "layers: use 'blocks' (True) or 'none'"
        )
    return mode


def step_spec(config, batch_size, seq_len, attn_impl, dtype, lora_rank, checkpointing, **kw):
    """Check the arguments of :func:`predict_hf_step`: ``(Arch, StepSpec, dtype name, mode)``.

    Without keywords (the planner's call) LoRA goes on every projection; :func:`predict_hf_step`
    passes ``lora_targets`` and the other settings through ``kw``.
    """
    arch = architecture(config)
    positive_int("batch_size", batch_size)
    positive_int("seq_len", seq_len)
    attn_impl = "flash" if attn_impl == "flash_attention_2" else attn_impl
    one_of("attn_impl", attn_impl, ATTENTION)
    if lora_rank is not None:
        positive_int("lora_rank", lora_rank, "or None for a full fine-tune")
    mode = _mode(checkpointing)
    if arch.family == "gpt2" and seq_len > arch.max_position_embeddings:
        raise ValueError(
            f"seq_len={seq_len} exceeds GPT-2's n_positions={arch.max_position_embeddings}"
        )
    name = dtype_name(dtype if dtype is not None else _config_dtype(config_dict(config)))
    b = DTYPE_BYTES[name]
    weights = one_of("weights", kw.get("weights", "16bit"), WEIGHTS)
    upcast = kw.get("kbit_prepare")
    upcast = weights != "16bit" if upcast is None else bool(upcast)
    if weights != "16bit" and lora_rank is None:
        raise ValueError(
            f"weights={weights!r} are frozen: a quantised model trains adapters "
            "only (pass lora_rank), or use weights='16bit' for a full fine-tune"
        )
    if arch.attn_softcap and attn_impl == "sdpa":
        raise ValueError(
            f"{arch.model_type} soft-caps its attention scores, which sdpa cannot "
            "do (transformers refuses it): use attn_impl='eager' or 'flash'"
        )
    every = positive_int("checkpoint_every", kw.get("checkpoint_every", 1))
    dropout = float(kw.get("lora_dropout", 0.0))
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"lora_dropout={dropout!r} must be in [0, 1)")
    spec = StepSpec(
        batch_size,
        seq_len,
        FP32_B if upcast else b,
        attn_impl == "eager",
        lora_rank,
        mode == "blocks",
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
        documents=_documents(kw.get("documents"), seq_len, arch),
    )
    return arch, spec, name, mode


FP32_B = 4


def _documents(documents, seq_len: int, arch: Arch) -> int:
    """``None``: one sequence a row; else the documents packed in each row (1 to seq_len)."""
    if documents is None:
        return 0
    if isinstance(documents, bool) or not isinstance(documents, int):
        raise ValueError(f"documents must be a positive int or None, got {documents!r}")
    if not 1 <= documents <= seq_len:
        raise ValueError(f"documents={documents} must be between 1 and seq_len={seq_len}")
    if arch.family == "gpt2":
        raise ValueError(
            "packed documents need position ids reset per document: GPT-2's "
            "learned positions are not modelled packed; use documents=None"
        )
    return documents


def expert_counts(arch: Arch, tokens: int, expert_tokens) -> tuple:
    """Tokens per expert for every layer: ``"worst"`` (default) or ``"uniform"``
    (:func:`~course_lib.hf.moe.routing`), one list of ``n_experts`` counts for every layer, or
    one list per layer; each list must add up to ``tokens x top_k``."""
    if not arch.n_experts:
        if expert_tokens not in (None, "worst", "uniform"):
            raise ValueError(
                f"expert_tokens is for a mixture of experts; {arch.model_type} has no experts"
            )
        return ()
    L, E, k = arch.num_hidden_layers, arch.n_experts, arch.top_k
    if expert_tokens is None or isinstance(expert_tokens, str):
        return (routing(tokens, E, k, expert_tokens or "worst"),) * L
    rows = [tuple(expert_tokens)] * L if all(isinstance(n, int) for n in expert_tokens) \
        else [tuple(r) for r in expert_tokens]  # fmt: skip
    for r in rows:
        if len(r) != E or sum(r) != tokens * k or min(r) < 0:
            raise ValueError(
                f"expert_tokens {list(r)} must give {E} counts adding up to tokens x top_k = "
                f"{tokens * k}, or say 'worst' or 'uniform'"
            )
    if len(rows) != L:
        raise ValueError(f"expert_tokens has {len(rows)} layers; the model has {L}")
    return tuple(rows)


def _config_dtype(c: dict) -> str:
    return c.get("dtype") or c.get("torch_dtype") or "float32"


def predict_hf_step(
    config,
    batch_size: int,
    seq_len: int,
    *,
    attn_impl: str = "sdpa",
    dtype=None,
    lora_rank: int | None = None,
    checkpointing="none",
    lora_targets=None,
    lora_dropout: float = 0.0,
    adapter_dtype="float32",
    weights: str = "16bit",
    kbit_prepare: bool | None = None,
    loss: str = "standard",
    loop: str = "trainer",
    device: str = "cpu",
    checkpoint_every: int = 1,
    expert_tokens=None,
    experts: str = "grouped_mm",
    documents: int | None = None,
) -> HFStepBreakdown:
    """Predict the peak bytes of one training step of a Hugging Face causal LM.

    Args:
        config: a ``PretrainedConfig`` or its dict, ``model_type`` in
            :data:`SUPPORTED_MODEL_TYPES`.
        batch_size, seq_len: the micro-batch, full rows of ``seq_len`` tokens, every one a label.
        attn_impl: ``"sdpa"`` (fused: no ``seq_len**2`` tensor kept), ``"eager"`` (keeps the
            ``batch x heads x seq_len**2`` probabilities per layer; in bf16 also their fp32 copy)
            or ``"flash"`` (FlashAttention-2 on CUDA: the log-sum-exp kept, its backward's
            workspaces counted).
        dtype: the model's dtype (``torch.bfloat16`` or ``"bf16"``...); default: the config's.
            With 4/8-bit weights: the compute dtype.
        lora_rank: PEFT LoRA of this rank (base frozen); ``None``: a full fine-tune.
        checkpointing: ``"none"``/``"off"``/``False`` or ``"blocks"``/``"on"``/``True``.
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
            varlen path (:mod:`~course_lib.hf.packing` plans rows from a length
            distribution); ``None``: one sequence a row.
        experts: mixture of experts: ``transformers``' ``experts_implementation``,
            ``"grouped_mm"`` (its default; the routing changes no tensor's size) or ``"eager"``
            (one matmul per expert: its transients follow the most loaded expert).

    Returns:
        :class:`HFStepBreakdown`, ``.total`` in bytes above the parameters.

    Raises:
        ValueError: an unsupported model type (naming the nearest supported one), a bad size,
            dtype, attention path, LoRA target or setting.
    """
    arch = architecture(config)
    targets = lora_targets_for(arch, lora_targets) if lora_rank is not None else ()
    kw = dict(
        targets=targets,
        lora_dropout=lora_dropout,
        adapter_dtype=adapter_dtype,
        weights=weights,
        kbit_prepare=kbit_prepare,
        loss=loss,
        loop=loop,
        device=device,
        checkpoint_every=checkpoint_every,
        expert_tokens=expert_tokens,
        experts=experts,
        documents=documents,
    )
    arch, spec, name, mode = step_spec(
        config, batch_size, seq_len, attn_impl, dtype, lora_rank, checkpointing, **kw
    )
    notes = notes_for(config, seq_len, spec.attn)
    if lora_rank is not None and lora_targets is None:
        notes.append(f"LoRA on {', '.join(targets)}: PEFT's default for {arch.model_type}")
    r = replay(record_step(arch, spec))
    settings = {"attn_impl": spec.attn, "checkpoint_every": spec.checkpoint_every, **kw}
    return HFStepBreakdown(
        model_type=arch.model_type,
        batch_size=batch_size,
        seq_len=seq_len,
        dtype=name,
        attn_impl=spec.attn,
        lora_rank=lora_rank,
        checkpointing=mode,
        activations=r.activations,
        logits_and_loss=r.logits_and_loss,
        gradients=r.gradients,
        transient=r.transient,
        total=r.peak,
        peak_at=r.peak_at,
        forward_peak=r.forward_peak,
        saved=r.saved,
        notes=notes,
        lora_targets=targets,
        settings=settings,
    )
