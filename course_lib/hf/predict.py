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
from .models import Arch, StepSpec, record_step
from .replay import replay

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "gpt2")
CHECKED_WITH = "transformers 5.24, peft 0.21, torch 2.13 (CPU)"  # where the recipes were read
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}
_ACTIVATIONS = {"llama": ("silu",), "gpt2": ("gelu_new", "gelu", "gelu_pytorch_tanh")}


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
    """The fields of ``config`` the memory model reads, checked.

    Raises ``ValueError`` for an unsupported ``model_type`` (naming it and the supported ones),
    a missing field, or an MLP activation other than the family's (SiLU; GPT-2's tanh GELU).
    """
    c = config_dict(config)
    model_type = c.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"model_type {model_type!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    family = "gpt2" if model_type == "gpt2" else "llama"
    act = (
        c.get("activation_function", "gelu_new")
        if family == "gpt2"
        else c.get("hidden_act", "silu")
    )
    if act not in _ACTIVATIONS[family]:
        raise ValueError(
            f"{model_type} with activation {act!r} is not modelled (only {_ACTIVATIONS[family]})"
        )
    try:
        return _gpt2_arch(c) if family == "gpt2" else _llama_arch(c, model_type)
    except KeyError as missing:
        raise ValueError(f"the {model_type} config has no field {missing}") from None


def _llama_arch(c: dict, model_type: str) -> Arch:
    C, H = c["hidden_size"], c["num_attention_heads"]
    bias = bool(c.get("attention_bias", False))
    return Arch(
        family="llama",
        hidden_size=C,
        intermediate_size=c["intermediate_size"],
        num_attention_heads=H,
        num_key_value_heads=c.get("num_key_value_heads") or H,
        head_dim=c.get("head_dim") or C // H,
        num_hidden_layers=c["num_hidden_layers"],
        vocab_size=c["vocab_size"],
        max_position_embeddings=c.get("max_position_embeddings", 0),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        qkv_bias=model_type == "qwen2" or bias,
        o_bias=model_type != "qwen2" and bias,
        mlp_bias=bool(c.get("mlp_bias", False)),
    )


def _gpt2_arch(c: dict) -> Arch:
    C, H = c["n_embd"], c["n_head"]
    return Arch(
        family="gpt2",
        hidden_size=C,
        intermediate_size=c.get("n_inner") or 4 * C,
        num_attention_heads=H,
        num_key_value_heads=H,
        head_dim=C // H,
        num_hidden_layers=c["n_layer"],
        vocab_size=c["vocab_size"],
        max_position_embeddings=c["n_positions"],
        tie_word_embeddings=bool(c.get("tie_word_embeddings", True)),
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        activation=c.get("activation_function", "gelu_new"),
    )


def notes_for(config, seq_len: int) -> list[str]:
    """What the prediction assumes that this config says otherwise; raises ``ValueError`` where
    the difference is too large to pass over (a sliding window shorter than ``seq_len``)."""
    c = config_dict(config)
    window = c.get("sliding_window")
    sliding = window is not None and (c.get("model_type") != "qwen2" or c.get("use_sliding_window"))
    if sliding and seq_len > window:
        raise ValueError(
            f"sliding-window attention over {window} tokens, shorter than seq_len={seq_len}, is "
            "not modelled (its mask changes what attention keeps); use seq_len <= sliding_window"
        )
    drops = {k: c[k] for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout")
             if c.get(k)}  # fmt: skip
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

    def components(self) -> dict[str, int]:
        """The four parts of ``total``, in bytes."""
        names = ("activations", "logits_and_loss", "gradients", "transient")
        return {name: getattr(self, name) for name in names}

    @property
    def saved_total(self) -> int:
        return sum(self.saved.values())


def step_spec(config, batch_size, seq_len, attn_impl, dtype, lora_rank, checkpointing):
    """Check the arguments of :func:`predict_hf_step`: ``(Arch, StepSpec, dtype name, mode)``."""
    arch = architecture(config)
    positive_int("batch_size", batch_size)
    positive_int("seq_len", seq_len)
    one_of("attn_impl", attn_impl, ("sdpa", "eager"))
    if lora_rank is not None:
        positive_int("lora_rank", lora_rank, "or None for a full fine-tune")
    mode = checkpointing_mode(checkpointing)
    if mode == "attention":
        raise ValueError(
            "checkpointing='attention' is TinyGPT's; Hugging Face models checkpoint whole decoder "
            "layers: use 'blocks' (True) or 'none'"
        )
    if arch.family == "gpt2" and seq_len > arch.max_position_embeddings:
        raise ValueError(
            f"seq_len={seq_len} exceeds GPT-2's n_positions={arch.max_position_embeddings}"
        )
    name = dtype_name(dtype if dtype is not None else _config_dtype(config_dict(config)))
    spec = StepSpec(
        batch_size, seq_len, DTYPE_BYTES[name], attn_impl == "eager", lora_rank, mode == "blocks"
    )
    return arch, spec, name, mode


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
) -> HFStepBreakdown:
    """Predict the peak bytes of one training step of a Hugging Face causal LM.

    Args:
        config: a ``PretrainedConfig`` or its dict, ``model_type`` in
            :data:`SUPPORTED_MODEL_TYPES` (grouped-query attention, tied or untied embeddings).
        batch_size, seq_len: the micro-batch, full rows of ``seq_len`` tokens, every one a label.
        attn_impl: ``"sdpa"`` (fused: no ``seq_len**2`` tensor kept) or ``"eager"`` (keeps the
            ``batch x heads x seq_len**2`` probabilities per layer; in bf16 also their fp32 copy).
        dtype: the model's dtype (``torch.bfloat16`` or ``"bf16"``...); default: the config's.
        lora_rank: PEFT LoRA of this rank on every attention and MLP projection (base frozen,
            adapters in fp32); ``None``: a full fine-tune.
        checkpointing: ``"none"``/``False`` or ``"blocks"``/``True`` (every decoder layer).

    Returns:
        :class:`HFStepBreakdown`, ``.total`` in bytes above the parameters.

    Raises:
        ValueError: an unsupported model type (naming it and the supported ones), a bad size,
            dtype, attention path or checkpointing mode.
    """
    arch, spec, name, mode = step_spec(
        config, batch_size, seq_len, attn_impl, dtype, lora_rank, checkpointing
    )
    notes = notes_for(config, seq_len)
    r = replay(record_step(arch, spec))
    return HFStepBreakdown(
        model_type=config_dict(config)["model_type"],
        batch_size=batch_size,
        seq_len=seq_len,
        dtype=name,
        attn_impl=attn_impl,
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
    )
