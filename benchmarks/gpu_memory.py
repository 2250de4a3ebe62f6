"""The memory model against the CUDA caching allocator (run on a machine with a GPU).

    python benchmarks/gpu_memory.py

Runs benchmarks/memory_model.py's shapes on ``cuda`` (allocator peak above the starting point,
``torch.cuda.max_memory_allocated``) and, for the same steps, the exact counted bytes, so the
allocator's rounding and workspace show up as the difference between the two. Exits with a clear
message (status 0) on a machine without CUDA.
"""

from __future__ import annotations

import sys

import torch

from course_lib.memory import format_bytes, measure_step
from course_lib.model import TinyGPT, TinyGPTConfig

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from memory_model import SHAPES, main  # noqa: E402


def counted_vs_allocator() -> None:
    cfg = TinyGPTConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=2048)
    print(f"\n{'path':6} {'shape':>11} {'allocator':>11} {'counted':>11} {'alloc/counted':>13}")
    for impl in ("eager", "sdpa"):
        torch.manual_seed(0)
        model = TinyGPT(TinyGPTConfig(**{**cfg.__dict__, "attn_impl": impl})).cuda()
        for b, t in SHAPES:
            ids = torch.randint(0, cfg.vocab_size, (b, t), device="cuda")
            r = measure_step(model, {"input_ids": ids, "labels": ids}, device="cuda")
            print(
                f"{impl:6} {b:>4} × {t:<4} {format_bytes(r.peak_bytes):>11} "
                f"{format_bytes(r.counted_peak_bytes):>11} "
                f"{r.peak_bytes / r.counted_peak_bytes:>13.4f}"
            )


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print(
            "no CUDA device here: this benchmark needs a GPU (the CPU figures come from "
            "benchmarks/memory_model.py)"
        )
        sys.exit(0)
    print(f"GPU: {torch.cuda.get_device_name()} torch {torch.__version__}")
    main(["--device", "cuda"])
    counted_vs_allocator()
