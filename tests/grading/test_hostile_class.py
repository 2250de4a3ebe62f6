"""A hostile class cannot break grading, reach anybody else, or cost the host (issues 12, 19).

One class of the fast fixture lesson: four honest students (full marks, blank, half done, and
``cpu_honest``: full marks plus a first cell that computes for 1.5 s of CPU time) and hostile
ones, each a full-marks notebook with more code:

- vandal: deletes the folders above it, the output folder, the submissions and the course, and
  tries to write into the venv;
- reader: walks the folders around it and prints every hidden-test and solution line it finds;
- writer: appends to another student's original and to the gradebook;
- fork bomb: forks until it cannot (bounded at 2,000 so a broken limit cannot take the machine;
  its children exit at once but are never reaped);
- lingerer: starts a process in a session of its own, to outlive its kernel;
- memory hog: asks for 10 GiB;
- network: connects to a port this test listens on, on 127.0.0.1;
- classkiller: kills every kernel and grader it finds in ``/proc``, then ``kill -9 -1``;
- graderkiller: kills its parent and every process above it, pid 1, and ``kill -9 -1``;
- zombies: a fork-and-exit loop whose pid keeps moving (no process-list sweep can catch it),
  and children never reaped up to the process limit;
- cpu_hog: a first cell running 16 busy processes, each in a session of its own (so, with the
  scheduler's autogroups, each a CPU share of its own), beside ``cpu_honest`` (``--jobs 2`` runs
  the two together: they sort next to each other);
- hogs: 4 processes of 900 MiB each, each within its address-space limit, together over the
  sandbox's memory (``--memory 2``);
- filler: 100 MiB into each of ``/tmp``, its home, ``/dev/shm`` and its runtime folder, and
  30,000 files (``--tmp-size 64``: each private folder holds 64 MiB);
- display: one 100 MiB ``display`` message (the cap is 32 MiB);
- sleeper: nine cells each sleeping just under the cell limit (``--timeout 8``);
- graderreader: imports ``course_grading`` and reads its files at the grader's own paths;

and, in the answer cell of the graded function (``tokens_per_batch``), which runs again in the
function sandbox (issue 42):

- fnhogs: where the function is graded, 3 processes of 900 MiB each at once (``--memory 2``);
- escaper: a user and mount namespace of its own with a 3 GiB tmpfs where the function is graded,
  ``unshare -Urm`` and a 100 MiB tmpfs in the kernel, and the calls the issue found reaching the
  kernel (``io_uring_setup``, ``keyctl``, ``personality``, ``pidfd_open``, ``process_vm_readv``,
  ``perf_event_open``, ``setns``); its function answers right only where nothing got through;
- slowcalls: every call sleeps 5.5 s where the function is graded, under the 7 s per-call limit
  (6 calls: 33 s), against the item's budget of 30 s.

Sizes are the smallest that prove each limit (the issue's attacks were 1.5 GB and 600 MiB; 4 ×
900 MiB under ``--memory 1``; ``--memory 2`` here so that the 100 MiB message can be built in a
kernel's address space). The class is graded ``--jobs 2`` as root, again ``--jobs 1``, its honest
students alone, and ``--jobs 2`` as an ordinary uid (user namespaces instead of dropped uids, no
cgroup). Each hostile row must be flagged with its reason, each honest row must equal its row
graded alone, every original must be byte-identical, both root reports identical, no feedback
may hold instructor material, nothing may reach the port or another sandbox or the grader, no
process may be left, and neither the host's disk nor the grader's memory may take what the
students tried to put there. The same checks run on a small class graded ``--no-sandbox`` must
fail: they can tell. On the code before issue 42 (``benchmarks/sandbox_envelope.py`` grades the
same attacks alone, with either checkout) no function member's row named a limit, and the
escaper's function answered wrong: its namespace and its tmpfs were made.
"""

from __future__ import annotations

import ast
import copy
import csv
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import nbformat
import pytest
from class_builders import (
    FIXTURE,
    ORDINARY_UID,
    as_ordinary_user,
    digest,
    filled,
    fixture_course,
    hand_to_ordinary_user,
    sandbox_problem,
    set_source,
    unreachable,
    write,
)

import course_grading
from course_grading.judge import secret as course_secret
from course_grading.nbgrader import course as wc
from course_grading.review.leaks import instructor_lines, leaked, own_lines, visible_text
from course_grading.sandbox import syscalls
from course_grading.sandbox.bwrap import MAX_SLOTS, UID_BASE
from course_grading.sandbox.processes import running

