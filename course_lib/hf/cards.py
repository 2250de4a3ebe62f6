"""From counted tensors to what the card shows: common GPUs, the CUDA context, the reserve.

``CARDS``: each card's memory as PyTorch reports it
(``torch.cuda.get_device_properties(0).total_memory``, the driver's ``totalGlobalMem``, which
``deviceQuery`` prints too), not the marketing size: a "24 GB" L4 reports 22.0 GiB, a "16 GB"
T4 14.75 GiB with ECC on. Each figure is a published print-out, its source in ``CARD_SOURCES``
(MiB figures are torch's ``MB``, ``total_memory // 2**20``: up to 1 MiB low).

The CUDA context is memory the process holds outside PyTorch's allocator (the driver, cuBLAS's
and cuDNN's workspaces, kernel images). Measured figures only, with their source:
``CONTEXT`` (T4: 140.875 MiB on every fitcheck-llm 0.3.1 T4 row, torch 2.14 / CUDA 13). No
other card was measured here: ``DEFAULT_CONTEXT`` is the T4's figure, an assumption (newer
cards and CUDA versions load more kernels; the docs say so).

The allocator's reserve (``max_memory_reserved / max_memory_allocated``) depends on the attention
backend: the fitcheck-llm T4 rows measured 1.04-1.25x with sdpa and up to 1.49x with eager
(fragmentation from the ``seq_len**2`` blocks). :func:`device_bytes` adds the median of those
ratios per backend (``RESERVE``), a measured figure, never fitted to a row; FlashAttention was
not measured and takes sdpa's (an assumption: neither keeps a ``seq_len**2`` block).
"""

from __future__ import annotations

GIB = 2**30
MIB = 2**20
CARDS = {
    "T4": 15_835_398_144,
    "L4": 23_583_784_960,
    "A10G": 22_587 * MIB,
    "RTX 4090": 24_563 * MIB,
    "A100 40GB": 42_298_834_944,
    "A100 80GB": 81_049 * MIB,
    "H100 80GB": 81_090 * MIB,
    "H200": 143_156 * MIB,
}
CARD_SOURCES = {
    "T4": "deviceQuery, CUDA 12.0, ECC on: router-gao/cuda-demo, "
    "cuda-samples/01-cuda-deviceQuery.md",
    "L4": "deviceQuery, driver 12.2: bottlerocket-os/bottlerocket-kernel-kit pull request 139",
    "A10G": "torch 2.15 get_device_properties: torchcodec's CUDA decoding tutorial "
    "(basic_cuda_example)",
    "RTX 4090": "torch get_device_properties (24,563 MB) in a public set-up note; deviceQuery "
    "elsewhere prints 24,564 MiB",
    "A100 40GB": "deviceQuery, A100-SXM4-40GB, driver 12.2: bottlerocket-os/bottlerocket pull "
    "request 3873",
    "A100 80GB": "mixbench, A100 80GB PCIe, driver 12.3: ekondis/mixbench issue 47 (the SXM4 "
    "card reports 81,221 MiB)",
    "H100 80GB": "torch get_device_properties, H100 80GB HBM3, torch 2.x: Stanford CS336 "
    "(spring 2025) lecture 6 notes",
    "H200": "torch get_device_properties: ai-bot-pro/achatbot, "
    "deploy/modal/src/llm/vllm/vlm/skywork_r1v.py",
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

    Args:
        name: a card's name, any case and spacing.

    Returns:
        The name as :data:`CARDS` spells it.

    Raises:
        ValueError: a card that is not shipped, listing the shipped ones.
    """
    key = name.replace(" ", "").lower()
    for card in CARDS:
        if card.replace(" ", "").lower() == key:
            return card
    raise ValueError(f"unknown card {name!r}: one of {', '.join(CARDS)}, or give the memory")


def card_memory(name: str) -> int:
    """The memory of a shipped card name (case and spaces ignored).

    Args:
        name: a card's name, any case and spacing.

    Returns:
        Its memory in bytes, as torch reports it.
    """
    return CARDS[card_name(name)]


def cublas_workspace_bytes(card: str | None = None) -> int:
    """One cuBLAS workspace, as PyTorch sizes it (``parseChosenWorkspaceSize`` in
    ``aten/src/ATen/cuda/CublasHandlePool.cpp``, no ``CUBLAS_WORKSPACE_CONFIG``): 32 MiB on
    compute capability 9.x, 10.x and 12.x, else ``4096 KiB x 2 + 16 KiB x 8``. It comes from the
    caching allocator, so ``max_memory_allocated`` counts it. Unknown card: the smaller one.

    Args:
        card: a shipped card name (``None``: the smaller workspace).

    Returns:
        Bytes of one workspace.
    """
    major = CAPABILITY[card_name(card)][0] if card else 8
    return 4096 * 8 * 1024 if major in (9, 10, 12) else 4096 * 1024 * 2 + 16 * 1024 * 8


def cublas_workspaces(card: str | None = None) -> int:
    """The workspaces a training step holds: the map of workspaces is per thread
    (``cublas_stream_to_workspace`` is ``thread_local``), and autograd runs the backward (and
    a checkpointed layer's recomputation) on its own device thread: two of them, on one stream.
    On the fitcheck-llm T4 rows this is the constant 16.25 MiB between the allocated peak and
    the tensors of the step.

    Args:
        card: a shipped card name (``None``: the smaller workspace).

    Returns:
        Bytes of both workspaces.
    """
    return 2 * cublas_workspace_bytes(card)


def reserved_bytes(peak_allocated: int, attn_impl: str) -> int:
    """The caching allocator's reserve at the peak (``max_memory_reserved``): the allocated
    peak times the measured ratio for the attention backend (module docstring).

    Args:
        peak_allocated: the allocated peak in bytes.
        attn_impl: the attention backend.

    Returns:
        The reserved bytes.
    """
    return int(peak_allocated * RESERVE.get(attn_impl, RESERVE["eager"]))


def device_bytes(peak_allocated: int, attn_impl: str, card: str | None = None) -> int:
    """What the device shows at the peak: the allocator's reserve over the allocated peak,
    plus the CUDA context (module docstring for each figure's source).

    Args:
        peak_allocated: the allocated peak in bytes.
        attn_impl: the attention backend.
        card: a shipped card name, for its measured context (``None``: the T4's).

    Returns:
        Bytes on the device: the reserve plus the CUDA context.
    """
    context = CONTEXT.get(card or "", DEFAULT_CONTEXT)
    return reserved_bytes(peak_allocated, attn_impl) + context
