"""Data parallelism: the loss tokens of a window counted over every rank, and the loss that makes
DDP's gradient average the global token mean.

Across ``W`` data-parallel ranks, DDP *averages* gradients: ``g = (1 / W) * sum_r g_r``. To get
the mean over every loss token of the window on every rank, each rank divides its summed
cross-entropy ``S_r`` by the loss tokens summed over ranks, ``N_all``, and multiplies by ``W`` to
undo the average::

    (1 / W) * sum_r W * S_r / N_all = sum_r S_r / N_all

Dividing by the rank's own count instead is a mean of means again (of ranks rather than of
micro-batches). :func:`course_lib.accumulation.accumulate_gradients` applies it with the count
from :func:`sum_over_ranks`. Every function here is a collective when ``torch.distributed`` is
initialised: every rank must call it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """True when ``torch.distributed`` is available and initialised in this process.

    Returns:
        False in an ordinary single process (every function here is then local).
    """
    return dist.is_available() and dist.is_initialized()


def all_reduce_sum(values: list[float], dtype: torch.dtype, group: Any = None) -> list:
    """Sum a short list of numbers over the ranks of ``group`` (one collective call).

    Args:
        values: the numbers this rank contributes, the same length on every rank.
        dtype: the dtype they are reduced in (``torch.int64`` for counts: exact).
        group: the process group; ``None`` means the default (world) group.

    Returns:
        The element-wise sums over the ranks, as Python numbers (the same on every rank).
    """
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":  # nccl reduces only CUDA tensors
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor(values, dtype=dtype, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    return t.tolist()


def sum_over_ranks(count: int, group: Any = None) -> tuple[int, int]:
    """The count summed over the ranks of ``group``, and the world size.

    A collective: every rank must call it.

    Args:
        count: this rank's number (loss tokens of its micro-batches).
        group: the process group; ``None`` means the default group.

    Returns:
        ``(sum over ranks, world size)``; ``(count, 1)`` without ``torch.distributed``.
    """
    if not is_distributed():
        return int(count), 1
    return int(all_reduce_sum([int(count)], torch.int64, group)[0]), dist.get_world_size(group)
