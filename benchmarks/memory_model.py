"""Predicted vs measured peak memory of one TinyGPT training step, eager and sdpa.

    python benchmarks/memory_model.py                    # CPU: exact counted bytes, fp32
    python benchmarks/memory_model.py --dtype bfloat16   # the same in bf16
    python benchmarks/memory_model.py --device cuda      # GPU: allocator peak (make bench-gpu)

Prints one row per (path, shape): measured peak, predicted peak, their ratio, and where the
model says the peak happens; then the worst ratio. On a GPU each row also shows the exact count
beside the allocator's peak, so the allocator's rounding and workspaces show up as their ratio.
The test suite asserts 3 % on the CPU. Without CUDA, ``--device cuda`` says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from course_lib.memory import compare_shapes, format_bytes
from course_lib.model import TinyGPTConfig

SHAPES = [
    (32, 64),
    (16, 128),
    (8, 256),
    (4, 512),
    (2, 1024),
    (1, 2048),
    (8, 64),
    (4, 128),
    (2, 256),
    (1, 512),
    (3, 300),
    (6, 100),
]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def print_rows(rows, cfg: TinyGPTConfig, args, elapsed: float) -> float:
    gpu = rows[0].method.startswith("GPU")
    print(
        f"\nTinyGPT d_model={cfg.d_model} n_heads={cfg.n_heads} n_layers={cfg.n_layers}, "
        f"{args.dtype}, device={args.device}, method: {rows[0].method}"
    )
    extra = f" {'counted':>11} {'alloc/count':>11}" if gpu else ""
    print(
        f"{'path':6} {'shape':>11} {'tokens':>7} {'measured':>11} {'predicted':>11} "
        f"{'pred/meas':>9}{extra}  peak at"
    )
    for r in rows:
        extra = (
            f" {format_bytes(r.counted_bytes):>11} {r.measured_bytes / r.counted_bytes:>11.4f}"
            if gpu
            else ""
        )
        print(
            f"{r.attn_impl:6} {r.batch_size:>4} × {r.seq_len:<4} {r.tokens:>7} "
            f"{format_bytes(r.measured_bytes):>11} {format_bytes(r.predicted_bytes):>11} "
            f"{r.ratio:>9.5f}{extra}  {r.peak_at}"
        )
    worst = max(abs(r.ratio - 1) for r in rows)
    print(f"\n{len(rows)} measurements in {elapsed:.1f} s; worst |pred/meas - 1| = {worst:.5%}")
    eager = {(r.batch_size, r.seq_len): r for r in rows if r.attn_impl == "eager"}
    sdpa = {(r.batch_size, r.seq_len): r for r in rows if r.attn_impl == "sdpa"}
    a, b = (32, 64), (2, 1024)
    if a in eager and b in eager and a in sdpa and b in sdpa:
        e = eager[b].measured_bytes / eager[a].measured_bytes
        s = sdpa[b].measured_bytes / sdpa[a].measured_bytes
        print(f"same 2,048 tokens, 2×1024 vs 32×64: eager peak {e:.2f}×, sdpa peak {s:.2f}×")
    return worst


def main(argv=None) -> float | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: the GPU comparison needs one (the CPU run is the default)")
        return None
    if args.device.startswith("cuda"):
        print(f"GPU: {torch.cuda.get_device_name()} torch {torch.__version__}")
    cfg = TinyGPTConfig(
        d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers, max_seq_len=2048
    )
    start = time.perf_counter()
    rows = compare_shapes(cfg, SHAPES, device=args.device, progress=True, dtype=DTYPES[args.dtype])
    return print_rows(rows, cfg, args, time.perf_counter() - start)


if __name__ == "__main__":
    main()
    sys.exit(0)
