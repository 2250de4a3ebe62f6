"""Gradient accumulation: why the mean of micro-batch means is not the mean over tokens.

A causal LM's loss over an accumulation window of micro-batches ``i = 1..K`` is meant to be the
mean over every loss token of the window::

    L = (1 / N) * sum_i S_i,    S_i = summed cross-entropy of micro-batch i (nats),
                                N   = sum_i n_i, n_i = loss tokens of micro-batch i.

The widely copied loop ``loss = model(**mb).loss / accum`` computes instead::

    L_mean = (1 / K) * sum_i S_i / n_i

which weights a micro-batch of 5 completion tokens as much as one of 500. The two agree only when
every ``n_i`` is equal. ``mode="token_weighted"`` reproduces ``L`` exactly by asking the model for
``S_i / N`` (Hugging Face's ``num_items_in_batch``); ``mode="mean"`` is that loop's ``L_mean``.
Across data-parallel ranks ``N`` is summed over ranks (:mod:`course_lib.distributed`).

Counting: :func:`~course_lib.batch.count_loss_tokens` (re-exported here) and
:mod:`course_lib.token_log`; lesson 3's windows with set loss-token counts:
:mod:`course_lib.lessons.accumulation`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from .batch import CONCATENABLE_KEYS, IGNORE_INDEX, count_loss_tokens
from .distributed import all_reduce_sum, is_distributed, sum_over_ranks
from .token_log import MicroBatchTokens, batch_token_counts

__all__ = [
    "MODES",
    "AccumulationStats",
    "accumulate_gradients",
    "concatenate_micro_batches",
    "count_loss_tokens",
    "flat_grad",
    "gradient_error",
    "relative_error",
]

Mode = Literal["token_weighted", "mean"]
MODES: tuple[Mode, ...] = ("token_weighted", "mean")


@dataclass
class AccumulationStats:
    """What one accumulation window did.

    ``loss_per_token``: ``sum_i S_i / N`` in nats per loss token, the same definition in both
    modes (and over all ranks when distributed), so runs are comparable. ``window_loss_tokens``:
    ``N``, summed over ranks when distributed; the ``total_*`` fields count this rank only.
    """

    mode: str
    loss_per_token: float
    micro_batches: list[MicroBatchTokens]
    total_all_tokens: int
    total_non_pad_tokens: int
    total_loss_tokens: int
    window_loss_tokens: int
    world_size: int = 1


def _validate_window(
    micro_batches: Iterable[dict], mode: str
) -> tuple[list[dict], list[MicroBatchTokens]]:
    if mode not in MODES:
        raise ValueError(
            f"mode={mode!r} is not one of {MODES}; use 'token_weighted' (correct) or "
            "'mean' (the common loss / accum, for comparison)"
        )
    micro_batches = list(micro_batches)
    if not micro_batches:
        raise ValueError("the accumulation window is empty: pass at least one micro-batch dict")
    for i, mb in enumerate(micro_batches):
        if not isinstance(mb, dict) or "labels" not in mb or "input_ids" not in mb:
            raise ValueError(f"micro-batch {i} must be a dict with 'input_ids' and 'labels'")
    counts = [batch_token_counts(mb) for mb in micro_batches]
    if mode == "mean":
        empty = [i for i, c in enumerate(counts) if c.loss_tokens == 0]
        if empty:
            raise ValueError(
                f"micro-batches {empty} hold no loss token, so their mean loss is 0/0 and "
                "mode='mean' would still give each 1/K of the weight; use mode='token_weighted' "
                "(they then contribute 0) or drop them"
            )
    return micro_batches, counts


def _window_tokens(local_tokens: int, k: int, distributed: bool, group: object) -> tuple[int, int]:
    """``(N, W)``: the window's loss tokens (summed over ranks when ``distributed``) and the
    world size; raises when ``N`` is 0."""
    window_tokens, world_size = (
        sum_over_ranks(local_tokens, group) if distributed else (local_tokens, 1)
    )
    if window_tokens == 0:
        raise ValueError(
            f"the window of {k} micro-batch(es) on {world_size} rank(s) holds no "
            "loss token (every shifted label is -100): nothing to learn and the mean is 0/0; "
            "check the completion-only masking or skip this window"
        )
    return window_tokens, world_size


def accumulate_gradients(
    model: torch.nn.Module,
    micro_batches: Iterable[dict],
    mode: Mode = "token_weighted",
    distributed: bool | None = None,
    group: object = None,
    *,
    simulate_ranks: tuple[int, int] | None = None,
) -> AccumulationStats:
    """Forward/backward every micro-batch of one window; gradients add up in ``.grad``.

    The optimiser is not stepped and ``.grad`` is not zeroed: the caller owns both.
    ``"token_weighted"``: back-propagates ``S_i / N`` (``N`` = the window's loss tokens), so the
    window's gradient is that of the mean over all its tokens; a micro-batch without a loss token
    contributes 0. ``"mean"``: back-propagates ``(S_i / n_i) / K`` (the common ``loss / accum``);
    a micro-batch without a loss token raises, before any backward pass.

    ``distributed=None`` means "if ``torch.distributed`` is initialised": ``N`` is then summed over
    the ranks of ``group`` and the token-weighted loss multiplied by the world size ``W`` so DDP's
    average gives the global token mean (all-reducing gradients by hand? average them too, as DDP
    does). A DDP model syncs only on the last micro-batch
    (``no_sync``). ``"mean"`` with DDP is the mean over ``W * K`` micro-batch means.

    ``simulate_ranks=(N_all, W)`` plays one rank of ``W`` in a single process (lesson 3): the
    token-weighted loss uses the given window count over all ranks and world size, and no
    collective runs. Averaging the ranks' gradients by hand then gives what DDP would.

    Args:
        model: a model whose forward takes a batch dict and ``num_items_in_batch`` and returns
            ``.loss`` (TinyGPT, a Hugging Face causal LM, or either wrapped in DDP).
        micro_batches: the window's batch dicts, each with ``input_ids`` and ``labels``.
        mode: ``"token_weighted"`` (every loss token weighs the same) or ``"mean"`` (every
            micro-batch weighs the same: ``loss / accum``).
        distributed: count the window's tokens over the ranks of ``group``; ``None``: when
            ``torch.distributed`` is initialised.
        group: the process group (``None``: the default one).
        simulate_ranks: ``(N_all, W)``: the window's loss tokens over all ranks and the world size,
            for one simulated rank of ``W`` in this process.

    Returns:
        :class:`AccumulationStats` of the window.

    Raises:
        ValueError: an unknown mode, an empty window, a micro-batch without ``input_ids`` and
            ``labels``, a window without any loss token, or (``"mean"``) a micro-batch without one.
    """
    micro_batches, counts = _validate_window(micro_batches, mode)
    local_tokens = sum(c.loss_tokens for c in counts)
    k = len(micro_batches)
    distributed = is_distributed() if distributed is None else distributed
    if simulate_ranks is not None:
        window_tokens, world_size = simulate_ranks
        distributed = False
    else:
        window_tokens, world_size = _window_tokens(local_tokens, k, distributed, group)

    loss_sum = 0.0  # sum_i S_i in nats
    for i, (mb, c) in enumerate(zip(micro_batches, counts)):
        # DDP all-reduces on every backward unless told not to: sync once, on the last one.
        no_sync = getattr(model, "no_sync", None) if i < k - 1 else None
        with no_sync() if no_sync is not None else contextlib.nullcontext():
            if mode == "token_weighted":
                out = model(**mb, num_items_in_batch=window_tokens)  # S_i / N
                (out.loss * world_size).backward()
                loss_sum += float(out.loss.detach()) * window_tokens
            else:
                out = model(**mb)  # S_i / n_i
                (out.loss / k).backward()
                loss_sum += float(out.loss.detach()) * c.loss_tokens
    if distributed and world_size > 1:
        loss_sum = all_reduce_sum([loss_sum], torch.float64, group)[0]
    return AccumulationStats(
        mode=mode,
        loss_per_token=loss_sum / window_tokens,
        micro_batches=counts,
        total_all_tokens=sum(c.all_tokens for c in counts),
        total_non_pad_tokens=sum(c.non_pad_tokens for c in counts),
        total_loss_tokens=local_tokens,
        window_loss_tokens=window_tokens,
        world_size=world_size,
    )


def concatenate_micro_batches(
    micro_batches: Iterable[dict], pad_token_id: int = 0
) -> dict[str, torch.Tensor]:
    """One full batch holding every row of the window, right-padded to the longest ``seq_len``.

    Padding slots get ``attention_mask`` 0 and label -100, so they change no loss and (causal,
    masked keys) no real token's output.

    Args:
        micro_batches: padded batch dicts (``input_ids`` ``(B_i, T_i)``, optionally
            ``attention_mask``, ``labels``, ``position_ids``).
        pad_token_id: the id written in the added padding slots.

    Returns:
        The same keys, each ``(Σ B_i, max T_i)``: the rows in order, right-padded; a batch that had
        no ``attention_mask`` (or ``position_ids``) gets ones (``0 .. T_i - 1``).

    Raises:
        ValueError: no micro-batch, or one with keys other than
            :data:`~course_lib.batch.CONCATENABLE_KEYS` (packed rows: unpack them first).
    """
    micro_batches = list(micro_batches)
    if not micro_batches:
        raise ValueError("no micro-batch to concatenate: pass at least one batch dict")
    for i, mb in enumerate(micro_batches):
        extra = sorted(set(mb) - set(CONCATENABLE_KEYS))
        if extra:
            raise ValueError(
                f"micro-batch {i} has keys {extra}; only padded batches with "
                f"{CONCATENABLE_KEYS} can be concatenated (unpack packed rows first)"
            )
    seq_len = max(mb["input_ids"].shape[1] for mb in micro_batches)
    fill = {
        "input_ids": pad_token_id,
        "attention_mask": 0,
        "labels": IGNORE_INDEX,
        "position_ids": 0,
    }
    keys = [k for k in CONCATENABLE_KEYS if any(k in mb for mb in micro_batches)]
    full = {}
    for key in keys:
        rows = []
        for mb in micro_batches:
            ids = mb["input_ids"]
            t = mb.get(key)
            if t is None:  # no mask: every slot is real; no position ids: 0..T-1
                t = (
                    torch.ones_like(ids)
                    if key == "attention_mask"
                    else torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
                )
            pad = t.new_full((t.shape[0], seq_len - t.shape[1]), fill[key])  # (B_i, T - T_i)
            rows.append(torch.cat([t, pad], dim=1))  # (B_i, T)
        full[key] = torch.cat(rows, dim=0)  # (sum B_i, T)
    return full


def flat_grad(
    params: torch.nn.Module | Iterable[torch.Tensor], dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Every parameter's gradient in one vector (zeros where there is none yet).

    Args:
        params: a model, or its parameters.
        dtype: the vector's dtype (float64: differences of nearly equal gradients stay exact).

    Returns:
        ``(P,)`` in ``dtype``, ``P`` the number of parameter elements, in ``parameters()`` order.
    """
    if isinstance(params, torch.nn.Module):
        params = params.parameters()
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    return torch.cat([g.detach().to(dtype).flatten() for g in grads])


def relative_error(g: torch.Tensor, reference: torch.Tensor) -> float:
    """``||g - reference|| / ||reference||`` (dimensionless).

    Args:
        g: a gradient vector (e.g. :func:`flat_grad` after accumulating).
        reference: the exact gradient, the same shape.

    Returns:
        The L2 norm of the difference over the reference's norm: 0 when equal, ``0.05`` is 5 %.

    Raises:
        ValueError: ``reference`` is exactly 0, so a relative error is undefined.
    """
    norm = float(reference.norm())
    if norm == 0.0:
        raise ValueError(
            "the full-batch gradient is exactly 0, so a relative error is undefined; "
            "use a model with random (non-zero) weights"
        )
    return float((g - reference).norm()) / norm


def gradient_error(
    model: torch.nn.Module, micro_batches: Sequence[dict], mode: Mode = "token_weighted"
) -> float:
    """Relative L2 error ``||g_acc - g_full|| / ||g_full||`` (dimensionless).

    ``g_acc``: ``accumulate_gradients(model, micro_batches, mode)`` in this process only.
    ``g_full``: one forward/backward of every row concatenated into one batch, whose loss is the
    mean over all its loss tokens. Dropout-like layers are switched off for the comparison; the
    model's ``.grad`` and train/eval flags are as they were afterwards. Pass the bare module, not
    a DDP wrapper (its backward would average with other ranks).

    Args:
        model: the bare model (not DDP-wrapped).
        micro_batches: the window's padded micro-batches.
        mode: how :func:`accumulate_gradients` weighs them.

    Returns:
        The relative error (:func:`relative_error`): float rounding only for
        ``"token_weighted"`` (at most 1e-6 in fp32); for ``"mean"`` as small only when every
        micro-batch holds the same number of loss tokens, and often over 10 % when they differ.

    Raises:
        ValueError: see :func:`accumulate_gradients`; a full-batch gradient of exactly 0.
    """
    micro_batches, _ = _validate_window(micro_batches, mode)
    params = [p for p in model.parameters() if p.requires_grad]
    saved_grads = [p.grad for p in params]
    saved_modes = {m: m.training for m in model.modules()}
    try:
        model.eval()
        for p in params:
            p.grad = None
        accumulate_gradients(model, micro_batches, mode, distributed=False)
        g_acc = flat_grad(params)
        for p in params:
            p.grad = None
        model(**concatenate_micro_batches(micro_batches)).loss.backward()
        g_full = flat_grad(params)
    finally:
        for p, g in zip(params, saved_grads):
            p.grad = g
        for m, training in saved_modes.items():
            m.training = training
    return relative_error(g_acc, g_full)
