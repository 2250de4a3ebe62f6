"""The loss: next-token cross-entropy over the label tokens, as Hugging Face computes it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .batch import IGNORE_INDEX


def causal_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, int]:
    """Shifted cross-entropy: position ``t`` predicts ``labels[:, t + 1]``.

    With ``num_items_in_batch`` the loss is the *sum* over this batch's label tokens divided by
    that count (the whole accumulation window's tokens); otherwise it is the mean over this
    batch's label tokens. A batch with no label token gives a loss of 0 with no gradient
    contribution rather than NaN when a count is given, and raises otherwise.

    Args:
        logits: ``(B, T, V)`` next-token scores (bf16/fp16 are upcast to fp32 for the loss).
        labels: int ``(B, T)``, ``-100`` where no loss is taken (unshifted: the shift is here).
        num_items_in_batch: label tokens of the whole optimiser step (all micro-batches, all
            ranks); ``None`` for this batch's own mean.

    Returns:
        ``(loss, n_loss_tokens)``: a 0-d float tensor (nats per token) and this batch's count of
        shifted labels that are not ``-100``.

    Raises:
        ValueError: a ``num_items_in_batch`` that is not positive, or (without it) a batch with
            no label token.
    """
    # Shift the labels, not the logits: slicing logits[:, :-1] would copy a (B, T, V) tensor.
    B, T, V = logits.shape
    pad = torch.full((B, 1), IGNORE_INDEX, dtype=torch.long, device=labels.device)
    shift_labels = torch.cat([labels[:, 1:].long(), pad], dim=1).view(B * T)  # (B*T,)
    n_tokens = int((shift_labels != IGNORE_INDEX).sum())
    flat_logits = logits.view(B * T, V)  # (B*T, V)
    if flat_logits.dtype in (torch.float16, torch.bfloat16):  # the loss in at least fp32
        flat_logits = flat_logits.float()
    total = F.cross_entropy(flat_logits, shift_labels, ignore_index=IGNORE_INDEX, reduction="sum")
    if num_items_in_batch is not None:
        denom = float(num_items_in_batch)
        if denom <= 0:
            raise ValueError(f"num_items_in_batch must be positive, got {num_items_in_batch}")
        return total / denom, n_tokens
    if n_tokens == 0:
        raise ValueError(
            "this batch has no label token (every shifted label is -100), so its mean loss is "
            "undefined; check completion_only masking, or pass num_items_in_batch"
        )
    return total / n_tokens, n_tokens
