"""predict_hf_step beside the meter on tiny copies of every supported Hugging Face family.

    python benchmarks/hf_memory.py                 # CPU: exact counted bytes
    python benchmarks/hf_memory.py --quick         # 4 shapes per variant instead of 8
    python benchmarks/hf_memory.py --device cuda   # GPU: the CUDA allocator's peak (bench-gpu)

One row per (family, dtype, attention, LoRA, checkpointing, shape): measured peak, predicted
peak, their error and where the prediction puts the peak; then the worst error per family and per
setting. On a GPU each row also shows the exact count beside the allocator's peak: the prediction
follows the CPU's kernels (CUDA's flash attention keeps a little more, cuBLAS a workspace), so
read the GPU's column as "how far the CPU-exact model is from a real card". Without CUDA,
``--device cuda`` says so and exits 0. Needs the hf extra (transformers, peft).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
import time

import torch

from course_lib.hf.arch import SUPPORTED_MODEL_TYPES
from course_lib.hf.predict import CHECKED_WITH
from course_lib.memory import format_bytes
from course_lib.memory.hf_check import compare_hf, tiny_hf_config

SHAPES = [(1, 16), (2, 32), (4, 24), (1, 128), (3, 40), (2, 96), (6, 12), (1, 200)]
SETTINGS = list(
    itertools.product(("float32", "bfloat16"), ("eager", "sdpa"), (None, 8), ("off", "blocks"))
)


def run(device: str, shapes, families) -> list:
    rows = []
    for family in families:
        config = tiny_hf_config(family)
        for dtype, attn, lora, ckpt in SETTINGS:
            try:
                rows += compare_hf(
                    config, shapes, dtype=getattr(torch, dtype), attn_impl=attn,
                    lora_rank=lora, checkpointing=ckpt, device=device,
                )  # fmt: skip
            except ValueError as refused:  # e.g. Gemma 2 with sdpa: said, not measured
                print(f"{family} {dtype} {attn}: {refused}")
    return rows


def print_rows(rows, gpu: bool) -> None:
    head = f"{'family':<8} {'setting':<44} {'shape':>8} {'measured':>10} {'predicted':>10} "
    head += f"{'error':>8}  peak at"
    print(head + ("  (counted)" if gpu else ""))
    for r in rows:
        line = (
            f"{r.model_type:<8} {r.label:<44} {f'{r.batch_size}x{r.seq_len}':>8} "
            f"{format_bytes(r.measured):>10} {format_bytes(r.predicted):>10} {r.error:>+8.2%}  "
            f"{r.peak_at}"
        )
        print(line + (f"  ({r.predicted / r.counted - 1:+.2%} of counted)" if gpu else ""))


def print_worst(rows) -> None:
    print("\nworst |error| per family and setting:")
    for family in sorted({r.model_type for r in rows}):
        mine = [r for r in rows if r.model_type == family]
        parts = {
            "fp32": [r for r in mine if r.dtype == "float32"],
            "bf16": [r for r in mine if r.dtype == "bfloat16"],
            "eager": [r for r in mine if r.attn_impl == "eager"],
            "sdpa": [r for r in mine if r.attn_impl == "sdpa"],
            "LoRA": [r for r in mine if r.lora_rank],
            "checkpointing": [r for r in mine if r.checkpointing == "blocks"],
        }
        worst = {k: max(abs(r.error) for r in v) for k, v in parts.items() if v}
        cells = "  ".join(f"{k} {v:.3%}" for k, v in worst.items())
        print(
            f"  {family:<8} all {max(abs(r.error) for r in mine):.3%}  {cells}  ({len(mine)} steps)"
        )
    off = max(abs(r.predicted - r.measured) for r in rows)
    print(f"worst overall: {max(abs(r.error) for r in rows):.3%} over {len(rows)} steps "
          f"(largest difference: {off:,} bytes)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="4 shapes per setting")
    parser.add_argument("--families", default=",".join(SUPPORTED_MODEL_TYPES))
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: the GPU comparison needs one (make bench-gpu on a GPU box)")
        return 0
    for name in ("transformers", "peft"):
        if importlib.util.find_spec(name) is None:
            print(f"{name} is not installed: pip install -e '.[hf]'")
            return 0
    import transformers

    torch.set_num_threads(1 if args.device == "cpu" else torch.get_num_threads())
    shapes = SHAPES[::2] if args.quick else SHAPES
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {args.device}; "
          f"recipes read from {CHECKED_WITH}\n")  # fmt: skip
    start = time.perf_counter()
    rows = run(args.device, shapes, args.families.split(","))
    print_rows(rows, gpu=args.device != "cpu")
    print_worst(rows)
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
