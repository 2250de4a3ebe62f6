"""The sandbox's envelope against issue 42's memory and time attacks: what each costs the host.

    python benchmarks/sandbox_envelope.py [--ordinary] [--only NAME ...]

Each attack is one student of the fast fixture lesson, graded alone with ``python -m
course_grading --jobs 1`` as an instructor would (as root, where the sandbox gets a cgroup; with
``--ordinary``, as an ordinary uid, where the watch holds it instead). It prints, per attack, the
``--memory`` limit, the row (status, auto score, the reasons that name a limit), the run's time,
and the memory the run took, two ways:

- **the run's peak**: the whole grading command runs in a cgroup v1 memory cgroup of its own
  (as root, where there is one), whose ``memory.max_usage_in_bytes`` counts every page the
  grader, its kernels and its function sandboxes held at once, tmpfs pages included, and nothing
  of other processes on the machine;
- **the host's available memory**: ``MemAvailable`` sampled every 50 ms, the median of 2 s of
  samples before the run less the lowest during it. On a machine others share, their processes
  move this figure by GiBs either way: read it beside the load average printed.

An honest student graded the same way is the baseline: the grader, its kernel and its function
sandbox hold some memory of their own. Target: no attack takes more than its ``--memory`` limit
(one slot) beyond the baseline.

Run it with another checkout's Python (``/path/to/main/.venv/bin/python
benchmarks/sandbox_envelope.py``) to grade with that checkout's grader: the attacks are the
same, built here.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "grading"))

from class_builders import (  # noqa: E402 (the tests' class builders, as benchmarks/grading.py)
    FIXTURE,
    as_ordinary_user,
    filled,
    fixture_course,
    hand_to_ordinary_user,
    set_source,
    write,
)

import course_grading  # noqa: E402
from course_grading.nbgrader import course as wc  # noqa: E402

#: The checkout whose grader this Python imports: the grading command runs there.
CHECKOUT = Path(course_grading.__file__).resolve().parents[1]

FUNCTION = "if 'ipykernel' not in sys.modules:  # where the graded function runs\n"
TOKENS = "def tokens_per_batch(batch_size, seq_len):\n    return batch_size * seq_len\n"
USERNS = (
    "import ctypes, os, sys, time\n" + FUNCTION + "    libc = ctypes.CDLL(None, use_errno=True)\n"
    "    uid, gid = os.getuid(), os.getgid()\n"
    "    if libc.unshare(0x10000000 | 0x00020000) == 0:\n"
    "        open('/proc/self/setgroups', 'w').write('deny')\n"
    "        open('/proc/self/uid_map', 'w').write(f'0 {uid} 1')\n"
    "        open('/proc/self/gid_map', 'w').write(f'0 {gid} 1')\n"
    "        os.makedirs('/tmp/big', exist_ok=True)\n"
    "        libc.mount(b'none', b'/tmp/big', b'tmpfs', 0, b'size=16g')\n"
    "        for n in range(4 * GIB):\n"
    "            with open(f'/tmp/big/{n}', 'wb') as out:\n"
    "                for _ in range(256):\n"
    "                    out.write(b'x' * 2**20)\n"
    "def tokens_per_batch(batch_size, seq_len):\n"
    "    time.sleep(1)  # the tmpfs is kept through the calls\n"
    "    return batch_size * seq_len\n"
)
HOGS = (
    "import subprocess, sys\n" + FUNCTION + "    code = 'import time; b = bytearray(800 * 2**20); "
    "time.sleep(4)'\n"
    "    hogs = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(3)]\n"
    "    print([hog.wait() for hog in hogs])\n" + TOKENS
)
SLOW = "import sys, time\n" + TOKENS.replace(
    "    return", "    if 'ipykernel' not in sys.modules:\n        time.sleep(5.5)\n    return"
)
NESTED = (
    "import subprocess\n"
    "fill = 'mount -t tmpfs -o size=16g none /tmp && head -c GIBG /dev/zero > /tmp/x && sleep 3'\n"
    "print(subprocess.run(['unshare', '-Urm', 'sh', '-c', fill]).returncode)"
)
KERNEL_HOGS = (
    "import subprocess, sys\n"
    "code = 'import time; b = bytearray(900 * 2**20); time.sleep(3)'\n"
    "print([h.wait() for h in [subprocess.Popen([sys.executable, '-c', code]) for _ in range(4)]])"
)
TMPFS = (
    "import os\n"
    "for folder in ('/tmp', os.path.expanduser('~'), '/dev/shm'):\n"
    "    try:\n"
    "        with open(os.path.join(folder, 'fill'), 'wb') as out:\n"
    "            for _ in range(600):\n"
    "                out.write(b'x' * 2**20)\n"
    "    except OSError:\n"
    "        pass\n"
    "import time; time.sleep(3)"
)
#: name -> (--memory GiB, answer cell of the graded function or None, extra cell or None)
ATTACKS = {
    "honest": (1, None, None),
    "function: user namespace, tmpfs of memory + 1 GiB": (4, USERNS, None),
    "function: 3 x 800 MiB processes": (1, HOGS, None),
    "function: 6 calls of 5.5 s (under the 7 s limit)": (1, SLOW, None),
    "kernel: unshare -Urm, tmpfs of memory + 1 GiB": (1, None, NESTED),
    "kernel: 4 x 900 MiB processes": (2, None, KERNEL_HOGS),
    "kernel: /tmp, home and /dev/shm filled (1.1 GiB)": (1, None, TMPFS),
}


def available() -> int:
    """``MemAvailable`` now, in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


