"""Grading on a real Dask cluster (issues 29 and 42): the same report as here, nothing lost, and
nobody but the grader, the scheduler and its workers gets in.

A ``dask scheduler`` and two ``dask worker`` processes (``--nthreads 1``, each under its
nanny) on 127.0.0.1, over TLS with the certificates ``python -m course_grading cluster-certs``
makes (every connection proving itself); ``w2`` runs as another, unprivileged account
(``WORKER_UID``), from the documented venv (this checkout's: ``as_worker_account``); and a
third worker whose ``PATH`` has no bubblewrap. One class of the
fixture lesson, honest and hostile (``test_hostile_class.py``'s vandal, reader, grader killer,
class killer, and a network member aiming at the scheduler's own port) and ``a_slow``, an
honest notebook whose first cell sleeps, is graded ``--jobs 2`` here and with ``--scheduler``,
with the same course secret. During the cluster run the worker grading ``a_slow`` is killed (by
its pid); once ``a_slow`` is graded again, the scheduler is killed: the run stops in one line,
exit 2, keeping what was graded. A new scheduler and workers start, and ``--resume`` grades the
rest, from a process with no bubblewrap on its PATH (only workers need it). The report, scores
and feedback must be the local run's, byte for byte, but for the note on ``a_slow``'s row; the
worker without bubblewrap must be refused by name and never used; the local run must not import
Dask; nothing of the killed attempt may be left running; the originals must be untouched. Then
a submission whose two workers are killed is a row, not a stalled run; a cluster whose only
worker cannot sandbox, and an unreachable scheduler, are one line and exit 2. A grading worker
process ends when its parent (a Dask worker) is killed. Each check is also shown a case that
fails it. A local process without the certificate cannot connect (as root, and as uid 65534,
which cannot read any key either), a ``tcp://`` scheduler is refused, a job carries its lesson's
key and never the course secret, and losing the scheduler in each call into Dask (waiting for a
worker, submitting, waiting, taking an answer) stops the run in one line.
"""

from __future__ import annotations

import copy
import csv
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from class_builders import (
    FIXTURE,
    ORDINARY_UID,
    as_ordinary_user,
    digest,
    filled,
    fixture_course,
    sandbox_problem,
    unreachable,
    write,
)
from test_hostile_class import HOSTILE, NEXT_CELL, honest_notebooks

from course_grading import cli
from course_grading.autograde import Options
from course_grading.cluster import DIED, RERUN
from course_grading.cluster_certs import make as make_certs
from course_grading.cluster_store import Store
from course_grading.cluster_worker import needs_of, unfit
from course_grading.errors import GradingError
from course_grading.judge import secret as course_secret
from course_grading.nbgrader import course as wc
from course_grading.report import markdown_text
from course_grading.sandbox.bwrap import Limits

distributed = pytest.importorskip(
    "distributed", reason="Dask distributed is not installed: .venv/bin/pip install -e '.[cluster]'"
)

DASK = str(Path(sys.executable).parent / "dask")
#: The unprivileged account ``w2`` runs as (no name needed: ``setpriv`` takes the uid), the one
#: :func:`class_builders.as_ordinary_user` drops to.
WORKER_UID = ORDINARY_UID
STRANGER_UID = 65_534  # nobody
REPORTS = ("report.csv", "report.md", "scores.csv")
VICTIM = "a_slow"  # sorted first, so it runs early and the run goes on after it
SLEEP = 6  # seconds its first cell sleeps: time to kill the worker grading it
KILL_AFTER = 2.0  # seconds after its attempt starts
MEMBERS = ("vandal", "reader", "graderkiller", "classkiller", "network")
OPTIONS = ("--timeout", "8", "--max-processes", "64", "--memory", "2", "--tmp-size", "64")
#: Runs the command and says, last, which Dask modules it imported.
CLI = (
    "import sys\n"
    "from course_grading.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "dask = {m.split('.')[0] for m in sys.modules} & {'dask', 'distributed'}\n"
    "print('DASK MODULES', sorted(dask))\n"
    "sys.exit(rc)\n"
)
needs_sandbox = pytest.mark.skipif(bool(sandbox_problem()), reason=sandbox_problem() or "-")


# --- a real cluster ----------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def as_worker_account() -> list[str]:
    """The command prefix that runs this checkout's ``.venv`` as ``WORKER_UID``, as section 3.8
    documents a worker's account: unprivileged, reading the checkout and its venv, running the
    venv's Python. Where any of them lies in a folder other accounts cannot enter (pyenv's
    Python under ``/root``, a clone inside a ``mktemp -d`` folder, as CI makes), the worker gets
    :func:`class_builders.as_ordinary_user`'s private view, in which just those paths are shown
    read-only (what installing them where every account reads them gives): the same
    interpreter at the same path as the grader's, so tracebacks on its pages match."""
    why = unreachable()
    if why:
        pytest.skip(f"no worker can run as another account here: {why}")
    prefix = as_ordinary_user([])
    probe = [sys.executable, "-c", "import sys; print(sys.version)"]
    proc = subprocess.run([*prefix, *probe], capture_output=True, text=True)
    if proc.stdout.strip() != sys.version:
        pytest.skip(f"{sys.executable} cannot be run by uid {WORKER_UID} here: {proc.stderr}")
    return prefix


def client_security(certs: Path):
    from distributed.security import Security

    return Security(require_encryption=True, tls_ca_file=str(certs / "client" / "ca.pem"),
                    tls_client_cert=str(certs / "client" / "cert.pem"),
                    tls_client_key=str(certs / "client" / "key.pem"))  # fmt: skip


def tls_options(certs: Path, role: str) -> list[str]:
    folder = certs / role
    return ["--tls-ca-file", str(folder / "ca.pem"), "--tls-cert", str(folder / "cert.pem"),
            "--tls-key", str(folder / "key.pem")]  # fmt: skip


