"""The sandbox's command line and its refusal to fall back silently.

``test_hostile_class.py`` checks from inside real kernels that the sandbox holds; these check
what is asked of bwrap, that a machine without it stops the grading command in one line, and,
from inside a sandbox built for a regular (non-editable) install, that the grader's package can
be neither imported nor read there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from class_builders import sandbox_problem

import course_grading
from course_grading.autograde import Options
from course_grading.errors import GradingError
from course_grading.run import grade
from course_grading.sandbox import bwrap as sandbox

REPO = Path(__file__).resolve().parents[2]
KERNEL = ["python", "-m", "ipykernel_launcher", "-f", sandbox.KERNEL_CONNECTION]


def _argv(tmp_path, uid=None, limits=None):
    return sandbox.kernel_argv(
        bwrap="bwrap",
        stage=tmp_path / "stage",
        connection=tmp_path / "runtime" / "kernel.json",
        lesson="99_fixture",
        uid=uid,
        limits=limits or sandbox.Limits(),
        kernel=KERNEL,
    )


def _script(argv: list[str]) -> str:
    """The sandbox's start script: the shell command bwrap runs (after its ``--``)."""
    inside = argv[argv.index("--") + 1 :]
    return inside[inside.index("-c") + 1]


def _binds(argv: list[str]) -> list[tuple[str, str, str]]:
    return [
        (argv[i], argv[i + 1], argv[i + 2])
        for i in range(len(argv) - 2)
        if argv[i] in ("--bind", "--ro-bind")
    ]


def _tmpfs(argv: list[str]) -> dict[str, int | None]:
    """Each ``--tmpfs`` folder and the ``--size`` given just before it (``None``: none)."""
    found, size = {}, None
    for i, arg in enumerate(argv[:-1]):
        if arg == "--size":
            size = int(argv[i + 1])
        elif arg == "--tmpfs":
            found[argv[i + 1]], size = size, None
    return found


def test_the_kernel_sees_no_repository_and_writes_no_host_folder(tmp_path):
    argv = _argv(tmp_path)
    binds = _binds(argv)
    assert [dest for kind, _, dest in binds if kind == "--bind"] == []  # nothing writable
    bound = {src for _, src, _ in binds}
    assert str(REPO) not in bound and str(REPO / "solutions") not in bound
    assert str(REPO / "course_lib") in bound  # the package folder alone (editable install)
    assert (str(tmp_path / "runtime" / "kernel.json"), sandbox.CONNECTION) in [
        (src, dest) for _, src, dest in binds
    ]  # the connection file alone, read-only
    for flag in ("--unshare-net", "--unshare-ipc", "--unshare-pid", "--die-with-parent"):
        assert flag in argv
    assert "--new-session" in argv
    assert argv.index("--clearenv") < argv.index("--setenv")
    assert "JPY_PARENT_PID" not in argv  # its parent check would end the kernel


def test_every_writable_folder_is_a_private_tmpfs_of_bounded_size(tmp_path):
    limits = sandbox.Limits(tmpfs_bytes=64 * 2**20, shm_bytes=8 * 2**20)
    argv = _argv(tmp_path, limits=limits)
    tmpfs = _tmpfs(argv)
    assert tmpfs["/tmp"] == tmpfs[sandbox.HOME] == 64 * 2**20
    assert tmpfs["/dev/shm"] == 8 * 2**20 and tmpfs[sandbox.RUNTIME] == sandbox.RUNTIME_BYTES
    shm = argv.index("/dev/shm")
    remount = argv.index("--remount-ro")
    assert argv.index("--dev") < shm < remount and argv[remount + 1] == "/dev"  # all but shm
    script = _script(argv)
    assert f"cp {sandbox.CONNECTION} {sandbox.KERNEL_CONNECTION}" in script


def test_tmp_is_mounted_before_the_binds_under_it(tmp_path):
    argv = _argv(tmp_path)
    tmp = argv.index("/tmp", argv.index("--tmpfs"))
    first_bind = argv.index("--ro-bind", argv.index("--remount-ro"))
    assert tmp < first_bind  # a later tmpfs would hide a folder bound under /tmp


