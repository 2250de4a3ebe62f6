"""Which Hugging Face configs the memory model reads, and how each family differs.

:func:`architecture` turns a config dict into an :class:`~course_lib.hf.models.Arch`; a family
it does not model is refused with the nearest one it does, and the models that load as a
supported family are named (SmolLM2 and TinyLlama ship ``model_type: llama``).
"""

from __future__ import annotations

from typing import Any

from .spec import Arch

LLAMA_LIKE = (
    "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "olmo2", "mixtral",
)  # fmt: skip
SUPPORTED_MODEL_TYPES = (*LLAMA_LIKE, "gpt2")
LOADS_AS = {
    "llama": "SmolLM2, TinyLlama, Llama 2/3, DeepSeek-Coder 1.3B, Vicuna",
    "mistral": "Mistral 7B, Zephyr",
    "qwen2": "Qwen2, Qwen2.5 (and Coder, Math)",
    "gemma3_text": "Gemma 3 1B; the text model of a multimodal gemma3 config (text_config)",
}
# Refused families: the nearest modelled one (what differs is said in the error).
NEAREST = {
    "gemma": ("gemma2", "Gemma 1 has no soft-capping, no sliding windows and no post-norms"),
    "phi": ("gpt2", "Phi-1/2 use a parallel attention+MLP block with LayerNorm"),
    "smollm3": ("llama", "SmolLM3 drops RoPE in every fourth layer"),
    "olmo3": ("olmo2", "OLMo 3 adds sliding-window layers"),
    "olmo": ("olmo2", "OLMo 1 uses a non-parametric LayerNorm"),
    "granite": ("llama", "Granite scales embeddings, residuals, attention and logits"),
    "qwen2_moe": ("mixtral", "Qwen2-MoE adds a shared expert"),
    "phi4": ("phi3", "Phi-4 loads as phi3 where its config says so"),
    "gemma3": ("gemma3_text", "pass the config's text_config"),
    "qwen3_moe": (
        "mixtral",
        "Qwen3-MoE's router renormalises only with norm_topk_prob, and it adds QK-norm",
    ),
}
_ACTS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
# QK-norm: per head (Qwen3, Gemma 3) or over the whole projection (OLMo 2)
QK_NORM = {"qwen3": "head", "gemma3_text": "head", "qwen3_moe": "head", "olmo2": "full"}


def architecture(c: dict) -> Arch:
    """The fields of config dict ``c`` the memory model reads, checked.

    Args:
        c: the config dict.

    Returns:
        The :class:`~course_lib.hf.spec.Arch`.

    Raises:
        ValueError: an unsupported ``model_type`` (naming the nearest supported one and the
            families that load as a supported type), a missing field, or an MLP activation the
            family's recipe does not have.
    """
    model_type = c.get("model_type")
    if model_type == "gemma3" and isinstance(c.get("text_config"), dict):
        c = {"model_type": "gemma3_text", **c["text_config"]}
        model_type = "gemma3_text"
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(unsupported(model_type))
    try:
        if model_type == "gpt2":
            return _gpt2(c)
        return _llama_like(c, model_type)
    except KeyError as missing:
        raise ValueError(f"the {model_type} config has no field {missing}") from None


def unsupported(model_type: Any) -> str:
    """The error for a family the memory model does not read.

    Args:
        model_type: the config's ``model_type``.

    Returns:
        The error message.
    """
    near = NEAREST.get(model_type)
    hint = f"; nearest supported: {near[0]} ({near[1]})" if near else ""
    loads = "; ".join(f"{k}: {v}" for k, v in LOADS_AS.items())
    return (
        f"model_type {model_type!r} is not supported; supported: "
        f"{', '.join(SUPPORTED_MODEL_TYPES)}{hint}. These load as a supported type: {loads}"
    )


def _activation(c: dict, model_type: str) -> str:
    """The MLP's activation as the recipes name it; refuses what they do not model (another
    activation, RoPE on part of each head)."""
    act = c.get("hidden_activation") or c.get("hidden_act", "silu")
    if model_type.startswith("gemma"):
        act = c.get("hidden_activation") or "gelu_pytorch_tanh"
    if act not in _ACTS:
        raise ValueError(
            f"{model_type} with activation {act!r} is not modelled (only silu, gelu_pytorch_tanh)"
        )
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    partial = c.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0)) or 1.0
    if partial != 1.0:
        raise ValueError(
            f"{model_type} with partial_rotary_factor={partial} is not modelled "
            "(RoPE on part of each head); nearest: the same family without it"
        )
    return _ACTS[act]


