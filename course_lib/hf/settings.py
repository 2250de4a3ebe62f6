"""The settings :func:`~course_lib.hf.predict.predict_hf_step` takes, checked: dtypes, the config
as a dict, what the prediction assumes that a config says otherwise, checkpointing's mode, packed
documents and a mixture of experts' routed tokens."""

from __future__ import annotations

from .._checks import checkpointing_mode
from . import families
from .models import Arch
from .moe import routing

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


FP32_B = 4


def checkpoint_mode(checkpointing) -> str:
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


def packed_documents(documents, seq_len: int, arch: Arch) -> int:
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


def config_dtype(c: dict) -> str:
    return c.get("dtype") or c.get("torch_dtype") or "float32"
