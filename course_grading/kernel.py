"""The kernel a job runs in: the command that starts it (sandboxed or not) and its manager.

jupyter_client 8 ignores ``KernelManager.kernel_cmd``: a kernel is started from its kernel
spec's ``argv``. ``GivenSpecKernelManager`` takes that spec directly instead of looking it up by
name, so the bwrap command is what runs, and ``execute.py`` checks from inside the kernel that
it did.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager

from course_grading import sandbox
from course_grading.jobs import JobSpec


class GivenSpecKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel spec is given, not looked up by name.

    jupyter_client 8 ignores ``kernel_cmd``; the spec's ``argv`` is what it runs.
    """

    def __init__(self, *, spec: KernelSpec, **kwargs) -> None:
        super().__init__(**kwargs)
        self._given_spec = spec

    @property
    def kernel_spec(self) -> KernelSpec:
        return self._given_spec


def kernel_manager(spec: JobSpec, job: Path) -> GivenSpecKernelManager:
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    runtime = job / "runtime"
    if spec.sandbox:
        argv = sandbox.kernel_argv(
            bwrap=spec.bwrap,
            stage=job / "stage",
            runtime=runtime,
            lesson=spec.lesson,
            uid=spec.uid,
            limits=sandbox.Limits(**spec.limits),
            kernel=kernel,
        )
        mode = "message"  # a signal to bwrap would not reach the kernel in its own session
    else:
        argv, mode = kernel, "signal"
    kernel_spec = KernelSpec(
        argv=argv, display_name="Python 3 (grading)", language="python", interrupt_mode=mode
    )
    return GivenSpecKernelManager(
        spec=kernel_spec,
        transport="ipc",  # TCP cannot cross --unshare-net; IPC sockets in runtime/ can
        ip=str(runtime / "kernel"),
        connection_file=str(runtime / "kernel.json"),
    )
