"""Data parallelism: the loss tokens of a window counted over every rank, and the loss that makes
DDP's gradient average the global token mean.

Across ``W`` data-parallel ranks, DDP *averages* gradients: ``g = (1 / W) * sum_r g_r``. To get
the mean over every loss token of the window on every rank, each rank divides its summed
cross-entropy ``S_r`` by the loss tokens summed over ranks, ``N_all``, and multiplies by ``W`` to
undo the average::

    (1 / W) * sum_r W * S_r / N_all = sum_r S_r / N_all

Dividing by the rank's own count instead is a mean of means again (of ranks rather than of
micro-batches). Every function here is a collective when ``torch.distributed`` is initialised:
every rank must call it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """True when ``torch.distributed`` is available and initialised in this process."""
    return dist.is_available() and dist.is_initialized()


def all_reduce_sum(values: list, dtype: torch.dtype, group=None) -> list:
    """Sum a short list of numbers over the ranks of ``group`` (one collective call)."""
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":  # nccl reduces only CUDA tensors
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor(values, dtype=dtype, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    return t.tolist()


def sum_over_ranks(count: int, group=None) -> tuple[int, int]:
    """``(count summed over the ranks of group, world size)``; ``(count, 1)`` without
    ``torch.distributed``. A collective: every rank must call it."""
    if not is_distributed():
        return int(count), 1
    return int(all_reduce_sum([int(count)], torch.int64, group)[0]), dist.get_world_size(group)


def dp_token_weighted_loss(loss_sum: torch.Tensor, local_tokens: int, group=None) -> torch.Tensor:
    """Loss to back-propagate on this rank so that DDP's gradient average is the global token mean.

    Returns ``loss_sum * W / N_all`` where ``loss_sum`` is this rank's summed cross-entropy (nats),
    ``N_all`` the loss tokens summed over the ``W`` ranks. For a window of several micro-batches
    sum the window's tokens first (``accumulate_gradients`` does). Collective: call on every rank.
    """
    n_all, world_size = sum_over_ranks(local_tokens, group)
    if n_all <= 0:
        raise ValueError(
            f"the window holds {n_all} loss tokens over {world_size} rank(s): every "
            "label is -100; check the completion-only masking or skip this window"
        )
    return loss_sum * (world_size / n_all)
