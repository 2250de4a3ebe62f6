"""A cgroup per sandbox where the host gives this grader one: memory and processes bounded together.

A cgroup bounds everything a sandbox holds at once: every process's pages and the pages of its
tmpfs folders (``RLIMIT_AS`` is per process and virtual; ``RLIMIT_NPROC`` counts per uid), and
the number of its processes and threads. Every sandbox, a kernel's and a graded function's,
gets one when the grader starts it; the command joins it before bwrap starts
(``sandbox.join``), and it is removed when the sandbox has ended. Which kind is chosen at run
time (``make``), in this order:

- **cgroup v2, a delegated subtree**: the grader runs in a cgroup of its own that it may manage,
  with the ``memory`` and ``pids`` controllers available (``systemd-run --scope -p Delegate=yes``,
  as root or with ``--user``; systemd marks such a cgroup with the ``trusted.delegate`` or
  ``user.delegate`` attribute, and an ordinary account's delegated cgroup is owned by it). A
  cgroup v2 folder with processes cannot give controllers to children, so the grader first moves
  the processes of its cgroup into a leaf of it, ``shapes-grader``, and makes each sandbox's
  cgroup beside that leaf: ``memory.max`` and ``memory.swap.max`` (no swapping past it),
  ``pids.max``; ``memory.peak`` and ``memory.events`` tell what it held and what was killed.
- **cgroup v1, as root**: children of the grader's own ``memory`` and ``pids`` cgroups
  (``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``, ``pids.max``).
- **none**: ``watch.py`` sums the sandbox's resident memory and its tmpfs pages instead, and
  ``RLIMIT_NPROC`` bounds its processes.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
SELF = Path("/proc/self/cgroup")
#: The controllers a sandbox's cgroup needs.
CONTROLLERS = ("memory", "pids")
#: The leaf of a delegated cgroup v2 folder that the grader's own processes move into.
LEAF = "shapes-grader"
#: Processes a sandbox's cgroup allows beyond its process limit: bwrap's own, and the shell
#: that joins the cgroup and starts it.
BWRAP_PROCESSES = 4
#: Settings absent where the host counts no swap (nothing to bound then).
OPTIONAL = ("memory.swap.max", "memory.memsw.limit_in_bytes")
_DELEGATING = threading.Lock()


def _mounts() -> tuple[Path | None, dict[str, Path]]:
    """The cgroup v2 mount (``None``: none) and each cgroup v1 controller's mount."""
    v2, v1 = None, {}
    try:
        lines = MOUNTINFO.read_text().splitlines()
    except OSError:
        return None, {}
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, kind = before.split(), after.split()
        if len(fields) < 5 or len(kind) < 3:
            continue
        if kind[0] == "cgroup2" and v2 is None:
            v2 = Path(fields[4])
        elif kind[0] == "cgroup":
            for name in kind[2].split(","):
                v1.setdefault(name, Path(fields[4]))
    return v2, v1


def _own() -> tuple[str | None, dict[str, str]]:
    """This process's cgroup v2 path and its cgroup v1 path per controller."""
    v2, v1 = None, {}
    try:
        lines = SELF.read_text().splitlines()
    except OSError:
        return None, {}
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if number == "0" and not controllers:
            v2 = path
        for name in controllers.split(","):
            v1[name] = path
    return v2, v1


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _words(path: Path) -> set[str]:
    """The controllers a ``cgroup.controllers`` or ``cgroup.subtree_control`` file names."""
    return {word.lstrip("+") for word in _read(path).split()}


def delegated(folder: Path) -> bool:
    """Whether this process may manage cgroup v2 ``folder`` as its own subtree.

    Args:
        folder: a cgroup v2 folder (the grader's own cgroup).

    Returns:
        True when ``folder`` offers the ``memory`` and ``pids`` controllers, this process may
        write its ``cgroup.procs``, ``cgroup.subtree_control`` and the folder itself, and it was
        handed over: owned by this (non-root) user, or marked ``trusted.delegate`` or
        ``user.delegate`` by systemd's ``Delegate=yes``.
    """
    if not set(CONTROLLERS) <= _words(folder / "cgroup.controllers"):
        return False
    files = [folder, folder / "cgroup.procs", folder / "cgroup.subtree_control"]
    if not all(os.access(path, os.W_OK) for path in files):
        return False
    try:
        if os.geteuid() != 0 and (folder / "cgroup.procs").stat().st_uid == os.geteuid():
            return True
    except OSError:
        return False
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(folder, name) == b"1":
                return True
        except OSError:
            continue
    return False


def delegate(folder: Path, attempts: int = 20) -> bool:
    """Make cgroup v2 ``folder`` a parent of sandboxes: its processes into ``LEAF``, and its
    controllers given to its children (a folder holding processes cannot give them).

    Args:
        folder: a delegated cgroup v2 folder (:func:`delegated`) holding this process.
        attempts: tries, 10 ms apart (a process forked meanwhile lands in ``folder``).

    Returns:
        Whether ``folder``'s children now get ``CONTROLLERS``.
    """
    leaf = folder / LEAF
    want = " ".join(f"+{name}" for name in CONTROLLERS)
    for _ in range(attempts):
        try:
            leaf.mkdir(exist_ok=True)
            for pid in _read(folder / "cgroup.procs").split():
                (leaf / "cgroup.procs").write_text(pid)
            (folder / "cgroup.subtree_control").write_text(want)
        except OSError:
            time.sleep(0.01)
            continue
        return set(CONTROLLERS) <= _words(folder / "cgroup.subtree_control")
    return False


