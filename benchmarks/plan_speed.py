"""How long ``python -m course_lib plan --model ...`` takes, end to end, for every shipped config.

Each run is a fresh interpreter (``subprocess``), so the figure includes Python's start, the
imports and the plan, as a fine-tuner waits for it. For every name in
:func:`course_lib.hf_configs.available` it times two plans, full rows and ``--packing`` from the
shipped Wikipedia histogram, and prints the median of ``--runs`` runs of each (wall seconds,
and the CPU seconds the run used: on a shared, busy machine the wall figure waits for other
processes, the CPU figure much less), then the median and the worst over all configs. It also
reports whether any run imported torch (it should not: ``tests/library/test_cli.py`` fails if
one does).

    python benchmarks/plan_speed.py [--runs 5] [--seq-len 2048] [--gpu-memory 80GiB]
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


def timed(args: list[str], runs: int) -> tuple[float, float, int, bool]:
    """Median wall and CPU seconds of ``runs`` fresh runs of the plan, its exit status, torch
    seen."""
    times, cpu, torch_seen, status = [], [], False, 0
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), _children_cpu()
        out = subprocess.run([sys.executable, "-m", "course_lib", "plan", *args],
                             capture_output=True, text=True)  # fmt: skip
        times.append(time.perf_counter() - start)
        cpu.append(_children_cpu() - start_cpu)
        status = out.returncode
    probe = subprocess.run([sys.executable, "-c", PROBE, "plan", *args], capture_output=True,
                           text=True)  # fmt: skip
    torch_seen = probe.stderr.endswith("TORCH")
    return statistics.median(times), statistics.median(cpu), status, torch_seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seq-len", default="2048")
    parser.add_argument("--gpu-memory", default="80GiB")
    args = parser.parse_args()
    base = ["--seq-len", args.seq_len, "--gpu-memory", args.gpu_memory,
            "--lora-targets", "all-linear"]  # fmt: skip
    packing = ["--packing", "--lengths", "wikipedia_512"]
    print(f"{'config':<28}{'plan (s)':>10}{'cpu':>7}{'--packing (s)':>15}{'cpu':>7}  exit  torch")
    rows, pack, rows_cpu, pack_cpu, torch_any = [], [], [], [], False
    for name in available():
        t, c, status, torch_a = timed(["--model", name, *base], args.runs)
        tp, cp, status_p, torch_b = timed(["--model", name, *base, *packing], args.runs)
        rows.append(t)
        pack.append(tp)
        rows_cpu.append(c)
        pack_cpu.append(cp)
        torch_any |= torch_a or torch_b
        print(f"{name:<28}{t:>10.3f}{c:>7.3f}{tp:>15.3f}{cp:>7.3f}  {status}/{status_p}  "
              f"{torch_a or torch_b}")  # fmt: skip
    print(f"\n{len(rows)} configs, median of {args.runs} runs each")
    for what, wall, cpu in (("plan:     ", rows, rows_cpu), ("--packing:", pack, pack_cpu)):
        print(
            f"{what} median {statistics.median(wall):.3f} s, worst {max(wall):.3f} s wall; "
            f"CPU median {statistics.median(cpu):.3f} s, worst {max(cpu):.3f} s"
        )
    print(f"load average while it ran: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"torch imported by any run: {torch_any}")


if __name__ == "__main__":
    main()
