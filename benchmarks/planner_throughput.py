"""The planner's time per step against measured ones, calibration rows apart from held-out rows.

    python benchmarks/planner_throughput.py

The time model (:mod:`course_lib.hf.speed`) has two constants, the share of a card's dense peak
the step's matmuls reach and the bytes moved per byte the step writes. They are fitted here
(least squares on the relative error) to the calibration rows, this repository's first pass of
H200 runs (``measured_peaks.json``, ``results`` with ``pass`` 1, fixed-length rows: the median
of each run's steps after its first), and the script fails (exit 1) if ``speed.py`` does not
hold what they give. Then every row is predicted with the shipped constants and printed with
its ratio predicted / measured: the calibration rows, then the held-out ones (the second H200
pass, and ``published_throughput.json``: fms-acceleration's A100 table, universal-llm-trainer's
H100 and A100 tables), each group's median and worst |ratio - 1|, and the same with the
matmuls alone at one utilisation (the single-constant model the time replaced).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from course_lib.hf.memory import predict_hf_memory
from course_lib.hf.speed import CARD_SPEED, MATMUL_UTILISATION, TRAFFIC, step_seconds
from course_lib.hf_configs import load_config

HERE = Path(__file__).resolve().parent


def h200_rows() -> list[dict]:
    """This repository's H200 runs as throughput rows: pass 1 calibration, pass 2 held out."""
    found = json.loads((HERE / "measured_peaks.json").read_text())["results"]
    rows = []
    for r in found:
        run = r["run"]
        if run["workload"] != "fixed":
            continue  # padding-free rows: another shape every step
        rows.append({
            "source_id": "Shapes H200 runs", "model": run["model"], "card": "H200",
            "measured_kind": "step_seconds", "step_seconds": statistics.median(r["step_s"][1:]),
            "role": "calibration" if r["pass"] == 1 else "held-out", "shipped_config": run["model"],
            "setting": {"batch_size": run["batch_size"], "seq_len": run["seq_len"],
                        "dtype": "bfloat16", "attn_impl": run["attn_impl"],
                        "lora_rank": run["lora_rank"], "lora_targets": run["lora_targets"],
                        "weights": "16bit", "checkpointing": run["checkpointing"],
                        "devices": 1, "sharding": "none", "accumulation": 1, "loop": "plain"},
        })  # fmt: skip
    return rows


def published_rows() -> list[dict]:
    return json.loads((HERE / "published_throughput.json").read_text())["rows"]


def counts(row: dict) -> tuple[dict, int, int]:
    """One micro-batch's operations and bytes written, the trained bytes, the tokens."""
    s = row["setting"]
    config = load_config(row["shipped_config"]) if row.get("shipped_config") else row["config"]
    extra = {k: s[k] for k in ("lora_dropout", "kbit_prepare", "reentrant", "loop") if k in s}
    m = predict_hf_memory(
        config, s["batch_size"], s["seq_len"], lora_rank=s["lora_rank"], dtype=s["dtype"],
        attn_impl=s["attn_impl"], checkpointing="blocks" if s["checkpointing"] else "off",
        lora_targets=s["lora_targets"], weights=s["weights"], devices=s["devices"],
        sharding=s["sharding"], card=row["card"], **extra,
    )  # fmt: skip
    return m.step.flops, m.components["gradients"], s["batch_size"] * s["seq_len"]


def measured_seconds(row: dict, tokens: int) -> float:
    """Seconds of one micro-batch (its share of the optimiser step) as the row measured it."""
    if row["measured_kind"] == "tokens_per_second":
        return tokens / row["tokens_per_second"]
    return row["step_seconds"]


def predicted(row: dict, utilisation: float, traffic: float, memory: bool = True) -> float:
    c, trained, _ = counts(row)
    acc = row["setting"]["accumulation"]
    t = step_seconds(c, row["card"], acc, trained, utilisation)
    part = t.compute + (t.memory * traffic / TRAFFIC if memory else 0.0)
    return (part + t.optimizer) / acc


