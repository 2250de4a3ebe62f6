"""Sandboxed grading: parallel speed-up and the sandbox's cost per submission, measured.

    python benchmarks/grading.py [--students 40] [--lesson 99_fixture]

One class of ``--students`` submissions of one lesson (a third full marks, a third half done, a
third blank; default: the fast fixture lesson of tests/grading) is graded three times with
``course_grading.run.grade``, as ``python -m course_grading`` would:

1. ``--jobs 1``, sandboxed;  2. ``--jobs 2``, sandboxed;  3. ``--jobs 1 --no-sandbox``.

Runs 1 and 2 alternate ``--repeats`` times (default 3) and their medians are compared: on 2
cores ``--jobs 1`` already overlaps the grader's own work with the kernel's, by a varying
amount, so one pair alone can mislead; the pair-by-pair range is printed too. It prints each
run's time (the autograde step, where the notebooks run, and the whole run), the speed-up of 2
over 1 (target >= 1.7x on 2 cores), the sandbox's overhead per submission (1 against 3; target
<= 10 %), and whether runs 1 and 2 wrote byte-identical reports. Runs 1 and 3 are minutes apart,
so a change in the machine's load shows as overhead; the sandbox's cost is therefore also
measured directly: ``--pairs`` runs of the fixture's notebook in one worker, sandboxed and not
in turn. The load average is printed: the figures mean little on a busy machine. The class is
honest: a row not graded, or with its feedback withheld, stops the benchmark (a false alarm is a
bug, and it would change the times).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from tqdm import tqdm

from course_grading.autograde import Options
from course_grading.judge.items import strip_hidden_tests
from course_grading.nbgrader import course as wc
from course_grading.pages.feedback import WITHHELD
from course_grading.run import grade
from course_grading.sandbox.bwrap import Limits, check_available
from course_grading.sandbox.jobs import JobSpec, Worker

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
    """``students`` submissions in turn: full marks (every answer cell answered with the
    solution's code, written answers in the student's own words), half done (the first answer
    cell answered), and blank. None is a copy of the instructor's file: the grader flags those."""
    work = wc.make_work_course(root, tmp / "release")
    wc.generate_assignments(work)
    source = nbformat.read(str(work.source_notebook(lesson)), as_version=4)
    blank = nbformat.read(str(work.release_notebook(lesson)), as_version=4)
    markers = ("### BEGIN SOLUTION", "### END SOLUTION")
    answers = {
        c.metadata["nbgrader"]["grade_id"]: "\n".join(
            line for line in c.source.split("\n") if not line.strip().startswith(markers)
        )
        for c in source.cells
        if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"
    }
    full, half = nbformat.from_dict(blank), nbformat.from_dict(blank)
    for cell in full.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = answers.get(meta["grade_id"], "My own words: not graded here.")
    first = next(c for c in half.cells if c.metadata.get("nbgrader", {}).get("grade_id") in answers)
    first.source = answers[first.metadata["nbgrader"]["grade_id"]]
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
    bad = [r for r in rows if r.status == "not graded" or WITHHELD in "; ".join(r.reasons)]
    if bad:  # the class is honest: this is a false alarm, and the times would mean little
        raise SystemExit(f"{len(bad)} honest submission(s) {bad[0].status}: {bad[0].reasons}")
    return timings


