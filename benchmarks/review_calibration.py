"""The copy listing, calibrated: how many honest answers it lists, and how many copies it finds.

    .venv/bin/python benchmarks/review_calibration.py [--thresholds 0.6 0.7 0.75 0.8 0.9]

For each graded function of the course, the honest corpus (``tests/grading/honest_corpus``:
answers written independently of the instructor's solution, each right) is graded as one class
with the course's sources (``review/copies.py``); an honest answer in any listed cluster is a
false positive of the listing. Each copy of ``tests/grading/corpus.copies_of`` (the solution,
the library's code and the grader's reference pasted, a classmate's answer: renamed,
re-commented, reordered, ten dead lines, all at once) is then handed in among the corpus, and is
found when it is listed in a cluster with what it was copied from.

Printed: per function, the honest answers listed (and which) and the copies found (and which
were missed) at the threshold the grader uses (``copies.THRESHOLD``); the same overall at every
``--thresholds``; and a two-fold check of the choice. The threshold was chosen on the whole
corpus by one rule: the smallest threshold of the grid at which the honest answers listed reach
their fewest (above it, only answers that are a source's program line for line stay listed, and
a higher line only loses copies). The two-fold check makes the same choice on half of each
function's answers (alternate files) and reports the other half's false-positive rate at it, so
the figure is not only the one the choice was fitted to. The fingerprint's settings
(``fingerprints.K``, the normalisation) were chosen on the whole corpus too.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "grading"))

from corpus import caught_copies, graded_functions, honest, listed_honest  # noqa: E402

from course_grading.review.copies import THRESHOLD  # noqa: E402

GRID = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({n / d:.1%})" if d else "0/0"


def per_function(threshold: float) -> tuple[int, int, int, int]:
    """Print each function's figures at ``threshold``; return the totals (listed, honest, found,
    copies)."""
    totals = [0, 0, 0, 0]
    print(f"\nat the grader's threshold, {threshold:.0%} of the smaller cell's code in common:")
    print(f"{'function':<28} {'honest listed':>16} {'copies found':>16}")
    for name, graded in sorted(graded_functions().items()):
        listed, judged = listed_honest(graded, threshold=threshold)
        caught = caught_copies(graded, threshold)
        found = sum(ok for _, ok in caught)
        print(f"{name:<28} {_pct(len(listed), judged):>16} {_pct(found, len(caught)):>16}")
        for stem in listed:
            print(f"    listed: {stem}")
        for what, ok in caught:
            if not ok:
                print(f"    missed: {what}")
        totals = [a + b for a, b in zip(totals, (len(listed), judged, found, len(caught)))]
    print(f"{'all':<28} {_pct(totals[0], totals[1]):>16} {_pct(totals[2], totals[3]):>16}")
    return totals[0], totals[1], totals[2], totals[3]


def curve(thresholds: list[float]) -> None:
    print("\nthe whole corpus at each threshold (honest listed | copies found):")
    for t in thresholds:
        listed = judged = found = copies = 0
        for graded in graded_functions().values():
            names, n = listed_honest(graded, threshold=t)
            caught = caught_copies(graded, t)
            listed, judged = listed + len(names), judged + n
            found, copies = found + sum(ok for _, ok in caught), copies + len(caught)
        print(f"  {t:.2f}: {_pct(listed, judged):>14} | {_pct(found, copies)}")


def _listed_at(fold: list[tuple], t: float) -> tuple[int, int]:
    listed = judged = 0
    for graded, stems in fold:
        names, n = listed_honest(graded, stems, threshold=t)
        listed, judged = listed + len(names), judged + n
    return listed, judged


def two_fold() -> None:
    """Choose the threshold on one half of the corpus, report the other half at it."""
    halves = ([], [])
    for graded in graded_functions().values():
        stems = sorted(honest(graded.function))
        halves[0].append((graded, stems[0::2]))
        halves[1].append((graded, stems[1::2]))
    print("\ntwo-fold: the threshold chosen on one half, the other half's honest answers listed:")
    for i, half in enumerate(halves):
        print(
            f"  half {i + 1} at the grader's {THRESHOLD:.2f}: {_pct(*_listed_at(half, THRESHOLD))}"
        )
    for fit, held in ((0, 1), (1, 0)):
        counts = {t: _listed_at(halves[fit], t)[0] for t in GRID}
        chosen = next(t for t in GRID if counts[t] == min(counts.values()))
        listed, judged = _listed_at(halves[held], chosen)
        fitted = _listed_at(halves[fit], chosen)
        print(
            f"  chosen on half {fit + 1}: {chosen:.2f} (that half: {_pct(*fitted)}); "
            f"held-out half {held + 1}: {_pct(listed, judged)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thresholds", type=float, nargs="*", default=list(GRID))
    args = parser.parse_args()
    start = time.perf_counter()
    per_function(THRESHOLD)
    curve(args.thresholds)
    two_fold()
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
