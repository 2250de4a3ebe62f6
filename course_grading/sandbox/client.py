"""nbclient as the grader runs it: nbgrader's execution rules and this course's limits.

``GradingClient`` adds, to nbclient's ``NotebookClient``: the probe of the sandbox before any
cell (``probe.py``); each cell's CPU-time limit watched while it runs (``watch.py``), with
nbclient's own wall-clock timeout as the backstop (``JobSpec.wall_factor`` times the limit);
the output cap; and the message caps (``messages.py``), whose IOPub channel may be replaced
after a refused message, so its loop over IOPub reads whichever channel is current.
"""

from __future__ import annotations

import json
from queue import Empty
from typing import TYPE_CHECKING, Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete

from course_grading.sandbox import processes
from course_grading.sandbox.jobs import JobSpec
from course_grading.sandbox.messages import MessageGuard
from course_grading.sandbox.probe import SandboxBroken, probe_failure, run_probe
from course_grading.sandbox.watch import Watch

if TYPE_CHECKING:
    from jupyter_client.client import KernelClient

    from course_grading.sandbox.kernel import GivenSpecKernelManager


class GradingClient(NotebookClient):
    """nbclient with nbgrader's execution rules, CPU-time cell limits, output and message caps,
    and the sandbox probe.

    A cell's wall-clock timeout is ``int(cpu_limit * spec.wall_factor) + 1`` seconds: a backstop
    for a cell that sleeps or blocks, since the watch only counts CPU time.

    Args:
        nb: the notebook to run (changed in place: outputs are written into it).
        spec: the job: per-cell CPU limits (``cell_timeouts``, one per cell of ``nb``; a cell
            past the list gets the last one), the limits, whether it is sandboxed.
        memory_watched: whether the watch must also enforce ``limits["memory_bytes"]`` on the
            summed resident and tmpfs memory (no cgroup holds the sandbox).
        **kw: nbclient's own options (``km``, ``timeout``, ``allow_errors``, ...).
    """

    def __init__(
        self, nb: nbformat.NotebookNode, spec: JobSpec, memory_watched: bool, **kw: Any
    ) -> None:
        super().__init__(nb, **kw)
        self.spec = spec
        self.limit_of = {id(cell): limit for cell, limit in zip(nb.cells, spec.cell_timeouts)}
        default = spec.cell_timeouts[-1] if spec.cell_timeouts else 60
        self.cpu_limit = lambda cell: self.limit_of.get(id(cell), default)
        self.timeout_func = lambda cell: int(self.cpu_limit(cell) * spec.wall_factor) + 1
        self.on_cell_executed = self._record_hidden_error
        self.memory_watched = memory_watched
        self.output_bytes = 0
        self.output_cut: list[int] = []
        self.hidden_errors: list[int] = []
        self.wall_stopped: list[int] = []
        self.probe: dict | None = None
        self.watch: Watch | None = None
        self.guard: MessageGuard | None = None
        self.cell_index: int | None = None

    def _record_hidden_error(self, cell, cell_index: int, execute_reply: dict) -> None:
        """As nbgrader's ``Execute``: an error reply without an error output gets one."""
        content = execute_reply["content"]
        if content["status"] != "error":
            return
        if any(o.output_type == "error" and o.ename == content["ename"] for o in cell.outputs):
            return
        cell.outputs.append(
            nbformat.v4.new_output(
                "error",
                ename=content["ename"],
                evalue=content["evalue"],
                traceback=content["traceback"] or ["(the traceback was not shown)"],
            )
        )
        stopped = self.guard is not None and self.guard.refused_in(cell_index)
        if content["ename"] not in ("CellTimeoutError", "KeyboardInterrupt") and not stopped:
            self.hidden_errors.append(cell_index)

    def output(
        self,
        outs: list[nbformat.NotebookNode],
        msg: dict[str, Any],
        display_id: str | None,
        cell_index: int,
    ) -> nbformat.NotebookNode | None:
        """Keep outputs until the notebook has printed ``limits.output_bytes``; cut the rest.

        A message's size is the length of its content as JSON, summed over the whole notebook;
        the first cell past the cap gets one ``... output cut ...`` line on stderr and is
        recorded in ``output_cut``.

        Args:
            outs: the cell's outputs so far, appended to.
            msg: an IOPub message from the kernel.
            display_id: the display id it updates, if any (nbclient's).
            cell_index: the cell's position in the notebook.

        Returns:
            The output nbclient made of ``msg`` while under the cap; ``None`` past it.
        """
        size = len(json.dumps(msg.get("content", {}), default=str))
        self.output_bytes += size
        if self.output_bytes <= self.spec.limits["output_bytes"]:
            return super().output(outs, msg, display_id, cell_index)
        if cell_index not in self.output_cut:
            self.output_cut.append(cell_index)
            outs.append(
                nbformat.v4.new_output("stream", name="stderr", text="... output cut ...\n")
            )
        return None

    async def async_start_new_kernel_client(self) -> KernelClient:
        """Connect to the kernel, then guard its messages, probe the sandbox and start the watch.

        The guard starts first, so a message refused during the probe is caught too. The watch
        spares the launched process, the sandbox's init and the kernel; any other process in
        the tree is what a cell started.

        Returns:
            The connected kernel client.

        Raises:
            SandboxBroken: the probe found the sandbox open (the message says how); no cell
                has run.
        """
        kc = await super().async_start_new_kernel_client()
        self.guard = MessageGuard(kc, self.km.is_alive, self._stop_kernel)
        self.guard.start()
        if self.spec.sandbox:
            self.probe = await run_probe(self, self.spec)
            failure = probe_failure(self.probe, self.spec)
            if failure:
                raise SandboxBroken(failure)
        launched = self.km.provisioner.pid
        keep = {launched}
        init = getattr(self.km, "sandbox_init", None)
        if init is not None:
            keep |= {init, *processes.children(init)}  # the sandbox's init and the kernel
        memory = self.spec.limits["memory_bytes"] if self.memory_watched else None
        self.watch = Watch(launched, keep, memory, self.km.interrupt_kernel)
        self.watch.start()
        return kc

    async def _stop_kernel(self) -> None:
        await self.km.shutdown_kernel(now=True)

    async def async_execute_cell(
        self,
        cell: nbformat.NotebookNode,
        cell_index: int,
        execution_count: int | None = None,
        store_history: bool = True,
    ) -> nbformat.NotebookNode:
        """Run one cell with its CPU-time limit watched (``watch.py``).

        Args:
            cell: the cell to run (a markdown cell passes through nbclient untouched).
            cell_index: its position in the notebook.
            execution_count: the execution count to give it (nbclient's).
            store_history: whether the kernel keeps it in its history (nbclient's).

        Returns:
            The cell, with its outputs.
        """
        self.cell_index = cell_index
        if self.guard is not None:
            self.guard.cell = cell_index
        if self.watch is not None and cell.cell_type == "code":
            self.watch.start_cell(cell_index, self.cpu_limit(cell))
        try:
            return await super().async_execute_cell(
                cell, cell_index, execution_count=execution_count, store_history=store_history
            )
        finally:
            if self.watch is not None:
                self.watch.end_cell()
            if self.guard is not None:
                self.guard.close_retired()

    async def _async_handle_timeout(self, timeout, cell=None):
        """The wall-clock backstop: stop what the cell started, then interrupt as nbclient does."""
        if self.cell_index is not None:
            self.wall_stopped.append(self.cell_index)
        if self.watch is not None:
            self.watch.stop_extras()
        return await super()._async_handle_timeout(timeout, cell)

    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index) -> None:
        """nbclient's loop over IOPub, on whichever IOPub channel is current (``messages.py``
        opens a fresh one after a refused message, which may have taken the cell's end)."""
        quiet = 0.0
        while True:
            try:
                msg = await self.kc.iopub_channel.get_msg(timeout=0.5)
            except Empty:
                quiet += 0.5
                if self.guard is not None and self.guard.refused_in(cell_index) and quiet >= 2:
                    return
                continue
            quiet = 0.0
            if msg["parent_header"].get("msg_id") == parent_msg_id:
                try:
                    self.process_message(msg, cell, cell_index)  # raises at the cell's end
                except CellExecutionComplete:
                    return


def grading_client(
    nb: nbformat.NotebookNode, spec: JobSpec, km: GivenSpecKernelManager, memory_watched: bool
) -> GradingClient:
    """The client that runs ``nb`` in ``km``'s kernel with ``spec``'s limits (nbgrader's rules:
    errors allowed, a timed-out cell interrupted and recorded, history in memory).

    Args:
        nb: the notebook to run.
        spec: the job's spec (limits, timeouts, whether it is sandboxed).
        km: the manager of the job's kernel (``kernel.kernel_manager``).
        memory_watched: whether the watch enforces the memory limit (no cgroup).

    Returns:
        The client, not yet started.
    """
    return GradingClient(
        nb,
        spec,
        memory_watched,
        km=km,
        timeout=60,
        iopub_timeout=spec.iopub_timeout,
        interrupt_on_timeout=True,
        allow_errors=True,
        raise_on_iopub_timeout=True,
        record_timing=False,
        error_on_timeout={
            "ename": "CellTimeoutError",
            "evalue": "",
            "traceback": ["CellTimeoutError: No reply from kernel before timeout"],
        },
        startup_timeout=spec.startup_timeout,
        extra_arguments=["--HistoryManager.hist_file=:memory:"],
    )