REPORTS = ("report.csv", "report.md", "scores.csv")
HONEST = ("blank", "half", "honest", "cpu_honest")
STUDENT_TIMEOUT = 8  # seconds of CPU time a cell of student code may use (the case)
MEMORY_GIB = 2  # the sandbox's memory, and each of its processes' address space
TMP_MIB = 64  # each private folder (/tmp, home); /dev/shm is 64 MiB, the runtime folder 1 MiB
FLOOR = 45  # seconds: the notebook budget's floor (5 × the solution's time is less here)
OPTIONS = (
    *("--max-processes", "64", "--memory", str(MEMORY_GIB), "--tmp-size", str(TMP_MIB)),
    *("--notebook-floor", str(FLOOR)),
)
GRADER = Path(course_grading.__file__).parent
GRADER_FILES = [
    str(GRADER / "sandbox" / "bwrap.py"),
    str(GRADER / "judge" / "items" / "lesson_99.py"),
]
NEXT_CELL = "\n# --- next cell ---\n"  # hostile code split into cells
ITEM_BUDGET = 30  # seconds: every run of one item's function (the floor: the fixture's is fast)


pytestmark = pytest.mark.skipif(bool(sandbox_problem()), reason=sandbox_problem() or "-")

#: Why this machine cannot run the grader as an ordinary uid ("" where it can): dropping to one
#: needs root, and the uid must be shown the checkout (``class_builders.unreachable``).
ORDINARY_PROBLEM = "switching to an ordinary uid needs root" if os.geteuid() else unreachable()
_ORDINARY = pytest.param(
    "ordinary", marks=pytest.mark.skipif(bool(ORDINARY_PROBLEM), reason=ORDINARY_PROBLEM or "-")
)

