"""How long ``python -m course_lib plan --model ...`` takes, end to end, beside a bare Python start.

Each run is a fresh interpreter (``subprocess``), so the figure includes Python's start, the
imports and the plan, as a fine-tuner waits for it. For every name in
:func:`course_lib.hf_configs.available` it times two plans, full rows and ``--packing`` from the
shipped Wikipedia histogram, each run beside a bare ``python -c pass`` started just before it
(side by side: both see the same load), and prints the medians of ``--runs`` runs: wall seconds,
the CPU seconds the run used, and the plan's wall time as a multiple of the bare start's. On a
busy machine the wall figures wait for other processes; the CPU figure much less, and on a quiet
machine a single-threaded run's wall time is its CPU time. It also reports the load average
before and after, and whether any run imported torch (it should not: ``tests/library/test_cli.py``
fails if one does).

    python benchmarks/plan_speed.py [--runs 5] [--seq-len 2048] [--gpu-memory 80GiB] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from course_lib.hf_configs import available

PROBE = "import sys, runpy; sys.argv = ['course_lib'] + sys.argv[1:]\n" + (
    "try:\n    runpy.run_module('course_lib', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "sys.stderr.write('TORCH' if 'torch' in sys.modules else '')\n"
)


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def _run(argv: list[str]) -> tuple[float, float, int]:
    """Wall and CPU seconds of one fresh interpreter, and its exit status."""
    start, start_cpu = time.perf_counter(), _children_cpu()
    out = subprocess.run(argv, capture_output=True, text=True)
    return time.perf_counter() - start, _children_cpu() - start_cpu, out.returncode


def timed(args: list[str], runs: int) -> dict:
    """Medians of ``runs`` plans, each after a bare start: wall, CPU, the bare start's wall and
    CPU, the ratio of the walls; the exit status; torch seen."""
    plan, bare, ratios = [], [], []
    status = 0
    for _ in range(runs):
        bare.append(_run([sys.executable, "-c", "pass"])[:2])
        wall, cpu, status = _run([sys.executable, "-m", "course_lib", "plan", *args])
        plan.append((wall, cpu))
        ratios.append(wall / bare[-1][0])
    probe = subprocess.run([sys.executable, "-c", PROBE, "plan", *args], capture_output=True,
                           text=True)  # fmt: skip
    med = statistics.median
    return {"wall": med(w for w, _ in plan), "cpu": med(c for _, c in plan),
            "bare": med(w for w, _ in bare), "bare_cpu": med(c for _, c in bare),
            "ratio": med(ratios), "status": status,
            "torch": probe.stderr.endswith("TORCH")}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seq-len", default="2048")
    parser.add_argument("--gpu-memory", default="80GiB")
    parser.add_argument("--only", action="append", help="time these configs only")
    args = parser.parse_args()
    base = ["--seq-len", args.seq_len, "--gpu-memory", args.gpu_memory,
            "--lora-targets", "all-linear"]  # fmt: skip
    packing = ["--packing", "--lengths", "wikipedia_512"]
    load_before = os.getloadavg()[0]
    print(f"{'config':<28}{'plan (s)':>9}{'cpu':>7}{'bare':>7}{'x bare':>8}"
          f"{'--packing':>11}{'cpu':>7}{'x bare':>8}  exit  torch")  # fmt: skip
    found: dict[str, list[dict]] = {"plan": [], "packing": []}
    for name in args.only or available():
        r = timed(["--model", name, *base], args.runs)
        q = timed(["--model", name, *base, *packing], args.runs)
        found["plan"].append(r)
        found["packing"].append(q)
        print(f"{name:<28}{r['wall']:>9.3f}{r['cpu']:>7.3f}{r['bare']:>7.3f}{r['ratio']:>8.1f}"
              f"{q['wall']:>11.3f}{q['cpu']:>7.3f}{q['ratio']:>8.1f}  {r['status']}/{q['status']}"
              f"  {r['torch'] or q['torch']}")  # fmt: skip
    print(f"\n{len(found['plan'])} configs, median of {args.runs} runs each, each beside a bare "
          "Python start")  # fmt: skip
    med = statistics.median
    for what, rows in found.items():
        print(f"{what + ':':<9} wall median {med(r['wall'] for r in rows):.3f} s, worst "
              f"{max(r['wall'] for r in rows):.3f} s; {med(r['ratio'] for r in rows):.1f}x a bare "
              f"start ({med(r['bare'] for r in rows):.3f} s wall); CPU median "
              f"{med(r['cpu'] for r in rows):.3f} s, worst {max(r['cpu'] for r in rows):.3f} s "
              f"(a bare start: {med(r['bare_cpu'] for r in rows):.3f} s)")  # fmt: skip
    print(f"load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after, on "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    print(f"torch imported by any run: {any(r['torch'] for rs in found.values() for r in rs)}")


if __name__ == "__main__":
    main()
