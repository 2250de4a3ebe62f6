"""A sandbox's processes, read from ``/proc``: its tree, CPU time and memory; and, for
``--no-sandbox`` only, killing what a kernel left behind.

A sandboxed kernel runs in a PID namespace of its own (``sandbox.py``): every process it ever
starts descends from the namespace's init, a child of the bwrap that the grader launched, and
an orphan is re-parented to that init, not to anything outside. So the tree under the launched
bwrap is the whole sandbox, and when it ends Linux ends every process in it: there is nothing
to sweep. Its CPU time is the sum, over the tree, of each process's own user+system time and
the time of the children it has reaped (``/proc/<pid>/stat`` fields 14-17): a process's time
moves to its parent's count when it ends, so none is lost or counted twice.

Unsandboxed (``--no-sandbox``), a kernel's children outlive it; the worker is a child
subreaper, so orphans come to it and ``kill_leftovers`` ends them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Usage:
    """What a process tree uses now."""

    cpu: float = 0.0  # seconds of CPU time, the tree's and its reaped children's
    rss: int = 0  # bytes resident, summed over live processes
    pids: list[int] = field(default_factory=list)  # every process of the tree, zombies too
    resident: dict[int, int] = field(default_factory=dict)  # live pid -> its resident bytes
    tmpfs: int = 0  # bytes in the sandbox's tmpfs folders (``tmpfs_bytes``), when counted

    @property
    def memory(self) -> int:
        """Resident and tmpfs bytes together: what a watch holds to the memory limit."""
        return self.rss + self.tmpfs


def become_subreaper() -> None:
    """Make orphaned descendants of this process its children, not init's (Linux).

    Raises:
        OSError: the kernel refused ``prctl(PR_SET_CHILD_SUBREAPER)``.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def children(pid: int) -> list[int]:
    """The children of process ``pid`` (of any of its threads); ``[]`` once it is gone.

    Args:
        pid: the process whose children are read from ``/proc``.

    Returns:
        The pids of its children, thread by thread.
    """
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(n) for n in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def tree(root: int) -> list[int]:
    """``root`` and every descendant of it, parents before children.

    Args:
        root: the process at the top of the tree (the launched bwrap).

    Returns:
        The pids of the tree, ``root`` first.
    """
    found, frontier = [root], [root]
    while frontier:
        frontier = [child for pid in frontier for child in children(pid) if child not in found]
        found += frontier
    return found


def namespace_init(launched: int) -> int | None:
    """The sandbox's init (its pid 1, seen from here): the child of the launched bwrap that
    lives in another PID namespace; ``None`` until bwrap has made it.

    Args:
        launched: the pid of the bwrap process the grader started.

    Returns:
        The init's pid, or ``None`` when no child of ``launched`` is in another namespace yet.
    """
    try:
        ours = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    for child in children(launched):
        try:
            if os.readlink(f"/proc/{child}/ns/pid") != ours:
                return child
        except OSError:
            continue
    return None


