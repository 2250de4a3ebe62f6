"""Held-out rows for the planner, measured on a real card: real model configs at full size
(random weights, nothing downloaded), one training step recipe per row, each in a fresh process.

    python benchmarks/gpu_held_out.py --out rows.json        # the whole grid (about 6 minutes)
    python benchmarks/gpu_held_out.py --out rows.json --first 4
    python benchmarks/gpu_held_out.py --dry-run              # no GPU: the grid and predictions
    python benchmarks/gpu_held_out.py --cpu-smoke            # no GPU: one tiny row, end to end

Why: the planner's card-level constants (the allocator's reserve, the CUDA context) were set
from T4 rows, and the tensors were checked on the CPU. A row measured here on a card none of
its constants came from is held out by construction, so it may join
``benchmarks/measured_peaks.json`` with ``role`` ``held-out`` for every tool, as long as no
constant is later set from it (then it is calibration, and must say so).

Each row runs in its own process (so the reserve and the device reading start from nothing):

1. a model from a shipped config (``course_lib.finetune.search.resolve_model``) built straight
   on the card in bf16 (``build_model(..., device="cuda")``: no fp32 copy passes through the
   allocator, as with a checkpoint's load), LoRA through PEFT where asked;
2. ``torch.optim.AdamW`` (foreach, CUDA's default), the plain loop (``outputs = model(...)``,
   ``outputs.loss.backward()``, ``opt.step()``): a warm-up step makes the optimiser's state,
   then ``reset_peak_memory_stats`` and the measured steps;
3. ``max_memory_allocated`` (the tensors), ``max_memory_reserved`` (the caching allocator) and
   the device's used memory polled every 2 ms through NVML over the whole process, minus its
   reading before CUDA started (what nvidia-smi shows), and the CUDA context (what the process
   holds outside the allocator after the run).

``varying`` rows change the sequence length every step (padding-free micro-batches; the peak at
the longest); ``expandable`` rows run with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.
Each run prints one JSON line; ``--out`` collects the rows in ``published_peaks.json``'s schema
(three rows a run: allocated, reserved, device), written after every run so a run stopped early
keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

MIB = 2**20
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Run:
    """One measured recipe."""

    model: str
    batch_size: int
    seq_len: int
    lora_rank: int | None = None
    lora_targets: str | None = None  # None: PEFT's default for the family
    attn_impl: str = "sdpa"
    checkpointing: bool = False
    workload: str = "fixed"  # "fixed" or "varying"
    allocator: str = "default"  # or "expandable"
    lengths: tuple[int, ...] = field(default=())  # varying rows: the steps' seq_len, in order

    @property
    def label(self) -> str:
        lora = (
            f"LoRA r{self.lora_rank} {self.lora_targets or 'default'}" if self.lora_rank else "full"
        )
        ckpt = "ckpt" if self.checkpointing else "no ckpt"
        return (f"{self.model} {lora} {self.attn_impl} {ckpt} {self.batch_size}x{self.seq_len} "
                f"{self.workload} {self.allocator}")  # fmt: skip


VARYING = (1024, 4096, 2048, 3072, 512, 4096, 1536, 2560)
# Most-used recipes first, so a run cut short keeps the rows that matter most.
GRID = (
    Run("Llama-3.1-8B", 8, 4096, lora_rank=16, checkpointing=True),
    Run("Llama-3.1-8B", 2, 2048, lora_rank=16, lora_targets="all-linear"),
    Run("Llama-3.2-1B", 8, 1024),
    Run("Llama-3.2-1B", 8, 4096, checkpointing=True),
    Run("Qwen2.5-7B", 4, 8192, lora_rank=16, lora_targets="all-linear", checkpointing=True),
    Run("Mistral-7B-v0.3", 4, 4096, lora_rank=16, lora_targets="all-linear", checkpointing=True),
    Run("Llama-3.1-8B", 4, 2048, checkpointing=True),
    Run("Qwen2.5-0.5B", 16, 1024),
    Run("Qwen3-1.7B", 8, 2048, checkpointing=True),
    Run("gemma-2-2b", 4, 2048, attn_impl="eager", checkpointing=True),
    Run("Llama-3.2-1B", 4, 1024, attn_impl="eager"),
    Run("Qwen3-4B", 4, 4096, checkpointing=True),
    Run("Phi-3-mini-4k-instruct", 8, 1024, checkpointing=True),
    Run("OLMo-2-0425-1B", 4, 2048),
    Run("Llama-3.2-1B", 4, 4096, workload="varying", lengths=VARYING),
    Run("Llama-3.2-1B", 8, 1024, allocator="expandable"),
    Run("Llama-3.1-8B", 8, 4096, lora_rank=16, checkpointing=True, allocator="expandable"),
    Run("Llama-3.1-8B", 4, 4096, lora_rank=16, checkpointing=True, workload="varying",
        lengths=VARYING),
    Run("gemma-3-1b-pt", 4, 2048, attn_impl="eager", checkpointing=True),
    Run("Qwen3-8B", 4, 4096, lora_rank=16, lora_targets="all-linear", checkpointing=True),
    Run("OLMo-2-1124-7B", 4, 4096, lora_rank=16, lora_targets="all-linear", checkpointing=True),
    Run("SmolLM2-1.7B", 8, 2048),
    Run("Llama-3.2-3B", 4, 4096, checkpointing=True, workload="varying", lengths=VARYING),
)  # fmt: skip


def config_of(model: str) -> dict:
    """The shipped config dict of ``model`` (``course_lib.hf_configs``)."""
    from course_lib.finetune.search import resolve_model

    return resolve_model(model)[1]


def predicted(run: Run, card: str | None) -> dict:
    """The planner's figures for ``run`` (MiB), to print beside the measurement."""
    from course_lib.hf.memory import predict_hf_memory

    extra = {"lora_targets": run.lora_targets} if run.lora_targets else {}
    p = predict_hf_memory(config_of(run.model), run.batch_size, run.seq_len,
                          lora_rank=run.lora_rank, dtype="bfloat16", attn_impl=run.attn_impl,
                          checkpointing="blocks" if run.checkpointing else "off", loop="plain",
                          card=card, workload=run.workload, allocator=run.allocator,
                          **extra)  # fmt: skip
    return {"allocated": p.peak_bytes / MIB, "reserved": p.reserved_bytes / MIB,
            "device_low": p.device_bytes_low / MIB,
            "device_high": p.device_bytes / MIB}  # fmt: skip


