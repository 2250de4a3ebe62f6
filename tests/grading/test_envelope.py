"""One resource envelope for every sandbox, a kernel's and a graded function's (issue 42, items
1, 2 and 9): the seccomp allow-list, the cgroup (v1, v2 or none), the watch that counts tmpfs
pages, a uid per running function sandbox, and the time budgets of an item and a submission.

Each attack of the issue is run here against the piece that stops it, with the case that shows
the check can fail beside it (the same command without the filter, the watch without its tmpfs
count, a run without budgets). ``test_hostile_class.py`` runs them again as members of a graded
class.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from class_builders import sandbox_problem

from course_grading.judge import functions
from course_grading.judge.items import call
from course_grading.sandbox import bwrap as sandbox
from course_grading.sandbox import cgroup, processes, seccomp, syscalls
from course_grading.sandbox.watch import over_limit

SANDBOX = not sandbox_problem()
needs_sandbox = pytest.mark.skipif(not SANDBOX, reason=sandbox_problem() or "-")
MACHINE = os.uname().machine
MIB = 2**20

# --- the filter, read as the kernel reads it --------------------------------------------------

ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS


def run_filter(code: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """What a classic BPF seccomp program answers for one call (the few instructions ours uses)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    ops = [struct.unpack("=HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = ops[pc]
        if op == 0x20:  # BPF_LD|BPF_W|BPF_ABS
            (acc,) = struct.unpack_from("<I", data, k)
            pc += 1
        elif op in (0x15, 0x25, 0x45):  # JEQ, JGT, JSET with a constant
            taken = {0x15: acc == k, 0x25: acc > k, 0x45: bool(acc & k)}[op]
            pc += 1 + (jt if taken else jf)
        elif op == 0x06:  # BPF_RET|BPF_K
            return k
        else:
            raise AssertionError(f"instruction {op:#x} at {pc}: not one the filter should use")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_filter_allows_its_list_and_refuses_every_other_call(machine):
    code, table = seccomp.program(machine), syscalls.numbers(machine)
    arch, allowed = syscalls.AUDIT_ARCH[machine], seccomp.allowed(machine)
    assert {"read", "mmap", "futex", "execve", "wait4"} <= set(allowed)
    for name, nr in table.items():
        got = run_filter(code, arch, nr)
        if name in allowed:
            assert got == ALLOW, name
        elif name == "clone3":
            assert got == ENOSYS  # the C library falls back to clone, whose flags we can read
        elif name != "clone":
            assert got == EPERM, name
    clone, personality = table["clone"], table["personality"]
    assert run_filter(code, arch, clone, (0x11 | 0x01000000 | 0x00200000,)) == ALLOW  # fork
    assert run_filter(code, arch, clone, (0x3D0F00,)) == ALLOW  # a thread
    for flag in (0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000):
        assert run_filter(code, arch, clone, (flag | 0x11,)) == EPERM, hex(flag)
    assert run_filter(code, arch, personality, (0xFFFFFFFF,)) == ALLOW  # the query
    assert run_filter(code, arch, personality, (0x0040000,)) == EPERM  # ADDR_NO_RANDOMIZE
    assert run_filter(code, arch, max(table.values()) + 1) == ENOSYS  # newer than the table
    assert run_filter(code, arch ^ 1, table["read"]) == EPERM  # another ABI
    assert run_filter(code, arch, 0x40000000 | table["read"]) == EPERM  # x32


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_numbers_are_the_kernels(machine):
    """Every number in ``syscalls.py`` against the installed kernel headers (where they are)."""
    header = {
        "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
        "aarch64": Path("/usr/include/asm-generic/unistd.h"),
    }[machine]
    if not header.is_file():
        pytest.skip(f"no {header} here")
    text = header.read_text()
    found = {m[0]: int(m[1]) for m in re.findall(r"#define __NR_(\w+) (\d+)\b", text)}
    via = dict(re.findall(r"#define __NR3264_(\w+) (\d+)", text))
    for name, target in re.findall(r"#define __NR_(\w+) __NR3264_(\w+)", text):
        if target in via and not name.endswith("64") and name not in ("llseek", "mmap2"):
            found.setdefault(name, int(via[target]))
    ours = syscalls.numbers(machine)
    differ = {n: (ours[n], found[n]) for n in ours if n in found and ours[n] != found[n]}
    assert not differ
    assert len(set(ours) & set(found)) >= 300


# --- the families the issue named, inside both sandboxes ------------------------------------------

FAMILIES = r"""
import ctypes, errno, json, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
N = json.loads(sys.argv[1])
CALLS = {
    "unshare (user, mount)": ("unshare", 0x10000000 | 0x00020000),
    "clone (a user namespace)": ("clone", 0x10000000 | 17, 0, 0, 0, 0),
    "setns": ("setns", 0, 0),
    "io_uring_setup": ("io_uring_setup", 1, 0),
    "keyctl": ("keyctl", 0, 0),
    "add_key": ("add_key", 0, 0, 0, 0, 0),
    "personality (no randomisation)": ("personality", 0x0040000),
    "pidfd_open": ("pidfd_open", os.getpid(), 0),
    "process_vm_readv": ("process_vm_readv", os.getpid(), 0, 0, 0, 0, 0),
    "perf_event_open": ("perf_event_open", 0, 0, -1, -1, 0),
    "ptrace": ("ptrace", 16, 1, 0, 0),
    "bpf": ("bpf", 0, 0, 0),
    "userfaultfd": ("userfaultfd", 0),
    "mount": ("mount", 0, 0, 0, 0, 0),
    "memfd_create": ("memfd_create", 0, 0),
    "shmget": ("shmget", 0, 4096, 0o1600),
    "clone3": ("clone3", 0, 0),
}
found = {}
for label, (name, *args) in CALLS.items():  # each in a child: a call let through changes it
    if name not in N:
        continue
    child = os.fork()
    if child == 0:
        got = libc.syscall(N[name], *[ctypes.c_long(a) for a in args])
        os._exit(0 if got >= 0 else ctypes.get_errno())  # (a clone's own child: 0 too)
    status = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    found[label] = errno.errorcode.get(status, "reached the kernel")
found["personality (the query)"] = libc.personality(0xFFFFFFFF) >= 0
nested = "unshare -Urm sh -c 'mount -t tmpfs -o size=1g none /tmp && head -c 8M /dev/zero >/tmp/x'"
found["unshare -Urm and a tmpfs"] = subprocess.run(["sh", "-c", nested]).returncode
print(json.dumps(found))
"""


def _families_argv(kind: str, tmp_path: Path) -> list[str]:
    script = [sys.executable, "-c", FAMILIES, json.dumps(syscalls.numbers(MACHINE))]
    bwrap = shutil.which("bwrap") or "bwrap"
    limits, uid = sandbox.Limits(), sandbox.sandbox_uid(0)
    if kind == "function":
        env = {"PATH": "/usr/bin:/bin"}
        return sandbox.command_argv(bwrap=bwrap, argv=script, binds=[], limits=limits,
                                    cpu_seconds=30, uid=uid, env=env)  # fmt: skip
    (tmp_path / "stage").mkdir()
    (tmp_path / "kernel.json").write_text("{}")
    return sandbox.kernel_argv(bwrap=bwrap, stage=tmp_path / "stage",
                               connection=tmp_path / "kernel.json", lesson="l", uid=uid,
                               limits=limits, kernel=script)  # fmt: skip


@needs_sandbox
@pytest.mark.skipif(syscalls.numbers(MACHINE) is None, reason="no filter for this machine")
@pytest.mark.parametrize("kind", ["kernel", "function"])
def test_every_named_family_is_refused_inside_both_sandboxes(kind, tmp_path):
    """The issue's list (``unshare -Urm``, ``io_uring_setup``, ``keyctl``, ``personality``,
    ``pidfd_open``, ``process_vm_readv``, ``perf_event_open``, a nested tmpfs) and their
    neighbours reach no kernel code from either sandbox; without the filter, the same sandbox
    lets them through (the failing case: what the issue found)."""
    argv = _families_argv(kind, tmp_path)
    found = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    assert found.pop("personality (the query)") is True
    assert found.pop("unshare -Urm and a tmpfs") != 0
    assert found.pop("clone3") == "ENOSYS"
    assert set(found.values()) == {"EPERM"}, found
    bare = argv[argv.index("--seccomp") - 1 : argv.index("--seccomp")]
    bare += argv[argv.index("--seccomp") + 2 :]  # bwrap, its arguments, without the filter
    loose = json.loads(subprocess.run(bare, capture_output=True, text=True, check=True).stdout)
    assert loose["unshare -Urm and a tmpfs"] == 0 and loose["personality (the query)"] is True
    reached = {k for k, v in loose.items() if v == "reached the kernel"}
    assert {"unshare (user, mount)", "pidfd_open", "personality (no randomisation)"} <= reached


# --- cgroups: v1 here as root, v2 in a fake folder and on the kernel's own hierarchy -------------


def test_a_cgroup_v1_holds_memory_and_processes():
    group = cgroup.Cgroup.make(f"shapes-{os.getpid()}-t1", 64 * MIB, 8)
    if group is None or group.version != "cgroup v1":
        pytest.skip("no cgroup v1 can be made here (not root, or no cgroup v1 controllers)")
    forks = "import os, time\nfor n in range(64):\n    os.fork() or (time.sleep(2), os._exit(0))"
    try:
        assert len(group.folders) == 2, group.folders  # memory and pids
        forked = subprocess.run(sandbox.join([sys.executable, "-c", forks], group.procs),
                                capture_output=True, text=True, check=False)  # fmt: skip
        assert "BlockingIOError" in forked.stderr  # the 13th process, say, was refused
        hog = [sys.executable, "-c", "b = bytearray(256 * 2**20)"]
        assert subprocess.run(sandbox.join(hog, group.procs), check=False).returncode == -9
        assert group.oom_kills() >= 1 and 0 < group.peak() <= 64 * MIB
    finally:
        group.remove()
    assert not any(folder.exists() for folder in group.folders)


def _fake_v2(tmp_path: Path, monkeypatch, delegated: bool = True) -> Path:
    """A cgroup v2 tree in ``tmp_path``: this process in ``/course.scope``, with memory and pids,
    marked delegated as systemd's ``Delegate=yes`` marks it; ``cgroup.py`` pointed at it."""
    mount = tmp_path / "cgroup2"
    own = mount / "course.scope"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    (own / "cgroup.procs").write_text(f"{os.getpid()}\n")
    if delegated:
        try:
            os.setxattr(own, "user.delegate", b"1")
        except OSError:
            pytest.skip("this file system keeps no user.* attributes")
    info, self_file = tmp_path / "mountinfo", tmp_path / "cgroup"
    info.write_text(f"30 23 0:26 / {mount} rw,nosuid - cgroup2 cgroup2 rw\n")
    self_file.write_text("0::/course.scope\n")
    monkeypatch.setattr(cgroup, "MOUNTINFO", info)
    monkeypatch.setattr(cgroup, "SELF", self_file)
    return own


def test_a_delegated_cgroup_v2_subtree_is_used_and_set(tmp_path, monkeypatch):
    own = _fake_v2(tmp_path, monkeypatch)
    group = cgroup.Cgroup.make("shapes-1-2", 256 * MIB, 100)
    assert group is not None and group.version == "cgroup v2" and cgroup.kind() == "cgroup v2"
    (folder,) = group.folders
    assert folder == own / "shapes-1-2"  # beside the leaf the grader moved into
    assert (own / cgroup.LEAF / "cgroup.procs").read_text().strip() == str(os.getpid())
    assert set((own / "cgroup.subtree_control").read_text().split()) == {"+memory", "+pids"}
    assert (folder / "memory.max").read_text() == str(256 * MIB)
    assert (folder / "pids.max").read_text() == str(100 + cgroup.BWRAP_PROCESSES)
    assert not (folder / "memory.swap.max").exists()  # the fake host counts no swap
    assert group.procs == [folder / "cgroup.procs"]
    (folder / "memory.peak").write_text(f"{200 * MIB}\n")
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n")
    assert group.peak() == 200 * MIB and group.oom_kills() == 2
    # a worker the grader starts later is born in the leaf, and makes its cgroups beside it
    (tmp_path / "cgroup").write_text(f"0::/course.scope/{cgroup.LEAF}\n")
    worker = cgroup.Cgroup.make("shapes-1-3", 64 * MIB, 10)
    assert worker is not None and worker.folders == [own / "shapes-1-3"]


def test_a_cgroup_v2_folder_not_handed_over_is_left_alone(tmp_path, monkeypatch):
    """Root may write every cgroup v2 folder; only a delegated one is the grader's to split."""
    own = _fake_v2(tmp_path, monkeypatch, delegated=False)
    if os.geteuid() != 0:
        pytest.skip("an ordinary user's own folder counts as delegated to it")
    assert not cgroup.delegated(own) and cgroup._v2_parent() is None
    assert not (own / cgroup.LEAF).exists() and (own / "cgroup.subtree_control").read_text() == ""


V2_CHILD = r"""
import json, os, subprocess, sys
from pathlib import Path
from course_grading.sandbox import bwrap, cgroup
folder, wanted = Path(sys.argv[1]), tuple(sys.argv[2].split(","))
cgroup.CONTROLLERS = wanted
found = {"delegated": cgroup.delegated(folder), "parent": str(cgroup._v2_parent())}
found["own"] = cgroup._own()[0]
found["left in the folder"] = (folder / "cgroup.procs").read_text().split()
if wanted == ("memory", "pids"):
    group = cgroup.Cgroup.make(f"shapes-{os.getpid()}-v2", 64 * 2**20, 8)
    hog = [sys.executable, "-c", "b = bytearray(256 * 2**20)"]
    found["hog"] = subprocess.run(bwrap.join(hog, group.procs)).returncode
    found["oom_kills"], found["peak"] = group.oom_kills(), group.peak()
else:  # a hybrid host: hugetlb is the only cgroup v2 controller
    group = cgroup.Cgroup._made("cgroup v2", {folder: {"hugetlb.2MB.max": 0}},
                                f"shapes-{os.getpid()}-v2")
    found["limit"] = (group.folders[0] / "hugetlb.2MB.max").read_text().strip()
joined = subprocess.run(bwrap.join(["cat", "/proc/self/cgroup"], group.procs),
                        capture_output=True, text=True).stdout.splitlines()
found["joined"] = [line for line in joined if line.startswith("0::")][0]
group.remove()
found["removed"] = not group.folders[0].exists()
print(json.dumps(found))
"""


def test_the_cgroup_v2_path_on_this_kernel():
    """``cgroup.py``'s v2 path against the kernel's own cgroup2 hierarchy: a folder marked
    delegated (as ``systemd-run --scope -p Delegate=yes`` marks it), the grader moved into its
    leaf, the controllers given to its children, a sandbox's folder made, set, joined and
    removed. With memory and pids on cgroup v2 (a v2 host), a hog is held to its limit; on a
    hybrid host like this course's test machine (memory and pids are cgroup v1's), hugetlb, the
    one v2 controller, stands in for them. The root's controllers are as they were after."""
    mount, _ = cgroup._mounts()
    if os.geteuid() != 0 or mount is None:
        pytest.skip("needs root and a cgroup2 hierarchy")
    offered = set((mount / "cgroup.controllers").read_text().split())
    wanted = ("memory", "pids") if {"memory", "pids"} <= offered else ("hugetlb",)
    if not set(wanted) <= offered:
        pytest.skip(f"the cgroup2 hierarchy offers neither memory and pids nor hugetlb: {offered}")
    control = mount / "cgroup.subtree_control"
    before = control.read_text().split()
    folder = mount / f"shapes-test-{os.getpid()}"
    try:
        control.write_text(" ".join(f"+{name}" for name in wanted))
        folder.mkdir()
        os.setxattr(folder, "trusted.delegate", b"1")
        child = f'echo $$ > "{folder}/cgroup.procs" && exec "$@"'
        out = subprocess.run(["sh", "-c", child, "sh", sys.executable, "-c", V2_CHILD,
                              str(folder), ",".join(wanted)],
                             capture_output=True, text=True, check=True)  # fmt: skip
        found = json.loads(out.stdout)
    finally:
        for leftover in (folder / cgroup.LEAF, folder):
            if leftover.exists():
                leftover.rmdir()
        control.write_text(" ".join(f"-{n}" for n in wanted if n not in before) or "\n")
    assert found["delegated"] and found["parent"] == str(folder)
    assert found["own"] == f"/{folder.name}/{cgroup.LEAF}" and found["left in the folder"] == []
    assert found["joined"].startswith(f"0::/{folder.name}/shapes-") and found["removed"]
    if wanted == ("memory", "pids"):
        assert found["hog"] == -9 and found["oom_kills"] >= 1 and found["peak"] <= 64 * MIB
    else:
        assert found["limit"] == "0"
    assert control.read_text().split() == before


# --- the watch: tmpfs pages are memory too -------------------------------------------------


@needs_sandbox
def test_a_sandboxs_tmpfs_pages_are_counted_and_the_hosts_are_not(tmp_path):
    host_shm = Path("/dev/shm")
    script = "head -c 24M /dev/zero > /tmp/x && echo ready && sleep 30"
    argv = sandbox.command_argv(
        bwrap=shutil.which("bwrap"),
        argv=["sh", "-c", script],
        binds=[(host_shm, "/mnt/host-shm")],
        limits=sandbox.Limits(),
        cpu_seconds=30,
        uid=None,
        env={"PATH": "/usr/bin:/bin"},
    )
    filler = host_shm / f"shapes-test-{os.getpid()}"
    filler.write_bytes(b"x" * 32 * MIB)  # a host tmpfs bound in: not the sandbox's pages
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        used, init = processes.sandbox_usage(proc.pid, None, 1)
        assert init is not None and 24 * MIB <= used.tmpfs < 32 * MIB, used.tmpfs
        assert used.memory == used.rss + used.tmpfs
        assert processes.sandbox_usage(proc.pid, init, None)[0].tmpfs == 0  # not watched
    finally:
        proc.kill()
        proc.wait()
        filler.unlink()
    for _ in range(100):  # its init ends with bwrap (--die-with-parent), soon after
        if not processes.alive(init):
            break
        time.sleep(0.05)
    assert processes.tmpfs_bytes(init) == 0  # the sandbox is gone


def test_tmpfs_pages_over_the_limit_cost_every_process():
    """Pages in a tmpfs are freed by no kill: when they alone are over, every process goes."""
    sizes = {10: 200 * MIB, 11: 100 * MIB}
    used = processes.Usage(rss=300 * MIB, resident=sizes, tmpfs=1100 * MIB)
    assert over_limit(used, 1024 * MIB) == [10, 11]
    assert over_limit(replace(used, tmpfs=900 * MIB), 1024 * MIB) == [10]
    assert over_limit(processes.Usage(rss=300 * MIB, resident=sizes), 1024 * MIB) == []


# --- the function sandbox's envelope --------------------------------------------------------

FILL_TMP = (
    "with open('/tmp/fill', 'wb') as out:\n"
    "    for _ in range(200):\n"
    "        out.write(b'x' * 2**20)\n"
    "def f(n):\n"
    "    import time\n"
    "    time.sleep(n)\n"
    "    return n\n"
)


@pytest.fixture(scope="module")
def settings():
    if not SANDBOX:
        pytest.skip(sandbox_problem())
    return functions.FunctionSandbox.default()


def test_a_watched_function_sandbox_counts_its_tmpfs(settings, monkeypatch):
    """Without a cgroup (an ordinary grader), 200 MiB in /tmp under a 160 MiB limit stops the
    run; the same watch without the tmpfs count let it through (the failing case)."""
    monkeypatch.setattr(functions.Cgroup, "make", classmethod(lambda cls, *a: None))
    tight = replace(settings, limits=replace(settings.limits, memory_bytes=160 * MIB))
    ran = functions.run(FILL_TMP, "f", [call(3)], settings=tight)
    said = ran.failure or ran.answer["calls"][0].get("stopped", "")  # in the cell, or the call
    assert "its sandbox held more than 0.15625 GiB and was stopped" in said, ran
    assert ran.memory_kills == 1  # what the item's review flag reads
    monkeypatch.setattr(processes, "tmpfs_bytes", lambda init: 0)
    ran = functions.run(FILL_TMP, "f", [call(3)], settings=tight)
    assert ran.answer["calls"][0].get("returned") == 3 and ran.memory_kills == 0


HOGS = (
    "import subprocess, sys\n"
    "code = 'import time; b = bytearray(300 * 2**20); time.sleep(3)'\n"
    "hogs = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(3)]\n"
    "def f(n):\n"
    "    return [hog.wait() for hog in hogs]\n"
)


def test_a_function_sandbox_is_held_by_its_cgroup(settings):
    if cgroup.kind() == "watched":
        pytest.skip("no cgroup here: the watch holds it (test above)")
    tight = replace(settings, limits=replace(settings.limits, memory_bytes=512 * MIB))
    ran = functions.run(HOGS, "f", [call(0)], settings=tight)
    assert ran.memory_kills >= 1 and -9 in ran.answer["calls"][0]["returned"]


def test_two_function_sandboxes_at_once_have_two_uids(settings):
    source = "import os, time\ndef f(n):\n    time.sleep(n)\n    return os.getuid()\n"
    found = []
    runs = [threading.Thread(target=lambda: found.append(functions.run(
        source, "f", [call(1.5)], settings=settings).answer["calls"][0]["returned"]))
        for _ in range(2)]  # fmt: skip
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join()
    assert len(set(found)) == 2 and all(uid >= sandbox.UID_BASE for uid in found), found
    if os.geteuid() == 0:
        assert set(found) <= {settings.uid, settings.uid - 1}


# --- time budgets ---------------------------------------------------------------------------

SLEEPER = "import time\ndef f(n):\n    time.sleep(n)\n    return n\n"


def _quick(settings, **changes):
    """Small per-call limits: 0.5 s of CPU, 2 s of wall clock a call."""
    return replace(settings, call_cap=0.5, call_wall_factor=2.0, **changes)


def test_calls_under_the_call_limit_stop_at_the_items_budget(settings):
    """Six calls each sleeping 1.8 s, under the 2 s per-call limit: 10.8 s without a budget
    (the failing case, as the issue's 5.5 s under 7 s held one slot 336 s); with a budget of
    5 s the run stops there and says which budget it used."""
    limited = _quick(settings)
    started = time.monotonic()
    free = functions.run(SLEEPER, "f", [call(1.8)] * 6, settings=limited)
    assert time.monotonic() - started > 10.8 and free.budget is None
    assert [c.get("returned") for c in free.answer["calls"]] == [1.8] * 6
    budget = functions.TimeBudget(5.0, "the item's time budget (5 s)")
    held = functions.run(SLEEPER, "f", [call(1.8)] * 6, settings=limited, budgets=[budget])
    assert held.budget is budget and 5.0 <= held.seconds < 6.5 and budget.spent == held.seconds
    kinds = [c.get("kind") for c in held.answer["calls"]]
    assert kinds[:2] == [None, None] and kinds[2] == "budget" and set(kinds[3:]) == {"skipped"}
    assert "used the item's time budget (5 s)" in held.answer["calls"][2]["stopped"]
    again = functions.run(SLEEPER, "f", [call(0)], settings=limited, budgets=[budget])
    assert again.answer is None and again.budget is budget and "was used up" in again.failure


def test_a_submissions_budget_covers_its_items_together(settings):
    limited = _quick(settings)
    submission = functions.TimeBudget(6.0, "the submission's time budget (6 s)")
    first = functions.run(SLEEPER, "f", [call(1.5)] * 2, settings=limited,
                          budgets=[functions.TimeBudget(5.0, "item 1"), submission])  # fmt: skip
    assert first.budget is None and submission.left() < 3.5
    second = functions.run(SLEEPER, "f", [call(1.5)] * 3, settings=limited,
                           budgets=[functions.TimeBudget(5.0, "item 2"), submission])  # fmt: skip
    assert second.budget is submission and submission.spent < 6.0 + 1.0


def test_budgets_follow_the_solutions_runs_with_a_floor():
    measured = {("l", "a"): (0.01, 2.2), ("l", "b"): (0.5, 9.1), ("m", "c"): 0.01}
    made = functions.FunctionSandbox(None, solution_cpu=measured)
    assert functions.item_budget(made, ("l", "a")).seconds == made.item_floor == 30
    assert functions.item_budget(made, ("l", "b")).seconds == 50  # 45.5, rounded up to 5 s
    assert functions.item_budget(made, ("m", "c")).seconds == made.budget_cap  # CPU alone
    assert functions.item_budget(made, None).seconds == made.budget_cap
    assert functions.submission_budget(made, "l").seconds == 60  # 5 × 11.3 = 56.5
    assert functions.submission_budget(made, "m").seconds == made.budget_cap
    assert functions.call_limit(made, ("m", "c")).cpu == 2.0  # a bare number: the CPU time
    budget = functions.item_budget(made, ("l", "b"))
    assert budget.why == "the item's time budget (50 s)" and budget.left() == 50