def _stat(pid: int) -> tuple[str, float, int] | None:
    """(state letter, CPU seconds with reaped children's, resident bytes) of ``pid``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK
    return fields[0], cpu, int(fields[21]) * PAGE


def usage(root: int) -> Usage:
    """CPU time and memory of the process tree under ``root`` (module docstring).

    Args:
        root: the process at the top of the tree.

    Returns:
        The tree's CPU seconds, resident bytes (in all, and per live process) and pids.
    """
    found = Usage()
    for pid in tree(root):
        stat = _stat(pid)
        if stat is None:
            continue
        state, cpu, rss = stat
        found.cpu += cpu
        found.pids.append(pid)
        if state != "Z":
            found.rss += rss
            found.resident[pid] = rss
    return found


def _mounts(mountinfo: Path) -> list[tuple[list[str], str]]:
    """Each mount of a mount table: its fields before the separator, and its file system type."""
    found = []
    for line in mountinfo.read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields, kind = before.split(), after.split()
        if len(fields) >= 5 and kind:
            found.append((fields, kind[0]))
    return found


def tmpfs_bytes(init: int | None) -> int:
    """What the tmpfs folders of the sandbox whose init is ``init`` hold now (bytes).

    A tmpfs page is memory no process need map, so a watch that sums resident memory adds
    these. Read from the sandbox's own mount table (``/proc/<init>/mountinfo``), each folder
    measured through ``/proc/<init>/root``; a sandbox can mount no tmpfs of its own (no new
    mount or user namespace: ``seccomp.py``), so these are its fixed, size-limited ones (a
    host tmpfs bound in, known by its device, is not counted).

    Args:
        init: the host pid of the sandbox's init; ``None``: none yet (0 bytes).

    Returns:
        The bytes in use over every tmpfs mount of the sandbox; 0 once it has ended.
    """
    if init is None:
        return 0
    try:
        ours = {fields[2] for fields, _ in _mounts(Path("/proc/self/mountinfo"))}
        theirs = _mounts(Path(f"/proc/{init}/mountinfo"))
    except OSError:
        return 0
    used = 0
    for fields, kind in theirs:
        if kind != "tmpfs" or fields[2] in ours:  # a host tmpfs bound in is not the sandbox's
            continue
        try:
            found = os.statvfs(f"/proc/{init}/root{fields[4]}")
        except OSError:
            continue
        used += (found.f_blocks - found.f_bfree) * found.f_frsize
    return used


def sandbox_usage(root: int, init: int | None, watched: object) -> tuple[Usage, int | None]:
    """:func:`usage` of a sandbox, with its tmpfs pages when its memory is ``watched``.

    Args:
        root: the launched process (bwrap): the tree's top.
        init: the sandbox's init if known, else ``None`` (looked for among ``root``'s children).
        watched: the memory limit the caller holds the sandbox to; ``None``: tmpfs not counted.

    Returns:
        The usage (its ``tmpfs`` set when watched) and the sandbox's init, found or not yet.
    """
    used = usage(root)
    if watched is not None:
        init = init or namespace_init(root)
        used.tmpfs = tmpfs_bytes(init)
    return used, init


def kill(pids: Iterable[int]) -> int:
    """Send ``SIGKILL`` to each of ``pids``; return how many were still there.

    Args:
        pids: the processes to kill (one that is gone, or not ours, is passed over).

    Returns:
        How many were sent the signal.
    """
    sent = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie.

    Args:
        pid: the process to look up in ``/proc``.

    Returns:
        True while it exists and has not ended.
    """
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


# --- unsandboxed kernels (--no-sandbox) and checks -------------------------------------------


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, real uid, state letter) for every process this one can see."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        state = fields["State"].split()[0]
        found[int(entry.name)] = (int(fields["PPid"]), int(fields["Uid"].split()[0]), state)
    return found


def running(uids: Container[int]) -> list[int]:
    """Live processes whose real uid is one of ``uids``.

    Args:
        uids: the real user ids to look for.

    Returns:
        Their live (not zombie) processes' pids, in order.
    """
    return sorted(
        pid for pid, (_, uid, state) in _processes().items() if uid in uids and state != "Z"
    )


def _descendants(me: int) -> set[int]:
    """Live (not zombie) descendants of ``me``."""
    table = _processes()
    found: set[int] = set()
    frontier = {me}
    while frontier:
        frontier = {pid for pid, (parent, _, _) in table.items() if parent in frontier} - found
        found |= frontier
    return {pid for pid in found if table[pid][2] != "Z"}


def kill_leftovers(grace: float = 0.0, expected: frozenset = frozenset()) -> int:
    """Kill every descendant of this process (an unsandboxed kernel's orphans come here).

    Processes get ``grace`` seconds to end on their own (a kernel still shutting down);
    returns how many had to be killed, not counting the ``expected`` ones (the kernel itself).

    Args:
        grace: seconds the descendants get to end on their own before they are killed.
        expected: pids whose killing is not counted (the kernel itself).

    Returns:
        How many processes had to be killed, less the expected ones.
    """
    me = os.getpid()
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _descendants(me):
        reap()
        time.sleep(0.05)
    killed: set[int] = set()
    for _ in range(200):  # a fork bomb is bounded by its process limit: this ends
        reap()
        doomed = _descendants(me)
        if not doomed:
            break
        kill(doomed)
        killed |= doomed
        time.sleep(0.05)
    reap()
    return len(killed - expected)


def reap() -> None:
    """Collect every ended child of this process (orphans a subreaper inherited)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
