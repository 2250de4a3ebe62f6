"""Limits watched while a notebook runs: CPU time per cell, and memory where no cgroup holds it.

nbclient limits a cell by the wall clock, so a cell's time depended on what else the machine
ran: beside a neighbour running 16 busy processes, an honest 1.5 s cell was stopped at
``--timeout 8``. A ``Watch`` samples the sandbox's process tree (``processes.usage``) every
``PERIOD`` seconds and stops a cell once the sandbox has used more CPU time since the cell began
than the cell's limit: every process but the kernel is killed (what the cell started) and the
kernel is interrupted. The wall clock stays, as a generous backstop (``JobSpec.wall_factor`` ×
the limit, nbclient's own timeout) for a cell that sleeps or waits without using the CPU.

Memory: where the sandbox has no cgroup (``cgroup.py``), the watch sums its processes' resident
memory and the pages of its tmpfs folders (``processes.tmpfs_bytes``: memory no process need
map) and, over ``memory_bytes``, kills its largest processes, largest first (the kernel itself
if it is the largest), until what is left is within the limit: one sample, not one kill a
sample, so four processes that each allocate 900 MiB between two samples are over a 2 GiB limit
for one sample, not three. The bound is loose by what the sandbox can allocate between two
samples (``Watched.memory_over`` counts the samples over it in a row); a tmpfs page a process
maps is counted twice (resident, and in its folder), so the sum errs high, never low.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from course_grading.sandbox import processes

#: Seconds between two samples.
PERIOD = 0.2
#: Walks of the process tree after the last cell, and the seconds between them (``finish``).
FINAL_LOOKS, FINAL_GAP = 5, 0.005


@dataclass
class Watched:
    """What the watch saw and did (copied into ``jobs.Outcome``)."""

    cpu_stopped: list[int] = field(default_factory=list)  # cells stopped at their CPU limit
    memory_kills: int = 0  # processes killed over the memory limit (no cgroup)
    memory_peak: int = 0  # most resident and tmpfs memory seen at once (bytes)
    memory_over: int = 0  # most samples in a row over the memory limit
    cpu_seconds: float = 0.0  # CPU time of the whole sandbox, last sample
    left_running: int = 0  # processes besides the kernel alive after the last cell


class Watch:
    """Sample one sandbox's processes while its notebook runs (module docstring).

    Args:
        root: the launched process (bwrap, or the kernel unsandboxed): the tree's top.
        keep: the processes that are the sandbox itself (bwrap, its init, the kernel), never
            killed as a cell's extras.
        memory_bytes: the resident-memory limit to enforce on the summed tree, in bytes;
            ``None`` where a cgroup enforces it.
        interrupt: an async callable that interrupts the kernel (the kernel manager's
            ``interrupt_kernel``), awaited when a cell passes its CPU limit.
    """

    def __init__(
        self,
        root: int,
        keep: set[int],
        memory_bytes: int | None,
        interrupt: Callable[[], Awaitable[None]],
    ) -> None:
        self.root, self.keep, self.memory_bytes = root, keep, memory_bytes
        self.interrupt = interrupt
        self.seen = Watched()
        self._cell: tuple[int, float, float] | None = None  # index, limit, CPU at its start
        self._init: int | None = None  # the sandbox's init, once bwrap has made it
        self._task: asyncio.Task | None = None
        self._over = 0  # samples in a row over the memory limit, so far

    def start(self) -> None:
        """Begin sampling every ``PERIOD`` seconds, as a task on the running event loop."""
        self._task = asyncio.ensure_future(self._run())

    def start_cell(self, index: int, limit: float) -> None:
        """Start counting a cell's CPU time from the sandbox's total now.

        Args:
            index: the cell's position in the notebook (recorded if it is stopped).
            limit: CPU seconds the whole sandbox may use while the cell runs.
        """
        self._cell = (index, limit, processes.usage(self.root).cpu)

    def end_cell(self) -> None:
        """Stop counting: time between cells (the client's own work) is charged to no cell."""
        self._cell = None

    def extras(self) -> list[int]:
        """Live processes of the sandbox that are not the sandbox itself.

        Returns:
            Pids in the tree under ``root``, other than ``keep``, that are still alive.
        """
        return [p for p in processes.tree(self.root) if p not in self.keep and processes.alive(p)]

    def stop_extras(self) -> int:
        """Kill what the cells started, sparing the sandbox itself (see ``extras``).

        Returns:
            How many of them were still there to be sent ``SIGKILL`` (``processes.kill``).
        """
        return processes.kill(self.extras())

    async def _run(self) -> None:
        while True:
            used, self._init = processes.sandbox_usage(self.root, self._init, self.memory_bytes)
            self.seen.cpu_seconds = used.cpu
            self.seen.memory_peak = max(self.seen.memory_peak, used.memory)
            self._over = self._over + 1 if self._is_over(used) else 0
            self.seen.memory_over = max(self.seen.memory_over, self._over)
            if self._over:
                self.seen.memory_kills += processes.kill(over_limit(used, self.memory_bytes))
            cell = self._cell
            if cell is not None and used.cpu - cell[2] > cell[1]:
                index = cell[0]
                self._cell = None  # once per cell; the wall backstop covers the rest
                self.seen.cpu_stopped.append(index)
                self.stop_extras()
                await self.interrupt()
            await asyncio.sleep(PERIOD)

    def _is_over(self, used: processes.Usage) -> bool:
        return self.memory_bytes is not None and used.memory > self.memory_bytes

    def finish(self) -> Watched:
        """Stop sampling; count what is still running besides the kernel.

        One walk of the process tree can miss a process whose pid keeps moving (it forks and
        exits: its child is under neither the parent the walk already read nor, yet, the
        sandbox's init), so the tree is walked up to ``FINAL_LOOKS`` times, a few ms apart,
        until something is found.

        Returns:
            What the watch saw, with ``left_running`` set from the last walk.
        """
        if self._task is not None:
            self._task.cancel()
        found = self.extras()
        for _ in range(FINAL_LOOKS - 1):
            if found:
                break
            time.sleep(FINAL_GAP)
            found = self.extras()
        self.seen.left_running = len(found)
        return self.seen


def over_limit(used: processes.Usage, limit: int | None) -> list[int]:
    """The processes to kill so that what is left of a sample is within the memory limit.

    Args:
        used: one sample of the sandbox (``processes.usage``, its ``tmpfs`` set).
        limit: the sandbox's memory in bytes (``None``: no limit, nothing to kill).

    Returns:
        Live pids, largest first, whose resident memory brings the sum (tmpfs pages included,
        which no kill frees: every process goes if they alone are over) to ``limit`` or
        below; empty when the sample is within it.
    """
    if limit is None:
        return []
    left, chosen = used.memory, []
    for pid, rss in sorted(used.resident.items(), key=lambda kv: (-kv[1], kv[0])):
        if left <= limit:
            break
        chosen.append(pid)
        left -= rss
    return chosen