HOSTILE = {
    "vandal": (
        "import os, shutil, sys\n"
        "here = os.getcwd()\n"
        "targets = [os.path.abspath(os.path.join(here, *['..'] * n)) for n in (1, 2)]\n"
        "targets += [{out!r}, {subs!r}, {root!r}]\n"
        "failed = []\n"
        "for target in targets:\n"
        "    shutil.rmtree(target, onerror=lambda f, p, e: failed.append(p))\n"
        "try:\n"
        "    open(os.path.join(sys.prefix, 'shapes-vandal-was-here'), 'w').close()\n"
        "except OSError as err:\n"
        "    failed.append(str(err))\n"
        "print(len(failed), 'deletions failed')",
        [r"deletes files \(shutil\.rmtree\)", r"writes files"],
    ),
    "reader": (
        "import json, os\n"
        "here = os.getcwd()\n"
        "tops = [os.path.join(here, '..'), os.path.join(here, '..', '..'), {out!r}, {root!r}]\n"
        "cwds = set()\n"
        "for pid in os.listdir('/proc'):  # other processes' folders\n"
        "    try:\n"
        "        cwds.add(os.readlink(f'/proc/{{pid}}/cwd'))\n"
        "    except OSError:\n"
        "        pass\n"
        "tops += sorted(cwds)\n"
        "for top in tops:\n"
        "    for folder, folders, files in os.walk(top):\n"
        "        folders[:] = [f for f in folders if not f.startswith('.')]\n"
        "        for name in [n for n in files if n.endswith('.ipynb')]:\n"
        "            try:\n"
        "                cells = json.load(open(os.path.join(folder, name)))['cells']\n"
        "            except Exception:\n"
        "                continue\n"
        "            for cell in cells:\n"
        "                text = ''.join(cell['source'])\n"
        "                if 'BEGIN HIDDEN TESTS' in text or 'BEGIN SOLUTION' in text:\n"
        "                    print(text)",
        [r"looks through folders \(os\.(walk|listdir)\)"],
    ),
    "writer": (
        "with open({victim!r}, 'a') as original:\n"
        "    original.write('tampered')\n"
        "with open({gradebook!r}, 'a') as book:\n"
        "    book.write('tampered')",
        [r"writes files", r"raised (FileNotFoundError|PermissionError|OSError)"],
    ),
    "forkbomb": (
        "import os\n"
        "for _ in range(2000):\n"
        "    if os.fork() == 0:\n"
        "        os._exit(0)  # never reaped: each child holds its place in the process table",
        [r"starts processes \(os\.fork\)", r"raised BlockingIOError"],
    ),
    "lingerer": (
        "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)",
        [r"starts processes \(subprocess\.Popen\)", r"left processes running after its kernel"],
    ),
    "memoryhog": ("hog = bytearray(10 * 2**30)", [r"raised MemoryError"]),
    "network": (
        "import socket\n"
        "with socket.create_connection(('127.0.0.1', {port}), timeout=5) as s:\n"
        "    s.sendall(b'hello from a student')",
        [r"uses the network \(socket", r"raised (ConnectionRefusedError|OSError)"],
    ),
    "classkiller": (
        "import os, signal\n"
        "killed = []\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    if int(pid) in (1, os.getpid()):\n"
        "        continue\n"
        "    try:\n"
        "        command = open(f'/proc/{{pid}}/cmdline', 'rb').read()\n"
        "        if b'ipykernel' in command or b'course_grading' in command:\n"
        "            os.kill(int(pid), signal.SIGKILL)\n"
        "            killed.append(pid)\n"
        "    except OSError:\n"
        "        pass\n"
        "try:\n"
        "    os.kill(-1, signal.SIGKILL)\n"
        "except OSError:\n"
        "    pass\n"
        "print('KILLED', len(killed))",
        [r"exits the kernel \(os\.kill\)"],
    ),
    "graderkiller": (
        "import os, signal\n"
        "pid, failed = os.getppid(), []\n"
        "while pid > 1:\n"
        "    status = dict(l.split(':', 1) for l in open(f'/proc/{{pid}}/status') if ':' in l)\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError:\n"
        "        failed.append(pid)\n"
        "    pid = int(status['PPid'])\n"
        "for target in (1, -1):\n"
        "    try:\n"
        "        os.kill(target, signal.SIGKILL)\n"
        "    except OSError:\n"
        "        failed.append(target)\n"
        "print('STILL HERE')",
        [r"exits the kernel \(os\.kill\)"],
    ),
    "zombies": (
        "import os\n"
        "if os.fork() == 0:  # a loop whose pid keeps moving: each child forks, then exits\n"
        "    os.setsid()\n"
        "    while True:\n"
        "        try:\n"
        "            if os.fork():\n"
        "                os._exit(0)\n"
        "        except OSError:\n"
        "            pass\n"
        "made = 0\n"
        "for _ in range(2000):  # children never reaped, up to the process limit\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            os._exit(0)\n"
        "        made += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print('ZOMBIES', made)",
        [r"starts processes \(os\.fork\)", r"left processes running after its kernel"],
    ),
    "hogs": (
        "import subprocess, sys\n"
        "code = 'import time; b = bytearray(900 * 2**20); time.sleep(3)'\n"
        "hogs = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(4)]\n"
        "print('HOGS', [hog.wait() for hog in hogs])",
        [rf"its sandbox reached its memory limit of {MEMORY_GIB} GiB"],
    ),
    "filler": (
        "import os\n"
        "from ipykernel.connect import get_connection_file\n"
        "written = {{}}\n"
        "for folder in ('/tmp', os.path.expanduser('~'), '/dev/shm',\n"
        "               os.path.dirname(get_connection_file())):\n"
        "    written[folder] = 0\n"
        "    try:\n"
        "        with open(os.path.join(folder, 'filler'), 'wb') as out:\n"
        "            for _ in range(100):\n"
        "                out.write(b'x' * 2**20)\n"
        "                out.flush()\n"
        "                written[folder] += 2**20\n"
        "    except OSError:\n"
        "        pass\n"
        "files = 0\n"
        "for n in range(30000):\n"
        "    try:\n"
        "        open(f'/tmp/f{{n}}', 'w').close()\n"
        "        files += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print('FILLED', written, files)",
        [r"writes files"],
    ),
    "display": (
        "from IPython.display import display\n"
        "display({{'text/plain': 'x' * (100 * 2**20)}}, raw=True)",
        [r"sent a message over 32 MiB; it was refused unread"],
    ),
    "sleeper": (
        NEXT_CELL.join([f"import time\ntime.sleep({STUDENT_TIMEOUT - 0.1})"] * 9),
        [
            r"ran over its time budget \(5 times the lesson's solution's time in this run, "
            rf"at least {FLOOR} s"
        ],
    ),
}
#: Cells put first (so that the two run side by side); ``cpu_hog`` is hostile, the other honest.
FIRST_CELLS = {
    "cpu_hog": (
        "import subprocess, sys\n"
        "burners = [  # each in a session of its own: a scheduler group of its own, too\n"
        "    subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)\n"
        "    for _ in range(16)\n"
        "]\n"
        "for burner in burners:\n"
        "    burner.wait()",
        [r"reached their time limit \(their CPU time, or 4 times that in wall-clock time\)"],
    ),
    "cpu_honest": (
        "import time\n"
        "start = time.process_time()\n"
        "while time.process_time() - start < 1.5:  # 1.5 s of CPU time\n"
        "    pass",
        [],
    ),
}
#: Hostile students whose attack leaves nothing to flag: what they printed is checked instead.
PROBING = {
    "graderreader": (
        "import importlib.util\n"
        "print('IMPORTABLE', importlib.util.find_spec('course_grading') is not None)\n"
        "for path in {grader_files!r}:\n"
        "    try:\n"
        "        print('READ', path, len(open(path).read()))\n"
        "    except OSError as err:\n"
        "        print('NOT READ', path, type(err).__name__)"
    ),
}


