"""Leave nothing running: kill what a kernel left behind (a fork bomb's sleepers, say).

Without a PID namespace (ipykernel quits inside one) a kernel's children outlive it. The worker
that ran the kernel is a child subreaper, so every orphan below it is re-parented to it and can
be found and killed; a root grader's sandbox runs as a uid of its own, so every process of that
uid is killed too.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Make orphaned descendants of this process its children, not init's (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


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


def running(uids) -> list[int]:
    """Live processes whose real uid is one of ``uids``."""
    return sorted(
        pid for pid, (_, uid, state) in _processes().items() if uid in uids and state != "Z"
    )


def _alive(uid: int | None, me: int) -> set[int]:
    """Live (not zombie) descendants of ``me`` and processes of ``uid``."""
    table = _processes()
    found = {pid for pid, (_, owner, _) in table.items() if uid is not None and owner == uid}
    frontier = {me}
    while frontier:
        frontier = {pid for pid, (parent, _, _) in table.items() if parent in frontier} - found
        found |= frontier
    found.discard(me)
    return {pid for pid in found if table[pid][2] != "Z"}


def kill_leftovers(
    uid: int | None, me: int | None = None, grace: float = 0.0, expected: frozenset = frozenset()
) -> int:
    """Kill every descendant of ``me`` (this process) and every process of ``uid``.

    Processes get ``grace`` seconds to end on their own (a kernel still shutting down);
    returns how many had to be killed, not counting the ``expected`` ones (the kernel itself).
    """
    me = os.getpid() if me is None else me
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(uid, me):
        _reap()
        time.sleep(0.05)
    killed: set[int] = set()
    for _ in range(200):  # a fork bomb is bounded by its process limit: this ends
        _reap()
        doomed = _alive(uid, me)
        if not doomed:
            break
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    _reap()
    return len(killed - expected)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
