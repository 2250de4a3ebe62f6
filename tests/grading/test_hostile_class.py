"""A hostile class cannot break grading, or anybody else's grade (issue 12).

One class of the fast fixture lesson: three honest students (full marks, blank, half done) and
seven hostile ones, each a full-marks notebook with one more cell at the end:

- vandal: deletes the folders above it, the output folder, the submissions and the course, and
  tries to write into the venv;
- reader: walks the folders around it and prints every hidden-test and solution line it finds;
- writer: appends to another student's original and to the gradebook;
- fork bomb: forks until it cannot (bounded at 2,000 so a broken limit cannot take the machine;
  its children exit at once but are never reaped, so the run does not depend on their timing);
- lingerer: starts a process in a session of its own, to outlive its kernel;
- memory hog: asks for 10 GiB;
- network: connects to a port this test listens on, on 127.0.0.1.

The class is graded twice (``--jobs 2``, then ``--jobs 1``) and the honest students once more on
their own. Each hostile row must be flagged with its reason, each honest row must equal its row
graded alone, every original must be byte-identical, both reports identical, no feedback may
hold instructor material, nothing may reach the port, and no process may be left. The same
checks run on a small class graded ``--no-sandbox`` must fail: they can tell.
"""

from __future__ import annotations

import copy
import csv
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
import pytest
from class_builders import (
    FIXTURE,
    digest,
    filled,
    fixture_course,
    sandbox_problem,
    set_source,
    write,
)

from course_grading import course as wc
from course_grading.leaks import instructor_lines, leaked, own_lines, visible_text
from course_grading.processes import running
from course_grading.sandbox import MAX_SLOTS, UID_BASE

REPORTS = ("report.csv", "report.md", "scores.csv")
HONEST = ("blank", "half", "honest")
STUDENT_TIMEOUT = 30  # seconds a cell of student code may run (generous: a busy machine)


pytestmark = pytest.mark.skipif(bool(sandbox_problem()), reason=sandbox_problem() or "-")

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
}


# --- the course, the class, a port ---------------------------------------------------------------


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course root holding the fixture lesson only, and its student version."""
    tmp = tmp_path_factory.mktemp("hostile")
    root, work = fixture_course(tmp)
    return {"tmp": tmp, "root": root, "work": work}


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
    }
    for name, (code, _) in HOSTILE.items():
        nb = copy.deepcopy(honest["honest"])
        nb.cells.append(nbformat.v4.new_code_cell(code.format(**paths)))
        write(subs / f"{name}_{FIXTURE}.ipynb", nb)


def grade_cli(subs: Path, out: Path, root: Path, *options: str) -> dict:
    """Run ``python -m course_grading``; return its process, report rows and sandbox uids."""
    command = [sys.executable, "-m", "course_grading", str(subs), "--out", str(out)]
    command += ["--root", str(root), "--timeout", str(STUDENT_TIMEOUT), *options]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=wc.nbgrader_env()
    )
    stdout, stderr = proc.communicate(timeout=900)
    rows = []
    if (out / "report.csv").is_file():
        with open(out / "report.csv", newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    uids = range(UID_BASE + proc.pid * MAX_SLOTS, UID_BASE + (proc.pid + 1) * MAX_SLOTS)
    return {"rc": proc.returncode, "stdout": stdout, "stderr": stderr, "rows": rows, "uids": uids}


@pytest.fixture(scope="module")
def graded(course, listener):
    """The hostile class graded twice, and its honest students alone."""
    tmp, root = course["tmp"], course["root"]
    port, seen = listener
    subs, out = tmp / "class", tmp / "out"
    build_class(course, subs, out, port)
    before = digest(subs)
    limits = ("--max-processes", "64", "--memory", "4")
    first = grade_cli(subs, out, root, "--jobs", "2", *limits)
    first_reports = {name: (out / name).read_bytes() for name in REPORTS if (out / name).exists()}
    second = grade_cli(subs, tmp / "out2", root, "--jobs", "1", *limits)
    alone_subs = tmp / "alone"
    alone_subs.mkdir()
    for name in HONEST:
        shutil.copy(subs / f"{name}_{FIXTURE}.ipynb", alone_subs / f"{name}_{FIXTURE}.ipynb")
    alone = grade_cli(alone_subs, tmp / "out_alone", root, "--jobs", "1", *limits)
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


# --- the sandboxed run --------------------------------------------------------------------------


def test_the_runs_finish(graded):
    for run in ("first", "second", "alone"):
        assert graded[run]["rc"] == 0, graded[run]["stderr"][-3000:]
        assert {r["sandbox"] for r in graded[run]["rows"]} == {"bubblewrap"}


def test_each_hostile_student_is_flagged_with_its_reason(graded):
    rows = _rows(graded["first"])
    wrong = []
    for name, (_, reasons) in HOSTILE.items():
        row = rows.get(name, {"status": "no row", "reasons": ""})
        if row["status"] not in ("flagged", "not graded"):
            wrong.append(f"{name}: status {row['status']}")
        missing = [r for r in reasons if not re.search(r, row["reasons"])]
        wrong += [f"{name}: no {r!r} in {row['reasons']!r}" for r in missing]
    assert not wrong, "\n".join(wrong)


def test_honest_students_get_what_they_get_alone(graded):
    assert not honest_problems(graded["first"], graded["alone"])
    rows = _rows(graded["first"])
    assert float(rows["honest"]["auto_score"]) == float(rows["honest"]["auto_max"]) == 3
    assert float(rows["half"]["auto_score"]) == 1 and float(rows["blank"]["auto_score"]) == 0


def test_originals_are_byte_identical(graded):
    assert not original_problems(graded["subs"], graded["before"])


def test_a_second_run_gives_the_same_report(graded):
    second = {name: (graded["second_out"] / name).read_bytes() for name in REPORTS}
    assert graded["first_reports"] == second  # --jobs 2 then --jobs 1


def test_nothing_escaped(graded, secret):
    assert graded["seen"] == [], "a sandboxed kernel reached the host's 127.0.0.1"
    stray = Path(sys.prefix) / "shapes-vandal-was-here"
    written = stray.exists()
    stray.unlink(missing_ok=True)
    assert not written, "the vandal wrote into the venv"
    assert not reader_problems(graded["out"], secret)


def test_feedback_holds_no_instructor_material(graded, secret):
    pages = sorted((graded["out"] / "feedback").rglob("*.html"))
    assert len(pages) >= len(HONEST) + len(HOSTILE) - 1  # all but the fork bomb's, at most
    for page in pages:
        own = own_lines(graded["subs"] / f"{page.parent.name}_{FIXTURE}.ipynb")
        assert not leaked(page, secret, own), page
        assert "### BEGIN HIDDEN TESTS" not in visible_text(page.read_text(encoding="utf-8"))


def test_no_process_is_left(graded):
    uids = {*graded["first"]["uids"], *graded["second"]["uids"], *graded["alone"]["uids"]}
    assert running(uids) == []


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
