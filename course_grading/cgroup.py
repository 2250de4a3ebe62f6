"""A memory cgroup per sandbox, where the host lets this grader make one (cgroup v1, root).

A cgroup bounds everything a sandbox holds in memory at once: every process's pages and the
pages of its tmpfs folders, which ``RLIMIT_AS`` (per process, virtual) does not. It is made as
a child of the grader's own memory cgroup (so the grader's own limits still apply), the kernel's
command joins it before bwrap starts (``sandbox.kernel_argv``), and it is removed when the job
ends. The cgroup v1 memory controller is writable only by root on hosts like this one; where it
is not (an ordinary grader account, or a cgroup v2 host that has not delegated one), ``make``
answers ``None`` and ``watch.py`` bounds the sandbox's resident memory instead.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")


def _own_v1() -> Path | None:
    """The grader's own memory cgroup folder (v1), or ``None`` where there is none."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = V1 / path.lstrip("/")
            return folder if folder.is_dir() else None
    return None


def _remove_stale(parent: Path) -> None:
    """Remove the cgroups a killed worker left (``shapes-<its pid>-<job>``, empty by then)."""
    for folder in parent.glob("shapes-*-*"):
        pid = folder.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            MemoryCgroup(folder).remove(wait=0)


class MemoryCgroup:
    """One sandbox's memory cgroup (v1): its limit, what it peaked at, what the kernel killed.

    Args:
        path: the cgroup's folder under the v1 memory hierarchy (``make`` creates one).
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls, name: str, limit_bytes: int) -> MemoryCgroup | None:
        """A fresh cgroup ``name`` limited to ``limit_bytes``; ``None`` where none can be made.

        The limit covers memory and swap together where the host counts swap
        (``memory.memsw.limit_in_bytes``), so a sandbox cannot swap its way past it. Cgroups
        that killed workers left behind are removed first.

        Args:
            name: the cgroup's folder name, ``shapes-<worker pid>-<job>`` (the pid lets a later
                worker tell a stale one).
            limit_bytes: the most the whole sandbox may hold at once, in bytes.

        Returns:
            The cgroup, made under the grader's own memory cgroup; ``None`` when this is not a
            root grader on a cgroup v1 host whose memory cgroup it can write, or when making
            it failed (what was made is removed).
        """
        parent = _own_v1()
        if parent is None or os.geteuid() != 0 or not os.access(parent, os.W_OK):
            return None
        _remove_stale(parent)
        path = parent / name
        try:
            path.mkdir()
            (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            swap = path / "memory.memsw.limit_in_bytes"
            if swap.exists():  # no swapping out of the limit either
                swap.write_text(str(limit_bytes))
        except OSError:
            cls(path).remove()
            return None
        return cls(path)

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def _read(self, name: str) -> str:
        try:
            return (self.path / name).read_text()
        except OSError:
            return ""

    def peak(self) -> int:
        """The most the sandbox held at once (bytes).

        Returns:
            ``memory.max_usage_in_bytes``: process pages and tmpfs pages together; 0 when it
            cannot be read.
        """
        return int(self._read("memory.max_usage_in_bytes") or 0)

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed at the limit.

        Returns:
            The ``oom_kill`` count of ``memory.oom_control``; 0 when the kernel does not report
            it or it cannot be read.
        """
        for line in self._read("memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def remove(self, wait: float = 5.0) -> None:
        """Remove the cgroup once its processes are gone (they are: the namespace ended).

        The last processes may still be exiting when the job ends, so removal is retried every
        50 ms; a cgroup still busy after ``wait`` is left (a later ``make`` removes it once
        the worker named in it has ended).

        Args:
            wait: seconds to keep retrying.
        """
        deadline = time.monotonic() + wait
        while self.path.exists():
            try:
                self.path.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