def shared_workspace(out: Path) -> Path:
    """``out``, made as section 3.8 says: in the workers' account's group, setgid, 2770."""
    out.mkdir(parents=True, exist_ok=True)
    os.chown(out, -1, WORKER_UID)
    out.chmod(0o2770)
    return out


class Cluster:
    """``dask scheduler`` and ``dask worker`` processes on 127.0.0.1 over TLS, stopped by
    ``stop``; a worker named in ``others`` runs as ``WORKER_UID`` (``account``: the command
    prefix that does, :func:`as_worker_account`)."""

    def __init__(self, base: Path, certs: Path, account: list[str]) -> None:
        self.base, self.certs, self.account, self.runs, self.procs = base, certs, account, 0, []
        self.scheduler: subprocess.Popen | None = None
        self.address = ""
        self.uids: dict[str, int] = {}
        self.prefixes: dict[str, str] = {}

    def _spawn(self, name: str, command: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.base / f"{name}-{self.runs}.log", "wb")  # noqa: SIM115 (kept open)
        proc = subprocess.Popen(command, stdout=log, stderr=log, env=env or dict(os.environ))
        self.procs.append(proc)
        return proc

    def start(
        self, workers: tuple[str, ...] = ("w1", "w2"), refused: tuple[str, ...] = (),
        others: tuple[str, ...] = ("w2",),
    ) -> str:  # fmt: skip
        """A scheduler and its workers (``refused``: started with no bubblewrap on PATH)."""
        self.runs += 1
        file = self.base / f"scheduler-{self.runs}.json"
        self.scheduler = self._spawn("scheduler", [
            DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--protocol", "tls",
            "--no-dashboard", "--scheduler-file", str(file), *tls_options(self.certs, "scheduler"),
        ], {**os.environ, **NO_PAGES})  # fmt: skip
        deadline = time.monotonic() + 60
        while not file.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(file.read_text())["address"]
        empty = self.base / "no-bwrap-bin"
        empty.mkdir(exist_ok=True)
        quiet = {**os.environ, **NO_PAGES, "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}
        for name in (*workers, *refused):
            env = {**quiet, "PATH": str(empty)} if name in refused else quiet
            local = self.base / "dask" / name
            local.mkdir(parents=True, exist_ok=True)
            command = [DASK, "worker"]
            if name in others:  # the documented recipe for a worker account (section 3.8)
                os.chown(local, WORKER_UID, WORKER_UID)
                env = {**env, "HOME": str(local)}
                command = [*self.account, DASK, "worker"]
            self._spawn(name, [
                *command, address, "--nthreads", "1", "--name", name, "--host", "127.0.0.1",
                "--no-dashboard", "--local-directory", str(local),
                *tls_options(self.certs, "worker"),
            ], env)  # fmt: skip
        with distributed.Client(address, timeout=30, security=client_security(self.certs)) as c:
            c.wait_for_workers(len(workers) + len(refused), timeout=120)
            pids, prefixes = c.run(os.getpid), c.run(lambda: sys.prefix)
            info = c.scheduler_info(n_workers=-1)["workers"]
        self.uids = {info[a]["name"]: _uid_of(pid) for a, pid in pids.items()}
        self.prefixes = {info[a]["name"]: prefix for a, prefix in prefixes.items()}
        self.address = address
        return address

    def stop(self) -> None:
        """Every process started, and the nannies' workers, ended (bounded waits)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                for child in _children(proc.pid):
                    os.kill(child, signal.SIGKILL)
                proc.kill()
                proc.wait(timeout=30)
        self.procs = []


def _uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))


class Killer(threading.Thread):
    """Kills (by its pid) the Dask worker grading ``student``, ``times`` times, ``after``
    seconds into each attempt; the attempt marks in the jobs folder say which worker."""

    def __init__(self, jobs: Path, student: str, times: int) -> None:
        super().__init__(daemon=True)
        self.jobs, self.student, self.times = jobs, student, times
        self.killed: list[dict] = []
        self.done = threading.Event()

    def run(self) -> None:
        seen: set[Path] = set()
        deadline = time.monotonic() + 600
        while len(self.killed) < self.times and not self.done.wait(0.2):
            if time.monotonic() > deadline:
                return
            for mark in sorted(set(self.jobs.glob("*/attempts/*")) - seen):
                try:
                    info = json.loads(mark.read_text())
                except (OSError, ValueError):
                    continue  # being written
                seen.add(mark)
                if info["student"] == self.student and len(self.killed) < self.times:
                    time.sleep(KILL_AFTER)
                    os.kill(info["pid"], signal.SIGKILL)
                    folder = mark.parent.parent / f"attempt-{mark.name}"
                    self.killed.append({**info, "folder": str(folder)})


def stop_scheduler_after(graded_csv: Path, student: str, scheduler: subprocess.Popen) -> dict:
    """Kill the scheduler once ``student``'s row is in ``graded.csv`` (in a thread)."""
    result: dict = {}

    def watch() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and scheduler.poll() is None:
            if graded_csv.is_file() and f"\n{student}," in graded_csv.read_text():
                scheduler.send_signal(signal.SIGKILL)
                result["killed"] = True
                return
            time.sleep(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    result["thread"] = thread
    return result


def grade_cli(subs: Path, out: Path, root: Path, *options: str, path: str = "") -> dict:
    """``python -m course_grading`` (through :data:`CLI`), with ``path`` as its ``PATH`` when
    given; its exit status, output, rows."""
    command = [sys.executable, "-c", CLI, str(subs), "--out", str(out), "--root", str(root)]
    env = {**wc.nbgrader_env(), **({"PATH": path} if path else {})}
    proc = subprocess.run(
        [*command, *OPTIONS, *options], capture_output=True, text=True, timeout=900, env=env
    )
    rows = {}
    if (out / "report.csv").is_file():
        with open(out / "report.csv", newline="", encoding="utf-8") as fh:
            rows = {r["student"]: r for r in csv.DictReader(fh)}
    dask = re.findall(r"^DASK MODULES (.*)$", proc.stdout, re.M)
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "rows": rows,
            "dask": dask[-1] if dask else None, "out": out}  # fmt: skip


def graded_log(out: Path) -> list[dict]:
    path = out / "cluster" / "graded.csv"
    if not path.is_file():  # nothing graded (the tests then show the run's output)
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def running_with(text: str) -> list[str]:
    """Command lines of running processes that mention ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(line[:200])
    return found


# --- the class ---------------------------------------------------------------------------------


def build_class(work: wc.WorkCourse, subs: Path, port: int) -> None:
    honest = honest_notebooks(work)
    for name, nb in honest.items():
        write(subs / f"{name}_{FIXTURE}.ipynb", nb)
    paths = {"out": str(subs.parent / "cluster"), "subs": str(subs), "root": str(subs.parent),
             "victim": str(subs / f"honest_{FIXTURE}.ipynb"), "gradebook": "/nonexistent",
             "port": port, "grader_files": []}  # fmt: skip
    for name in MEMBERS:
        nb = copy.deepcopy(honest["honest"])
        code = HOSTILE[name][0].format(**paths)
        nb.cells += [nbformat.v4.new_code_cell(part) for part in code.split(NEXT_CELL)]
        write(subs / f"{name}_{FIXTURE}.ipynb", nb)
    write(subs / f"{VICTIM}_{FIXTURE}.ipynb", slow(work))


def slow(work: wc.WorkCourse) -> nbformat.NotebookNode:
    """Full marks, after a first cell that sleeps ``SLEEP`` seconds."""
    nb = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"import time\ntime.sleep({SLEEP})"))
    return nb


def without_note(text: str, name: str) -> str:
    """``text`` (a report file's) with the note on a graded-again row (``RERUN``) taken out; a
    CSV file is read and written again as the report writes it (so quoting follows)."""
    if name.endswith(".md"):
        return text.replace(markdown_text(f"; {RERUN}"), "")
    out = io.StringIO()
    rows = csv.reader(io.StringIO(text, newline=""))
    csv.writer(out).writerows([[cell.replace(f"; {RERUN}", "") for cell in row] for row in rows])
    return out.getvalue()


def report_problems(local: Path, cluster: Path, noted: str) -> list[str]:
    """How ``cluster``'s reports and feedback differ from ``local``'s, byte for byte, once the
    note on ``noted``'s row is taken out; and any other row the note is on."""
    problems = []
    for name in REPORTS:
        path = cluster / name
        mine = path.read_bytes().decode() if path.is_file() else ""
        theirs = (local / name).read_bytes().decode()
        assert without_note(theirs, name) == theirs  # (reading and writing changes nothing)
        note = markdown_text(f"; {RERUN}") if name.endswith(".md") else f"; {RERUN}"
        sep, cell = ("|", 1) if name.endswith(".md") else (",", 0)  # the student's cell
        where = [ln.split(sep)[cell].strip() for ln in mine.splitlines() if note in ln]
        if name != "scores.csv" and where != [noted]:
            problems.append(f"{name}: the note is on {where}, not on {noted}'s row alone")
        if without_note(mine, name) != theirs:
            diff = set(without_note(mine, name).splitlines()) ^ set(theirs.splitlines())
            problems.append(f"{name} differs: {sorted(diff)[:2]}"[:400])
    pages = [{k: v[0] for k, v in digest(out / "feedback").items()} if (out / "feedback").is_dir()
             else {} for out in (local, cluster)]  # fmt: skip
    if not pages[0] or pages[1] != pages[0]:
        problems.append("feedback differs")
    return problems


# --- the runs ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def course():
    """The fixture lesson's course, in a folder other uids may enter (the sandbox's do)."""
    base = Path(tempfile.mkdtemp(prefix="shapes-cluster-"))
    base.chmod(0o755)
    root, work = fixture_course(base)
    certs = make_certs(base / "certs")  # each role's folder goes to its account
    certs.chmod(0o711)  # (what --worker-user does, for an account with a name)
    for path in [certs / "worker", *(certs / "worker").iterdir()]:
        os.chown(path, WORKER_UID, WORKER_UID)
    yield {"tmp": base, "root": root, "work": work, "certs": certs, "account": as_worker_account()}
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(course):
    started = Cluster(course["tmp"], course["certs"], course["account"])
    yield started
    started.stop()


def on(cluster: Cluster, address: str = "") -> tuple[str, ...]:
    """The options that grade on ``cluster`` (at ``address``: its current one by default)."""
    client = cluster.certs / "client"
    return ("--scheduler", address or cluster.address, "--cluster-certs", str(client))


@pytest.fixture(scope="module")
def first_run(course, cluster):
    """The class graded on the cluster, a worker and then the scheduler killed (the run that
    must stop in one line): all the loss test needs, so it can be repeated on its own."""
    tmp, root = course["tmp"], course["root"]
    subs = tmp / "class"
    address = cluster.start(refused=("nobwrap",))
    port = int(address.rsplit(":", 1)[1])  # the network member aims at the scheduler itself
    build_class(course["work"], subs, port)
    before = digest(subs)
    course_secret.create(tmp / "keys" / "course_secret")
    secret = ("--secret-file", str(tmp / "keys" / "course_secret"))
    out = shared_workspace(tmp / "cluster")
    workers = {"uids": dict(cluster.uids), "prefixes": dict(cluster.prefixes)}
    killer = Killer(out / "cluster" / "jobs", VICTIM, times=1)
    killer.start()
    stopper = stop_scheduler_after(out / "cluster" / "graded.csv", VICTIM, cluster.scheduler)
    first = grade_cli(subs, out, root, *on(cluster, address), *secret)
    killer.done.set()
    stopper["thread"].join(timeout=30)
    first_log = graded_log(out)
    cluster.stop()
    time.sleep(1.0)  # the killed worker's own processes: they end within half a second
    left = [p for kill in killer.killed for p in running_with(kill["folder"])]
    return {"first": first, "first_log": first_log, "killed": killer.killed, "left": left,
            "stopped": stopper.get("killed", False), "subs": subs, "before": before, "out": out,
            "secret": secret, "workers": workers,
            "total": len(list(subs.glob("*.ipynb")))}  # fmt: skip


@pytest.fixture(scope="module")
def graded(course, cluster, first_run):
    """The class graded here too (``--jobs 2``), and the stopped run resumed on a new cluster."""
    subs, out, secret = first_run["subs"], first_run["out"], first_run["secret"]
    local = grade_cli(subs, course["tmp"] / "local", course["root"], "--jobs", "2", *secret)
    # This machine needs no bubblewrap of its own: the resumed run has none on its PATH.
    no_bwrap = f"{Path(sys.executable).parent}{os.pathsep}{course['tmp'] / 'no-bwrap-bin'}"
    cluster.start()
    resumed = grade_cli(subs, out, course["root"], *on(cluster), "--resume", *secret,
                        path=no_bwrap)  # fmt: skip
    return {**first_run, "local": local, "resumed": resumed}


# --- what the runs must show -------------------------------------------------------------------


@needs_sandbox
def test_the_local_run_does_not_import_dask(graded):
    local = graded["local"]
    assert local["rc"] == 0, local["stderr"][-2000:]
    assert local["dask"] == "[]", local["stdout"][-500:]
    # The check can tell: a cluster run's line names them.
    assert graded["resumed"]["dask"] == "['dask', 'distributed']"


@needs_sandbox
def test_a_worker_that_cannot_sandbox_is_refused_by_name_and_never_used(graded):
    stderr = graded["first"]["stderr"]
    assert re.search(
        r"^refused Dask worker nobwrap \(tls://127\.0\.0\.1:\d+\): cannot sandbox student code: "
        r"bubblewrap is not installed \(apt-get install bubblewrap\); it is sent nothing$",
        stderr, re.M,
    ), stderr[-2000:]  # fmt: skip
    used = {row["worker"].split()[0] for row in graded["first_log"]}
    assert used and used <= {"w1", "w2"}, used  # only the fit workers graded anything


@needs_sandbox
def test_a_killed_workers_submission_is_graded_again_once_and_its_row_says_so(graded):
    killed, log = graded["killed"], graded["first_log"]
    assert len(killed) == 1, killed
    rows = [row for row in log if row["student"] == VICTIM]
    assert len(rows) == 1 and rows[0]["attempt"] == "2", rows
    assert killed[0]["worker"] != rows[0]["worker"], (killed, rows)  # another worker
    row = graded["resumed"]["rows"][VICTIM]
    assert row["status"] == graded["local"]["rows"][VICTIM]["status"] == "ok", row
    assert row["reasons"].endswith(f"; {RERUN}"), row["reasons"]
    assert row["score"] == graded["local"]["rows"][VICTIM]["score"]
    assert f"{VICTIM} / {FIXTURE}: {RERUN}" in graded["first"]["stderr"]


@needs_sandbox
def test_nothing_of_the_killed_attempt_is_left_running(graded):
    assert graded["killed"] and not graded["left"], graded["left"]


@needs_sandbox
def test_losing_the_scheduler_stops_the_run_in_one_line_and_keeps_what_is_graded(first_run):
    first, total = first_run["first"], first_run["total"]
    assert first_run["stopped"] and first["rc"] == 2, first["stderr"][-2000:]
    last = first["stderr"].strip().splitlines()[-1]
    found = re.fullmatch(
        r"python -m course_grading: lost the Dask scheduler at tls://127\.0\.0\.1:\d+; (\d+) of "
        rf"{total} submission\(s\) graded and kept in {re.escape(str(first_run['out']))}/cluster: "
        r"run the same command with --resume to grade the rest",
        last,
    )  # fmt: skip
    assert found and 1 <= int(found.group(1)) < total, last
    assert int(found.group(1)) == len(first_run["first_log"])
    assert "Traceback" not in first["stderr"], first["stderr"][-2000:]


@needs_sandbox
def test_resume_grades_the_rest_and_the_report_is_the_local_runs(graded):
    resumed, log = graded["resumed"], graded_log(graded["out"])
    assert resumed["rc"] == 0, resumed["stderr"][-2000:]
    students = [row["student"] for row in log]
    assert sorted(students) == sorted(graded["local"]["rows"]), students  # each graded once
    assert students[: len(graded["first_log"])] == [r["student"] for r in graded["first_log"]]
    local, out = graded["local"]["out"], graded["out"]
    assert report_problems(local, out, VICTIM) == []


@needs_sandbox
def test_the_report_comparison_can_fail(graded, tmp_path):
    changed = tmp_path / "changed"
    shutil.copytree(graded["out"], changed, ignore=shutil.ignore_patterns("course", "cluster"))
    text = (changed / "scores.csv").read_text()
    (changed / "scores.csv").write_text(text.replace("honest,", "honest ,"))
    noted = (changed / "report.csv").read_text().replace(f"{VICTIM},", "victim,", 1)
    (changed / "report.csv").write_text(noted)
    problems = report_problems(graded["local"]["out"], changed, VICTIM)
    assert [p.split()[0].rstrip(":") for p in problems] == [
        "report.csv",
        "report.csv",
        "scores.csv",
    ]
    assert problems[0] == "report.csv: the note is on ['victim'], not on a_slow's row alone"
    assert "victim" in problems[1] and "'honest ,3" in problems[2], problems


@needs_sandbox
def test_hostile_members_are_flagged_on_the_cluster_as_here(graded):
    rows = graded["resumed"]["rows"]
    for name in MEMBERS:
        for reason in HOSTILE[name][1]:
            assert re.search(reason, rows[name]["reasons"]), (name, reason, rows[name])


@needs_sandbox
def test_the_originals_are_untouched(graded):
    assert digest(graded["subs"]) == graded["before"]


@needs_sandbox
def test_a_submission_that_kills_two_workers_is_a_row_not_a_stalled_run(graded, cluster, course):
    subs, out = course["tmp"] / "twice", shared_workspace(course["tmp"] / "twice-out")
    write(subs / f"{VICTIM}_{FIXTURE}.ipynb", slow(course["work"]))
    killer = Killer(out / "cluster" / "jobs", VICTIM, times=2)
    killer.start()  # (on the cluster the class was resumed on)
    run = grade_cli(subs, out, course["root"], *on(cluster), *graded["secret"])
    killer.done.set()
    assert len(killer.killed) == 2, killer.killed
    assert run["rc"] == 0, run["stderr"][-2000:]
    row = run["rows"][VICTIM]
    assert row["status"] == "not graded" and row["reasons"] == DIED, row


@needs_sandbox
def test_a_cluster_with_no_worker_that_can_grade_stops_in_one_line(graded, cluster, course):
    subs = course["tmp"] / "none-fit"
    write(subs / f"honest_{FIXTURE}.ipynb", slow(course["work"]))
    cluster.stop()
    address = cluster.start(workers=(), refused=("nobwrap",))
    out = shared_workspace(course["tmp"] / "none-fit-out")
    run = grade_cli(subs, out, course["root"], *on(cluster), "--worker-wait", "3")
    assert run["rc"] == 2, run["stderr"][-2000:]
    last = run["stderr"].strip().splitlines()[-1]
    assert re.fullmatch(
        rf"python -m course_grading: no Dask worker at {re.escape(address)} can grade "
        r"\(waited 3 s; refused tls://127\.0\.0\.1:\d+: cannot sandbox student code: "
        r"bubblewrap is not installed \(apt-get install bubblewrap\)\)",
        last,
    ), last


def test_an_unreachable_scheduler_is_one_line_and_exit_2(tmp_path):
    certs = make_certs(tmp_path / "certs")
    subs = tmp_path / "subs"
    subs.mkdir()
    command = [sys.executable, "-m", "course_grading", str(subs), "--out", str(tmp_path / "out")]
    proc = subprocess.run(
        [*command, "--scheduler", "tls://127.0.0.1:1", "--cluster-certs", str(certs / "client")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert re.fullmatch(
        r"python -m course_grading: cannot reach the Dask scheduler at tls://127\.0\.0\.1:1: .+\n",
        proc.stderr,
    ), proc.stderr
    assert not (tmp_path / "out").exists()  # nothing was touched


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--resume"], "--resume goes with --scheduler"),
        (["--scheduler", "tls://127.0.0.1:1", "--no-sandbox"], "--no-sandbox does not go with"),
        (["--scheduler", "tls://127.0.0.1:1", "--student", "ann"], "--student regrades on this"),
        (["--scheduler", "tls://127.0.0.1:1", "--resume"], "holds no stopped run to resume"),
        (["--scheduler", "tcp://127.0.0.1:1"], "a Dask scheduler reached without TLS takes any"),
        (["--scheduler", "127.0.0.1:8786"], "a Dask scheduler reached without TLS takes any"),
        (["--scheduler", "tls://127.0.0.1:1"], "needs --cluster-certs DIR"),
    ],
)
def test_options_that_do_not_go_together_are_one_line(tmp_path, capsys, extra, message):
    (tmp_path / "subs").mkdir()
    argv = [str(tmp_path / "subs"), "--out", str(tmp_path / "out"), *extra]
    assert cli.main(argv) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # (--no-sandbox's warning comes first)
    assert last.startswith("python -m course_grading: ") and message in last, last


def test_resume_refuses_a_run_graded_with_another_secret_or_options(tmp_path):
    folder = tmp_path / "cluster"
    first = Options(secret=b"a" * 32)
    Store(folder, first, resume=False).begin({}, {})
    assert Store(folder, first, resume=True).measured() == ({}, {})
    with pytest.raises(GradingError, match=r"--resume: the secret changed since the stopped run"):
        Store(folder, Options(secret=b"b" * 32), resume=True)
    with pytest.raises(GradingError, match=r"--resume: the options changed"):
        Store(folder, Options(secret=b"a" * 32, cell_timeout=9), resume=True)


def test_a_worker_is_told_what_it_lacks(tmp_path):
    probe = tmp_path / "workspace.txt"
    probe.write_text("token")
    needs = needs_of(Limits(), probe, "token")
    older = replace(needs, course_lib="0.0")
    assert unfit(older).startswith(f"it has course_lib {needs.course_lib}, the run needs 0.0")
    elsewhere = replace(needs, probe=str(tmp_path / "not-shared.txt"))
    assert unfit(elsewhere).startswith("it cannot read the run's workspace")
    assert needs.resource != older.resource  # a worker fit for one run is not for another


def test_the_classroom_sends_a_lesson_to_the_cluster(monkeypatch):
    path = Path(__file__).resolve().parents[2] / "classroom" / "autograde.py"
    spec = importlib.util.spec_from_file_location("classroom_autograde", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ran: list[list[str]] = []
    monkeypatch.setattr(module, "class_due_argument", lambda *args: [])
    monkeypatch.setattr(
        module.subprocess,
        "run",
        lambda command: ran.append(command) or SimpleNamespace(returncode=2),
    )
    monkeypatch.setenv("SHAPES_GRADEBOOK_URL", "sqlite://")
    monkeypatch.setenv("SHAPES_COURSE_ID", "shapes")
    cluster = ["--scheduler", "tls://127.0.0.1:8786", "--cluster-certs", "certs/client"]
    assert module.main([FIXTURE, *cluster]) == 2
    assert module.main([FIXTURE]) == 2
    assert ran[0][-4:] == cluster and "--scheduler" not in ran[1]


def _ended(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # a zombie has ended, whoever reaps it


def test_a_grading_worker_ends_when_its_parent_dies():
    """A killed Dask worker's grading process (``execute.py --serve``) must not run on for
    nobody: it ends within a second, although its input stays open; also when its parent is
    killed before it has finished importing (as here, on a loaded machine), since the starter
    names itself in ``SHAPES_PARENT_PID`` as ``jobs.py`` does."""
    # (a job sent to the background reads /dev/null unless given its input by name: fd 3 here)
    script = (
        'exec 3<&0; SHAPES_PARENT_PID=$$ "$0" -m course_grading.sandbox.execute --serve <&3 & '
        "echo $!; wait"
    )
    parent = subprocess.Popen(
        ["sh", "-c", script, sys.executable], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        worker = int(parent.stdout.readline())
        time.sleep(2.0)  # its imports done, waiting for a job
        assert not _ended(worker)
        parent.kill()
        parent.wait(timeout=30)
        deadline = time.monotonic() + 60  # (its imports may take seconds under load)
        while not _ended(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ended(worker), "the grading worker outlived its parent"
    finally:
        parent.stdin.close()  # (ends it anyway, when the check above failed)


def test_the_leftover_check_sees_a_process(tmp_path):
    folder = tmp_path / "attempt-1"
    sleeper = subprocess.Popen(["sh", "-c", "sleep 30", str(folder)])  # the folder in its argv
    try:
        # until the child has exec'd, its /proc cmdline is still its parent's
        deadline = time.monotonic() + 10
        while not running_with(str(folder)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running_with(str(folder))  # the check that nothing is left can fail
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not running_with(str(folder))


# --- issue 42: a cluster closed to strangers, and every loss one line ---------------------------


@needs_sandbox
def test_a_worker_under_another_account_starts_from_the_documented_venv_and_grades(graded):
    workers = graded["workers"]
    assert workers["uids"]["w2"] == WORKER_UID != os.getuid()
    assert workers["uids"]["w1"] == os.getuid()  # (the check can tell the two apart)
    assert workers["prefixes"]["w2"] == workers["prefixes"]["w1"] == sys.prefix, workers
    logs = graded["first_log"] + graded_log(graded["out"])
    assert any(row["worker"].startswith("w2 ") for row in logs), logs


#: Run as uid 65534 by the system's Python: reads each key, then tries the scheduler's port
#: over TLS without a certificate, and prints what happened as JSON.
STRANGER = r"""
import json, socket, ssl, sys
certs, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
found = {}
for role in ("scheduler", "worker", "client"):
    try:
        open(f"{certs}/{role}/key.pem").read()
        found[role] = "read"
    except OSError as err:
        found[role] = type(err).__name__
context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
try:
    with socket.create_connection((host, port), timeout=10) as raw:
        with context.wrap_socket(raw) as tls:
            tls.settimeout(10)
            data = tls.recv(64)  # a Dask server speaks first once a connection is accepted
            found["tls"] = f"got {len(data)} bytes" if data else "closed"
except (OSError, ssl.SSLError) as err:
    found["tls"] = type(err).__name__
try:
    with socket.create_connection((host, port), timeout=10) as raw:
        raw.settimeout(10)
        raw.sendall(b"\x00" * 8)
        data = raw.recv(64)
        found["tcp"] = f"got {len(data)} bytes" if data else "closed"
except OSError as err:
    found["tcp"] = type(err).__name__
print(json.dumps(found))
"""


def stranger(certs: Path, address: str) -> dict:
    host, port = address.split("://")[1].rsplit(":", 1)
    command = ["setpriv", f"--reuid={STRANGER_UID}", f"--regid={STRANGER_UID}", "--clear-groups",
               "/usr/bin/python3", "-c", STRANGER, str(certs), host, port]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@needs_sandbox
def test_a_process_without_the_certificate_cannot_connect(graded, cluster, course):
    """Issue 42: a process of uid 65534 connected to the scheduler, ran code on a worker and read
    the course secret out of the grader's jobs. Over TLS with certificates, nobody without one
    gets in: not as uid 65534 (which cannot read any key either), not as root without one."""
    from distributed import Client
    from distributed.security import Security

    address = cluster.address
    found = stranger(course["certs"], address)
    assert found["scheduler"] == found["worker"] == found["client"] == "PermissionError", found
    assert not found["tls"].startswith("got") and not found["tcp"].startswith("got"), found
    plain = "tcp://" + address.split("://")[1]
    for target, security in ((plain, None), (address, Security.temporary())):  # another CA's
        with pytest.raises((OSError, TimeoutError)):
            Client(target, timeout=5, security=security).close()
    with Client(address, timeout=30, security=client_security(course["certs"])) as client:
        assert client.scheduler_info()["workers"]  # (with the certificate, it connects)


#: What section 3.8 starts the scheduler and workers with: no HTTP routes. Even with
#: ``--no-dashboard``, Dask serves pages over plain HTTP, without a login, on every address
#: (8787): the workers' list with their folders, logs, exceptions, each task's page.
NO_PAGES = {
    "DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES": "[]",
    "DASK_DISTRIBUTED__WORKER__HTTP__ROUTES": "[]",
}

#: Run as uid 65534 by the system's Python: what a GET of the URL answers.
PAGE = r"""
import sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as answer:
        print(answer.status, answer.read().decode(errors="replace")[:300])
except urllib.error.HTTPError as err:
    print(err.code)
"""


@pytest.mark.parametrize("documented", [True, False])
def test_a_stranger_reads_no_page_of_the_scheduler(tmp_path, documented):
    """My own attack on issue 42's cluster: the TLS port refused uid 65534, but the scheduler's
    HTTP pages (on 0.0.0.0, with ``--no-dashboard``) gave it every worker's address and folder,
    logs and task pages. Started as section 3.8 says, each page is a 404; without ``NO_PAGES``
    (the failing case) the scheduler's identity is read."""
    certs = make_certs(tmp_path / "certs")
    file = tmp_path / "scheduler.json"
    env = {**os.environ, **(NO_PAGES if documented else {})}
    command = [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--protocol", "tls",
               "--no-dashboard", "--scheduler-file", str(file),
               *tls_options(certs, "scheduler")]  # fmt: skip
    scheduler = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        deadline = time.monotonic() + 60
        while not file.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        port = json.loads(file.read_text())["services"]["dashboard"]
        drop = ["setpriv", f"--reuid={STRANGER_UID}", f"--regid={STRANGER_UID}", "--clear-groups"]
        url = f"http://127.0.0.1:{port}/json/identity.json"
        proc = subprocess.run([*drop, "/usr/bin/python3", "-c", PAGE, url],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        scheduler.terminate()
        scheduler.wait(timeout=30)
    assert proc.returncode == 0, proc.stderr
    if documented:
        assert proc.stdout.strip() == "404", proc.stdout
    else:
        assert proc.stdout.startswith("200 ") and "tls://127.0.0.1:" in proc.stdout, proc.stdout


def test_the_stranger_check_sees_an_open_scheduler(tmp_path):
    """The check above can fail: a scheduler started without TLS talks to uid 65534."""
    file = tmp_path / "scheduler.json"
    tmp_path.chmod(0o755)
    scheduler = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", str(file)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not file.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        found = stranger(tmp_path / "no-certs", json.loads(file.read_text())["address"])
    finally:
        scheduler.terminate()
        scheduler.wait(timeout=30)
    assert found["tcp"].startswith("got"), found


def test_certificates_are_made_with_keys_for_their_owners_only(tmp_path):
    certs = make_certs(tmp_path / "certs")
    assert (certs.stat().st_mode & 0o777) == 0o700
    for role in ("scheduler", "worker", "client"):
        assert (certs / role / "key.pem").stat().st_mode & 0o777 == 0o600
        assert (certs / role / "cert.pem").read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert not list(certs.rglob("ca.key")) and len(list(certs.rglob("*key*"))) == 3
    with pytest.raises(GradingError, match="exists already"):
        make_certs(certs)
    assert cli.main(["cluster-certs", str(tmp_path / "more"), "--days", "0"]) == 2


def test_a_key_others_can_read_is_refused(tmp_path):
    from course_grading.cluster_connect import security

    certs = make_certs(tmp_path / "certs")
    (certs / "client" / "key.pem").chmod(0o644)
    with pytest.raises(GradingError, match=r"can be read by others \(mode 644\): chmod 600"):
        security(certs / "client")
    with pytest.raises(GradingError, match="holds no ca.pem, cert.pem, key.pem"):
        security(certs)  # the folder above the roles'


# --- losing the scheduler, call by call (a client that fails where it is told) ----------------


class FakeFuture:
    """A finished job's future: ``result()`` raises or returns each of ``outcomes`` in turn."""

    def __init__(self, outcomes: list, status: str = "finished") -> None:
        self.outcomes, self.status = list(outcomes), status

    def result(self, timeout=None):
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


class FakeClient:
    """A Dask client whose calls fail as told (``fail``: call name -> what it raises)."""

    def __init__(self, fail: dict, status: str = "running") -> None:
        self.fail, self.status, self.submitted = fail, status, []

    def _maybe(self, call: str) -> None:
        if call in self.fail:
            raise self.fail[call]

    def scheduler_info(self, n_workers=-1):
        self._maybe("scheduler_info")
        return {"workers": {"tls://127.0.0.1:9": {"name": "w1"}}}

    def run(self, function, *args, **kwargs):
        self._maybe("run")
        return {address: "" for address in kwargs.get("workers", [])}

    def submit(self, function, task, **kwargs):
        self._maybe("submit")
        self.submitted.append(task)
        outcomes = self.fail.get("results", [self.fail.get("result", "no answer")])
        return FakeFuture(outcomes, self.fail.get("status", "finished"))


def fake_run(tmp_path: Path, client: FakeClient):
    from course_grading.cluster import ClusterRun
    from course_grading.cluster_connect import Pool

    store = Store(tmp_path / "cluster", Options(), resume=False)
    store.begin({}, {})
    run = ClusterRun(client, "tls://127.0.0.1:9", store, wait=1)
    run.needs = needs_of(Limits(), tmp_path / "probe", "token")
    run.total, run.pool = 3, Pool(client, run.needs)
    return run


def fake_task(tmp_path: Path, secret: bytes | None = None):
    from course_grading.cluster_worker import Task
    from course_grading.grading_run import GradingRun

    job = tmp_path / "jobs" / "0"
    job.mkdir(parents=True, exist_ok=True)
    run = GradingRun(None, Options(secret=secret), None, (), None, None)
    return Task(run, None, str(job), SimpleNamespace(lesson=FIXTURE))


LOST = (r"lost the Dask scheduler at tls://127\.0\.0\.1:9; 0 of 3 submission\(s\) graded and "
        r"kept in .*/cluster: run the same command with --resume to grade the rest")  # fmt: skip


def _comm_closed():
    from distributed.comm.core import CommClosedError

    return CommClosedError("in <TLS (closed) ConnectionPool.gather local=tls://127.0.0.1:1>")


@pytest.mark.parametrize("where", ["waiting for a worker", "submit", "wait", "result",
                                   "result, cancelled", "result, asyncio", "watching"])  # fmt: skip
def test_losing_the_scheduler_in_any_call_is_the_one_line_stop(tmp_path, monkeypatch, where):
    """Issue 42: ``CommClosedError`` came out of ``future.result()`` in ``_finish`` (a 30-line
    traceback, exit 1); every call into Dask that shows the scheduler gone must stop the run in
    one line, keeping what is graded."""
    import asyncio

    import distributed
    from distributed.client import FutureCancelledError

    fail = {
        "waiting for a worker": {"scheduler_info": _comm_closed()},
        "submit": {"submit": _comm_closed()},
        "result": {"result": _comm_closed(), "scheduler_info": _comm_closed()},
        "result, cancelled": {
            "result": FutureCancelledError("x", "scheduler-connection-lost"),
            "scheduler_info": OSError("Timed out trying to connect"),
        },
        "result, asyncio": {"result": asyncio.CancelledError(), "scheduler_info": _comm_closed()},
        "watching": {"scheduler_info": OSError("Timed out trying to connect")},
    }.get(where, {})
    client = FakeClient(fail, status="closed" if where == "watching" else "running")
    run = fake_run(tmp_path, client)

    def wait(futures, *args, **kwargs):
        if where == "wait":
            raise _comm_closed()
        return set(futures), set()

    monkeypatch.setattr(distributed, "wait", wait)
    with pytest.raises(GradingError, match=LOST):
        if where == "waiting for a worker":
            run._wait_for_a_worker()
        elif where == "watching":
            run._watch()
        else:
            run._submit(fake_task(tmp_path), lambda answer: None)
            run._collect(block=True)


def test_a_lost_worker_is_not_a_lost_scheduler(tmp_path, monkeypatch):
    """A worker that leaves while it is checked, or with a finished job's answer, is waited
    for (the scheduler runs the job again); the run goes on."""
    import distributed

    client = FakeClient({"run": OSError("worker tls://127.0.0.1:9 left")})
    run = fake_run(tmp_path, client)
    assert run.pool.check() == 0  # not admitted yet, not a stop
    monkeypatch.setattr(distributed, "wait", lambda futures, *a, **k: (set(futures), set()))
    for first in (TimeoutError(), _comm_closed()):  # not here yet; its worker's connection lost
        client.fail = {"results": [first, "the answer"]}
        taken: list = []
        run._submit(fake_task(tmp_path), taken.append)
        run._collect(block=False)
        assert len(run.pending) == 1 and not taken  # waited for again...
        run._collect(block=True)
        assert taken == ["the answer"] and not run.pending  # ...and taken


def test_a_jobs_own_os_error_stops_the_run_and_is_not_a_lost_scheduler(tmp_path, monkeypatch):
    """A job that raised ``PermissionError`` on its worker (a worker of another account could
    not mark its attempt in a folder a root worker had made) was taken for a lost connection
    and waited for again, forever; it is the job's error: the run stops naming it."""
    import distributed

    client = FakeClient({"result": PermissionError(13, "Permission denied"), "status": "error"})
    run = fake_run(tmp_path, client)
    monkeypatch.setattr(distributed, "wait", lambda futures, *a, **k: (set(futures), set()))
    run._submit(fake_task(tmp_path), lambda answer: None)
    with pytest.raises(GradingError, match=r"failed on a Dask worker: \[Errno 13\] Permission"):
        run._collect(block=False)


def test_an_attempts_marks_can_be_written_by_a_worker_of_another_account(tmp_path):
    from course_grading.cluster_worker import _attempt

    task = fake_task(tmp_path)
    for name in ("stage", "in.ipynb"):
        (Path(task.job) / name).mkdir() if name == "stage" else (Path(task.job) / name).touch()
    assert _attempt(task, "w1")[1] == 1
    marks = Path(task.job) / "attempts"
    assert marks.stat().st_mode & 0o7777 == 0o2770, oct(marks.stat().st_mode)


def test_a_job_carries_its_lessons_key_and_never_the_secret(tmp_path, monkeypatch):
    """Issue 42: the jobs carried the course secret to every worker (and, through an open
    scheduler, to anyone). Each carries its own lesson's key, from which that lesson's draws
    follow exactly as from the secret."""
    import pickle

    from course_grading.judge.items.model import lesson_of
    from course_grading.judge.secret import LessonKeys, lesson_key, seed

    secret = b"s3cr3t-" * 8
    client = FakeClient({})
    fake_run(tmp_path, client)._submit(fake_task(tmp_path, secret), lambda answer: None)
    (sent,) = client.submitted
    data = pickle.dumps(sent)
    assert secret not in data and secret.hex().encode() not in data
    keys = sent.run.options.secret
    assert isinstance(keys, LessonKeys) and [name for name, _ in keys.keys] == [FIXTURE]
    assert keys.key(FIXTURE) == lesson_key(secret, FIXTURE)
    with pytest.raises(GradingError, match="no key of lesson 01_tokens_and_attention_memory"):
        keys.key("01_tokens_and_attention_memory")
    assert seed(keys, FIXTURE, "test_tokens", "ann", "x") == seed(
        secret, FIXTURE, "test_tokens", "ann", "x"
    )
    lesson = "01_tokens_and_attention_memory"
    edition = lesson_of(lesson).edition
    one = LessonKeys.of(secret, [lesson])
    assert edition.draw(one) == edition.draw(secret) != edition.draw(b"other" * 8)
    assert edition.label(one) == edition.label(secret)
