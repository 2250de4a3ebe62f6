"""Sandboxed grading: parallel speed-up and the sandbox's cost per submission, measured.

    python benchmarks/grading.py [--students 40] [--lesson 99_fixture]
    python benchmarks/grading.py --scheduler [tls://HOST:PORT --cluster-certs DIR] [--students 40]

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

``--scheduler`` measures grading on a Dask cluster instead (``course_grading/cluster.py``): the
class is graded ``--jobs 2`` here and on the cluster in turn, ``--repeats`` times, side by side
in one run; without an address, the cluster is a scheduler and two workers of one thread each
started on this machine (the same two slots as ``--jobs 2``). It prints the cluster's overhead
per submission against ``--jobs 2`` (target <= 10 %), whether the reports are byte-identical, the
time a worker spends on one submission (``graded.csv``) and this machine's own share, and a line
extrapolating a class of 300 on N workers from those per-submission times.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
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


def options_for(jobs: int, sandbox: bool, timeout: int) -> Options:
    cores = os.cpu_count() or 1
    limits = Limits(threads=max(1, cores // jobs))
    return Options(cell_timeout=timeout, jobs=jobs, sandbox=sandbox, limits=limits)


def run(
    subs: Path, root: Path, out: Path, *, jobs: int, sandbox: bool, timeout: int,
    cluster: object = None,
) -> dict:  # fmt: skip
    options = options_for(jobs, sandbox, timeout)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    rows = grade(subs, out, root, options=options, timings=timings, cluster=cluster)
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


class LocalCluster:
    """``dask scheduler`` and two ``dask worker --nthreads 1`` on 127.0.0.1, as processes, over
    TLS with certificates made for it (``tmp/certs``), Dask's statistical profiler off in the
    workers (docs/instructors.md, section 3.8)."""

    def __init__(self, tmp: Path) -> None:
        from course_grading.cluster_certs import make

        self.certs = make(tmp / "certs")

        def tls(role: str) -> list[str]:
            folder = self.certs / role
            return ["--tls-ca-file", str(folder / "ca.pem"), "--tls-cert", str(folder / "cert.pem"),
                    "--tls-key", str(folder / "key.pem")]  # fmt: skip

        dask = str(Path(sys.executable).parent / "dask")
        file, log = tmp / "scheduler.json", open(tmp / "dask.log", "wb")  # noqa: SIM115
        env = {**os.environ, "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}  # 3.8
        common = {"stdout": log, "stderr": log, "env": env}
        self.procs = [
            subprocess.Popen(
                [
                    dask,
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--protocol",
                    "tls",
                    "--scheduler-file",
                    str(file),
                    *tls("scheduler"),
                ],
                **common,
            )
        ]
        deadline = time.monotonic() + 60
        while not file.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.address = json.loads(file.read_text())["address"]
        for name in ("w1", "w2"):
            self.procs.append(subprocess.Popen([
                dask, "worker", self.address, "--nthreads", "1", "--name", name, "--host",
                "127.0.0.1", "--no-dashboard", "--local-directory", str(tmp / "dask"),
                *tls("worker"),
            ], **common))  # fmt: skip

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def cluster_main(args: argparse.Namespace) -> int:
    """``--scheduler``: the class here (``--jobs 2``) and on the cluster in turn (module doc)."""
    from course_grading.cluster import ClusterRun
    from course_grading.cluster_connect import connect
    from course_grading.cluster_store import Store

    with tempfile.TemporaryDirectory(prefix="shapes-bench-") as name:
        tmp = Path(name)
        os.chmod(tmp, 0o755)
        root = course_root(tmp, args.lesson)
        subs = build_class(root, tmp, args.lesson, args.students)
        started = LocalCluster(tmp) if args.scheduler == "local" else None
        address = started.address if started else args.scheduler
        client = connect(address, started.certs / "client" if started else args.cluster_certs)
        load = os.getloadavg()
        local, remote, spent, per_worker = [], [], [], []
        try:
            client.wait_for_workers(1, timeout=120)
            for r in tqdm(range(args.repeats), desc="--jobs 2 / cluster pairs", unit="pair"):
                local.append(run(subs, root, tmp / f"local{r}", jobs=2, sandbox=True,
                                 timeout=args.timeout))  # fmt: skip
                out = tmp / f"cluster{r}"
                options = options_for(2, True, args.timeout)
                store = Store(out / "cluster", options, resume=False)
                on = ClusterRun(client, address, store, wait=300)
                remote.append(run(subs, root, out, jobs=2, sandbox=True, timeout=args.timeout,
                                  cluster=on))  # fmt: skip
                spent.append(sum(on.spent.values()))
                with open(out / "cluster" / "graded.csv", newline="") as fh:
                    per_worker += [float(row["seconds"]) for row in csv.DictReader(fh)]
            same = all(
                (tmp / "local0" / name).read_bytes() == (tmp / f"{kind}{r}" / name).read_bytes()
                for name in REPORTS
                for kind in ("local", "cluster")
                for r in range(args.repeats)
            )
        finally:
            client.close()
            if started:
                started.stop()
        load_after = os.getloadavg()
    print_cluster(args, local, remote, spent, per_worker, same, (load[0], load_after[0]))
    return 0 if same else 1


def print_cluster(args, local, remote, spent, per_worker, same, load) -> None:
    """The cluster's figures (module docstring)."""
    n, pairs = args.students, [c["autograde"] / h["autograde"] for h, c in zip(local, remote)]
    here, there = median_run(local), median_run(remote)
    where = "two local workers of 1 thread" if args.scheduler == "local" else args.scheduler
    print(
        f"cluster benchmark: {n} submissions of {args.lesson}, {os.cpu_count()} core(s), "
        f"{args.repeats} pair(s) side by side; load average {load[0]:.1f} before, "
        f"{load[1]:.1f} after (the machine is shared: read the pairs, not one figure)"
    )
    for label, t in (("here, --jobs 2", here), (f"Dask ({where})", there)):
        print(f"{label:<44}{t['autograde']:>8.1f} s autograde{t['total']:>8.1f} s in all"
              f"{t['autograde'] / n:>8.2f} s a submission")  # fmt: skip
    extra = (there["autograde"] - here["autograde"]) / n
    print(
        f"cluster overhead per submission: {extra * 1000:+.0f} ms = "
        f"{100 * extra / (here['autograde'] / n):+.1f} % of --jobs 2's (target <= 10 %); "
        f"pair by pair {100 * (min(pairs) - 1):+.1f} % to {100 * (max(pairs) - 1):+.1f} %"
    )
    worker = statistics.mean(per_worker)
    client = statistics.median(spent) / n  # preparing and recording, on this machine
    serial = (there["total"] - there["autograde"]) / n  # course, feedback, copies: here
    fixed = max(0.0, there["autograde"] - max(n * worker / 2, n * client))
    print(
        f"per submission: {worker:.2f} s on a worker (notebook and items), {client:.2f} s here "
        f"(prepare, record), {serial:.2f} s here after (course, feedback, copies); "
        f"{fixed:.1f} s a run besides (the solution's run, the last notebooks)"
    )
    for workers in (2, 8, 32):
        autograde = max(300 * worker / workers, 300 * client) + fixed
        print(
            f"a class of 300 on {workers} workers of 1 thread: about "
            f"{(autograde + 300 * serial) / 60:.1f} min ({autograde / 60:.1f} min to autograde"
            f"{', this machine the bottleneck' if 300 * client > 300 * worker / workers else ''}"
            f", {300 * serial / 60:.1f} min of its own steps; copies grow faster than linearly)"
        )
    print(f"reports of --jobs 2 and the cluster byte-identical: {'yes' if same else 'NO'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--lesson", default=FIXTURE, help=f"a lesson id (default {FIXTURE})")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per student cell")
    parser.add_argument("--pairs", type=int, default=10, help="interleaved sandbox/plain pairs")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved --jobs 1/2 pairs")
    parser.add_argument(
        "--scheduler",
        nargs="?",
        const="local",
        default=None,
        help="compare --jobs 2 with a Dask cluster: this scheduler's (tls://), or (no address) "
        "two local workers of one thread each, over TLS",
    )
    parser.add_argument(
        "--cluster-certs", type=Path, help="with a scheduler's address: the client's certificates"
    )
    args = parser.parse_args(argv)
    if args.scheduler:
        return cluster_main(args)
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
