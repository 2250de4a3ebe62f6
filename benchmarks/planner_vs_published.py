"""The memory planner against published measured GPU peaks, beside the peer tools.

    python benchmarks/planner_vs_published.py            # every row, then the summaries
    python benchmarks/planner_vs_published.py --reserve  # also reserved / allocated per backend

Rows come from ``published_peaks.json`` beside this file, each with its source, the card, the
setting and what was measured (``measured_kind``: ``allocated`` = ``max_memory_allocated``,
``reserved`` = ``max_memory_reserved``, ``device`` = what the process holds, as nvidia-smi
shows it; ``capacity`` = the card's memory, for the longest run that still fit it). For every
row the planner expresses it prints, side by side:

* the planner: :func:`course_lib.hf.memory.predict_hf_memory`, its ``peak_bytes`` against an
  allocated figure, its ``reserved_bytes`` against a reserved one, its ``device_bytes``
  against a process / nvidia-smi one and against a card's capacity;
* ``fitcheck-llm`` 0.3.1 (the ``bench`` extra), run offline: its ``estimate()`` from a
  ``ModelConfig`` built here (the one embedded in each fitcheck row; else fitcheck's own
  ``config.json`` parser and parameter formula on the row's config, since its
  ``fetch_model_config`` needs the Hub), compared tier by tier as its own ``measure.py``
  does: ``total - overhead`` with allocated, ``total - 500 MiB`` with reserved, ``total``
  with a process figure;
* accelerate's ``estimate-memory`` figure (weights only, for 16-bit rows).

Rows the planner cannot express are listed with the reason. The summaries give the median and
worst |predicted / measured - 1| per tool over the rows each expresses, and on the rows both
the planner and each peer express.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

from course_lib.hf.cards import CARDS
from course_lib.hf.memory import predict_hf_memory

MIB = 2**20
HERE = Path(__file__).resolve().parent
# course_lib.hf.cards names -> fitcheck.gpu_db keys
FITCHECK_GPU = {"T4": "t4", "L4": "l4", "A10G": "a10", "RTX 4090": "4090", "RTX 3090": "3090",
                "A100 40GB": "a100-40", "A100 80GB": "a100-80", "H100 80GB": "h100",
                "H200": "h200"}  # fmt: skip
FITCHECK_OPTIMIZER = {"adamw": "adamw", "adamw-8bit": "adam8bit", "sgd": "sgd",
                      "sgd-momentum": "sgd-momentum"}  # fmt: skip


def measured_bytes(row: dict) -> tuple[int, str]:
    kind = row.get("measured_kind", "allocated")
    return int(row[f"peak_{kind}_mib"] * MIB), kind


def planner(row: dict) -> int:
    s = row["setting"]
    p = predict_hf_memory(
        row["config"], s["batch_size"], s["seq_len"], lora_rank=s["lora_rank"],
        dtype=s["dtype"], attn_impl=s["attn_impl"], checkpointing=s["checkpointing"],
        lora_targets=s["lora_targets"], loop=s["loop"], weights=s["weights"],
        double_quant=s["double_quant"], optimizer=s["optimizer"],
        card=row["card"] if row["card"] in CARDS else None,
        devices=s.get("devices", 1), sharding=s.get("sharding", "none"),
        loss=s.get("loss", "standard"), kbit_prepare=s.get("kbit_prepare"),
    )  # fmt: skip
    kind = row.get("measured_kind", "allocated")
    return {"allocated": p.peak_bytes, "reserved": p.reserved_bytes, "device": p.device_bytes,
            "capacity": p.device_bytes}[kind]  # fmt: skip


def fitcheck_model_config(row: dict):
    """fitcheck's ModelConfig for the row: the one its own measurement embedded, else its
    config.json parser and parameter formula (what it falls back to without the Hub)."""
    from fitcheck.config_parser import ModelConfig, _count_params, _parse_fields

    if row.get("fitcheck_model_config"):
        return ModelConfig(**row["fitcheck_model_config"]), "embedded"
    fields = _parse_fields(row["config"])
    name = row["model"]
    return ModelConfig(name=name, num_params=_count_params(fields), **vars(fields)), "derived"


def fitcheck(row: dict) -> int | None:
    """fitcheck-llm's figure for the row's measured kind (module docstring), or None where
    its estimator cannot express the setting."""
    if importlib.util.find_spec("fitcheck") is None:
        return None
    from fitcheck.estimator import TrainingConfig, estimate
    from fitcheck.gpu_db import get_gpu

    s = row["setting"]
    if s.get("devices", 1) != 1 or s["optimizer"] not in FITCHECK_OPTIMIZER:
        return None  # single-device only; no mixed / paged optimisers
    if s.get("loss", "standard") != "standard":
        return None
    gpu = (get_gpu(FITCHECK_GPU[row["card"]]) if row["card"] in FITCHECK_GPU
           else get_gpu(row["card"], vram_mib=int(row.get("card_gib", 80) * 1024)))  # fmt: skip
    weights = {"16bit": "none", "nf4": "nf4", "int8": "int8"}[s["weights"]]
    targets = s["lora_targets"] if isinstance(s["lora_targets"], list) else None
    if s["lora_targets"] == "all-linear":
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    if s["lora_rank"] is not None and targets is None:
        return None
    precision = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(
        s["dtype"], s["dtype"]
    )
    # torch.optim.AdamW keeps a full fine-tune's moments in the parameters' dtype
    opt_dtype = "fp32" if s["lora_rank"] is not None or precision == "fp32" else "bf16"
    training = TrainingConfig(
        precision=precision, quantization=weights,
        double_quant=bool(s["double_quant"]) and weights == "nf4",
        optimizer=FITCHECK_OPTIMIZER[s["optimizer"]],
        optimizer_dtype=opt_dtype if s["optimizer"] == "adamw" else "fp32",
        batch_size=s["batch_size"], seq_len=s["seq_len"], lora_rank=s["lora_rank"],
        lora_targets=targets or [], grad_checkpoint=bool(s["checkpointing"]),
        flash_attn=s["attn_impl"] != "eager",
    )  # fmt: skip
    config, _ = fitcheck_model_config(row)
    try:
        report = estimate(config, training, gpu)
    except ValueError:
        return None
    kind = row.get("measured_kind", "allocated")
    mib = {
        "allocated": report.total_mib - report.overhead_mib,
        "reserved": report.total_mib - 500.0,
        "device": report.total_mib,
        "capacity": report.total_mib,
    }[kind]
    return int(mib * MIB)


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


def summary(name: str, errors: list[float]) -> str:
    if not errors:
        return f"  {name:<34} rows   0"
    return (f"  {name:<34} rows {len(errors):>3}  median {statistics.median(errors):6.1%}  "
            f"worst {max(errors):6.1%}")  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reserve", action="store_true")
    args = parser.parse_args(argv)
    rows = json.loads((HERE / "published_peaks.json").read_text())["rows"]
    tools = ("planner", "fitcheck", "accelerate")
    ratios: dict[str, dict[int, float]] = {t: {} for t in tools}
    reserve: dict[str, list[float]] = {}
    print(f"{'model':<26} {'setting':<40} {'kind':<9} {'measured':>8} {'planner':>7} "
          f"{'fitchk':>7} {'accel.':>7}  source")  # fmt: skip
    for i, row in enumerate(rows):
        if not row.get("setting"):
            continue
        s = row["setting"]
        measured, kind = measured_bytes(row)
        cells = {}
        for tool, fn in (("planner", planner), ("fitcheck", fitcheck),
                         ("accelerate", accelerate_weights)):  # fmt: skip
            value = fn(row)
            if value:
                ratios[tool][i] = value / measured
                cells[tool] = f"{value / measured:7.3f}"
            else:
                cells[tool] = f"{'-':>7}"
        if row.get("peak_reserved_mib") and kind == "allocated":
            ratio = row["peak_reserved_mib"] / row["peak_allocated_mib"]
            reserve.setdefault(s["attn_impl"], []).append(ratio)
        lora = f"r{s['lora_rank']}" if s["lora_rank"] else "full"
        dev = f" x{s['devices']} {s['sharding']}" if s.get("devices", 1) > 1 else ""
        label = (f"{s['weights']} {lora} {s['attn_impl']} {s['batch_size']}x{s['seq_len']} "
                 f"{s['dtype']}{dev}")  # fmt: skip
        print(f"{row['model'].split('/')[-1][:26]:<26} {label[:40]:<40} {kind:<9} "
              f"{measured / MIB:>8.0f} {cells['planner']} {cells['fitcheck']} "
              f"{cells['accelerate']}  {row['source'].split(',')[0][:40]}")  # fmt: skip
    print("\nrows the planner cannot express:")
    for row in rows:
        if row.get("expressible") is False:
            print(f"  {row['model']} on {row['card']} ({row['source']}): {row['why_not']}")
    print("\nsummary: |predicted / measured - 1| over the rows each tool expresses")
    for tool in tools:
        print(summary(tool, [abs(r - 1) for r in ratios[tool].values()]))
    print("on the rows both the planner and a peer express:")
    for peer in ("fitcheck", "accelerate"):
        both = sorted(set(ratios["planner"]) & set(ratios[peer]))
        print(summary(f"planner (rows {peer} expresses)", [abs(ratios["planner"][i] - 1)
                                                           for i in both]))  # fmt: skip
        print(summary(peer, [abs(ratios[peer][i] - 1) for i in both]))
    if importlib.util.find_spec("fitcheck") is None:
        print("  fitcheck-llm: not installed (pip install -e '.[bench]')")
    print("by source:")
    for tool in ("planner", "fitcheck"):
        by_source: dict[str, list[float]] = {}
        for i, r in ratios[tool].items():
            key = rows[i]["source"].split(" ")[0]
            by_source.setdefault(key, []).append(abs(r - 1))
        for key, errors in by_source.items():
            print(summary(f"{tool}: {key}", errors))
    print(
        "by what was measured (allocated: the tensors; device: what the process holds, "
        "compared with device_bytes; capacity: the card a run just fit):"
    )
    for tool in ("planner", "fitcheck"):
        by_kind: dict[str, list[float]] = {}
        for i, r in ratios[tool].items():
            by_kind.setdefault(measured_bytes(rows[i])[1], []).append(abs(r - 1))
        for key, errors in by_kind.items():
            print(summary(f"{tool}: {key}", errors))
    t4 = [abs(r - 1) for i, r in ratios["planner"].items() if rows[i]["card"] == "T4"]
    print(f"  T4 rows within +-5%: {sum(e <= 0.05 for e in t4)} of {len(t4)}")
    under = sorted((r, rows[i]["model"].split("/")[-1], rows[i]["source"].split(" ")[0])
                   for i, r in ratios["planner"].items() if r < 0.95)  # fmt: skip
    print(
        f"  rows the planner under-predicts by more than 5% (the direction that runs out of "
        f"memory): {len(under)}" + "".join(f"\n    {r:.3f} {m} ({src})" for r, m, src in under)
    )
    if args.reserve:
        for attn, r in reserve.items():
            print(f"  reserved / allocated, {attn}: median {statistics.median(r):.3f} "
                  f"(range {min(r):.2f}-{max(r):.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
