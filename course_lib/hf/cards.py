"""From counted tensors to what the card shows: common GPUs, the CUDA context, the reserve.

``CARDS``: each card's memory as PyTorch reports it
(``torch.cuda.get_device_properties(0).total_memory``, the driver's ``totalGlobalMem``, which
``deviceQuery`` prints too), not the marketing size: a "24 GB" L4 reports 22.0 GiB, a "16 GB"
T4 14.75 GiB with ECC on. Each figure is a published print-out, its source in ``CARD_SOURCES``
(MiB figures are torch's ``MB``, ``total_memory // 2**20``: up to 1 MiB low).

What the card must hold is a band, not a point (:func:`device_band`): the allocated peak (the
tensors, a point prediction) plus the caching allocator's reserve over the part of it that
fragments, plus the CUDA context.

* The reserve multiplies what fragments, not what persists: the weights and adapters are
  allocated once, at load, and the optimiser's state once, at the first step, each in blocks of
  its own that are never freed (the state: an assumption, no run measured it apart).
  ``RESERVE`` holds ``(low, high)`` ratios of reserved to allocated bytes over the rest (the
  step's gradients, activations, logits and temporaries) by workload kind and allocator; low is
  the typical run (the median), high the worst one measured, and a plan fits at the high end.
  ``fixed`` (every row ``seq_len`` tokens, the default allocator): the 69 fitcheck-llm 0.3.1 T4
  rows in ``benchmarks/published_peaks.json`` (fp16, LoRA r32, checkpointing), each as
  ``(reserved - persistent) / (allocated - persistent)`` with those counted here: sdpa median
  1.181 and highest 1.461 (35 rows), eager 1.391 and 1.627 (34 rows: the ``seq_len**2`` score
  blocks), rounded up to 0.01 (``tests/library/test_hf_states.py`` recomputes them). Flash
  takes sdpa's (neither keeps a score block; not measured).
  ``varying`` (padding-free micro-batches: every step another shape): the Hugging Face Trainer
  FSDP runs on 4x A100 collected for issue 26 measured reserved / allocated of 1.17 to 1.70 over
  the whole peak; over the part that fragments it is at least that, so 1.17 to 1.70 is a floor.
  ``packing`` (packed rows: one shape, documents of varying length inside): no packed run
  published both figures; it takes ``varying``'s, the cautious side.
  ``expandable`` (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, any workload): segments
  grow in place instead of leaving holes; torchtune issue 1185 measured 10.8 GiB reserved with it
  against 16.4 GiB with the default allocator on the same QLoRA run (0.66x). No published run
  gives reserved / allocated with it: 1.00 to 1.10 is assumed, and said so in the plan.
* The CUDA context (``CONTEXT``, ``(low, high)`` bytes per card): memory the process holds
  outside the allocator (the driver, kernel images, cuBLAS and cuDNN handles). T4: 140.875 MiB
  on every fitcheck-llm T4 row (torch 2.14, CUDA 13), measured. Other cards, with CUDA's lazy
  module loading (the default on Linux since CUDA 12.2): 256 MiB for a bare context (an RTX 3090,
  torch 2.7.1+cu128: InvokeAI issue 9413) to about 400 MiB (PyTorch's ptrblck, pytorch issue
  109888, CUDA 11.7 and newer); with eager loading (CUDA before 11.7, or
  ``CUDA_MODULE_LOADING=EAGER``) it was over 1,000 MiB (pytorch issue 107667), not planned here.
  Hopper (H100, H200): 750.8 to 770.8 MiB, measured by this repository after full training
  steps on an H200 (torch 2.11+cu130, driver 580, lazy loading: ``benchmarks/gpu_held_out.py``,
  the first pass's 17 runs in ``benchmarks/measured_peaks.json``, whose device rows are
  therefore calibration for the planner; the second pass's 6 runs held it out at 750.8 to
  768.8 MiB). A training step loads far more kernels than a bare context holds, so the other
  cards' 256 to 400 MiB is probably low by a few hundred MiB; no run on them measured it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

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
T4_CONTEXT = int(140.875 * MIB)
HOPPER_CONTEXT = (int(750.8125 * MIB), int(770.8125 * MIB))  # H200 runs, first pass
CONTEXT = {card: (T4_CONTEXT, T4_CONTEXT) if card == "T4"
           else HOPPER_CONTEXT if CAPABILITY[card] == (9, 0) else (256 * MIB, 400 * MIB)
           for card in CARDS}  # fmt: skip
DEFAULT_CONTEXT = (256 * MIB, 400 * MIB)  # an unnamed card: a current one, lazy loading
WORKLOADS = ("fixed", "varying", "packing")
ALLOCATORS = ("default", "expandable")
_FIXED = {"sdpa": (1.18, 1.47), "flash": (1.18, 1.47), "eager": (1.39, 1.63)}
RESERVE: dict[str, dict[str, tuple[float, float]]] = {
    "fixed": _FIXED,
    "varying": dict.fromkeys(_FIXED, (1.17, 1.70)),
    "packing": dict.fromkeys(_FIXED, (1.17, 1.70)),
    "expandable": dict.fromkeys(_FIXED, (1.00, 1.10)),
}


@dataclass(frozen=True)
class Band:
    """What the card must hold at the peak, both ends (bytes): ``low`` and ``high`` add the
    reserve and the CUDA context at the low and the high end of their measured ranges to the
    allocated peak (module docstring); ``ratio`` and ``context`` are the ``(low, high)``
    figures used, ``fragments`` the allocated bytes the ratio multiplied, ``persistent`` the
    rest of the allocated peak (weights, adapters, optimiser state: taken as they are)."""

    low: int
    high: int
    ratio: tuple[float, float]
    context: tuple[int, int]
    fragments: int
    persistent: int


def reserve_ratio(
    attn_impl: str, workload: str = "fixed", allocator: str = "default"
) -> tuple[float, float]:
    """The ``(low, high)`` reserve ratio over what fragments (module docstring).

    Args:
        attn_impl: ``"sdpa"``, ``"eager"`` or ``"flash"``.
        workload: ``"fixed"``, ``"varying"`` or ``"packing"``.
        allocator: ``"default"`` or ``"expandable"`` (``expandable_segments:True``).

    Returns:
        ``(low, high)``.

    Raises:
        ValueError: an unknown workload or allocator.
    """
    if workload not in WORKLOADS or allocator not in ALLOCATORS:
        raise ValueError(f"workload must be one of {WORKLOADS} and allocator one of "
                         f"{ALLOCATORS}, got {workload!r}, {allocator!r}")  # fmt: skip
    table = RESERVE["expandable" if allocator == "expandable" else workload]
    return table.get(attn_impl, table["eager"])


def device_band(
    peak_allocated: int, persistent: int, attn_impl: str, card: str | None = None,
    workload: str = "fixed", allocator: str = "default",
) -> Band:  # fmt: skip
    """What the device must hold at the peak: what persists as it is, the rest of the
    allocated peak times the reserve ratio, plus the CUDA context; at both ends of the band.

    Args:
        peak_allocated: the allocated peak in bytes.
        persistent: the part of it that does not fragment (weights, adapters, the optimiser's
            state), in bytes.
        attn_impl: the attention backend.
        card: a shipped card name, for its context (``None``: a current card's).
        workload: ``"fixed"``, ``"varying"`` or ``"packing"``.
        allocator: ``"default"`` or ``"expandable"``.

    Returns:
        The :class:`Band`.
    """
    ratio = reserve_ratio(attn_impl, workload, allocator)
    context = CONTEXT.get(card_name(card), DEFAULT_CONTEXT) if card else DEFAULT_CONTEXT
    rest = max(0, peak_allocated - persistent)
    low, high = (peak_allocated - rest + int(rest * r) + c for r, c in zip(ratio, context))
    return Band(low, high, ratio, context, rest, peak_allocated - rest)


def _card_key(name: str) -> str:
    """A card's name without case, spaces, dashes, underscores or a vendor's prefix."""
    key = "".join(ch for ch in name.lower() if ch not in " -_")
    for prefix in ("nvidia", "tesla", "geforce"):
        key = key.removeprefix(prefix)
    return key


def card_name(name: str) -> str:
    """A shipped card's name as :data:`CARDS` spells it, read as people type it: case, spaces,
    dashes and a vendor prefix ignored (``"a100-80gb"``, ``"NVIDIA H100"``, ``"rtx4090"``); a
    name that starts only one card's name is that card (``"H100"``), one that starts several
    asks which (``"A100"``: 40GB or 80GB).

    Args:
        name: a card's name, as typed.

    Returns:
        The name as :data:`CARDS` spells it.

    Raises:
        ValueError: a name that starts several cards' names (listing them), or one that is
            not shipped (listing the closest, then every shipped card).
    """
    key = _card_key(name)
    keys = {_card_key(card): card for card in CARDS}
    if key in keys:
        return keys[key]
    starts = [card for k, card in keys.items() if key and k.startswith(key)]
    if len(starts) == 1:
        return starts[0]
    if starts:
        memories = ", ".join(f"{c!r} ({CARDS[c] / GIB:.1f} GiB)" for c in starts)
        spelt = starts[0].replace(" ", "-")
        raise ValueError(f"which {name}? {memories}: say which (--gpu {spelt}), or give the "
                         "memory")  # fmt: skip
    close = difflib.get_close_matches(key, list(keys), n=3, cutoff=0.4)
    hint = f"closest: {', '.join(keys[k] for k in close)}; " if close else ""
    raise ValueError(f"unknown card {name!r}: {hint}one of {', '.join(CARDS)}, or give the memory")


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
