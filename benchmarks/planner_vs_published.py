"""The memory planner against published measured GPU peaks, beside its peers, held-out rows apart.

    python benchmarks/planner_vs_published.py            # every row, then the tables
    python benchmarks/planner_vs_published.py --reserve  # also reserved / allocated per backend

Rows come from ``published_peaks.json`` beside this file. Each row must carry (``validate_row``
refuses it otherwise, naming the field):

* ``source`` and ``source_id`` (the short name the tables group by) and ``citation``: the URL and
  where in it the number is;
* ``measured_kind``: ``allocated`` = ``max_memory_allocated``, ``reserved`` =
  ``max_memory_reserved``, ``active`` = active bytes, ``device`` = what the process holds as
  nvidia-smi shows it, ``capacity`` = the card's memory for the longest run that still fit it,
  ``unstated`` (only on a row that is not expressed: nothing to compare with);
* ``role``: per tool (``planner``, ``fitcheck``, ``accelerate``), ``calibration`` when a constant or
  term of that tool was set from the row, else ``held-out``.

For every row the planner expresses it prints, side by side, the ratio predicted / measured of:

* the planner: :func:`course_lib.hf.memory.predict_hf_memory`, its ``peak_bytes`` against an
  allocated or active figure, its ``reserved_bytes`` against a reserved one, its
  ``device_bytes`` against a process / nvidia-smi one and against a card's capacity;
* ``fitcheck-llm`` 0.3.1 (the ``bench`` extra), run offline: its ``estimate()`` from a
  ``ModelConfig`` built here (the one embedded in each fitcheck row; else fitcheck's own
  ``config.json`` parser and parameter formula on the row's config, since its
  ``fetch_model_config`` needs the Hub), compared tier by tier as its own ``measure.py``
  does: ``total - overhead`` with allocated, ``total - 500 MiB`` with reserved, ``total``
  with a process figure;
* accelerate's ``estimate-memory`` figure (weights only, for 16-bit rows).

Rows the planner cannot express are listed with the reason. The tables give, per source and
per tool, the rows, median and worst |predicted / measured - 1|, calibration and held-out rows
apart (``split_errors`` reads each row's ``role``, nothing else), then the held-out total per
tool and on the held-out rows both the planner and a peer express.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

from course_lib.finetune.verdict import VERDICTS
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


TOOLS = ("planner", "fitcheck", "accelerate")
ROLES = ("calibration", "held-out")
KINDS = ("allocated", "reserved", "active", "device", "capacity", "verdict", "unstated")
OUTCOMES = ("fits", "oom")  # a verdict row's outcome: it ran, or it ran out of memory
REQUIRED = ("source", "source_id", "citation", "measured_kind", "role")


def validate_row(i: int, row: dict) -> None:
    """Refuse a row that does not say where it comes from, what it measured and whether a
    tool was calibrated on it (module docstring); an expressed row must hold its number.

    Raises:
        ValueError: naming the row and the missing or bad field.
    """
    name = f"row {i} ({row.get('model', '?')})"
    for field in REQUIRED:
        if not row.get(field):
            raise ValueError(f"{name}: no {field!r}; every row needs {', '.join(REQUIRED)}")
    if row["measured_kind"] not in KINDS:
        raise ValueError(f"{name}: measured_kind {row['measured_kind']!r} is none of {KINDS}")
    role = row["role"]
    if not isinstance(role, dict) or set(role) != set(TOOLS):
        raise ValueError(f"{name}: role must give each of {TOOLS} its role, got {role!r}")
    for tool, value in role.items():
        if value not in ROLES:
            raise ValueError(f"{name}: role[{tool!r}] = {value!r} is none of {ROLES}")
    if row.get("setting"):
        kind = row["measured_kind"]
        if kind == "unstated":
            raise ValueError(f"{name}: an expressed row must say what was measured")
        if kind == "verdict":
            if row.get("outcome") not in OUTCOMES or not card_bytes(row):
                raise ValueError(f"{name}: a verdict row needs an outcome in {OUTCOMES} and a card")
            return
        if not isinstance(row.get(f"peak_{kind}_mib"), (int, float)):
            raise ValueError(f"{name}: measured_kind {kind!r} but no number peak_{kind}_mib")
    elif row.get("expressible") is not False or not row.get("why_not"):
        raise ValueError(f"{name}: a row without a setting needs expressible false and why_not")


SOURCES = (HERE / "published_peaks.json", HERE / "measured_peaks.json")


def load_rows(paths: Path | tuple[Path, ...] = SOURCES) -> list[dict]:
    """The rows of one file or several (default: the published ones, then this repository's
    own GPU runs in ``measured_peaks.json``, made by ``gpu_held_out.py``), each checked by
    :func:`validate_row`.

    Raises:
        ValueError: the first bad row.
    """
    paths = (paths,) if isinstance(paths, Path) else paths
    rows = [row for path in paths for row in json.loads(path.read_text())["rows"]]
    for i, row in enumerate(rows):
        validate_row(i, row)
    return rows


def split_errors(rows: list[dict], ratios: dict[int, float], tool: str) -> dict:
    """|ratio - 1| of one tool's rows, by the role the row gives that tool, then by source
    and measured kind: ``{role: {(source_id, kind): [errors]}}``.
    """
    out: dict[str, dict[tuple[str, str], list[float]]] = {role: {} for role in ROLES}
    for i, ratio in ratios.items():
        row = rows[i]
        key = (row["source_id"], row["measured_kind"])
        out[row["role"][tool]].setdefault(key, []).append(abs(ratio - 1))
    return out


def card_bytes(row: dict) -> int:
    """The memory the run had: a shipped card's (as torch reports it), the row's ``card_mib``,
    or for a capacity row the capacity itself (0: not known)."""
    if row.get("measured_kind") == "capacity":
        return int(row["peak_capacity_mib"] * MIB)
    if row.get("card") in CARDS:
        return CARDS[row["card"]]
    return int(row.get("card_mib", 0) * MIB)


def measured_bytes(row: dict) -> tuple[int, str]:
    kind = row["measured_kind"]
    return int(row[f"peak_{kind}_mib"] * MIB), kind


def planner_memory(row: dict):
    """The planner's :class:`~course_lib.hf.memory.HFMemory` for the row's setting."""
    s = row["setting"]
    extra = {"lora_targets": s["lora_targets"]} if s.get("lora_targets") else {}
    for key in ("reentrant", "bnb_version", "lora_dropout", "adapter_dtype", "modules_to_save",
                "sub_group_size", "master_weights"):  # fmt: skip
        if s.get(key) is not None:
            extra[key] = s[key]
    return predict_hf_memory(
        row["config"], s["batch_size"], s["seq_len"], lora_rank=s["lora_rank"],
        dtype=s["dtype"], attn_impl=s["attn_impl"], checkpointing=s["checkpointing"],
        loop=s["loop"], weights=s["weights"],
        double_quant=s["double_quant"], optimizer=s["optimizer"],
        card=row["card"] if row["card"] in CARDS else None,
        devices=s.get("devices", 1), sharding=s.get("sharding", "none"),
        loss=s.get("loss", "standard"), kbit_prepare=s.get("kbit_prepare"),
        workload=s.get("workload", "fixed"), allocator=s.get("allocator", "default"), **extra,
    )  # fmt: skip


def planner(row: dict) -> int:
    """The planner's figure for what the row measured (module docstring)."""
    p = planner_memory(row)
    return {"allocated": p.peak_bytes, "active": p.peak_bytes, "reserved": p.reserved_bytes,
            "device": p.device_bytes, "capacity": p.device_bytes}[row["measured_kind"]]  # fmt: skip


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
    kind = row["measured_kind"]
    mib = {
        "allocated": report.total_mib - report.overhead_mib,
        "active": report.total_mib - report.overhead_mib,
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
        return f"  {name:<44} rows   0"
    return (f"  {name:<44} rows {len(errors):>3}  median {statistics.median(errors):6.1%}  "
            f"worst {max(errors):6.1%}")  # fmt: skip


def print_rows(rows: list[dict], ratios: dict[str, dict[int, float]]) -> None:
    print(f"{'model':<24} {'setting':<38} {'kind':<9} {'measured':>8} {'planner':>7} "
          f"{'fitchk':>7} {'accel.':>7} role(P/F) source")  # fmt: skip
    for i, row in enumerate(rows):
        if not row.get("setting") or row["measured_kind"] == "verdict":
            continue
        s = row["setting"]
        measured, kind = measured_bytes(row)
        cells = {t: f"{ratios[t][i]:7.3f}" if i in ratios[t] else f"{'-':>7}" for t in TOOLS}
        lora = f"r{s['lora_rank']}" if s["lora_rank"] else "full"
        dev = f" x{s['devices']} {s['sharding']}" if s.get("devices", 1) > 1 else ""
        label = (f"{s['weights']} {lora} {s['attn_impl']} {s['batch_size']}x{s['seq_len']} "
                 f"{s['dtype']}{dev}")  # fmt: skip
        role = "/".join("cal" if row["role"][t] == "calibration" else "out"
                        for t in ("planner", "fitcheck"))  # fmt: skip
        print(f"{row['model'].split('/')[-1][:24]:<24} {label[:38]:<38} {kind:<9} "
              f"{measured / MIB:>8.0f} {cells['planner']} {cells['fitcheck']} "
              f"{cells['accelerate']} {role:<9} {row['source_id']}")  # fmt: skip


def print_split(rows: list[dict], ratios: dict[str, dict[int, float]]) -> None:
    """Per source (and measured kind) and per tool: calibration rows, then held-out rows."""
    for role in ROLES:
        print(f"\n{role} rows, per source and measured kind, per tool:")
        for tool in TOOLS:
            for (source, kind), errors in sorted(
                split_errors(rows, ratios[tool], tool)[role].items()
            ):
                print(summary(f"{tool}: {source} [{kind}]", errors))
    print(
        "\nheld-out total (targets: median <= 7%, worst <= 15%, below every peer on the same rows):"
    )
    held = {
        t: {i: r for i, r in ratios[t].items() if rows[i]["role"][t] == "held-out"} for t in TOOLS
    }
    for tool in TOOLS:
        print(
            summary(
                f"{tool}: every held-out row it expresses",
                [abs(r - 1) for r in held[tool].values()],
            )
        )
    for peer in ("fitcheck", "accelerate"):
        both = sorted(set(held["planner"]) & set(held[peer]))
        print(
            summary(
                f"planner on the rows {peer} expresses", [abs(held["planner"][i] - 1) for i in both]
            )
        )
        print(summary(f"{peer} on the same rows", [abs(held[peer][i] - 1) for i in both]))
    for label, kinds in (("tensors (allocated, active)", ("allocated", "active")),
                         ("the device (reserved, device, capacity)",
                          ("reserved", "device", "capacity"))):  # fmt: skip
        print(summary(f"planner, {label}",
                      [abs(r - 1) for i, r in held["planner"].items()
                       if rows[i]["measured_kind"] in kinds]))  # fmt: skip
    errors = [abs(r - 1) for r in held["planner"].values()]
    if errors:
        median, worst = statistics.median(errors), max(errors)
        verdict = {True: "meets", False: "misses"}
        print(f"  planner held-out: median {median:.1%} ({verdict[median <= 0.07]} 7%), "
              f"worst {worst:.1%} ({verdict[worst <= 0.15]} 15%)")  # fmt: skip


def print_band(rows: list[dict]) -> None:
    """Where held-out device-level rows (nvidia-smi, capacity) fall against the planner's band
    (``device_bytes_low`` to ``device_bytes``): below it, inside it, above it (the direction that
    runs out of memory), in all and per source."""
    where: dict[str, list[int]] = {}
    for row in rows:
        if not row.get("setting") or row["measured_kind"] not in ("device", "capacity"):
            continue
        if row["role"]["planner"] != "held-out":
            continue
        p = planner_memory(row)
        measured, _ = measured_bytes(row)
        counts = where.setdefault(row["source_id"], [0, 0, 0])
        counts[(measured >= p.device_bytes_low) + (measured > p.device_bytes)] += 1
    if where:
        below, inside, above = (sum(c[k] for c in where.values()) for k in range(3))
        print(f"  device band: {inside} of {below + inside + above} held-out device-level rows "
              f"inside it, {above} above it, {below} below it")  # fmt: skip
        for source, (b, i, a) in sorted(where.items()):
            print(f"    {source:<28} below {b:>3}  inside {i:>3}  above {a:>3}")


def verdict(row: dict) -> str:
    """The planner's verdict on the row's run (``fits``, ``may not fit``, ``does not fit``): its
    device band against the memory the run had, at the row's micro-batch."""
    p, budget = planner_memory(row), card_bytes(row)
    if p.device_bytes <= budget:
        return "fits"
    return "may not fit" if p.device_bytes_low <= budget else "does not fit"


def print_verdicts(rows: list[dict]) -> dict:
    """Every held-out run with a known outcome against the planner's verdict: the runs that
    fitted (every measured row on a known card, and verdict rows that ran) and the runs that
    ran out of memory (verdict rows), per source.

    Returns:
        ``{(source, outcome, verdict): count}``.
    """
    counts: dict[tuple[str, str, str], int] = {}
    seen: set[str] = set()  # a run measured several ways (allocated, reserved, device) once
    for row in rows:
        if not row.get("setting") or row["role"]["planner"] != "held-out" or not card_bytes(row):
            continue
        run = row["citation"] if row["measured_kind"] == "verdict" else json.dumps(
            [row["source_id"], row["model"], row["card"], row["setting"],
             row.get("peak_capacity_mib")], sort_keys=True)  # fmt: skip
        if run in seen:
            continue
        seen.add(run)
        outcome = row.get("outcome", "fits")
        key = (row["source_id"], outcome, verdict(row))
        counts[key] = counts.get(key, 0) + 1
    print("\nfit verdicts on held-out runs (the planner's verdict at each run's micro-batch and "
          "card):")  # fmt: skip
    print(f"  {'source':<28}{'ran: fits / may not / refused':>32}"
          f"{'OOM: refused / may not / fits':>34}")  # fmt: skip
    for source in sorted({k[0] for k in counts}):
        ran = [counts.get((source, "fits", v), 0) for v in VERDICTS]
        oom = [counts.get((source, "oom", v), 0) for v in reversed(VERDICTS)]
        print(f"  {source:<28}{' / '.join(map(str, ran)):>32}{' / '.join(map(str, oom)):>34}")
    total = {(o, v): sum(n for (s, oo, vv), n in counts.items() if (oo, vv) == (o, v))
             for o in OUTCOMES for v in VERDICTS}  # fmt: skip
    print(f"  refused runs that fitted: {total['fits', 'does not fit']} (and "
          f"{total['fits', 'may not fit']} called 'may not fit'); allowed runs that ran out of "
          f"memory: {total['oom', 'fits']} (and {total['oom', 'may not fit']} 'may not fit'); "
          f"{sum(v for (o, _), v in total.items() if o == 'fits')} runs that fitted, "
          f"{sum(v for (o, _), v in total.items() if o == 'oom')} that did not")  # fmt: skip
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reserve", action="store_true")
    args = parser.parse_args(argv)
    rows = load_rows()
    ratios: dict[str, dict[int, float]] = {t: {} for t in TOOLS}
    fns = {"planner": planner, "fitcheck": fitcheck, "accelerate": accelerate_weights}
    for i, row in enumerate(rows):
        if row.get("setting") and row["measured_kind"] != "verdict":
            measured, _ = measured_bytes(row)
            for tool, fn in fns.items():
                value = fn(row)
                if value:
                    ratios[tool][i] = value / measured
    print_rows(rows, ratios)
    print("\nrows the planner cannot express:")
    for row in rows:
        if row.get("expressible") is False:
            print(f"  [{row['source_id']}] {row['model']} on {row['card']}: {row['why_not']}")
    if importlib.util.find_spec("fitcheck") is None:
        print("  fitcheck-llm: not installed (pip install -e '.[bench]')")
    print_split(rows, ratios)
    print_band(rows)
    under = sorted((r, rows[i]["model"].split("/")[-1], rows[i]["source_id"])
                   for i, r in ratios["planner"].items() if r < 0.95)  # fmt: skip
    print(
        f"  rows the planner under-predicts by more than 5% (the direction that runs out of "
        f"memory): {len(under)}" + "".join(f"\n    {r:.3f} {m} ({src})" for r, m, src in under)
    )
    print_verdicts(rows)
    if args.reserve:
        reserve: dict[str, list[float]] = {}
        for row in rows:
            if row.get("peak_reserved_mib") and row["measured_kind"] == "allocated":
                ratio = row["peak_reserved_mib"] / row["peak_allocated_mib"]
                reserve.setdefault(row["setting"]["attn_impl"], []).append(ratio)
        for attn, r in reserve.items():
            print(f"  reserved / allocated, {attn}: median {statistics.median(r):.3f} "
                  f"(range {min(r):.2f}-{max(r):.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
