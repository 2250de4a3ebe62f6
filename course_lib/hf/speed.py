"""The time a training step takes on a card, from the operations the recorded step runs.

The step's record counts what it computes and what it writes
(:meth:`course_lib.hf.tape.Tape.count`): every matmul (``2 x N x in x out`` for the forward, as
much again for each gradient the backward makes), FlashAttention's and sdpa's fused attention
(``4 x B x H x T**2 x d`` over the causal half; 2.5 times that in the backward), eager
attention's two batched matmuls, a checkpointed block's forward again (``recompute``), each in
the element size it runs in (an fp32 head after kbit preparation runs at the card's fp32 rate:
PyTorch does not use TF32 for matmuls unless told to); and every byte of every tensor the step
makes, forward and backward (a 4-bit weight's dequantised copy included): the traffic of the
memory-bound kernels (norms, activations, casts, the loss over the logits, dequantisation).

:func:`step_seconds` is a roofline with two stated constants: the operations over the card's
published dense peak for their dtype at :data:`MATMUL_UTILISATION` of it, plus
:data:`TRAFFIC` bytes moved per byte written over the card's published bandwidth, per
micro-batch; and, once per optimiser step, AdamW's read and write of every trained parameter's
weight, gradient and two moments. Both constants were fitted (least squares on the relative
error) to this repository's first pass of H200 runs (``benchmarks/measured_peaks.json``, 15
fixed-length runs: calibration rows) and are assumed to carry to the other cards;
``benchmarks/planner_throughput.py`` refits them, prints calibration rows apart from held-out
ones (the second H200 pass, published A100 and H100 throughputs) and fails if the constants
here are not what the calibration rows give. Left out: communication between devices, the
data loader, kernel-launch gaps of tiny steps, ``torch.compile`` and fused kernels (Liger).

``CARD_SPEED``: dense peak (TFLOPS) for 16-bit tensor-core matmuls and for fp32, and memory
bandwidth (GB/s), each from the card's published datasheet (:data:`SPEED_SOURCES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .cards import card_name

TERA, GIGA = 10**12, 10**9
# card -> (16-bit dense TFLOPS, fp32 TFLOPS, memory GB/s)
CARD_SPEED = {
    "T4": (65.0, 8.1, 320.0),
    "L4": (121.0, 30.3, 300.0),
    "A10G": (125.0, 31.2, 600.0),
    "RTX 4090": (165.2, 82.6, 1008.0),
    "A100 40GB": (312.0, 19.5, 1555.0),
    "A100 80GB": (312.0, 19.5, 2039.0),
    "H100 80GB": (989.4, 66.9, 3350.0),
    "H200": (989.4, 66.9, 4800.0),
}
SPEED_SOURCES = {
    "T4": "NVIDIA T4 datasheet: 65 TFLOPS fp16 (mixed precision), 8.1 fp32, 320 GB/s; no bf16 "
    "tensor cores: bf16 matmuls take the fp32 rate here",
    "L4": "NVIDIA L4 datasheet: 242 TFLOPS bf16 with sparsity (121 dense), 30.3 fp32, 300 GB/s",
    "A10G": "NVIDIA A10 datasheet (125 TFLOPS bf16 dense, 31.2 fp32, 600 GB/s); the A10G is "
    "AWS's variant, whose own figures NVIDIA does not publish",
    "RTX 4090": "NVIDIA Ada Lovelace architecture whitepaper, appendix: 165.2 TFLOPS fp16/bf16 "
    "with fp32 accumulation (dense), 82.6 fp32, 1008 GB/s",
    "A100 40GB": "NVIDIA A100 datasheet: 312 TFLOPS bf16 dense (624 with sparsity), 19.5 fp32, "
    "1,555 GB/s",
    "A100 80GB": "NVIDIA A100 datasheet: 312 TFLOPS bf16 dense, 19.5 fp32, 2,039 GB/s (SXM; the "
    "PCIe card 1,935)",
    "H100 80GB": "NVIDIA H100 datasheet (SXM): 1,979 TFLOPS bf16 with sparsity (989.4 dense), "
    "66.9 fp32, 3.35 TB/s",
    "H200": "NVIDIA H200 datasheet: 1,979 TFLOPS bf16 with sparsity (989.4 dense), 66.9 fp32, "
    "4.8 TB/s",
}
MATMUL_UTILISATION = 0.74  # the share of the dense peak the step's matmuls reach (fitted)
TRAFFIC = 4.1  # bytes through memory per byte the step writes (fitted)
ADAMW_BYTES = 7  # per byte of a trained element: AdamW reads w, g, m, v and writes w, m, v


@dataclass(frozen=True)
class StepTime:
    """Seconds of one optimiser step on one device: ``compute`` (the micro-batches' matmuls and
    attention, every accumulation step), ``memory`` (their memory-bound kernels), ``optimizer``
    (AdamW's pass over the states), their ``total``; and the operations of the whole step by
    phase (``flops``: forward, backward, recompute)."""

    compute: float
    memory: float
    optimizer: float
    flops: dict[str, float]

    @property
    def total(self) -> float:
        """Seconds of one optimiser step."""
        return self.compute + self.memory + self.optimizer


def step_seconds(
    counts: dict[str, float], card: str, accumulation: int = 1, trained_bytes: int = 0,
    utilisation: float = MATMUL_UTILISATION, dtype: str = "bfloat16",
) -> StepTime:  # fmt: skip
    """The time of one optimiser step of ``accumulation`` micro-batches (module docstring).

    Args:
        counts: one micro-batch's counts (:attr:`HFStepBreakdown.flops`): ``"phase@2"``
            16-bit operations, ``"phase@4"`` fp32 ones, ``"phase@written"`` bytes written.
        card: a shipped card's name.
        accumulation: micro-batches per optimiser step.
        trained_bytes: bytes of the trained parameters on this device.
        utilisation: the share of the dense peak the matmuls reach.
        dtype: the model's 16-bit dtype (a T4 has no bf16 tensor cores).

    Returns:
        The :class:`StepTime`.

    Raises:
        ValueError: a card without published figures, or a utilisation outside (0, 1].
    """
    name = card_name(card)
    if name not in CARD_SPEED:
        raise ValueError(f"no published peak for {card!r}: one of {', '.join(CARD_SPEED)}")
    if not 0 < float(utilisation) <= 1:
        raise ValueError(f"utilisation={utilisation!r} must be in (0, 1]: the share of the peak")
    half, single, bandwidth = CARD_SPEED[name]
    if name == "T4" and dtype == "bfloat16":
        half = single
    rate = {"1": half, "2": half, "4": single}
    flops: dict[str, float] = {}
    compute = written = 0.0
    for key, n in counts.items():
        phase, kind = key.split("@")
        if kind == "written":
            written += n
        else:
            compute += n / (rate[kind] * TERA * utilisation)
            flops[phase] = flops.get(phase, 0.0) + n * accumulation
    memory = TRAFFIC * written / (bandwidth * GIGA)
    return StepTime(compute * accumulation, memory * accumulation,
                    ADAMW_BYTES * trained_bytes / (bandwidth * GIGA), flops)  # fmt: skip