def _v2_parent() -> Path | None:
    """Where this process makes sandboxes' cgroup v2 folders; ``None`` where it may not."""
    mount, _ = _mounts()
    own, _ = _own()
    if mount is None or own is None or own in ("", "/"):
        return None
    folder = mount / own.lstrip("/")
    with _DELEGATING:
        given = _words(folder.parent / "cgroup.subtree_control")
        if folder.name == LEAF and set(CONTROLLERS) <= given:
            return folder.parent if os.access(folder.parent, os.W_OK) else None
        if delegated(folder) and delegate(folder):
            return folder
    return None


def _v1_parents() -> dict[str, Path]:
    """The grader's own cgroup v1 folder of each controller it may write (root only)."""
    if os.geteuid() != 0:
        return {}
    _, mounts = _mounts()
    _, own = _own()
    found = {}
    for name in CONTROLLERS:
        if name in mounts and name in own:
            folder = mounts[name] / own[name].lstrip("/")
            if folder.is_dir() and os.access(folder, os.W_OK):
                found[name] = folder
    return found if "memory" in found else {}


def kind() -> str:
    """How the sandboxes of this grader are bounded: ``"cgroup v2"``, ``"cgroup v1"`` or
    ``"watched"``, as :meth:`Cgroup.make` would choose now.

    Returns:
        The kind, in the words of ``Outcome.memory``.
    """
    if _v2_parent() is not None:
        return "cgroup v2"
    return "cgroup v1" if _v1_parents() else "watched"


def _remove_stale(parent: Path) -> None:
    """Remove the cgroups a killed worker left (``shapes-<its pid>-<job>``, empty by then)."""
    for folder in parent.glob("shapes-*-*"):
        pid = folder.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            Cgroup("", [folder]).remove(wait=0)


class Cgroup:
    """One sandbox's cgroup: one folder (v2) or one per controller (v1, memory first).

    Args:
        version: ``"cgroup v2"`` or ``"cgroup v1"``.
        folders: its folders; the first holds the memory controller.
    """

    def __init__(self, version: str, folders: list[Path]) -> None:
        self.version, self.folders = version, folders

    @classmethod
    def make(cls, name: str, memory_bytes: int, processes: int) -> Cgroup | None:
        """A fresh cgroup ``name`` holding a sandbox to its limits; ``None`` where none can be made.

        Cgroups that killed workers left behind are removed first.

        Args:
            name: the folder's name, ``shapes-<worker pid>-<job>`` (the pid lets a later
                worker tell a stale one).
            memory_bytes: the most the whole sandbox may hold at once (memory and swap).
            processes: the most processes and threads it may have (bwrap's own added).

        Returns:
            The cgroup (v2 if delegated, else v1 as root), or ``None`` when neither can be made
            here, or making it failed (what was made is removed).
        """
        pids = {"pids.max": processes + BWRAP_PROCESSES}
        parent = _v2_parent()
        if parent is not None:
            settings = {"memory.max": memory_bytes, "memory.swap.max": 0, **pids}
            made = cls._made("cgroup v2", {parent: settings}, name)
            if made is not None:
                return made
        parents = _v1_parents()
        if not parents:
            return None
        memory = {
            "memory.limit_in_bytes": memory_bytes,
            "memory.memsw.limit_in_bytes": memory_bytes,
        }
        wanted = {parents["memory"]: memory}
        if "pids" in parents:
            wanted[parents["pids"]] = pids
        return cls._made("cgroup v1", wanted, name)

    @classmethod
    def _made(cls, version: str, wanted: dict[Path, dict[str, int]], name: str) -> Cgroup | None:
        group = cls(version, [parent / name for parent in wanted])
        try:
            for parent, settings in wanted.items():
                _remove_stale(parent)
                (parent / name).mkdir()
                for file, value in settings.items():
                    path = parent / name / file
                    if file not in OPTIONAL or path.exists():
                        path.write_text(str(value))
        except OSError:
            group.remove(wait=0)
            return None
        return group

    @property
    def procs(self) -> list[Path]:
        """The ``cgroup.procs`` files a process writes its pid into to join (all of them)."""
        return [folder / "cgroup.procs" for folder in self.folders]

    def peak(self) -> int:
        """The most the sandbox held at once (bytes): process and tmpfs pages together.

        Returns:
            ``memory.peak`` (v2; Linux 5.19 or later) or ``memory.max_usage_in_bytes`` (v1);
            0 when it cannot be read.
        """
        file = "memory.peak" if self.version == "cgroup v2" else "memory.max_usage_in_bytes"
        text = _read(self.folders[0] / file).strip()
        return int(text) if text.isdigit() else 0

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed at the memory limit.

        Returns:
            The ``oom_kill`` count of ``memory.events`` (v2) or ``memory.oom_control`` (v1); 0
            when the kernel does not report it or it cannot be read.
        """
        file = "memory.events" if self.version == "cgroup v2" else "memory.oom_control"
        for line in _read(self.folders[0] / file).splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def remove(self, wait: float = 5.0) -> None:
        """Remove the cgroup once its processes are gone (they are: the namespace ended).

        The last processes may still be exiting when the sandbox ends, so removal is retried
        every 10 ms; a folder still busy after ``wait`` is left (a later ``make`` removes it
        once the worker named in it has ended).

        Args:
            wait: seconds to keep retrying.
        """
        deadline = time.monotonic() + wait
        for folder in self.folders:
            while folder.exists():
                try:
                    folder.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
