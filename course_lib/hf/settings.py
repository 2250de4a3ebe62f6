"""The settings :func:`~course_lib.hf.predict.predict_hf_step` takes, checked: dtypes, the config
as a dict, what the prediction assumes that a config says otherwise, checkpointing's mode, packed
documents and a mixture of experts' routed tokens (dtypes: :mod:`course_lib.units`)."""

from __future__ import annotations

from typing import Any

from .._checks import Checkpointing, checkpointing_mode
from .arch import Arch, architecture, config_dict
from .moe import routing

ATTENTION = ("eager", "sdpa", "flash")
WEIGHTS = ("16bit", "int8", "nf4")
LOSSES = ("standard", "chunked")
LOOPS = ("trainer", "plain")
DEVICES = ("cpu", "cuda")


def notes_for(config: Any, seq_len: int, attn_impl: str = "sdpa") -> list[str]:
    """What the prediction assumes that this config says otherwise.

    Sliding windows: eager attention builds one ``(batch, 1, seq_len, seq_len)`` mask per kind of
    layer (counted); flash takes the window natively (nothing to count); sdpa is refused when a
    window is not longer than ``seq_len``, because ``transformers`` then builds a dense mask
    that sdpa turns into a float copy per layer (``seq_len == window`` included: only a window
    longer than the rows lets it use ``is_causal`` and skip the mask).

    Args:
        config: a ``PretrainedConfig`` or its dict.
        seq_len: tokens per row.
        attn_impl: the attention path.

    Returns:
        The notes, in words.

    Raises:
        ValueError: where the difference is too large to pass over (a sliding window with sdpa).
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


def checkpoint_mode(checkpointing: object) -> Checkpointing:
    """The checkpointing of a Hugging Face step (:func:`course_lib._checks.checkpointing_mode`).

    Args:
        checkpointing: ``"off"``, ``"blocks"``, ``True`` (``"blocks"``), ``False`` or ``None``
            (``"off"``).

    Returns:
        ``"off"`` or ``"blocks"`` (whole decoder layers).

    Raises:
        ValueError: TinyGPT's ``"attention"`` or a value that is no checkpointing mode.
    """
    mode = checkpointing_mode(checkpointing)
    if mode == "attention":
        raise ValueError(
            "checkpointing='attention' is TinyGPT's; Hugging Face models checkpoint whole decoder "
            "layers: use 'blocks' (True) or 'off'"
        )
    return mode


def refuse_unmodelled(
    arch: Arch, seq_len: int, attn_impl: str, weights: str, lora_rank: int | None
) -> None:
    """Refuse a step the recipes do not model, saying what to do instead.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        seq_len: tokens per row.
        attn_impl: the attention path.
        weights: ``"16bit"``, ``"int8"`` or ``"nf4"``.
        lora_rank: LoRA's rank, or ``None``.

    Raises:
        ValueError: GPT-2 rows longer than its position table, a full fine-tune of 4/8-bit
            weights, or sdpa on a model that soft-caps its attention scores.
    """
    if arch.family == "gpt2" and seq_len > arch.max_position_embeddings:
        raise ValueError(
            f"seq_len={seq_len} exceeds GPT-2's n_positions={arch.max_position_embeddings}"
        )
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


def packed_documents(documents: int | None, seq_len: int, arch: Arch) -> int:
    """``None``: one sequence a row; else the documents packed in each row (1 to seq_len).

    Args:
        documents: documents per row, or ``None``.
        seq_len: tokens per row.
        arch: the model's :class:`~course_lib.hf.spec.Arch`.

    Returns:
        Documents per row (0: no packing).

    Raises:
        ValueError: not a positive int up to ``seq_len``, or GPT-2 (learned positions).
    """
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


def expert_counts(
    arch: Arch, tokens: int, expert_tokens: str | list | tuple | None
) -> tuple[tuple[int, ...], ...]:
    """Tokens per expert for every layer: ``"worst"`` (default) or ``"uniform"``
    (:func:`~course_lib.hf.moe.routing`), one list of ``n_experts`` counts for every layer, or
    one list per layer; each list must add up to ``tokens x top_k``.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        tokens: tokens in the micro-batch.
        expert_tokens: ``"worst"``, ``"uniform"``, counts, or ``None``.

    Returns:
        Tokens per expert, per layer (``()`` without experts).

    Raises:
        ValueError: counts for a model without experts, or counts of the wrong length or sum.
    """
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
    """The dtype a config dict names (``dtype``, or the older ``torch_dtype``; else fp32).

    Args:
        c: the config dict.

    Returns:
        The dtype's name.
    """
    return str(c.get("dtype") or c.get("torch_dtype") or "float32")


# bitsandbytes 0.43.2 stopped MatMul4Bit keeping its input for the backward: the forward set
# ``ctx.tensors = (A, B)`` and the backward never read A (it only needs the weight); commit
# 9e75374 ("fix QLoRA mem bug: delete useless buffered activation", pull request 1270, July
# 2024) made it ``(None, B)``; 0.43.2 is the first tag that holds it.
NF4_INPUT_FREED = (0, 43, 2)


def nf4_keeps_input(bnb_version: str | None) -> bool:
    """Does this bitsandbytes keep every 4-bit projection's input for the backward?

    Args:
        bnb_version: ``"0.41.1"`` and the like (``None``: a current one, 0.43.2 or later).

    Returns:
        ``True`` before 0.43.2 (:data:`NF4_INPUT_FREED`).

    Raises:
        ValueError: a version that is not dotted numbers.
    """
    if bnb_version is None:
        return False
    parts = str(bnb_version).strip().split(".")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        raise ValueError(f"bnb_version={bnb_version!r}: give bitsandbytes' version, e.g. '0.41.1'")
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts)) < NF4_INPUT_FREED