def _llama_like(c: dict, model_type: str) -> Arch:
    C, H = c["hidden_size"], c["num_attention_heads"]
    act = _activation(c, model_type)
    bias = bool(c.get("attention_bias", False))
    gemma = model_type in ("gemma2", "gemma3_text")
    moe = model_type in ("mixtral", "qwen3_moe")
    L = c["num_hidden_layers"]
    wins = windows(c, model_type, L)
    return Arch(
        family="llama",
        hidden_size=C,
        intermediate_size=c["intermediate_size"],
        num_attention_heads=H,
        num_key_value_heads=c.get("num_key_value_heads") or H,
        head_dim=c.get("head_dim") or C // H,
        num_hidden_layers=L,
        vocab_size=c["vocab_size"],
        max_position_embeddings=c.get("max_position_embeddings", 0),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", gemma)),
        qkv_bias=model_type == "qwen2" or bias,
        o_bias=model_type != "qwen2" and bias,
        mlp_bias=bool(c.get("mlp_bias", False)),
        activation=act,
        model_type=model_type,
        norm="gemma" if gemma else "olmo2" if model_type == "olmo2" else "llama",
        layout="sandwich" if gemma else "post" if model_type == "olmo2" else "pre",
        qk_norm=QK_NORM.get(model_type, ""),
        qk_norm_each=model_type in ("qwen3", "olmo2", "qwen3_moe"),
        fused=model_type == "phi3",
        embed_scale=gemma,
        attn_softcap=float(c.get("attn_logit_softcapping") or 0.0) if gemma else 0.0,
        final_softcap=float(c.get("final_logit_softcapping") or 0.0) if gemma else 0.0,
        windows=wins,
        # Gemma 3: a local and a global RoPE table, one per kind of layer present
        rope_tables=2 if model_type == "gemma3_text" and len(set(wins or (0,))) > 1 else 1,
        n_experts=c.get("num_local_experts") or c.get("num_experts") or 0 if moe else 0,
        top_k=c.get("num_experts_per_tok", 0) if moe else 0,
        moe_intermediate=c.get("moe_intermediate_size") or c["intermediate_size"] if moe else 0,
    )


def windows(c: dict, model_type: str, L: int) -> tuple:
    """The sliding window of each layer (0: full attention), from ``layer_types`` or the
    family's rule (Mistral: every layer; Qwen2/3: only with ``use_sliding_window``).

    Args:
        c: the config dict.
        model_type: its ``model_type``.
        L: decoder layers.

    Returns:
        One window per layer, or ``()`` when no layer slides.
    """
    w = c.get("sliding_window") or 0
    if not w or (model_type.startswith("qwen") and not c.get("use_sliding_window")):
        return ()
    types = c.get("layer_types")
    if types:
        return tuple(w if kind == "sliding_attention" else 0 for kind in types[:L])
    if model_type == "gemma2":
        return tuple(w if i % 2 == 0 else 0 for i in range(L))
    return (w,) * L


def _gpt2(c: dict) -> Arch:
    act = c.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu", "gelu_pytorch_tanh"):
        raise ValueError(
            f"gpt2 with activation {act!r} is not modelled (only gelu_new, gelu, gelu_pytorch_tanh)"
        )
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
        activation=act,
        model_type="gpt2",
    )


# PEFT 0.21's per-family default LoRA targets (peft.utils.constants,
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): q_proj, v_proj for every supported
# decoder but these. phi3 and olmo2 have no entry: PEFT's get_peft_model then refuses to guess
# ("Please specify `target_modules`"), and so does the memory model (NO_PEFT_DEFAULT).
PEFT_DEFAULT_TARGETS = {"gpt2": ("c_attn",)}
NO_PEFT_DEFAULT = ("phi3", "olmo2", "qwen3_moe")


