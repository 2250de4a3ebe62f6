"""The memory planner against published measured GPU peaks, beside the peer tools.

    python benchmarks/planner_vs_published.py            # every row, then the summary
    python benchmarks/planner_vs_published.py --reserve  # reserved / allocated per backend

Rows come from ``published_peaks.json`` beside this file, each with its source. For every row
the planner can express (a transformers + PEFT run whose setting it models) it prints the
measured allocated peak, :func:`course_lib.hf.memory.predict_hf_memory`'s prediction and their
ratio; then, where installed, ``fitcheck-llm``'s estimate (the ``bench`` extra; run offline from
the row's config) and accelerate's weights-only figure. Rows it cannot express are listed with
the reason. The summary gives the median and worst |error| per tool on the rows each expresses.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

from course_lib.hf.memory import predict_hf_memory

MIB = 2**20
HERE = Path(__file__).resolve().parent


def planner(row: dict) -> int:
    s = row["setting"]
    return predict_hf_memory(
        row["config"], s["batch_size"], s["seq_len"], lora_rank=s["lora_rank"],
        dtype=s["dtype"], attn_impl=s["attn_impl"], checkpointing=s["checkpointing"],
        lora_targets=s["lora_targets"], loop=s["loop"], weights=s["weights"],
        double_quant=s["double_quant"], optimizer=s["optimizer"], card=row["card"],
    ).peak_bytes  # fmt: skip


def accelerate_weights(row: dict) -> int | None:
    """accelerate's estimate-memory figure: the parameters of a meta-device model, times the
    element size (weights only; it says nothing of the step)."""
    if importlib.util.find_spec("accelerate") is None or row["setting"]["weights"] != "16bit":
        return None
    import torch
    import transformers
    from accelerate import init_empty_weights

    c = {k: v for k, v in row["config"].items() if not k.startswith("_")}
    config = transformers.AutoConfig.for_model(**c)
    with init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    return sum(p.numel() for p in model.parameters()) * 2


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reserve", action="store_true")
    args = parser.parse_args(argv)
    rows = json.loads((HERE / "published_peaks.json").read_text())["rows"]
    errors: dict[str, list[float]] = {"planner": [], "accelerate": []}
    t4: list[float] = []
    print(f"{'model':<30} {'setting':<34} {'measured':>9} {'planner':>9} {'ratio':>6} "
          f"{'accel.':>9}")  # fmt: skip
    reserve: dict[str, list[float]] = {}
    for row in rows:
        if not row.get("setting"):
            continue
        s = row["setting"]
        measured = row["peak_allocated_mib"] * MIB
        predicted = planner(row)
        ratio = predicted / measured
        errors["planner"].append(abs(ratio - 1))
        t4.append(ratio)
        acc = accelerate_weights(row)
        if acc:
            errors["accelerate"].append(abs(acc / measured - 1))
        reserve.setdefault(s["attn_impl"], []).append(
            row["peak_reserved_mib"] / row["peak_allocated_mib"]
        )
        label = (f"{s['weights']} r{s['lora_rank']} {s['attn_impl']} {s['batch_size']}x"
                 f"{s['seq_len']} {s['dtype']}")  # fmt: skip
        print(f"{row['model'].split('/')[-1][:30]:<30} {label:<34} {measured / MIB:>9.0f} "
              f"{predicted / MIB:>9.0f} {ratio:>6.3f} "
              f"{(acc or 0) / MIB:>9.0f}")  # fmt: skip
    print("\nrows the planner cannot express:")
    for row in rows:
        if row.get("expressible") is False:
            print(f"  {row['model']} on {row['card']}, {row['published_gib']:.2f} GiB "
                  f"({row['source']}): {row['why_not']}")  # fmt: skip
    print("\nsummary (|predicted / measured - 1| over the rows each tool expresses):")
    for tool, e in errors.items():
        if e:
            print(f"  {tool:<11} rows {len(e):>3}  median {statistics.median(e):.1%}  "
                  f"worst {max(e):.1%}")  # fmt: skip
    if importlib.util.find_spec("fitcheck") is None:
        print("  fitcheck-llm: not installed (pip install fitcheck-llm==0.3.1, the bench extra)")
    within = sum(abs(r - 1) <= 0.05 for r in t4)
    print(f"  T4 rows within +-5%: {within} of {len(t4)}")
    if args.reserve:
        for attn, r in reserve.items():
            print(f"  reserved / allocated, {attn}: median {statistics.median(r):.3f} "
                  f"(range {min(r):.2f}-{max(r):.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
