"""Activation checkpointing: peak memory and step time, with and without, at several depths.

    python benchmarks/checkpointing.py                  # CPU: counted bytes, sdpa, 2/4/8 blocks
    python benchmarks/checkpointing.py --attn eager     # materialised scores: a larger cut
    python benchmarks/checkpointing.py --device cuda    # GPU: allocator peaks, synchronised times

One row per (depth, mode): the measured peak of one training step beside the prediction of
``memory.activation_bytes`` and where it says the peak happens; plain / checkpointed peak; and
the forward + backward step time of both, timed in one interleaved run (median of the paired
ratios). The deepest model is also run with selective checkpointing (attention only, every
second block). The last line checks the course's target for whole-block checkpointing: on >= 4
blocks, the peak at least 2.5x lower for at most 1.35x the step time (a common rule of thumb puts
the cost at roughly 30 % more compute).

The default model (d_model 128, 4 heads, 4 x 512 tokens) is chosen so that activations dominate,
as in fine-tuning: one block keeps ~9 KiB per token for backward (about 19 MiB at 2,048 tokens)
while its weights' gradients are 0.75 MiB. With a tiny model the gradients would dominate and
checkpointing would have little to cut.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch

from course_lib.checkpointing import time_checkpointing
from course_lib.memory import compare_checkpointing, format_bytes, mode_label
from course_lib.model import TinyGPTConfig

TARGET_PEAK_CUT = 2.5
TARGET_TIME_RATIO = 1.35


def main(argv=None) -> bool:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--depths", default="2,4,8", help="comma-separated block counts")
    parser.add_argument("--repeats", type=int, default=9, help="timed pairs per comparison")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda asked for, but torch.cuda.is_available() is False")
    if args.threads:
        torch.set_num_threads(args.threads)
    depths = [int(d) for d in args.depths.split(",")]
    B, T = args.batch_size, args.seq_len
    base = TinyGPTConfig(
        d_model=args.d_model, n_heads=args.n_heads, max_seq_len=T, attn_impl=args.attn
    )
    plans = [(L, "blocks", 1) for L in depths]
    plans += [(max(depths), "attention", 1), (max(depths), "blocks", 2)]

    start = time.perf_counter()
    results = []
    for L, mode, every in plans:
        cfg = replace(base, n_layers=L, checkpoint_every=every)
        plain, ckpt = compare_checkpointing(cfg, [(B, T)], modes=("off", mode), device=args.device)
        times = time_checkpointing(
            cfg, B, T, checkpointing=mode, repeats=args.repeats, device=args.device
        )
        results.append((L, mode, every, plain, ckpt, times))
        print(f"  {L} blocks, {mode_label(mode, every):12} {times.summary()}", flush=True)
    elapsed = time.perf_counter() - start

    first = results[0][3]
    print(
        f"\nTinyGPT d_model={args.d_model} n_heads={args.n_heads}, {args.attn}, fp32, "
        f"{B} × {T} = {B * T:,} tokens, device={args.device}, method: {first.method}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    header = (
        f"{'blocks':>6} {'mode':12} {'measured':>10} {'predicted':>10} {'pred/meas':>9} "
        f"{'peak at':22} {'peak cut':>8} {'plain ms':>9} {'ckpt ms':>8} {'time ×':>6}"
    )
    print(header)
    print("-" * len(header))
    passed = True
    for L, mode, every, plain, ckpt, times in results:
        if mode == "blocks" and every == 1:
            print(
                f"{L:>6} {'plain':12} {format_bytes(plain.measured_bytes):>10} "
                f"{format_bytes(plain.predicted_bytes):>10} {plain.ratio:>9.5f} "
                f"{plain.peak_at:22}"
            )
        cut = plain.measured_bytes / ckpt.measured_bytes
        print(
            f"{L:>6} {mode_label(mode, every):12} {format_bytes(ckpt.measured_bytes):>10} "
            f"{format_bytes(ckpt.predicted_bytes):>10} {ckpt.ratio:>9.5f} {ckpt.peak_at:22} "
            f"{cut:>7.2f}× {1e3 * times.off_median:>9.1f} "
            f"{1e3 * times.checkpointed_median:>8.1f} {times.ratio:>6.2f}"
        )
        if mode == "blocks" and every == 1 and L >= 4:
            passed &= cut >= TARGET_PEAK_CUT and times.ratio <= TARGET_TIME_RATIO
    worst = max(abs(r.ratio - 1) for res in results for r in res[3:5])
    print(
        f"\n{2 * len(results)} peaks measured and {len(results)} timings in {elapsed:.0f} s; "
        f"worst |pred/meas - 1| = {worst:.5%}"
    )
    verdict = "met" if passed else "NOT met"
    print(
        f"course target (>= 4 blocks, whole blocks): peak >= {TARGET_PEAK_CUT}× lower at <= "
        f"{TARGET_TIME_RATIO}× step time: {verdict}"
    )
    return passed


if __name__ == "__main__":
    main()
