"""Every attention mask the course builds, in one place.

Three situations, one rule each (``True`` = the query may attend the key)::

    causal (one sequence)      padded row (pad = .)      packed row (docs A A B B B)
    q\\k 0 1 2 3                q\\k 0 1 2 3              q\\k A A B B B
     0   1 . . .                 0  1 . . .               A  1 . . . .
     1   1 1 . .                 1  1 1 . .               A  1 1 . . .
     2   1 1 1 .                 2  1 1 1 .               B  . . 1 . .
     3   1 1 1 1                 .  . . . 1 (own diag)    B  . . 1 1 .
                                                          B  . . 1 1 1

Additive float masks (``0`` where allowed, a large negative value elsewhere) have shape
``(B, 1, T, T)`` and broadcast over heads. The diagonal is always allowed, so no softmax row is
fully masked (a fully masked row is NaN). Build a mask once per forward and share it across
layers: on the CPU, SDPA copies a boolean mask to float inside every call.
:func:`mask_for_batch` is the one choice of which mask a TinyGPT forward needs.
"""

from __future__ import annotations

import torch

Device = str | torch.device | None


def causal_allowed(seq_len: int, device: Device = None) -> torch.Tensor:
    """Bool ``(T, T)``: key ``j`` is visible from query ``i`` when ``j <= i``.

    Args:
        seq_len: ``T``, tokens per row.
        device: where to build it (``None``: the default device).

    Returns:
        The lower triangle (diagonal included) ``True``, ``(seq_len, seq_len)``.
    """
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


def future_mask(seq_len: int, device: Device = None) -> torch.Tensor:
    """Bool ``(T, T)``, ``True`` above the diagonal: the positions eager attention fills
    with ``-inf`` (one mask shared by every layer and every row).

    Args:
        seq_len: ``T``, tokens per row.
        device: where to build it (``None``: the default device).

    Returns:
        ``~causal_allowed(seq_len)``: ``True`` where key ``j > i`` (the future).
    """
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)


def document_allowed(segment_ids: torch.Tensor) -> torch.Tensor:
    """Same segment and not in the future (the block-diagonal causal mask).

    Args:
        segment_ids: int ``(B, T)``: the document each token belongs to.

    Returns:
        Bool ``(B, T, T)``: ``[b, i, j]`` is True when token ``j`` is in token ``i``'s document
        and ``j <= i``.
    """
    T = segment_ids.shape[-1]
    same = segment_ids[:, :, None] == segment_ids[:, None, :]  # (B, T, T)
    return same & causal_allowed(T, segment_ids.device)


def additive(allowed: torch.Tensor, dtype: torch.dtype, fill: float | None = None) -> torch.Tensor:
    """A float mask from a bool one: 0 where allowed, ``fill`` elsewhere.

    Args:
        allowed: bool ``(B, T, T)``, True where a query may attend a key.
        dtype: the attention scores' dtype (the mask is added to them).
        fill: the value of a masked position; ``None`` means ``-inf``.

    Returns:
        ``(B, 1, T, T)`` in ``dtype`` (the 1 broadcasts over heads).
    """
    fill = float("-inf") if fill is None else fill
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, fill)[:, None]  # (B, 1, T, T)