def lora_modules(arch: Arch) -> tuple[str, ...]:
    """The PEFT module names of the projections a LoRA adapter can go on (``all-linear``:
    every one; the head is never adapted).

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.

    Returns:
        The module names, in the model's order.
    """
    if arch.family == "gpt2":
        return ("c_attn", "c_proj", "c_fc")
    attn = ("qkv_proj", "o_proj") if arch.fused else ("q_proj", "k_proj", "v_proj", "o_proj")
    if arch.n_experts:
        # PEFT's all-linear takes nn.Linear modules only: the router (a bare nn.Parameter, which
        # PEFT can wrap when named, not modelled here) and the experts (3-D parameters) stay out
        return attn
    mlp = ("gate_up_proj", "down_proj") if arch.fused else ("gate_proj", "up_proj", "down_proj")
    return attn + mlp


def default_targets(arch: Arch) -> tuple[str, ...]:
    """PEFT's default ``target_modules`` for the family (``("q_proj", "v_proj")`` for most).

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.

    Returns:
        The module names PEFT 0.21 adapts when ``target_modules`` is not given.

    Raises:
        ValueError: the family has no PEFT default (Phi-3, OLMo 2), naming what to pass.
    """
    if arch.model_type in NO_PEFT_DEFAULT:
        raise ValueError(
            f"PEFT 0.21 has no default LoRA target_modules for {arch.model_type} (get_peft_model "
            f"asks for them): pass lora_targets, e.g. {', '.join(lora_modules(arch)[:2])} or "
            "'all-linear'"
        )
    return PEFT_DEFAULT_TARGETS.get(arch.model_type, ("q_proj", "v_proj"))


def lora_targets_for(
    arch: Arch, lora_targets: str | list[str] | tuple[str, ...] | None
) -> tuple[str, ...]:
    """The projections that get a LoRA adapter, as PEFT names them.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        lora_targets: ``None`` (PEFT's default for the family, :func:`default_targets`),
            ``"all-linear"`` (every projection, :func:`lora_modules`), or a list (or a
            comma-separated string) of PEFT module names, ``lm_head`` (the output layer) and
            ``all-linear`` among them.

    Returns:
        The module names, each once, in the order given.

    Raises:
        ValueError: a name that is not a projection of the family, no name at all, or no
            name for a family without a PEFT default.
    """
    allowed = lora_modules(arch)
    if lora_targets is None:
        return default_targets(arch)
    if lora_targets == "all-linear":
        return allowed
    names = _names(lora_targets)
    if "all-linear" in names:  # all-linear and more (the head): every projection, then those
        names = [*allowed, *(n for n in names if n != "all-linear")]
    bad = [n for n in names if n not in (*allowed, HEAD)]
    if bad or not names:
        raise ValueError(
            f"lora_targets {bad or names!r} are not projections of "
            f"{arch.model_type}: choose from {', '.join(allowed)}, {HEAD} (the output layer) "
            "or 'all-linear'"
        )
    return tuple(dict.fromkeys(names))


HEAD = "lm_head"  # the output layer's module name in every family


def embedding_name(arch: Arch) -> str:
    """The input embedding's module name (``embed_tokens``; GPT-2: ``wte``).

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.

    Returns:
        The name PEFT's ``modules_to_save`` takes for it.
    """
    return "wte" if arch.family == "gpt2" else "embed_tokens"


def saved_modules(arch: Arch, names: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """PEFT's ``modules_to_save`` as the recipes read it: ``"embed"`` (a trainable copy of the
    input embedding) and/or ``"head"`` (of the output layer), in that order.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        names: module names (a list or a comma-separated string): the embedding's
            (:func:`embedding_name`) and ``lm_head``; ``None`` or empty: none.

    Returns:
        ``()``, ``("embed",)``, ``("head",)`` or ``("embed", "head")``.

    Raises:
        ValueError: a name that is neither.
    """
    given = _names(names) if names else []
    embed = embedding_name(arch)
    bad = [n for n in given if n not in (embed, HEAD)]
    if bad:
        raise ValueError(
            f"modules_to_save {bad!r}: the planner models a trainable copy of {embed} (the input "
            f"embedding) and {HEAD} (the output layer) only"
        )
    return tuple(k for k, n in (("embed", embed), ("head", HEAD)) if n in given)


def _names(value: str | list[str] | tuple[str, ...]) -> list[str]:
    """Module names from a list or a comma-separated string, stripped, empty ones dropped."""
    names = value.split(",") if isinstance(value, str) else list(value)
    return [n.strip() for n in names if n.strip()]