#: Answer cells of the graded function (``answer_tokens``): each runs in the kernel and again in
#: the function sandbox, where ``ipykernel`` is not imported. Name -> (source, reasons).
FUNCTION_CELLS = {
    "fnhogs": (
        "import subprocess, sys\n"
        "if 'ipykernel' not in sys.modules:  # where the function is graded\n"
        "    code = 'import time; b = bytearray(900 * 2**20); time.sleep(2)'\n"
        "    hogs = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(3)]\n"
        "    print([hog.wait() for hog in hogs])\n"
        "def tokens_per_batch(batch_size, seq_len):\n"
        "    return batch_size * seq_len",
        [rf"test_tokens: its graded function's sandbox reached its memory limit of {MEMORY_GIB}"],
    ),
    "escaper": (
        "import ctypes, errno, os, subprocess, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.syscall.restype = ctypes.c_long\n"
        "reached = []\n"
        "for name, args in {calls!r}:\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        got = libc.syscall(*[ctypes.c_long(a) for a in args])\n"
        "        os._exit(0 if got >= 0 else ctypes.get_errno())\n"
        "    if os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) != errno.EPERM:\n"
        "        reached.append(name)\n"
        "held = 0\n"
        "if 'ipykernel' in sys.modules:  # the kernel: a nested tmpfs past --tmp-size\n"
        "    nested = ('mount -t tmpfs -o size=4g none /tmp && '\n"
        "              'head -c 100M /dev/zero > /tmp/x && echo $(($(stat -c %s /tmp/x)))')\n"
        "    done = subprocess.run(['unshare', '-Urm', 'sh', '-c', nested], capture_output=True)\n"
        "    print('NESTED', done.returncode, done.stdout.decode().strip())\n"
        "    print('REACHED', reached)\n"
        "else:  # the function sandbox: a user and mount namespace, 3 GiB in a tmpfs of its own\n"
        "    uid, gid = os.getuid(), os.getgid()\n"
        "    if libc.unshare(0x10000000 | 0x00020000) == 0:\n"
        "        open('/proc/self/setgroups', 'w').write('deny')\n"
        "        open('/proc/self/uid_map', 'w').write(f'0 {{uid}} 1')\n"
        "        open('/proc/self/gid_map', 'w').write(f'0 {{gid}} 1')\n"
        "        os.makedirs('/tmp/big', exist_ok=True)\n"
        "        libc.mount(b'none', b'/tmp/big', b'tmpfs', 0, b'size=4g')\n"
        "        for n in range(12):\n"
        "            with open(f'/tmp/big/{{n}}', 'wb') as out:\n"
        "                for _ in range(256):\n"
        "                    out.write(b'x' * 2**20)\n"
        "                    held += 2**20\n"
        "def tokens_per_batch(batch_size, seq_len):\n"
        "    return batch_size * seq_len if not reached and not held else -1",
        [r"loads native code"],
    ),
    "slowcalls": (
        "import sys, time\n"
        "def tokens_per_batch(batch_size, seq_len):\n"
        "    if 'ipykernel' not in sys.modules:  # 5.5 s a call, under the 7 s per-call limit\n"
        "        time.sleep(5.5)\n"
        "    return batch_size * seq_len",
        [rf"test_tokens: its graded function's runs used the item's time budget \({ITEM_BUDGET} s"],
    ),
}
#: The calls the issue found reaching the kernel from every sandbox, with harmless arguments.
ESCAPES = [
    (name, (syscalls.numbers(os.uname().machine) or {}).get(name, -1), *args)
    for name, *args in [
        ("io_uring_setup", 1, 0), ("keyctl", 0, 0), ("personality", 0x0040000),
        ("pidfd_open", 1, 0), ("process_vm_readv", 1, 0, 0, 0, 0, 0),
        ("perf_event_open", 0, 0, -1, -1, 0), ("setns", 0, 0),
    ]
]  # fmt: skip
ESCAPER_CALLS = [(name, (number, *args)) for name, number, *args in ESCAPES]
STUDENTS = len(HONEST) + len(HOSTILE) + len(PROBING) + len(FIRST_CELLS) - 1 + len(FUNCTION_CELLS)


# --- the course, the class, a port ---------------------------------------------------------------


