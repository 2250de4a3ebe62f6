"""Predicted vs measured peak memory of one TinyGPT training step, eager and sdpa.

    python benchmarks/memory_model.py            # CPU: exact counted bytes
    python benchmarks/memory_model.py --device cuda   # what benchmarks/gpu_memory.py runs

Prints one row per (path, shape): measured peak, predicted peak, their ratio, and where the
model says the peak happens; then the worst ratio. The test suite asserts 3% on the CPU.
"""

from __future__ import annotations

import argparse
import time

import torch

from course_lib.memory import activation_bytes, compare_shapes, format_bytes
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


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    cfg = TinyGPTConfig(
        d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers, max_seq_len=2048
    )
    start = time.perf_counter()
    rows = compare_shapes(cfg, SHAPES, device=args.device, progress=True)
    elapsed = time.perf_counter() - start
    print(
        f"\nTinyGPT d_model={cfg.d_model} n_heads={cfg.n_heads} n_layers={cfg.n_layers}, "
        f"fp32, device={args.device}, method: {rows[0].method}"
    )
    print(
        f"{'path':6} {'shape':>11} {'tokens':>7} {'measured':>11} {'predicted':>11} "
        f"{'pred/meas':>9}  peak at"
    )
    for r in rows:
        at = activation_bytes(
            TinyGPTConfig(**{**cfg.__dict__, "attn_impl": r.attn_impl}), r.batch_size, r.seq_len
        ).peak_at
        print(
            f"{r.attn_impl:6} {r.batch_size:>4} × {r.seq_len:<4} {r.tokens:>7} "
            f"{format_bytes(r.measured_bytes):>11} {format_bytes(r.predicted_bytes):>11} "
            f"{r.ratio:>9.5f}  {at}"
        )
    worst = max(abs(r.ratio - 1) for r in rows)
    eager = {(r.batch_size, r.seq_len): r for r in rows if r.attn_impl == "eager"}
    sdpa = {(r.batch_size, r.seq_len): r for r in rows if r.attn_impl == "sdpa"}
    print(f"\n{len(rows)} measurements in {elapsed:.1f} s; worst |pred/meas - 1| = {worst:.5%}")
    a, b = (32, 64), (2, 1024)
    if a in eager and b in eager:
        e = eager[b].measured_bytes / eager[a].measured_bytes
        s = sdpa[b].measured_bytes / sdpa[a].measured_bytes
        print(f"same 2,048 tokens, 2×1024 vs 32×64: eager peak {e:.2f}×, sdpa peak {s:.2f}×")
    return worst


if __name__ == "__main__":
    main()
