"""What the memory model reads from a Hugging Face config, and what is being trained.

:func:`architecture` reads a ``transformers`` config (a ``PretrainedConfig`` or its dict) into an
:class:`Arch`, the fields the recipes of :mod:`~course_lib.hf.models` use; :class:`StepSpec` says
what one training step trains (shape, dtype, attention path, LoRA, checkpointing);
:func:`arch_parameter_count` and :func:`lora_parameter_count` count what the plan stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._checks import Checkpointing

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "gpt2")
_ACTIVATIONS = {"llama": ("silu",), "gpt2": ("gelu_new", "gelu", "gelu_pytorch_tanh")}


@dataclass(frozen=True)
class Arch:
    """The config fields the memory model reads (names as in Llama's config)."""

    family: str  # "llama" (llama, mistral, qwen2) or "gpt2"
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int
    vocab_size: int
    max_position_embeddings: int  # GPT-2's learned position table has this many rows
    tie_word_embeddings: bool
    qkv_bias: bool = False  # qwen2: biases on q, k, v (Llama's attention_bias: on o too)
    o_bias: bool = False
    mlp_bias: bool = False
    activation: str = "silu"  # GPT-2: "gelu_new" (eight ops) or a fused "gelu"/"gelu_pytorch_tanh"


@dataclass(frozen=True)
class StepSpec:
    """What is being trained: shape, element size, attention path, LoRA, checkpointing."""

    batch_size: int
    seq_len: int
    b: int  # bytes per element of the model's dtype
    eager: bool
    lora_rank: int | None
    checkpointing: Checkpointing  # "off" or "blocks" (every decoder layer)


def config_dict(config: Any) -> dict:
    """A config as a plain dict: a ``PretrainedConfig`` (``.to_dict()``) or a dict.

    Raises:
        ValueError: neither a ``PretrainedConfig`` nor a dict.
    """
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    if not isinstance(config, dict):
        raise ValueError(
            f"config must be a transformers config or a dict, got {type(config).__name__}"
        )
    return config


def architecture(config: Any) -> Arch:
    """The fields of ``config`` the memory model reads, checked.

    Raises ``ValueError`` for an unsupported ``model_type`` (naming it and the supported ones),
    a missing field, or an MLP activation other than the family's (SiLU; GPT-2's tanh GELU).

    Raises:
        ValueError: an unsupported ``model_type`` (naming it and the supported ones), a missing
            field, or an MLP activation other than the family's (SiLU; GPT-2's tanh GELU).
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


def lora_shapes(arch: Arch) -> list[tuple[int, int]]:
    """``(in, out)`` of each projection that gets a LoRA adapter, in one layer: the attention
    and MLP projections (``q k v o gate up down``; GPT-2: ``c_attn c_proj c_fc c_proj``)."""
    C, M = arch.hidden_size, arch.intermediate_size
    if arch.family == "gpt2":
        return [(C, 3 * C), (C, C), (C, M), (M, C)]
    q, kv = arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    return [(C, q), (C, kv), (C, kv), (q, C), (C, M), (C, M), (M, C)]


def arch_parameter_count(arch: Arch) -> int:
    """Parameters of the model (a tied embedding counted once)."""
    C, M, V, L = arch.hidden_size, arch.intermediate_size, arch.vocab_size, arch.num_hidden_layers
    weights = sum(i * o for i, o in lora_shapes(arch))
    if arch.family == "gpt2":
        biases = 3 * C + C + M + C
        layer = weights + biases + 4 * C  # two LayerNorms, weight and bias
        extra = arch.max_position_embeddings * C + 2 * C  # position table, final LayerNorm
    else:
        q, kv = arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
        biases = (q + 2 * kv) * arch.qkv_bias + C * arch.o_bias + (2 * M + C) * arch.mlp_bias
        layer = weights + biases + 2 * C  # two RMSNorm weights
        extra = C  # final RMSNorm
    return V * C * (1 if arch.tie_word_embeddings else 2) + L * layer + extra


def lora_parameter_count(arch: Arch, rank: int) -> int:
    """Trainable parameters of rank-``rank`` LoRA on every attention and MLP projection."""
    return arch.num_hidden_layers * sum(rank * (i + o) for i, o in lora_shapes(arch))
