"""How long ``python -m course_lib plan --model ...`` takes, end to end, for every shipped config.

Each run is a fresh interpreter (``subprocess``), so the figure includes Python's start, the
imports and the plan, as a fine-tuner waits for it. For every name in
:func:`course_lib.hf_configs.available` it times two plans, full rows and ``--packing`` from the
shipped Wikipedia histogram, and prints the median of ``--runs`` runs of each, then the median
and the worst over all configs. It also reports whether any run imported torch (it should not:
``tests/library/test_cli.py`` fails if one does).

    python benchmarks/plan_speed.py [--runs 5] [--seq-len 2048] [--gpu-memory 80GiB]
"""

from __future__ import annotations

import argparse
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


def timed(args: list[str], runs: int) -> tuple[float, int, bool]:
    """Median wall seconds of ``runs`` fresh runs of the plan, its exit status, torch seen."""
    times, torch_seen, status = [], False, 0
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "course_lib", "plan", *args],
                             capture_output=True, text=True)  # fmt: skip
        times.append(time.perf_counter() - start)
        status = out.returncode
    probe = subprocess.run([sys.executable, "-c", PROBE, "plan", *args], capture_output=True,
                           text=True)  # fmt: skip
    torch_seen = probe.stderr.endswith("TORCH")
    return statistics.median(times), status, torch_seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seq-len", default="2048")
    parser.add_argument("--gpu-memory", default="80GiB")
    args = parser.parse_args()
    base = ["--seq-len", args.seq_len, "--gpu-memory", args.gpu_memory,
            "--lora-targets", "all-linear"]  # fmt: skip
    packing = ["--packing", "--lengths", "wikipedia_512"]
    print(f"{'config':<28}{'plan (s)':>10}{'--packing (s)':>15}  exit  torch")
    rows, pack, torch_any = [], [], False
    for name in available():
        t, status, torch_a = timed(["--model", name, *base], args.runs)
        tp, status_p, torch_b = timed(["--model", name, *base, *packing], args.runs)
        rows.append(t)
        pack.append(tp)
        torch_any |= torch_a or torch_b
        print(f"{name:<28}{t:>10.3f}{tp:>15.3f}  {status}/{status_p}  {torch_a or torch_b}")
    print(f"\n{len(rows)} configs, median of {args.runs} runs each")
    print(f"plan:      median {statistics.median(rows):.3f} s, worst {max(rows):.3f} s")
    print(f"--packing: median {statistics.median(pack):.3f} s, worst {max(pack):.3f} s")
    print(f"torch imported by any run: {torch_any}")


if __name__ == "__main__":
    main()