class RunCgroup:
    """A cgroup v1 memory cgroup of its own for one command (root only), and its peak."""

    def __init__(self, name: str) -> None:
        own = [line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
               if "memory" in line.split(":", 2)[1].split(",")]  # fmt: skip
        parent = Path("/sys/fs/cgroup/memory") / (own[0].lstrip("/") if own else "")
        self.folder = parent / name if os.geteuid() == 0 and parent.is_dir() else None
        if self.folder is not None:
            self.folder.mkdir()

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the cgroup (as it is where there is none)."""
        if self.folder is None:
            return argv
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.folder / "cgroup.procs"),
                *argv]  # fmt: skip

    def peak(self) -> float | None:
        """The most the command held at once, in GiB (``None``: no cgroup)."""
        if self.folder is None:
            return None
        return int((self.folder / "memory.max_usage_in_bytes").read_text()) / 2**30

    def remove(self) -> None:
        """Remove the cgroup, its processes gone."""
        for _ in range(100):
            if self.folder is None or not self.folder.exists():
                return
            try:
                self.folder.rmdir()
            except OSError:
                time.sleep(0.1)


class Lowest:
    """The lowest ``MemAvailable`` while the block runs (sampled every 50 ms)."""

    def __enter__(self) -> Lowest:
        self.low, self._stop = available(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.low = min(self.low, available())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def notebook(work: wc.WorkCourse, answer: str | None, extra: str | None, fill: int):
    """The honest full-marks notebook, with the attack in its answer cell or a cell of its own
    (``GIB`` in its code: the GiB it fills)."""
    import nbformat

    nb = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    if answer is not None:
        nb = set_source(nb, "answer_tokens", answer.replace("GIB", str(fill)))
    if extra is not None:
        nb.cells.append(nbformat.v4.new_code_cell(extra.replace("GIB", str(fill))))
    return nb


def grade_one(work: wc.WorkCourse, root: Path, name: str, ordinary: bool) -> dict:
    """Grade one attack alone; what it cost."""
    memory, answer, extra = ATTACKS[name]
    base = Path(tempfile.mkdtemp(prefix="shapes-envelope-"))
    base.chmod(0o755)
    subs, out = base / "subs", base / "out"
    nb = notebook(work, answer, extra, memory + 1)
    write(subs / f"attacker_{FIXTURE}.ipynb", nb)
    command = [sys.executable, "-m", "course_grading", str(subs), "--out", str(out)]
    command += ["--root", str(root), "--jobs", "1", "--memory", str(memory)]
    env = {**wc.nbgrader_env(), "TMPDIR": str(base), "HOME": str(base)}
    if ordinary:
        hand_to_ordinary_user(base)
        command = as_ordinary_user(command)
    group = RunCgroup(f"shapes-envelope-{os.getpid()}-{list(ATTACKS).index(name)}")
    before = statistics.median(available() for _ in range(40) if time.sleep(0.05) is None)
    started = time.monotonic()
    with Lowest() as low:
        done = subprocess.run(
            group.command(command), capture_output=True, text=True, env=env, cwd=CHECKOUT
        )  # ``-m`` imports from the folder it starts in
    seconds = time.monotonic() - started
    peak = group.peak()
    group.remove()
    rows = []
    if (out / "report.csv").is_file():
        with open(out / "report.csv", newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    shutil.rmtree(base, ignore_errors=True)
    row = rows[0] if rows else {"status": f"no row (rc {done.returncode})", "auto_score": "-"}
    said = [r for r in row.get("reasons", "").split(" | ") if "limit" in r or "budget" in r]
    return {
        "memory": memory,
        "row": f"{row['status']}, auto {row['auto_score']}",
        "said": "; ".join(said)[:300] or "-",
        "seconds": seconds,
        "took": (before - low.low) / 2**30,
        "peak": peak,
        "error": done.stderr.strip().splitlines()[-1:] if done.returncode else [],
    }


def main() -> None:
    """Grade each attack alone and print what it cost (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ordinary", action="store_true", help="grade as an ordinary uid")
    parser.add_argument("--only", nargs="*", default=None, help="attacks whose name starts so")
    args = parser.parse_args()
    print(f"grader: {CHECKOUT / 'course_grading'}")
    print(f"as {'an ordinary uid (no cgroup: watched)' if args.ordinary else 'root'}; load "
          f"{os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f}")  # fmt: skip
    base = Path(tempfile.mkdtemp(prefix="shapes-envelope-course-"))
    base.chmod(0o755)
    root, work = fixture_course(base)
    if args.ordinary:
        hand_to_ordinary_user(base)
    try:
        for name in ATTACKS:
            if args.only and not any(name.startswith(o) for o in args.only):
                continue
            got = grade_one(work, root, name, args.ordinary)
            peak = "-" if got["peak"] is None else f"{got['peak']:.2f} GiB"
            print(f"{name} (--memory {got['memory']}): {got['row']}, {got['seconds']:.0f} s; the "
                  f"run's peak {peak}, MemAvailable down {got['took']:.2f} GiB; {got['said']} "
                  f"{got['error'] or ''}", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"load {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f}")


if __name__ == "__main__":
    main()
