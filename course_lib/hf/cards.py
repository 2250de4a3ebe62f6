"""From counted tensors to what the card shows: common GPUs, the CUDA context, the reserve.

``CARDS``: the memory each card reports to ``torch.cuda.mem_get_info`` as its total (the vendor
figure: 16 GB T4 shows 15,360 MiB; the fitcheck-llm T4 rows record 14,912 MiB usable after the
driver's own reservation, which is the figure used for the T4).

The CUDA context is memory the process holds outside PyTorch's allocator (the driver, cuBLAS's
and cuDNN's workspaces, kernel images). Measured figures only, with their source:
``CONTEXT`` (T4: 140.875 MiB on every fitcheck-llm 0.3.1 T4 row, torch 2.14 / CUDA 13; no other
card measured here: the T4 figure is used, and the docs say so).

The allocator's reserve (``max_memory_reserved / max_memory_allocated``) depends on the attention
backend: the fitcheck-llm T4 rows measured 1.04-1.25x with sdpa and up to 1.49x with eager
(fragmentation from the ``seq_len**2`` blocks). :func:`device_bytes` adds the median of those
ratios per backend (``RESERVE``), a measured figure, never fitted to a row.
"""

from __future__ import annotations

GIB = 2**30
MIB = 2**20
CARDS = {
    "T4": 14_912 * MIB,
    "L4": 24 * GIB,
    "A10G": 24 * GIB,
    "RTX 4090": 24 * GIB,
    "A100 40GB": 40 * GIB,
    "A100 80GB": 80 * GIB,
    "H100 80GB": 80 * GIB,
    "H200": 141 * 10**9,
}
# compute capability (major, minor) of each card: it picks cuBLAS's workspace size
CAPABILITY = {
    "T4": (7, 5),
    "L4": (8, 9),
    "A10G": (8, 6),
    "RTX 4090": (8, 9),
    "A100 40GB": (8, 0),
    "A100 80GB": (8, 0),
    "H100 80GB": (9, 0),
    "H200": (9, 0),
}
CONTEXT = {"T4": int(140.875 * MIB)}
DEFAULT_CONTEXT = int(140.875 * MIB)
# reserved / allocated on the fitcheck-llm 0.3.1 T4 rows (fp16, LoRA r32, checkpointing),
# medians per backend as printed by benchmarks/planner_vs_published.py --reserve
RESERVE = {"sdpa": 1.10, "flash": 1.10, "eager": 1.18}


def card_name(name: str) -> str:
    """A shipped card's name as :data:`CARDS` spells it (case and spaces ignored).

    Raises:
        ValueError: a card that is not shipped, listing the shipped ones.
    """
    key = name.replace(" ", "").lower()
    for card in CARDS:
        if card.replace(" ", "").lower() == key:
            return card
    raise ValueError(f"unknown card {name!r}: one of {', '.join(CARDS)}, or give the memory")


def card_memory(name: str) -> int:
    """The memory of a shipped card name (case and spaces ignored)."""
    return CARDS[card_name(name)]


def cublas_workspace_bytes(card: str | None = None) -> int:
    """One cuBLAS workspace, as PyTorch sizes it (``parseChosenWorkspaceSize`` in
    ``aten/src/ATen/cuda/CublasHandlePool.cpp``, no ``CUBLAS_WORKSPACE_CONFIG``): 32 MiB on
    compute capability 9.x, 10.x and 12.x, else ``4096 KiB x 2 + 16 KiB x 8``. It comes from the
    caching allocator, so ``max_memory_allocated`` counts it. Unknown card: the smaller one."""
    major = CAPABILITY[card_name(card)][0] if card else 8
    return 4096 * 8 * 1024 if major in (9, 10, 12) else 4096 * 1024 * 2 + 16 * 1024 * 8


def cublas_workspaces(card: str | None = None) -> int:
    """The workspaces a training step holds: the map of workspaces is per thread
    (``cublas_stream_to_workspace`` is ``thread_local``), and autograd runs the backward (and
    a checkpointed layer's recomputation) on its own device thread: two of them, on one stream.
    On the fitcheck-llm T4 rows this is the constant 16.25 MiB between the allocated peak and
    the tensors of the step."""
    return 2 * cublas_workspace_bytes(card)


def reserved_bytes(peak_allocated: int, attn_impl: str) -> int:
    """The caching allocator's reserve at the peak (``max_memory_reserved``): the allocated
    peak times the measured ratio for the attention backend (module docstring)."""
    return int(peak_allocated * RESERVE.get(attn_impl, RESERVE["eager"]))


def device_bytes(peak_allocated: int, attn_impl: str, card: str | None = None) -> int:
    """What the device shows at the peak: the allocator's reserve over the allocated peak,
    plus the CUDA context (module docstring for each figure's source)."""
    context = CONTEXT.get(card or "", DEFAULT_CONTEXT)
    return reserved_bytes(peak_allocated, attn_impl) + context