class DevicePoll:
    """The device's used memory (NVML, what nvidia-smi prints), polled in a thread."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.base = self.used()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def used(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.used())
            time.sleep(0.002)

    def stop(self) -> int:
        """The peak over the process, minus the reading before CUDA started (bytes)."""
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.used())
        return self.peak - self.base

    def driver(self) -> str:
        version = self._nvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)


def peak_blocks(trace: list[dict], base: int) -> tuple[int, list[dict]]:
    """Replay the allocator's trace (``torch.cuda.memory._snapshot()["device_traces"][0]``)
    from ``base`` allocated bytes: the highest allocated total and the blocks alive then."""
    live: dict[int, dict] = {}
    current = peak = base
    at_peak: list[dict] = []
    for event in trace:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            current += event["size"]
            if current > peak:
                peak, at_peak = current, list(live.values())
        elif event["action"] == "free_completed" and event["addr"] in live:
            current -= live.pop(event["addr"])["size"]
    return peak, at_peak


def explain(trace: list[dict], base: int) -> None:
    """Print the blocks alive at the recorded peak, largest first, with the innermost Python
    frame outside torch that made each (backward's blocks have none: the engine's thread)."""
    peak, blocks = peak_blocks(trace, base)
    print(f"peak {peak / MIB:.0f} MiB = {base / MIB:.0f} MiB before the step + the blocks below")
    groups: dict[tuple[int, str], int] = {}
    for block in blocks:
        every = block.get("frames", [])
        frames = [
            f for f in every if f["filename"].endswith(".py") and "/torch/" not in f["filename"]
        ]
        kernel = next((f["name"] for f in every if "at::native::" in f["name"]), "")
        where = (f"{Path(frames[0]['filename']).name}:{frames[0]['line']} {frames[0]['name']}"
                 if frames else "(no Python frame: autograd's backward)")  # fmt: skip
        where += f" [{kernel[:90]}]" if kernel else ""
        key = (round(block["size"] / MIB), where)
        groups[key] = groups.get(key, 0) + 1
    for (mib, where), count in sorted(groups.items(), key=lambda kv: -kv[0][0] * kv[1])[:25]:
        print(f"  {count:>4} x {mib:>7} MiB  {where}")


def measure(
    run: Run, device: str = "cuda", tiny: bool = False, overrides: dict | None = None,
    record: bool = False, stacks: str = "python",
) -> dict:  # fmt: skip
    """One run in this process (module docstring, steps 1-3); figures in MiB. ``overrides``
    change the config (a diagnosis: ``final_logit_softcapping=None``); ``record`` keeps the
    allocator's history of the last step and prints what is alive at its peak."""
    import torch
    import transformers

    from course_lib.memory.hf_check import build_model, tiny_hf_config

    try:
        poll = DevicePoll() if device == "cuda" else None
    except ImportError:  # no nvidia-ml-py: no device-level figure, the rest still measured
        poll = None
    cfg = {k: v for k, v in config_of(run.model).items() if not k.startswith("_")}
    cfg |= overrides or {}
    config = (tiny_hf_config(cfg["model_type"]) if tiny
              else transformers.AutoConfig.for_model(**cfg))  # fmt: skip
    kw = {"lora_targets": run.lora_targets} if run.lora_targets else {}
    start = time.perf_counter()
    model = build_model(config, dtype=torch.bfloat16, attn_impl=run.attn_impl,
                        lora_rank=run.lora_rank, device=device,
                        checkpointing="blocks" if run.checkpointing else "off", **kw)  # fmt: skip
    build_s = time.perf_counter() - start
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    lengths = run.lengths or (run.seq_len,) * 3
    generator = torch.Generator().manual_seed(0)
    times = []
    for i, seq_len in enumerate(lengths):
        ids = torch.randint(config.vocab_size, (run.batch_size, seq_len), generator=generator)
        ids = ids.to(device)
        batch = {"input_ids": ids, "labels": ids.clone(), "use_cache": False}
        if i == 1 and device == "cuda":  # after the warm-up step that made AdamW's state
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        if record and i == len(lengths) - 1:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks=stacks)
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        outputs = model(**batch)
        outputs.loss.backward()
        opt.step()
        del outputs, batch, ids
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        if record and i == len(lengths) - 1:
            explain(torch.cuda.memory._snapshot()["device_traces"][0], base)
            torch.cuda.memory._record_memory_history(enabled=None)
    weights = sorted({str(p.dtype) for n, p in model.named_parameters() if "lora_" not in n})
    out = {"run": asdict(run), "build_s": round(build_s, 2), "step_s": [round(t, 3) for t in times],
           "weights_dtype": weights,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "python": platform.python_version()}  # fmt: skip
    try:
        import peft

        out["peft"] = peft.__version__
    except ImportError:
        out["peft"] = None
    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        base = poll.base if poll else 0
        out |= {"allocated_mib": torch.cuda.max_memory_allocated() / MIB,
                "reserved_mib": torch.cuda.max_memory_reserved() / MIB,
                # what the process holds outside the allocator, in torch's frame (its total
                # leaves out the driver's own reservation, which NVML counts as used)
                "context_mib": (total - free - torch.cuda.memory_reserved()) / MIB,
                "device_mib": poll.stop() / MIB if poll else None,
                "nvml_base_mib": base / MIB, "free_mib": free / MIB,
                "gpu": torch.cuda.get_device_name(),
                "total_memory_mib": torch.cuda.get_device_properties(0).total_memory / MIB,
                "driver": poll.driver() if poll else "?", "cuda": torch.version.cuda,
                "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}  # fmt: skip
    return out


def as_rows(result: dict, date: str) -> list[dict]:
    """Three rows in ``published_peaks.json``'s schema (allocated, reserved, device)."""
    run = Run(**{**result["run"], "lengths": tuple(result["run"]["lengths"])})
    config = config_of(run.model)
    setting = {"batch_size": run.batch_size, "seq_len": run.seq_len, "dtype": "bfloat16",
               "attn_impl": run.attn_impl, "lora_rank": run.lora_rank,
               "lora_targets": run.lora_targets, "weights": "16bit", "double_quant": False,
               "checkpointing": run.checkpointing, "optimizer": "adamw", "loop": "plain",
               "devices": 1, "sharding": "none", "workload": run.workload,
               "allocator": run.allocator}  # fmt: skip
    stack = (f"torch {result['torch']} (CUDA {result['cuda']}), transformers "
             f"{result['transformers']}, peft {result['peft']}, driver {result['driver']}, "
             f"{result['gpu']} ({result['total_memory_mib']:.0f} MiB as torch "
             "reports it)")  # fmt: skip
    what = {"allocated": "torch.cuda.max_memory_allocated over the steps after a warm-up step",
            "reserved": "torch.cuda.max_memory_reserved over the steps after a warm-up step",
            "device": "NVML used memory, peak over the process minus the reading before CUDA "
                      "started (nvidia-smi's figure)"}  # fmt: skip
    rows = []
    for kind in ("allocated", "reserved", "device"):
        if result.get(f"{kind}_mib") is None:
            continue
        rows.append({
            "source": "Shapes' own runs on a lent H200 (benchmarks/gpu_held_out.py)",
            "source_id": "Shapes H200 runs",
            "citation": f"benchmarks/gpu_held_out.py in this repository, run {date}: {run.label}",
            "model": run.model, "card": "H200", "measured_kind": kind,
            "measured": what[kind], f"peak_{kind}_mib": round(result[f"{kind}_mib"], 3),
            "context_mib": round(result["context_mib"], 3),
            "assumed": f"random bf16 weights from the shipped config, {stack}; AdamW foreach "
                       f"(moments in bf16), the plain loop, steps of "
                       f"{list(run.lengths) or run.seq_len} tokens a row; "
                       f"PYTORCH_CUDA_ALLOC_CONF={result['alloc_conf']!r}",
            "setting": setting, "config": config,
            "role": {"planner": "held-out", "fitcheck": "held-out", "accelerate": "held-out"},
        })  # fmt: skip
    return rows


def dry_run() -> int:
    for run in GRID:
        p = predicted(run, "H200")
        print(f"{run.label:<80} allocated {p['allocated']:>9.0f} MiB, device "
              f"{p['device_low']:>7.0f}-{p['device_high']:.0f} MiB")  # fmt: skip
    return 0


def cpu_smoke() -> int:
    """The measuring path on the CPU with a tiny model of each family in the grid (no
    CUDA figures): checks the script before a GPU is spent on it."""
    for model in dict.fromkeys(r.model for r in GRID):
        run = next(r for r in GRID if r.model == model)
        result = measure(Run(**{**asdict(run), "batch_size": 1, "seq_len": 16,
                                "lengths": (16, 8, 16) if run.lengths else ()}),
                         device="cpu", tiny=True)  # fmt: skip
        print(json.dumps({"model": model, "steps": result["step_s"]}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the rows here (JSON)")
    parser.add_argument("--first", type=int, default=len(GRID), help="only the first N runs")
    parser.add_argument("--only", default="", help="only these runs: GRID indices, 9,18")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: run GRID[i]
    parser.add_argument(
        "--explain",
        type=int,
        metavar="I",
        help="run GRID[I] here and print what is alive at its peak",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="with --explain: override a config field",
    )
    parser.add_argument("--stacks", default="python", choices=("python", "all"),
                        help="with --explain: all = C++ frames too (slow)")  # fmt: skip
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--cpu-smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run()
    if args.cpu_smoke:
        return cpu_smoke()
    if args.explain is not None:
        overrides = {k: json.loads(v) for k, v in (a.split("=", 1) for a in args.set)}
        result = measure(GRID[args.explain], overrides=overrides, record=True, stacks=args.stacks)
        print(json.dumps({k: result[k] for k in ("allocated_mib", "reserved_mib")} | overrides))
        return 0
    if args.one is not None:
        print(json.dumps(measure(GRID[args.one])), flush=True)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here: the held-out GPU rows need one (skipped)")
        return 0
    date = time.strftime("%Y-%m-%d")
    results, rows = [], []
    chosen = [int(i) for i in args.only.split(",")] if args.only else range(args.first)
    for i in chosen:
        run = GRID[i]
        env = dict(os.environ)
        if run.allocator == "expandable":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--one", str(i)], env=env, cwd=ROOT,
                              capture_output=True, text=True)  # fmt: skip
        took = time.perf_counter() - t
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            print(f"[{i}] {run.label}: failed ({took:.0f} s): {' | '.join(tail)}", flush=True)
            continue
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        p = predicted(run, "H200")
        results.append(result)
        rows += as_rows(result, date)
        print(f"[{i}] {run.label} ({took:.0f} s)\n    allocated {result['allocated_mib']:.0f} "
              f"(planner {p['allocated'] / result['allocated_mib']:.3f}x), reserved "
              f"{result['reserved_mib']:.0f} ({p['reserved'] / result['reserved_mib']:.3f}x), "
              f"device {result['device_mib'] or 0:.0f} (band {p['device_low']:.0f}-"
              f"{p['device_high']:.0f}), context {result['context_mib']:.0f} MiB, steps "
              f"{result['step_s']}", flush=True)  # fmt: skip
        if args.out:
            args.out.write_text(json.dumps({"results": results, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
