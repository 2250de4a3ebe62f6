"""Sandboxed grading: parallel speed-up and the sandbox's cost per submission, measured.

    python benchmarks/grading.py [--students 40] [--lesson 99_fixture]

One class of ``--students`` submissions of one lesson (a third full marks, a third half done, a
third blank; default: the fast fixture lesson of tests/grading) is graded three times with
``course_lib.grading.run.grade``, as ``python -m course_lib.grading`` would:

1. ``--jobs 1``, sandboxed;  2. ``--jobs 2``, sandboxed;  3. ``--jobs 1 --no-sandbox``.

It prints each run's time (the autograde step, where the notebooks run, and the whole run),
the speed-up of 2 over 1 (target >= 1.7x on 2 cores), the sandbox's overhead per submission
(1 against 3; target <= 10 %), and whether runs 1 and 2 wrote byte-identical reports. The
machine's load average is printed too: the figures mean little on a busy machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from course_lib.grading import course as wc
from course_lib.grading.autograde import Options
from course_lib.grading.run import grade
from course_lib.grading.sandbox import Limits

REPO = Path(__file__).resolve().parents[1]
FIXTURE_ROOT = REPO / "tests" / "grading" / "fixtures"
FIXTURE = "99_fixture"  # no torch: about a second of kernel time per notebook
REPORTS = ("report.csv", "report.md", "scores.csv")


def course_root(tmp: Path, lesson: str) -> Path:
    """A course root holding ``lesson`` only (the fixture's, or the repository's)."""
    root = tmp / "root"
    base = FIXTURE_ROOT if lesson == FIXTURE else REPO
    shutil.copytree(base / wc.SOURCE_DIR / lesson, root / wc.SOURCE_DIR / lesson)
    shutil.copy(REPO / wc.CONFIG_FILE, root / wc.CONFIG_FILE)
    return root


def build_class(root: Path, tmp: Path, lesson: str, students: int) -> Path:
    """``students`` submissions in turn: full marks (the instructor's own file, which nbgrader
    grades as full marks), half done (the first answer cell answered), and blank."""
    work = wc.make_work_course(root, tmp / "release")
    wc.generate_assignments(work)
    full = nbformat.read(str(work.source_notebook(lesson)), as_version=4)
    blank = nbformat.read(str(work.release_notebook(lesson)), as_version=4)
    half = nbformat.from_dict(blank)
    answered = {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in full.cells
        if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"
    }
    first = next(
        c for c in half.cells if c.metadata.get("nbgrader", {}).get("grade_id") in answered
    )
    first.source = answered[first.metadata["nbgrader"]["grade_id"]]
    subs = tmp / "class"
    subs.mkdir()
    for n in range(students):
        nb = (full, half, blank)[n % 3]
        nbformat.write(nb, str(subs / f"student{n:03d}_{lesson}.ipynb"))
    return subs


def run(subs: Path, root: Path, out: Path, *, jobs: int, sandbox: bool, timeout: int) -> dict:
    cores = os.cpu_count() or 1
    options = Options(
        cell_timeout=timeout,
        jobs=jobs,
        sandbox=sandbox,
        limits=Limits(threads=max(1, cores // jobs)),
    )
    timings: dict[str, float] = {}
    start = time.perf_counter()
    rows = grade(subs, out, root, options=options, timings=timings)
    timings["total"] = time.perf_counter() - start
    bad = [r for r in rows if r["status"] == "not graded"]
    if bad:
        raise SystemExit(f"{len(bad)} submission(s) not graded, e.g. {bad[0]['reasons']}")
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--lesson", default=FIXTURE, help=f"a lesson id (default {FIXTURE})")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per student cell")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shapes-bench-") as name:
        tmp = Path(name)
        root = course_root(tmp, args.lesson)
        subs = build_class(root, tmp, args.lesson, args.students)
        load = os.getloadavg()
        one = run(subs, root, tmp / "one", jobs=1, sandbox=True, timeout=args.timeout)
        two = run(subs, root, tmp / "two", jobs=2, sandbox=True, timeout=args.timeout)
        bare = run(subs, root, tmp / "bare", jobs=1, sandbox=False, timeout=args.timeout)
        same = all(
            (tmp / "one" / r).read_bytes() == (tmp / "two" / r).read_bytes() for r in REPORTS
        )
        load_after = os.getloadavg()
    n = args.students
    print(
        f"grading benchmark: {n} submissions of {args.lesson}, {os.cpu_count()} core(s); "
        f"load average {load[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print(f"{'run':<28}{'autograde':>12}{'total':>10}{'per submission':>17}")
    for label, t in (
        ("sandboxed, --jobs 1", one),
        ("sandboxed, --jobs 2", two),
        ("--no-sandbox, --jobs 1", bare),
    ):
        print(
            f"{label:<28}{t['autograde']:>10.1f} s{t['total']:>8.1f} s{t['autograde'] / n:>15.2f} s"
        )
    print(
        f"speed-up, --jobs 2 over --jobs 1: autograde {one['autograde'] / two['autograde']:.2f}x, "
        f"whole run {one['total'] / two['total']:.2f}x (target >= 1.7x on 2 cores)"
    )
    extra = (one["autograde"] - bare["autograde"]) / n
    print(
        f"sandbox overhead per submission: {extra * 1000:+.0f} ms "
        f"({100 * extra / (bare['autograde'] / n):+.1f} % of an unsandboxed one; target <= 10 %)"
    )
    print(f"reports of --jobs 1 and --jobs 2 byte-identical: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
