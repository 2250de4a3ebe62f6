"""Bin-packing benchmark: best-fit decreasing vs greedy next-fit on a million sequence lengths.

For each workload it prints wall time, rows used, the lower bound ceil(Σ lengths / capacity),
rows / lower bound, and the fill fraction Σ lengths / (rows * capacity). "pad" is no packing at
all (one sequence per row of ``capacity``), for scale. Workloads:

* synthetic instruction lengths (course_lib.data.sample_lengths) at capacity 2048;
* the BERT Wikipedia histogram of Krell et al. 2021 stretched ×4, at capacity 2048;
* the same histogram as published, at capacity 512 (the paper's SPFHP reached 99.6%).

If ``trl`` is importable, ``trl.data_utils.pack_dataset(strategy="bfd")`` runs on the same
lengths in the same run and the ratio of times is printed.

    python benchmarks/packing.py [--n 1000000] [--wiki PATH] [--no-trl]

The Wikipedia histogram ships with the course (``course_lib/lengths/``); ``--wiki`` takes another
``length,count`` CSV instead.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from course_lib.data import (
    length_histogram_from_csv,
    lengths_from_histogram,
    load_length_histogram,
    sample_lengths,
)
from course_lib.packing import lower_bound_rows, pack_lengths

PAPER_FILL_512 = 0.996  # Krell et al. 2021, SPFHP on the Wikipedia histogram at 512


def timed_pack(lengths: np.ndarray, capacity: int, strategy: str) -> tuple[float, int]:
    start = time.perf_counter()
    rows = pack_lengths(lengths, capacity, strategy)
    elapsed = time.perf_counter() - start
    if sum(len(r) for r in rows) != lengths.size:
        raise AssertionError(f"{strategy} packed {sum(len(r) for r in rows)} of {lengths.size}")
    return elapsed, len(rows)


def trl_bfd(lengths: np.ndarray, capacity: int) -> tuple[float, int] | None:
    """Time trl's pack_dataset on a dataset whose rows have exactly these lengths (or None)."""
    try:
        import pyarrow as pa
        from datasets import Dataset
        from trl.data_utils import pack_dataset
    except ImportError:
        return None
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()  # its per-batch bar would bury the table
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = pa.array(np.zeros(int(offsets[-1]), dtype=np.int32))
    column = pa.LargeListArray.from_arrays(pa.array(offsets), values)
    dataset = Dataset(pa.table({"input_ids": column}))
    start = time.perf_counter()
    packed = pack_dataset(dataset, seq_length=capacity, strategy="bfd")
    elapsed = time.perf_counter() - start
    return elapsed, len(packed)


def run_workload(
    name: str, lengths: np.ndarray, capacity: int, with_trl: bool
) -> tuple[list[str], dict[str, float]]:
    """Table lines for one workload, and the fill fraction of each strategy."""
    total = int(lengths.sum())
    bound = lower_bound_rows(lengths, capacity)
    lines = [
        f"\n{name}: n={lengths.size:,}, capacity={capacity}, mean length "
        f"{lengths.mean():.1f}, max {lengths.max()}, lower bound {bound:,} rows",
        f"{'method':<14}{'time s':>9}{'rows':>12}{'rows/bound':>12}{'fill':>9}",
    ]
    lines.append(
        f"{'pad (none)':<14}{'-':>9}{lengths.size:>12,}{lengths.size / bound:>12.4f}"
        f"{total / (lengths.size * capacity):>9.2%}"
    )
    results, fills = {}, {}
    for strategy in ("greedy", "bfd"):
        elapsed, rows = timed_pack(lengths, capacity, strategy)
        results[strategy] = (elapsed, rows)
        fills[strategy] = total / (rows * capacity)
        lines.append(
            f"{strategy:<14}{elapsed:>9.2f}{rows:>12,}{rows / bound:>12.4f}"
            f"{total / (rows * capacity):>9.2%}"
        )
    if with_trl:
        trl = trl_bfd(lengths, capacity)
        if trl is None:
            lines.append("trl bfd       skipped: trl (with datasets, pyarrow) is not importable")
        else:
            elapsed, rows = trl
            lines.append(
                f"{'trl bfd':<14}{elapsed:>9.2f}{rows:>12,}{rows / bound:>12.4f}"
                f"{total / (rows * capacity):>9.2%}"
            )
            ours = results["bfd"]
            lines.append(
                f"ours vs trl: {elapsed / ours[0]:.1f}x faster, rows {ours[1]:,} vs {rows:,}"
            )
    return lines, fills


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="lengths per workload")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--wiki",
        type=Path,
        default=None,
        help="a length,count CSV to use instead of the shipped Wikipedia histogram",
    )
    parser.add_argument("--no-trl", action="store_true", help="skip the trl comparison")
    args = parser.parse_args()

    out, _ = run_workload(
        "synthetic instruction lengths",
        sample_lengths(args.n, seed=args.seed),
        2048,
        with_trl=not args.no_trl,
    )
    hist = length_histogram_from_csv(args.wiki) if args.wiki else load_length_histogram()
    wiki4 = lengths_from_histogram(*hist, n=args.n, seed=args.seed, scale=4)
    out += run_workload("Wikipedia histogram x4", wiki4, 2048, with_trl=not args.no_trl)[0]
    wiki = lengths_from_histogram(*hist, n=args.n, seed=args.seed)
    lines, fills = run_workload(
        "Wikipedia histogram (Krell et al. 2021)", wiki, 512, with_trl=False
    )
    out += lines
    out.append(f"paper (SPFHP) fill at 512: {PAPER_FILL_512:.1%}; ours (bfd): {fills['bfd']:.2%}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
