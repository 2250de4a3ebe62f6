"""The kernel a job runs in: the command that starts it (sandboxed or not) and its manager.

jupyter_client 8 ignores ``KernelManager.kernel_cmd``: a kernel is started from its kernel
spec's ``argv``. ``GivenSpecKernelManager`` takes that spec directly instead of looking it up by
name, so the bwrap command is what runs, and ``execute.py`` checks from inside the kernel that
it did.

A sandboxed kernel's IPC sockets are in its private runtime folder (``sandbox.RUNTIME``, a
tmpfs only its mount namespace has). The connection file therefore names that folder, as the
kernel sees it; once bwrap has made the sandbox's init, the manager and its clients connect
through ``/proc/<init>/root``, the same folder seen from outside. Every socket of the manager
and its clients refuses messages over the cap unread (``messages.py``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager

from course_grading.sandbox import bwrap as sandbox
from course_grading.sandbox import processes
from course_grading.sandbox.jobs import JobSpec
from course_grading.sandbox.messages import GuardedKernelClient, cap_context

#: Seconds bwrap may take to make the sandbox's init.
INIT_WAIT = 10.0


class GivenSpecKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel spec is given, not looked up by name.

    jupyter_client 8 ignores ``kernel_cmd``; the spec's ``argv`` is what it runs. With
    ``inside`` set (the sandbox's runtime folder), it connects through the sandbox's init.

    Args:
        spec: the kernel spec to start (its ``argv`` is the bwrap command, or the plain
            kernel's).
        inside: the IPC socket prefix as the sandboxed kernel sees it
            (``sandbox.RUNTIME``/``kernel``); ``None`` for an unsandboxed kernel, reached at
            the connection file's own ``ip``.
        max_bytes: the largest message the manager's and its clients' sockets accept; a
            larger one is refused unread (``messages.py``).
        **kwargs: jupyter_client's ``AsyncKernelManager`` options (``transport``, ``ip``,
            ``connection_file``, ...).
    """

    def __init__(
        self, *, spec: KernelSpec, inside: str | None, max_bytes: int, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._given_spec = spec
        self.inside, self.max_bytes = inside, max_bytes
        self.sandbox_init: int | None = None
        self.client_factory = GuardedKernelClient
        cap_context(self.context, max_bytes)  # the manager's own control socket

    @property
    def kernel_spec(self) -> KernelSpec:
        return self._given_spec

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        await super()._async_launch_kernel(kernel_cmd, **kw)
        if self.inside is None:
            return
        launched = self.provisioner.pid
        for _ in range(int(INIT_WAIT / 0.01)):
            self.sandbox_init = processes.namespace_init(launched)
            if self.sandbox_init is not None or not processes.alive(launched):
                break
            await asyncio.sleep(0.01)
        if self.sandbox_init is not None:  # else bwrap failed: the start times out, its log says
            self.ip = f"/proc/{self.sandbox_init}/root{self.inside}"

    def client(self, **kwargs: Any) -> GuardedKernelClient:
        """A client of this kernel whose sockets refuse messages over ``max_bytes`` unread.

        Args:
            **kwargs: jupyter_client's client options, passed on.

        Returns:
            A ``GuardedKernelClient`` (the manager's ``client_factory``) with the manager's
            cap; it connects through the sandbox's init like the manager.
        """
        client = super().client(**kwargs)
        client.max_bytes = self.max_bytes
        return client


def kernel_manager(
    spec: JobSpec, job: Path, cgroup_procs: Sequence[Path]
) -> GivenSpecKernelManager:
    """The manager of ``job``'s kernel: sandboxed as ``spec`` says, or not.

    Either way the kernel talks over IPC sockets in ``job/runtime`` (TCP could not cross the
    sandbox's network namespace); a sandboxed kernel is interrupted by message, since a signal
    to bwrap would not reach it.

    Args:
        spec: the job's spec (sandboxed or not, bwrap's path, the slot's uid, the limits).
        job: the job's folder, holding ``stage/`` (what the kernel may see) and ``runtime/``
            (the connection file and, unsandboxed, the sockets).
        cgroup_procs: the ``cgroup.procs`` files of the sandbox's cgroup, joined before bwrap
            starts; none when there is none (or no sandbox).

    Returns:
        The manager, not started.
    """
    runtime = job / "runtime"
    limits = sandbox.Limits(**spec.limits)
    if spec.sandbox:
        kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", sandbox.KERNEL_CONNECTION]
        argv = sandbox.kernel_argv(
            bwrap=spec.bwrap,
            stage=job / "stage",
            connection=runtime / "kernel.json",
            lesson=spec.lesson,
            uid=spec.uid,
            limits=limits,
            kernel=kernel,
            cgroup_procs=cgroup_procs,
        )
        mode, inside = "message", f"{sandbox.RUNTIME}/kernel"  # a signal would not reach it
    else:
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        mode, inside = "signal", None
    kernel_spec = KernelSpec(
        argv=argv, display_name="Python 3 (grading)", language="python", interrupt_mode=mode
    )
    return GivenSpecKernelManager(
        spec=kernel_spec,
        inside=inside,
        max_bytes=limits.message_bytes,
        transport="ipc",  # TCP cannot cross --unshare-net; IPC sockets through /proc can
        ip=inside or str(runtime / "kernel"),
        connection_file=str(runtime / "kernel.json"),
    )