def block_causal_mask(
    segment_ids: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Additive mask for packed rows: attend within the segment, causally.

    Args:
        segment_ids: int ``(B, T)``: the document of each token.
        dtype: the attention scores' dtype.

    Returns:
        ``(B, 1, T, T)`` in ``dtype``: 0 within a document on or below the diagonal, ``-inf``
        elsewhere.
    """
    return additive(document_allowed(segment_ids), dtype)


def padding_causal_mask(
    attention_mask: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Additive ``(B, 1, T, T)`` mask for padded batches (left or right padding).

    Keys that are padding are masked; a padding query keeps its own diagonal so its softmax row
    stays finite (its output is never used: its label is -100).

    Args:
        attention_mask: ``(B, T)``, 1 for a real token, 0 for padding (anywhere in the row).
        dtype: the attention scores' dtype.

    Returns:
        ``(B, 1, T, T)`` in ``dtype``: 0 where a query may see a real key in its past (and on
        every diagonal), ``-inf`` elsewhere.
    """
    B, T = attention_mask.shape
    key_ok = attention_mask.bool()[:, None, :]  # (B, 1, T)
    eye = torch.eye(T, dtype=torch.bool, device=attention_mask.device)
    return additive((causal_allowed(T, attention_mask.device) & key_ok) | eye, dtype)


def document_attention_mask(
    document_ids: torch.Tensor, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Which key each query may see in a packed batch: same document and not in the future.

    The padding tail (-1) only sees itself.

    Args:
        document_ids: int ``(R, T)``: the document index of each token, ``-1`` for the padding
            tail.
        dtype: ``None`` for a bool mask; a float dtype for an additive one.

    Returns:
        Bool ``(R, T, T)`` (True = may attend) or, with a float ``dtype``, an additive
        ``(R, 1, T, T)`` mask (0 or the dtype's minimum) that Hugging Face models accept as a
        prepared 4-D ``attention_mask``.
    """
    allowed = document_allowed(document_ids)
    if dtype is None:
        return allowed
    return additive(allowed, dtype, torch.finfo(dtype).min)


def segment_ids_from_cu_seq_lens(
    cu_seq_lens: torch.Tensor, batch_size: int, seq_len: int
) -> torch.Tensor:
    """Per-token segment index ``(B, T)`` from offsets into the flattened ``B * T`` stream.

    Args:
        cu_seq_lens: int ``(D + 1,)``: cumulative document lengths in tokens, ``0 .. B * T``.
        batch_size: ``B``, rows.
        seq_len: ``T``, tokens per row.

    Returns:
        int64 ``(B, T)``: the index of each token's document in ``0 .. D - 1`` (counted over the
        whole batch, not per row).

    Raises:
        ValueError: offsets that do not start at 0, end at ``B * T`` and increase, or a document
            that crosses a row boundary.
    """
    cu = cu_seq_lens.to(torch.long)
    total = batch_size * seq_len
    if cu.dim() != 1 or cu.numel() < 2 or int(cu[0]) != 0 or int(cu[-1]) != total:
        raise ValueError(
            f"cu_seq_lens must be 1-D offsets starting at 0 and ending at B*T={total}, "
            f"got {cu.tolist()}"
        )
    if bool((cu[1:] <= cu[:-1]).any()):
        raise ValueError(f"cu_seq_lens must be strictly increasing, got {cu.tolist()}")
    # A document may not cross the end of a row: every row start must be an offset.
    row_starts = torch.arange(0, total, seq_len)
    if not bool(torch.isin(row_starts, cu).all()):
        raise ValueError("cu_seq_lens has a document that crosses a row boundary")
    seg = torch.searchsorted(cu[1:], torch.arange(total), right=True)  # (B*T,)
    return seg.view(batch_size, seq_len)


def mask_for_batch(
    attn_impl: str,
    input_ids: torch.Tensor,
    dtype: torch.dtype,
    *,
    cu_seq_lens: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The one mask a TinyGPT forward of ``input_ids`` ``(B, T)`` needs, shared by every layer.

    * packed rows (``cu_seq_lens`` or ``document_ids``): :func:`block_causal_mask`, except for
      ``"varlen"``, which cuts the documents out of the row itself and needs no mask;
    * padded rows (an ``attention_mask`` with zeros): :func:`padding_causal_mask`;
    * otherwise ``"eager"`` gets the bool :func:`future_mask` and the fused paths none (they
      are causal by themselves).

    Args:
        attn_impl: ``"eager"``, ``"sdpa"`` or ``"varlen"`` (``TinyGPTConfig.attn_impl``).
        input_ids: ``(B, T)``; only its shape and device are read.
        dtype: the attention scores' dtype (that of an additive mask).
        cu_seq_lens: a packed batch's cumulative document lengths, ``(D + 1,)``.
        document_ids: a packed batch's document index per token, ``(B, T)``.
        attention_mask: a padded batch's ``(B, T)`` 1/0 mask.

    Returns:
        An additive float ``(B, 1, T, T)`` mask in ``dtype``, a bool ``(T, T)`` one, or ``None``.

    Raises:
        ValueError: a packed batch that also has a padding mask with zeros, or ``"varlen"``
            given ``document_ids`` without ``cu_seq_lens``.
    """
    B, T = input_ids.shape
    padded = attention_mask is not None and not bool(attention_mask.bool().all())
    segments = None
    if cu_seq_lens is not None:
        segments = segment_ids_from_cu_seq_lens(cu_seq_lens.cpu(), B, T).to(input_ids.device)
    elif document_ids is not None:
        if attn_impl == "varlen":
            raise ValueError("attn_impl='varlen' needs cu_seq_lens, not only document_ids")
        segments = document_ids
    if segments is not None and padded:
        raise ValueError(
            "pass either a packed batch (cu_seq_lens/document_ids) or a padding attention_mask, "
            "not both"
        )
    if segments is not None:
        return None if attn_impl == "varlen" else block_causal_mask(segments, dtype)
    if padded:
        assert attention_mask is not None
        return padding_causal_mask(attention_mask, dtype)
    return future_mask(T, input_ids.device) if attn_impl == "eager" else None