def fit(rows: list[dict]) -> tuple[float, float]:
    """The two constants that minimise the squared relative error on ``rows``: the time is
    ``a x compute-at-full-peak + b x bytes-written-over-bandwidth`` (+ the optimiser)."""
    terms = []
    for row in rows:
        c, trained, tokens = counts(row)
        t = step_seconds(c, row["card"], 1, trained, 1.0)
        bandwidth = CARD_SPEED[row["card"]][2] * 1e9
        written = sum(v for k, v in c.items() if k.endswith("@written"))
        terms.append((t.compute, written / bandwidth, t.optimizer,
                      measured_seconds(row, tokens)))  # fmt: skip
    best = (float("inf"), 1.0, 0.0)
    for ai in range(1000, 2500, 2):
        for bi in range(0, 800, 2):
            a, b = ai / 1000, bi / 100
            e = sum(((a * f + b * w + o) / m - 1) ** 2 for f, w, o, m in terms)
            best = min(best, (e, a, b))
    return 1 / best[1], best[2]


def report(
    name: str, rows: list[dict], u: float, traffic: float, memory: bool = True, show: bool = True
) -> list:
    errors = []
    for row in rows:
        _, _, tokens = counts(row)
        ratio = predicted(row, u, traffic, memory) / measured_seconds(row, tokens)
        errors.append(abs(ratio - 1))
        if show:
            s = row["setting"]
            tune = (
                "full" if s["lora_rank"] is None else ("qlora" if s["weights"] == "nf4" else "lora")
            )
            seconds = measured_seconds(row, tokens)
            print(f"  {row['model'].split('/')[-1][:22]:<22} {row['card']:<10} {tune:<5} "
                  f"{s['batch_size']}x{s['seq_len']:<5} x{s['devices']} measured {seconds:7.3f} s"
                  f"  ratio {ratio:6.3f}  {row['source_id']}")  # fmt: skip
    print(f"  {name}: rows {len(errors)}, median {statistics.median(errors):.1%}, worst "
          f"{max(errors):.1%}")  # fmt: skip
    return errors


def main() -> int:
    rows = h200_rows() + published_rows()
    calibration = [r for r in rows if r["role"] == "calibration"]
    held = [r for r in rows if r["role"] == "held-out"]
    u, traffic = fit(calibration)
    print(f"fitted on {len(calibration)} calibration rows: utilisation {u:.3f}, traffic "
          f"{traffic:.2f} bytes per byte written; shipped: {MATMUL_UTILISATION}, "
          f"{TRAFFIC}")  # fmt: skip
    shipped = round(u, 2) == MATMUL_UTILISATION and round(traffic, 1) == TRAFFIC
    print("\ncalibration rows (the constants were fitted to these):")
    report("calibration", calibration, MATMUL_UTILISATION, TRAFFIC)
    print("\nheld-out rows:")
    for source in dict.fromkeys(r["source_id"] for r in held):
        report(f"held-out, {source}", [r for r in held if r["source_id"] == source],
               MATMUL_UTILISATION, TRAFFIC)  # fmt: skip
    report("held-out, every row", held, MATMUL_UTILISATION, TRAFFIC, show=False)
    # the single-constant roofline (matmuls only), its utilisation fitted the same way
    one = statistics.median(predicted(r, 1.0, TRAFFIC, False) / measured_seconds(r, counts(r)[2])
                            for r in calibration)  # fmt: skip
    one = 1 / one if one > 1 else one
    print(f"\nthe matmuls alone at one utilisation ({one:.3f}, the calibration rows' median):")
    report("calibration, matmuls alone", calibration, one, TRAFFIC, memory=False, show=False)
    report("held-out, matmuls alone", held, one, TRAFFIC, memory=False, show=False)
    if not shipped:
        print("course_lib/hf/speed.py does not hold the fitted constants", file=sys.stderr)
    return 0 if shipped else 1


if __name__ == "__main__":
    sys.exit(main())
