"""What the memory model reads from a Hugging Face config, and what is being trained.

:func:`architecture` reads a ``transformers`` config (a ``PretrainedConfig`` or its dict) into an
:class:`Arch` (each family's fields: :mod:`~course_lib.hf.families`), the fields the recipes of
:mod:`~course_lib.hf.models` use; :class:`StepSpec` says what one training step trains (shape,
dtype, attention path, LoRA, checkpointing and the other settings of
:func:`~course_lib.hf.predict.predict_hf_step`). The rest counts what the plan stores: every
parameter tensor's shape (what sharding divides and per-tensor optimisers see),
:func:`arch_parameter_count` and :func:`lora_parameter_count`.
"""

from __future__ import annotations

from typing import Any

from . import families
from .families import SUPPORTED_MODEL_TYPES
from .spec import Arch, StepSpec

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "Arch",
    "StepSpec",
    "architecture",
    "config_dict",
    "arch_parameter_count",
    "lora_parameter_count",
]


def config_dict(config: Any) -> dict:
    """A config as a plain dict: a ``PretrainedConfig`` (``.to_dict()``) or a dict.

    Args:
        config: a ``PretrainedConfig`` or its dict.

    Returns:
        The config as a plain dict.

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
    """The fields of ``config`` the memory model reads, checked
    (:func:`course_lib.hf.families.architecture`).

    Args:
        config: a ``PretrainedConfig`` or its dict.

    Returns:
        The :class:`Arch`.

    Raises:
        ValueError: not a config, an unsupported ``model_type`` (naming the nearest supported
            one), a missing field, or an MLP activation the family's recipe does not have.
    """
    return families.architecture(config_dict(config))


def lora_shapes(arch: Arch) -> list[tuple[int, int]]:
    """``(in, out)`` of each projection that gets a LoRA adapter, in one layer: the attention
    and MLP projections (``q k v o gate up down``; GPT-2: ``c_attn c_proj c_fc c_proj``).

    Args:
        arch: the model's :class:`Arch`.

    Returns:
        ``(in, out)`` per projection, in PEFT's order.
    """
    C, M = arch.hidden_size, arch.intermediate_size
    if arch.family == "gpt2":
        return [(C, 3 * C), (C, C), (C, M), (M, C)]
    q, kv = arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    return [(C, q), (C, kv), (C, kv), (q, C), (C, M), (C, M), (M, C)]


def layer_dims(arch: Arch) -> list[tuple[int, int]]:
    """``(rows, row length)`` of every parameter tensor of one decoder layer, as
    ``transformers`` holds them (dim 0 and the product of the others).

    Args:
        arch: the model's :class:`Arch`.

    Returns:
        ``(rows, row length)`` per parameter tensor of one layer.
    """
    C, M = arch.hidden_size, arch.intermediate_size
    if arch.family == "gpt2":  # Conv1D keeps (in, out)
        return [(C, 1), (C, 1), (C, 3 * C), (3 * C, 1), (C, C), (C, 1), (C, 1), (C, 1),
                (C, M), (M, 1), (M, C), (C, 1)]  # fmt: skip
    d, H, K = arch.head_dim, arch.num_attention_heads, arch.num_key_value_heads
    q, kv = H * d, K * d
    layer = [(C, 1)] * {"pre": 2, "post": 2, "sandwich": 4}[arch.layout]
    if arch.fused:
        layer += [(q + 2 * kv, C)] + [(q + 2 * kv, 1)] * arch.qkv_bias
    else:
        layer += [(q, C), (kv, C), (kv, C)] + [(q, 1), (kv, 1), (kv, 1)] * arch.qkv_bias
    layer += [(C, q)] + [(C, 1)] * arch.o_bias
    if arch.qk_norm == "head":
        layer += [(d, 1), (d, 1)]
    elif arch.qk_norm == "full":
        layer += [(q, 1), (kv, 1)]
    if arch.n_experts:
        E, Me = arch.n_experts, arch.moe_intermediate
        layer += [(E, C), (E, 2 * Me * C), (E, C * Me)]  # router, gate_up_proj, down_proj
    elif arch.fused:
        layer += [(2 * M, C), (C, M)] + [(2 * M, 1), (C, 1)] * arch.mlp_bias
    else:
        layer += [(M, C), (M, C), (C, M)] + [(M, 1), (M, 1), (C, 1)] * arch.mlp_bias
    return layer


def root_dims(arch: Arch) -> list[tuple[int, int]]:
    """The parameters outside the decoder layers: the embeddings (GPT-2: and its positions),
    the final norm (GPT-2: LayerNorm's weight and bias) and an untied head.

    Args:
        arch: the model's :class:`Arch`.

    Returns:
        ``(rows, row length)`` per parameter tensor outside the layers.
    """
    C, V = arch.hidden_size, arch.vocab_size
    head = [] if arch.tie_word_embeddings else [(V, C)]
    if arch.family == "gpt2":
        return [(V, C), (arch.max_position_embeddings, C), (C, 1), (C, 1)] + head
    return [(V, C), (C, 1)] + head


def parameter_dims(arch: Arch) -> list[tuple[int, int]]:
    """Every parameter tensor's ``(rows, row length)`` (a tied embedding once): what FSDP's
    dim-0 sharding divides (:func:`root_dims` and :func:`layer_dims` for every layer).

    Args:
        arch: the model's :class:`Arch`.

    Returns:
        ``(rows, row length)`` of every parameter tensor.
    """
    return root_dims(arch) + layer_dims(arch) * arch.num_hidden_layers


def parameter_shapes(arch: Arch) -> list[int]:
    """The element count of every parameter tensor (:func:`parameter_dims`): what a
    per-tensor optimiser state, ZeRO's partition or bitsandbytes' ``min_8bit_size`` sees.

    Args:
        arch: the model's :class:`Arch`.

    Returns:
        The element count of every parameter tensor.
    """
    return [rows * cols for rows, cols in parameter_dims(arch)]


def arch_parameter_count(arch: Arch) -> int:
    """Parameters of the model (a tied embedding counted once).

    Args:
        arch: the model's :class:`Arch`.

    Returns:
        The parameter count.
    """
    return sum(parameter_shapes(arch))


def lora_parameter_count(arch: Arch, rank: int) -> int:
    """Trainable parameters of rank-``rank`` LoRA on every attention and MLP projection.

    Args:
        arch: the model's :class:`Arch`.
        rank: LoRA's rank.

    Returns:
        The adapters' parameter count (every attention and MLP projection).
    """
    return arch.num_hidden_layers * sum(rank * (i + o) for i, o in lora_shapes(arch))