def median_run(runs: list[dict]) -> dict:
    """Per phase, the median over ``runs`` (each a ``run()`` result)."""
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def paired_runs(tmp: Path, pairs: int) -> tuple[float, float]:
    """Median seconds a worker takes for the fixture's notebook, sandboxed and not.

    The two kinds alternate in one worker process, so a change in the machine's load hits both
    alike; the first pair (imports, caches) is left out.
    """
    source = FIXTURE_ROOT / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
    release = FIXTURE_ROOT / wc.RELEASE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
    nb = nbformat.read(str(source), as_version=4)
    bwrap = check_available()
    worker = Worker(0, tmp / "worker.log")
    seconds: dict[bool, list[float]] = {True: [], False: []}
    try:
        for n in range(pairs + 1):
            for sandboxed in (True, False):
                job = tmp / f"pair-{n}-{sandboxed}"
                (job / "stage").mkdir(parents=True)
                (job / "runtime").mkdir()
                nbformat.write(strip_hidden_tests(nb), str(job / "in.ipynb"))
                shutil.copy(release, job / "stage")
                spec = JobSpec(
                    lesson=FIXTURE,
                    sandbox=sandboxed,
                    bwrap=bwrap if sandboxed else None,
                    limits=Limits().as_dict(),
                    cell_timeouts=[60] * len(nb.cells),
                    notebook_timeout=300,
                    hidden=[str(job / "in.ipynb")],
                )
                start = time.perf_counter()
                outcome = worker.run(job, spec)
                if outcome.status != "ok":
                    raise SystemExit(f"paired run failed: {outcome.reason}")
                if n:
                    seconds[sandboxed].append(time.perf_counter() - start)
    finally:
        worker.close()
    return statistics.median(seconds[True]), statistics.median(seconds[False])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--lesson", default=FIXTURE, help=f"a lesson id (default {FIXTURE})")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per student cell")
    parser.add_argument("--pairs", type=int, default=10, help="interleaved sandbox/plain pairs")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved --jobs 1/2 pairs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shapes-bench-") as name:
        tmp = Path(name)
        root = course_root(tmp, args.lesson)
        subs = build_class(root, tmp, args.lesson, args.students)
        load = os.getloadavg()
        ones, twos = [], []
        for r in tqdm(range(args.repeats), desc="--jobs 1 / --jobs 2 pairs", unit="pair"):
            for jobs, runs in ((1, ones), (2, twos)):
                out = tmp / f"{('one', 'two')[jobs - 1]}{r}"
                runs.append(run(subs, root, out, jobs=jobs, sandbox=True, timeout=args.timeout))
        bare = run(subs, root, tmp / "bare", jobs=1, sandbox=False, timeout=args.timeout)
        same = all(
            (tmp / "one0" / name).read_bytes() == (tmp / f"{kind}{r}" / name).read_bytes()
            for name in REPORTS
            for kind in ("one", "two")
            for r in range(args.repeats)
        )
        sandboxed, plain = paired_runs(tmp, args.pairs)
        load_after = os.getloadavg()
    n = args.students
    one, two = median_run(ones), median_run(twos)
    print(
        f"grading benchmark: {n} submissions of {args.lesson}, {os.cpu_count()} core(s); "
        f"load average {load[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print(f"{'run (median of ' + str(args.repeats) + ')':<32}{'autograde':>12}{'total':>10}"
          f"{'per submission':>17}")  # fmt: skip
    for label, t in (
        ("sandboxed, --jobs 1", one),
        ("sandboxed, --jobs 2", two),
        ("--no-sandbox, --jobs 1 (1 run)", bare),
    ):
        print(
            f"{label:<32}{t['autograde']:>10.1f} s{t['total']:>8.1f} s{t['autograde'] / n:>15.2f} s"
        )
    pairs = [a["autograde"] / b["autograde"] for a, b in zip(ones, twos, strict=True)]
    print(
        f"speed-up, --jobs 2 over --jobs 1: autograde {one['autograde'] / two['autograde']:.2f}x, "
        f"whole run {one['total'] / two['total']:.2f}x (target >= 1.7x on 2 cores); "
        f"pair by pair {min(pairs):.2f}x to {max(pairs):.2f}x"
    )
    per_bare = bare["autograde"] / n
    paired = sandboxed - plain
    print(
        f"sandbox overhead per submission: {paired * 1000:+.0f} ms = "
        f"{100 * paired / per_bare:+.1f} % of an unsandboxed {args.lesson} submission "
        f"(target <= 10 %); median of {args.pairs} interleaved pairs, fixture notebook: "
        f"{sandboxed:.2f} s sandboxed, {plain:.2f} s not"
    )
    extra = (one["autograde"] - bare["autograde"]) / n
    print(
        f"  (runs 1 and 3, minutes apart: {extra * 1000:+.0f} ms = {100 * extra / per_bare:+.1f} %;"
        " this also holds whatever else the machine did meanwhile)"
    )
    print(f"reports of --jobs 1 and --jobs 2 byte-identical: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