def test_a_root_grader_drops_to_the_slot_uid(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    limits = sandbox.Limits(memory_bytes=2**30, processes=64)
    argv = _argv(tmp_path, uid=2_000_000_123, limits=limits)
    script = _script(argv)
    assert "setpriv --reuid=2000000123" in script and "--no-new-privs" in script
    assert "--unshare-user" not in argv
    assert f"--as={2**30}" in argv and "--nproc=64" in argv
    assert argv[-len(KERNEL) :] == KERNEL


def test_an_ordinary_grader_maps_the_slot_uid_in_a_user_namespace(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 4242)
    argv = _argv(tmp_path, uid=2_000_000_123)
    assert "setpriv" not in _script(argv)
    at = argv.index("--unshare-user")
    assert argv[at : at + 6] == [
        "--unshare-user", "--disable-userns", "--uid", "2000000123", "--gid", "2000000123",
    ]  # fmt: skip


def test_slots_get_distinct_uids_and_a_bad_slot_is_refused():
    uids = {sandbox.sandbox_uid(slot) for slot in range(sandbox.MAX_SLOTS)}
    assert len(uids) == sandbox.MAX_SLOTS and min(uids) >= sandbox.UID_BASE
    assert max(uids) < 2**32 - 1
    with pytest.raises(ValueError, match="use fewer --jobs"):
        sandbox.sandbox_uid(sandbox.MAX_SLOTS)


def test_the_cgroup_is_joined_before_bwrap(tmp_path):
    """Both cgroup v1 folders (memory, pids) are joined by the shell that then execs bwrap."""
    procs = [tmp_path / "memory" / "cgroup.procs", tmp_path / "pids" / "cgroup.procs"]
    argv = sandbox.kernel_argv(
        bwrap="bwrap",
        stage=tmp_path / "stage",
        connection=tmp_path / "kernel.json",
        lesson="l",
        uid=None,
        limits=sandbox.Limits(),
        kernel=KERNEL,
        cgroup_procs=procs,
    )
    script = 'echo $$ > "$1" && echo $$ > "$2" && shift 2 && exec "$@"'
    assert argv[:6] == ["/bin/sh", "-c", script, "sh", *map(str, procs)]
    assert argv[6:9] == ["/bin/sh", "-c", 'exec "$@" 9<"$0"']  # then the seccomp filter's file
    assert argv[10:13] == ["bwrap", "--seccomp", "9"]
    for folder in ("memory", "pids"):
        (tmp_path / folder).mkdir()
    joined = sandbox.join(["sh", "-c", "echo $$"], procs)
    pid = subprocess.run(joined, capture_output=True, text=True, check=True).stdout.strip()
    assert [p.read_text().strip() for p in procs] == [pid, pid]  # the same process, in both


# --- memory that no process maps: refused -----------------------------------------------------

HIDE = """
import ctypes, json, os
found = {}
try:
    fd = os.memfd_create("hidden")
    os.posix_fallocate(fd, 0, 2**20)
    found["memfd"] = "made"
except OSError as err:
    found["memfd"] = err.errno
libc = ctypes.CDLL(None, use_errno=True)
made = libc.shmget(0, ctypes.c_size_t(2**20), 0o1600) >= 0
found["shmget"] = "made" if made else ctypes.get_errno()
with open("/dev/shm/ok", "wb") as fh:  # POSIX shared memory: a bounded tmpfs, still allowed
    fh.write(b"x" * 4096)
found["dev_shm"] = os.path.getsize("/dev/shm/ok")
print(json.dumps(found))
"""


@pytest.mark.skipif(bool(sandbox_problem()), reason=sandbox_problem() or "-")
def test_memory_no_process_maps_is_refused_in_the_sandbox(tmp_path):
    """A memfd file or a System V segment, filled and left unmapped, is counted by no limit
    without a cgroup (4 × 900 MiB of memfd read 54 MiB to the watch): the sandbox refuses both.
    The same command without the filter makes both, so the check can tell."""
    from course_grading.sandbox import seccomp

    (tmp_path / "stage").mkdir()
    (tmp_path / "kernel.json").write_text("{}")
    argv = sandbox.kernel_argv(
        bwrap=shutil.which("bwrap") or "bwrap", stage=tmp_path / "stage",
        connection=tmp_path / "kernel.json", lesson="l", uid=sandbox.sandbox_uid(0),
        limits=sandbox.Limits(), kernel=[sys.executable, "-c", HIDE],
    )  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert json.loads(run.stdout.splitlines()[-1]) == {"memfd": 1, "shmget": 1, "dev_shm": 4096}
    assert argv[5:7] == ["--seccomp", str(seccomp.FD)]
    bare = [argv[4], *argv[7:]]  # bwrap and its arguments, without the filter
    run = subprocess.run(bare, capture_output=True, text=True, check=True)
    assert json.loads(run.stdout.splitlines()[-1]) == {"memfd": "made", "shmget": "made",
                                                        "dev_shm": 4096}  # fmt: skip


def test_the_filter_is_built_only_where_its_numbers_are_known():
    from course_grading.sandbox import seccomp

    for machine in ("x86_64", "aarch64"):
        code = seccomp.program(machine)
        assert code is not None and len(code) // 8 > 2 * len(seccomp.allowed(machine))
    assert seccomp.program("riscv64") is None
    if seccomp.program() is not None:
        assert seccomp.wrap(["bwrap", "--", "true"])[-5:] == [
            "bwrap",
            "--seccomp",
            "9",
            "--",
            "true",
        ]


# --- a regular install: the grader's package is in the venv the kernel reads -------------------

LOOK = """
import json, os, sys
try:
    import course_grading
    imported = True
except ImportError as error:  # the cover's error, or the real package's own (no grader extra
    imported = "grading sandbox" not in str(error)  # inside: its code ran all the same)
paths = json.loads(sys.argv[1])
print(json.dumps({"imported": imported, "read": [p for p in paths if os.path.exists(p)]}))
"""

BUILD = """
import json, subprocess, sys
from pathlib import Path
from course_grading.sandbox import bwrap as sandbox
here = Path(sys.argv[1])
package = Path(sandbox.package_folders(("course_grading",))[0])
paths = [str(package / "sandbox" / "bwrap.py"), str(package / "judge" / "items" / "lesson_99.py")]
argv = sandbox.kernel_argv(
    bwrap="bwrap", stage=here / "stage", connection=here / "kernel.json", lesson="l",
    uid=sandbox.sandbox_uid(0), limits=sandbox.Limits(),
    kernel=[sys.executable, "-c", sys.argv[2], json.dumps(paths)],
)
if sys.argv[3] == "uncovered":  # the same command without the covers, to show the check tells
    at = [i for i, a in enumerate(argv) if a == "--tmpfs" and argv[i + 1] == str(package)][0]
    argv = argv[: at - 2] + argv[at + 7 :]
print(json.dumps({"package": str(package), "paths": paths}))
sys.stdout.flush()
subprocess.run(argv, check=True)
"""


@pytest.fixture(scope="module")
def regular_install(tmp_path_factory) -> Path:
    """A scratch venv holding copies of both packages as pip puts them (site-packages), the
    project's dependencies reached through a ``.pth`` line; its python."""
    venv = tmp_path_factory.mktemp("regular") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    for name in ("course_grading", "course_lib"):
        source = REPO / name
        shutil.copytree(source, site / name, ignore=shutil.ignore_patterns("__pycache__"))
    (site / "shapes-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin" / "python"


def _look(python: Path, tmp_path: Path, covered: str) -> tuple[dict, dict]:
    (tmp_path / "stage").mkdir(exist_ok=True)
    (tmp_path / "kernel.json").write_text("{}")
    out = subprocess.run(
        [str(python), "-c", BUILD, str(tmp_path), LOOK, covered],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.splitlines()
    return json.loads(out[0]), json.loads(out[-1])


@pytest.mark.skipif(bool(sandbox_problem()), reason=sandbox_problem() or "-")
def test_a_regular_install_of_the_grader_cannot_be_imported_or_read_inside(
    regular_install, tmp_path
):
    where, inside = _look(regular_install, tmp_path, "covered")
    assert where["package"].startswith(str(regular_install.parents[1]))  # in the venv
    assert all(Path(p).is_file() for p in where["paths"])  # there, outside
    assert inside == {"imported": False, "read": []}
    _, uncovered = _look(regular_install, tmp_path, "uncovered")
    assert uncovered == {"imported": True, "read": where["paths"]}  # the check can tell


def test_the_grader_is_not_where_the_kernel_looks_in_this_install():
    """The editable install of this checkout: its package folder is in no bound folder."""
    package = Path(course_grading.__file__).resolve().parent
    assert not any(p == package or p in package.parents for p in sandbox.readonly_paths())


def test_no_bwrap_stops_the_command_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    (tmp_path / "subs").mkdir()
    with pytest.raises(GradingError) as stop:
        grade(tmp_path / "subs", tmp_path / "out", REPO, options=Options())
    message = str(stop.value)
    assert "bubblewrap is not installed" in message and "--no-sandbox" in message
    assert "\n" not in message
    assert not (tmp_path / "out").exists()  # it stopped before doing anything


def test_namespaces_refused_stop_the_command_in_one_line(monkeypatch):
    refused = subprocess.CompletedProcess(
        [], 1, "", "bwrap: No permissions to creating new namespace\n"
    )
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: "/usr/bin/bwrap")
    monkeypatch.setattr(sandbox.subprocess, "run", lambda *a, **k: refused)
    with pytest.raises(GradingError, match="cannot create namespaces here .*No permissions"):
        sandbox.check_available()


def test_help_needs_no_sandbox_and_lists_the_new_options():
    out = subprocess.run(
        [sys.executable, "-m", "course_grading", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    options = ("--jobs", "--no-sandbox", "--memory", "--max-processes", "--notebook-timeout")
    for option in (*options, "--budget-factor", "--notebook-floor", "--tmp-size"):
        assert option in out


# --- the pieces the limits rest on ------------------------------------------------------------


def test_a_memory_cgroup_holds_a_process_to_its_limit():
    from course_grading.sandbox.cgroup import Cgroup

    group = Cgroup.make("shapes-test-cgroup", 64 * 2**20, 16)
    if group is None:
        pytest.skip("no cgroup can be made here (not root on cgroup v1, no delegated v2)")
    hog = [sys.executable, "-c", "b = bytearray(256 * 2**20)"]
    try:
        joined = subprocess.run(sandbox.join(hog, group.procs), check=False)
        assert joined.returncode == -9 and group.oom_kills() >= 1
        assert 0 < group.peak() <= 64 * 2**20
    finally:
        group.remove()
    assert not any(folder.exists() for folder in group.folders)
    assert subprocess.run(hog, check=False).returncode == 0  # outside it, the same runs


def test_a_trees_cpu_time_keeps_what_its_ended_children_used():
    from course_grading.sandbox import processes

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"
    code = (
        "import os, subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {burn!r}])\n"  # a child that ends, reaped
        "print('ready', flush=True)\n"
        "time.sleep(30)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        used = processes.usage(parent.pid)
        assert used.pids == [parent.pid]  # the child is gone...
        assert used.cpu >= 0.5  # ...but its CPU time is still counted
        assert processes.tree(parent.pid) == [parent.pid] and processes.children(parent.pid) == []
    finally:
        parent.kill()
        parent.wait()


def test_a_budget_follows_the_solution_within_floor_and_cap():
    from course_grading.sandbox.budgets import budget_of
    from course_grading.sandbox.jobs import Outcome

    def solution(seconds):
        return Outcome(status="ok", seconds=seconds)

    assert budget_of(solution(10.0), 5, 120, 1800).seconds == 120  # the floor
    assert budget_of(solution(60.3), 5, 120, 1800).seconds == 302  # 301.5, rounded up
    assert budget_of(solution(1000.0), 5, 120, 1800).seconds == 1800  # the cap
    assert budget_of(solution(3.1), 5, 30, 1800).why == budget_of(solution(4.7), 5, 30, 1800).why
    failed = budget_of(Outcome(status="error", reason="NameError: x"), 5, 120, 1800)
    assert failed.seconds == 1800 and failed.problem == "NameError: x"


def test_over_its_memory_the_watch_kills_enough_in_one_sample():
    """Four processes of 900 MiB beside a 200 MiB kernel, over 2 GiB: the two largest go at
    once (killing only the largest, as the watch once did, left 2.9 GiB for another sample)."""
    from course_grading.sandbox import processes
    from course_grading.sandbox.watch import over_limit

    mib = 2**20
    sizes = {10: 200 * mib, 11: 900 * mib, 12: 901 * mib, 13: 900 * mib, 14: 899 * mib}
    used = processes.Usage(rss=sum(sizes.values()), resident=sizes)
    chosen = over_limit(used, 2048 * mib)
    assert chosen == [12, 11] and used.rss - sum(sizes[p] for p in chosen) <= 2048 * mib
    assert used.rss - sizes[12] > 2048 * mib  # one kill a sample is not enough
    assert over_limit(used, used.rss) == [] and over_limit(used, None) == []
