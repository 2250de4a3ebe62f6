"""The batch contract: what a batch dict holds, and how its loss tokens are counted.

Every collator in the course returns a plain dict of tensors with Hugging Face's names, and the
model takes it as ``model(**batch)``:

* ``input_ids`` ``(B, T)`` int64 token ids;
* ``labels`` ``(B, T)`` int64, ``IGNORE_INDEX`` (-100) where no loss is taken (prompt, padding,
  the first token of a packed document); the model shifts them: position ``t`` predicts
  ``labels[:, t + 1]``;
* padded batches: ``attention_mask`` ``(B, T)`` 1 for real tokens, 0 for padding;
* packed batches: ``position_ids`` ``(B, T)`` restarting at 0 for every document,
  ``document_ids`` ``(B, T)`` (-1 for the padding tail), ``cu_seq_lens`` int32 offsets of every
  document in the flattened ``B * T`` stream and ``max_length`` the longest document.

The key sets below are the contract in code: :class:`~course_lib.collate.PaddingCollator` returns
:data:`PADDED_KEYS`, :class:`~course_lib.packing.PackingCollator` :data:`PACKED_KEYS` (and
:data:`HF_FLASH_KEYS` on request), and :func:`~course_lib.accumulation.concatenate_micro_batches`
joins batches holding only :data:`CONCATENABLE_KEYS`.
"""

from __future__ import annotations

import torch

from ._checks import seq_len_within

IGNORE_INDEX = -100  # the label of a token that is not trained on (PyTorch's cross-entropy default)

PADDED_KEYS = ("input_ids", "attention_mask", "labels")
PACKED_KEYS = ("input_ids", "labels", "position_ids", "document_ids", "cu_seq_lens", "max_length")
# Hugging Face's flash-attention names for the same offsets (DataCollatorWithFlattening).
HF_FLASH_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
# Per-row keys: rows of batches with only these can be stacked into one batch (padded rows).
CONCATENABLE_KEYS = (*PADDED_KEYS, "position_ids")


def random_batch(
    vocab_size: int,
    batch_size: int,
    seq_len: int,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> dict[str, torch.Tensor]:
    """Full rows of random token ids, every token a label: the worst case a measurement wants.

    The ids depend only on ``(seed, batch_size, seq_len)``, so every measurement of one shape sees
    the same batch. What a step allocates does not depend on the ids, only on the shape.

    Args:
        vocab_size: ids are drawn uniformly from ``[0, vocab_size)``.
        batch_size: ``B``, rows.
        seq_len: ``T``, tokens per row (no padding).
        seed: with the shape, fixes the ids (the global torch RNG is not touched).
        device: where the tensors live (``None``: the CPU).

    Returns:
        ``{"input_ids": (B, T) int64, "labels": the same tensor}`` on ``device``.
    """
    gen = torch.Generator().manual_seed(seed + batch_size * 100003 + seq_len)
    ids = torch.randint(0, vocab_size, (batch_size, seq_len), generator=gen)  # (B, T)
    ids = ids.to(device or "cpu")
    return {"input_ids": ids, "labels": ids}


def count_loss_tokens(labels: torch.Tensor) -> int:
    """Tokens that contribute to a causal-LM loss: ``(labels[..., 1:] != -100).sum()``.

    The model shifts labels inside: position ``t`` predicts ``labels[..., t + 1]``, so nothing
    predicts ``labels[..., 0]``. Counting the unshifted labels, ``(labels != -100).sum()``,
    overcounts by exactly the number of rows whose first label is not -100. With completion-only
    masking that first label is a prompt token (-100) and the counts agree; with full-sequence
    labels (``labels = input_ids``) every row adds one phantom token, so a batch of 16 rows of 20
    labelled tokens would claim 320 instead of 304 and every normaliser built on it is 5 % off.

    Args:
        labels: int ``(..., T)`` labels, ``-100`` where no loss is taken (unshifted, as a batch
            holds them).

    Returns:
        The number of targets the shifted loss averages over: labels at positions ``1 .. T-1``
        that are not ``-100``, summed over every row.

    Raises:
        ValueError: ``labels`` is not a tensor with a sequence dimension.
        TypeError: ``labels`` holds floats or bools rather than token ids.
    """
    if not torch.is_tensor(labels) or labels.dim() < 1:
        raise ValueError(f"labels must be a tensor with a sequence dimension, got {labels!r}")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(
            f"labels must hold integer token ids (-100 for ignored), got dtype {labels.dtype}"
        )
    return int((labels[..., 1:] != IGNORE_INDEX).sum())


def check_model_inputs(
    input_ids: object,
    vocab_size: int,
    max_seq_len: int,
    position_ids: torch.Tensor | None = None,
    **same_shape: torch.Tensor | None,
) -> tuple[int, int]:
    """Validate a batch at the model's door: a clear ``ValueError`` instead of a torch traceback.

    Args:
        input_ids: a non-empty ``(B, T)`` integer tensor with ids in ``[0, vocab_size)``.
        vocab_size: the model's vocabulary.
        max_seq_len: the longest row the model takes (``T <= max_seq_len``).
        position_ids: ``(B, T)`` positions in ``[0, max_seq_len)``, or ``None``.
        **same_shape: tensors (labels, masks, document ids) that must be ``(B, T)`` too when they
            are not ``None``.

    Returns:
        ``(B, T)``.

    Raises:
        ValueError: naming the first input that breaks the contract and what it should be.
    """
    if not torch.is_tensor(input_ids) or input_ids.dim() != 2:
        raise ValueError(
            "input_ids must be a 2-D tensor (batch_size, seq_len), got "
            f"{type(input_ids).__name__} {getattr(input_ids, 'shape', '')}"
        )
    if input_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    B, T = input_ids.shape
    if B == 0 or T == 0:
        raise ValueError(f"input_ids is empty: shape {(B, T)}")
    seq_len_within(int(T), max_seq_len)
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"token ids must be in [0, {vocab_size}), got range [{lo}, {hi}]")
    for name, t in {"position_ids": position_ids, **same_shape}.items():
        if t is not None and tuple(t.shape) != (B, T):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {(B, T)} like input_ids")
    if position_ids is not None:
        p_lo, p_hi = int(position_ids.min()), int(position_ids.max())
        if p_lo < 0 or p_hi >= max_seq_len:
            raise ValueError(
                f"position_ids must lie in [0, {max_seq_len}), got range [{p_lo}, {p_hi}]"
            )
    return int(B), int(T)