@pytest.fixture(scope="module")
def course():
    """A course root holding the fixture lesson only, and its student version, in a folder an
    ordinary uid may enter (pytest's own temporary folders are root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="shapes-hostile-"))
    base.chmod(0o755)
    root, work = fixture_course(base)
    yield {"tmp": base, "root": root, "work": work}
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def listener():
    """A TCP port on 127.0.0.1 that records every connection made to it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                seen.append(conn.recv(100) or b"(connected)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join(timeout=5)
    server.close()


def honest_notebooks(work: wc.WorkCourse) -> dict[str, nbformat.NotebookNode]:
    release, source = work.release_notebook(FIXTURE), work.source_notebook(FIXTURE)
    good = filled(release, source)
    half = nbformat.read(str(release), as_version=4)
    half = set_source(half, "answer_ratio", "attention_ratio = (2 * 8192**2) / (16 * 1024**2)")
    blank = nbformat.read(str(release), as_version=4)
    return {"honest": good, "half": half, "blank": blank}


def _with_cells(nb, code: str, first: bool = False) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    cells = [nbformat.v4.new_code_cell(part) for part in code.split(NEXT_CELL)]
    nb.cells = [*cells, *nb.cells] if first else [*nb.cells, *cells]
    return nb


def build_class(course: dict, subs: Path, out: Path, port: int) -> None:
    """Honest and hostile students in ``subs`` (flat LMS layout); hostile cells know the paths."""
    honest = honest_notebooks(course["work"])
    for name, nb in honest.items():
        write(subs / f"{name}_{FIXTURE}.ipynb", nb)
    paths = {
        "out": str(out),
        "subs": str(subs),
        "root": str(course["root"]),
        "victim": str(subs / f"honest_{FIXTURE}.ipynb"),
        "gradebook": str(out / "course" / "gradebook.db"),
        "port": port,
        "grader_files": GRADER_FILES,
    }
    for name, (code, _) in HOSTILE.items():
        write(subs / f"{name}_{FIXTURE}.ipynb", _with_cells(honest["honest"], code.format(**paths)))
    for name, code in PROBING.items():
        write(subs / f"{name}_{FIXTURE}.ipynb", _with_cells(honest["honest"], code.format(**paths)))
    for name, (code, _) in FIRST_CELLS.items():
        write(subs / f"{name}_{FIXTURE}.ipynb", _with_cells(honest["honest"], code, first=True))
    for name, (code, _) in FUNCTION_CELLS.items():
        nb = set_source(
            copy.deepcopy(honest["honest"]), "answer_tokens", code.format(calls=ESCAPER_CALLS)
        )
        write(subs / f"{name}_{FIXTURE}.ipynb", nb)


class DiskWatch:
    """While a run lasts, the most bytes and files its temporary folder held (sampled)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.most_bytes, self.most_files = folder, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.3):
            size = files = 0
            for folder, _, names in os.walk(self.folder):
                for name in names:
                    try:
                        size += os.lstat(os.path.join(folder, name)).st_size
                        files += 1
                    except OSError:
                        continue
            self.most_bytes = max(self.most_bytes, size)
            self.most_files = max(self.most_files, files)

    def __enter__(self) -> DiskWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def grade_cli(subs: Path, out: Path, root: Path, *options: str, ordinary: bool = False) -> dict:
    """Run ``python -m course_grading`` (as root, or as an ordinary uid); return its process,
    report rows, sandbox uids, and what its temporary folder held at most."""
    command = [sys.executable, "-m", "course_grading", str(subs), "--out", str(out)]
    command += ["--root", str(root), "--timeout", str(STUDENT_TIMEOUT), *OPTIONS, *options]
    scratch = Path(tempfile.mkdtemp(prefix="shapes-scratch-"))  # short: IPC socket paths
    home = out.parent / f"{out.name}-home"
    home.mkdir()
    if ordinary:
        command = as_ordinary_user(command)
        for folder in (scratch, home, out.parent):
            hand_to_ordinary_user(folder)
    env = {**wc.nbgrader_env(), "TMPDIR": str(scratch), "HOME": str(home)}
    with DiskWatch(scratch) as disk:
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        stdout, stderr = proc.communicate(timeout=1200)
    shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    if (out / "report.csv").is_file():
        with open(out / "report.csv", newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    uids = range(UID_BASE + proc.pid * MAX_SLOTS, UID_BASE + (proc.pid + 1) * MAX_SLOTS)
    logs = "".join(p.read_text() for p in sorted((out / "course").glob("worker-*.log")))
    return {
        "rc": proc.returncode,
        "stdout": stdout,
        "stderr": stderr,
        "rows": rows,
        "uids": uids,
        "out": out,
        "disk": (disk.most_bytes, disk.most_files),
        "worker_logs": logs,
    }


@pytest.fixture(scope="module")
def graded(course, listener):
    """The hostile class graded as root twice, its honest students alone, and as an ordinary
    uid once."""
    tmp, root = course["tmp"], course["root"]
    port, seen = listener
    subs, out = tmp / "class", tmp / "out"
    build_class(course, subs, out, port)
    before = digest(subs)
    keys = tmp / "keys"  # the course secret: every run draws the same hidden inputs with it
    course_secret.create(keys / "course_secret")
    if os.geteuid() == 0:
        hand_to_ordinary_user(keys)  # the ordinary-uid grader reads it too
    secret = ("--secret-file", str(keys / "course_secret"))
    first = grade_cli(subs, out, root, "--jobs", "2", *secret)
    first_reports = {name: (out / name).read_bytes() for name in REPORTS if (out / name).exists()}
    second = grade_cli(subs, tmp / "out2", root, "--jobs", "1", *secret)
    alone_subs = tmp / "alone"
    alone_subs.mkdir()
    for name in HONEST:
        shutil.copy(subs / f"{name}_{FIXTURE}.ipynb", alone_subs / f"{name}_{FIXTURE}.ipynb")
    alone = grade_cli(alone_subs, tmp / "out_alone", root, "--jobs", "1", *secret)
    ordinary_subs = tmp / "ordinary" / "class"
    shutil.copytree(subs, ordinary_subs)
    ordinary_before = digest(ordinary_subs)
    ordinary_out = tmp / "ordinary" / "out"
    ordinary = None
    if not ORDINARY_PROBLEM:
        ordinary = grade_cli(
            ordinary_subs, ordinary_out, root, "--jobs", "2", *secret, ordinary=True
        )
    return {
        **course,
        "subs": subs,
        "out": out,
        "before": before,
        "first": first,
        "first_reports": first_reports,
        "second": second,
        "second_out": tmp / "out2",
        "alone": alone,
        "ordinary": ordinary,
        "ordinary_subs": ordinary_subs,
        "ordinary_before": ordinary_before,
        "seen": seen,
    }


# --- checks (they return problems, so the --no-sandbox run can show that they fail) --------------


def _rows(run: dict) -> dict[str, dict]:
    return {r["student"]: r for r in run["rows"]}


def honest_problems(run: dict, alone: dict) -> list[str]:
    """Honest students whose row differs from their row when graded alone."""
    fields = ("status", "score", "max_score", "auto_score", "failed_tests", "reasons")
    got, want = _rows(run), _rows(alone)
    problems = []
    for name in HONEST:
        if name not in got:
            problems.append(f"{name}: no row (rc {run['rc']}: {run['stderr'][-300:]})")
        elif any(got[name][f] != want[name][f] for f in fields):
            mine, theirs = [got[name][f] for f in fields], [want[name][f] for f in fields]
            problems.append(f"{name}: {mine}; graded alone: {theirs}")
    return problems


def original_problems(subs: Path, before: dict) -> list[str]:
    after = digest(subs) if subs.is_dir() else {}
    return [f"{name} changed or gone" for name in sorted(before) if after.get(name) != before[name]]


def reader_problems(out: Path, secret: frozenset[str]) -> list[str]:
    """Instructor lines in what the reader's kernel printed (its graded notebook)."""
    graded = out / "course" / "autograded" / "reader" / FIXTURE / f"{FIXTURE}.ipynb"
    if not graded.is_file():
        return [f"no graded notebook for the reader at {graded}"]
    nb = nbformat.read(str(graded), as_version=4)
    printed = "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    return sorted(line for line in secret if line in " ".join(printed.split()))


@pytest.fixture(scope="module")
def secret(course):
    work = course["work"]
    return instructor_lines(work.source_notebook(FIXTURE), work.release_notebook(FIXTURE))


# --- the sandboxed runs: as root and as an ordinary uid -----------------------------------------

BOTH = pytest.mark.parametrize("mode", ["first", _ORDINARY])  # --jobs 2, root / ordinary uid
SUBS = {"first": "subs", "ordinary": "ordinary_subs"}


def _printed(run: dict, student: str) -> str:
    """What ``student``'s kernel printed, from its graded notebook."""
    graded = run["out"] / "course" / "autograded" / student / FIXTURE / f"{FIXTURE}.ipynb"
    if not graded.is_file():
        return f"(no graded notebook at {graded})"
    nb = nbformat.read(str(graded), as_version=4)
    return "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )


def _logged(run: dict, pattern: str) -> list[float]:
    """Every number the workers' logs give after ``pattern`` (``execute._summary``)."""
    return [float(n) for n in re.findall(pattern + r" ([0-9.]+)", run["worker_logs"])]


def test_the_runs_finish(graded):
    for run in ("first", "second", "alone", "ordinary"):
        if graded[run] is None:  # ORDINARY_PROBLEM: its tests say why they are skipped
            continue
        assert graded[run]["rc"] == 0, graded[run]["stderr"][-3000:]
        assert {r["sandbox"] for r in graded[run]["rows"]} == {"bubblewrap"}


@BOTH
def test_each_hostile_student_is_flagged_with_its_reason(graded, mode):
    rows = _rows(graded[mode])
    wrong = []
    hostile = {**HOSTILE, "cpu_hog": FIRST_CELLS["cpu_hog"], **FUNCTION_CELLS}
    for name, (_, reasons) in hostile.items():
        row = rows.get(name, {"status": "no row", "reasons": ""})
        if row["status"] not in ("flagged", "not graded"):
            wrong.append(f"{name}: status {row['status']}")
        missing = [r for r in reasons if not re.search(r, row["reasons"])]
        wrong += [f"{name}: no {r!r} in {row['reasons']!r}" for r in missing]
    assert not wrong, "\n".join(wrong)


@BOTH
def test_honest_students_get_what_they_get_alone(graded, mode):
    assert not honest_problems(graded[mode], graded["alone"])
    rows = _rows(graded[mode])
    for name in ("honest", "cpu_honest"):
        assert float(rows[name]["auto_score"]) == float(rows[name]["auto_max"]) == 3
    assert float(rows["half"]["auto_score"]) == 1 and float(rows["blank"]["auto_score"]) == 0


def test_originals_are_byte_identical(graded):
    assert not original_problems(graded["subs"], graded["before"])
    if graded["ordinary"] is not None:
        assert not original_problems(graded["ordinary_subs"], graded["ordinary_before"])


def test_a_second_run_gives_the_same_report(graded):
    second = {name: (graded["second_out"] / name).read_bytes() for name in REPORTS}
    differ = [
        f"{name}: {a!r} / {b!r}"
        for name in REPORTS
        for a, b in zip(
            graded["first_reports"][name].decode().splitlines(), second[name].decode().splitlines()
        )
        if a != b
    ]
    assert not differ, "\n".join(differ)  # --jobs 2 then --jobs 1
    assert graded["first_reports"] == second


@BOTH
def test_nothing_escaped(graded, secret, mode):
    assert graded["seen"] == [], "a sandboxed kernel reached the host's 127.0.0.1"
    stray = Path(sys.prefix) / "shapes-vandal-was-here"
    written = stray.exists()
    stray.unlink(missing_ok=True)
    assert not written, "the vandal wrote into the venv"
    assert not reader_problems(graded[mode]["out"], secret)


@BOTH
def test_feedback_holds_no_instructor_material(graded, secret, mode):
    pages = sorted((graded[mode]["out"] / "feedback").rglob("*.html"))
    assert len(pages) >= STUDENTS - 2  # all but the sleeper's and the fork bomb's, at most
    for page in pages:
        own = own_lines(graded[SUBS[mode]] / f"{page.parent.name}_{FIXTURE}.ipynb")
        assert not leaked(page, secret, own), page
        assert "### BEGIN HIDDEN TESTS" not in visible_text(page.read_text(encoding="utf-8"))


def test_no_process_is_left(graded):
    uids = {*graded["first"]["uids"], *graded["second"]["uids"], *graded["alone"]["uids"]}
    assert running(uids) == []
    assert running({ORDINARY_UID}) == []  # the ordinary grader's own, and its sandboxes'


@BOTH
def test_nobody_reaches_a_classmate_or_the_grader(graded, mode):
    # in its own PID namespace a kernel finds no other kernel, and kill -9 -1 or a kill of its
    # parent (the namespace's init) reaches nothing outside; the grader lived (every row)
    assert re.search(r"^KILLED 0$", _printed(graded[mode], "classkiller"), re.M)
    assert re.search(r"^STILL HERE$", _printed(graded[mode], "graderkiller"), re.M)
    assert "ZOMBIES" in _printed(graded[mode], "zombies")
    assert len(graded[mode]["rows"]) == STUDENTS


@BOTH
def test_the_grader_cannot_be_read_inside(graded, mode):
    printed = _printed(graded[mode], "graderreader")
    assert re.search(r"^IMPORTABLE False$", printed, re.M), printed
    for path in GRADER_FILES:
        assert f"NOT READ {path} FileNotFoundError" in printed, printed
        assert Path(path).is_file()  # it is there, outside


@BOTH
def test_private_folders_hold_their_size_and_the_host_disk_nothing(graded, mode):
    found = re.search(r"^FILLED (\{.*\}) (\d+)$", _printed(graded[mode], "filler"), re.M)
    assert found, _printed(graded[mode], "filler")
    written = ast.literal_eval(found.group(1))  # what the filler wrote into each folder
    mib = 2**20
    assert written["/tmp"] <= TMP_MIB * mib and written["/home/student"] <= TMP_MIB * mib
    assert written["/dev/shm"] <= 64 * mib and written["/run/shapes/runtime"] <= mib
    most_bytes, most_files = graded[mode]["disk"]  # the grader's temporary folder, sampled
    assert most_bytes < 32 * mib and most_files < 3000, graded[mode]["disk"]
    out = graded[mode]["out"]
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < 64 * mib


@BOTH
def test_memory_stays_bounded(graded, mode):
    run = graded[mode]
    assert re.search(r"^HOGS \[.*-9.*\]$", _printed(run, "hogs"), re.M), _printed(run, "hogs")
    limit = MEMORY_GIB * 1024
    cgroup, watched = _logged(run, r"memory cgroup v[12] peak"), _logged(run, "memory watched peak")
    assert cgroup or watched, run["worker_logs"][-2000:]
    assert all(peak <= limit for peak in cgroup), cgroup  # the kernel's own bound
    # sampled: the peak is loose by what the hogs allocate between two samples (4 × 900 MiB at
    # once on a quiet machine), but each sample over the limit kills enough to be within it, so
    # a run over it is short (two samples: one hog may start after the first was dealt with)
    over = _logged(run, r"MiB \(over its limit")
    assert len(over) == len(cgroup) + len(watched), run["worker_logs"][-2000:]
    assert max(over, default=0) <= 2, (watched, over)
    if mode == "ordinary":
        assert not cgroup  # cgroup v1 is root's alone: the watch bounds it
        assert max(over) >= 1, (watched, over)  # the hogs went over: the watch saw them
    # the 100 MiB message was refused before the worker read it (read, it took a worker from
    # about 50 MiB to 351 MiB)
    assert max(_logged(run, "worker peak RSS")) < 150, run["worker_logs"][-2000:]


@BOTH
def test_nothing_gets_past_either_sandbox(graded, mode):
    """The escaper: in its kernel, no nested tmpfs and none of the issue's calls reach the
    kernel; where its function is graded, no namespace and no tmpfs of its own (its function
    answers right only then, so its item is the proof)."""
    printed = _printed(graded[mode], "escaper")
    assert re.search(r"^REACHED \[\]$", printed, re.M), printed
    nested = re.search(r"^NESTED (\d+)", printed, re.M)
    assert nested and nested.group(1) != "0", printed  # before: 0, and 100 MiB past --tmp-size
    row = _rows(graded[mode])["escaper"]
    assert "test_tokens" not in row["failed_tests"] and float(row["auto_score"]) == 3, row


def _function_seconds(run: dict, student: str) -> float:
    with open(run["out"] / "function_times.csv", newline="", encoding="utf-8") as fh:
        found = [r for r in csv.DictReader(fh) if r["student"] == student]
    assert [r["item"] for r in found] == ["test_tokens"], found
    return float(found[0]["seconds"])


@BOTH
def test_calls_under_the_call_limit_stop_at_the_items_budget(graded, mode):
    """Six calls of 5.5 s under a 7 s limit held the slot 33 s for one item, unflagged; now the
    item's runs stop at its budget (the row says so: the reasons check above)."""
    assert ITEM_BUDGET <= _function_seconds(graded[mode], "slowcalls") < ITEM_BUDGET + 3
    assert _function_seconds(graded[mode], "honest") < 10


# --- the same checks fail without the sandbox ------------------------------------------------


def test_the_checks_fail_without_the_sandbox(course, listener, secret, tmp_path):
    """Reader and writer graded --no-sandbox: the reader reads solutions, the writer an original."""
    port, _ = listener
    subs, out = tmp_path / "class", tmp_path / "out"
    honest = honest_notebooks(course["work"])
    write(subs / f"honest_{FIXTURE}.ipynb", honest["honest"])
    paths = {
        "out": str(out),
        "root": str(course["root"]),
        "victim": str(subs / f"honest_{FIXTURE}.ipynb"),
        "gradebook": str(tmp_path / "elsewhere.db"),  # a gradebook written to would be lost
    }
    for name in ("reader", "writer"):
        nb = copy.deepcopy(honest["honest"])
        nb.cells.append(nbformat.v4.new_code_cell(HOSTILE[name][0].format(**paths)))
        write(subs / f"{name}_{FIXTURE}.ipynb", nb)
    before = digest(subs)
    run = grade_cli(subs, out, course["root"], "--no-sandbox", "--jobs", "1")
    assert run["rc"] == 0, run["stderr"][-3000:]
    assert "WARNING: --no-sandbox" in run["stderr"]
    assert "WARNING: graded with --no-sandbox" in (out / "report.md").read_text()
    assert original_problems(subs, before), "unsandboxed, the writer should have changed one"
    assert reader_problems(out, secret), "unsandboxed, the reader should have read solutions"
    rows = _rows(run)
    assert "feedback withheld: it contains instructor material" in rows["reader"]["reasons"]
    assert not (out / "feedback" / "reader").exists()  # defence in depth holds even so


def test_a_class_graded_with_the_course_secret_says_nothing_of_practice(graded):
    report = (graded["out"] / "report.md").read_text(encoding="utf-8")
    assert report.startswith("# Grading report\n") and "practice grading" not in report
