"""Run one submission's notebook in a fresh kernel, sandboxed, and leave nothing running.

    python -m course_grading.execute --serve     # job folders on stdin, one a line
    python -m course_grading.execute JOB_DIR     # one job

The grader keeps one of these per parallel slot (``jobs.py``), outside the sandbox; each job
gets a fresh kernel in a fresh sandbox. ``JOB_DIR``
holds ``job.json`` (``jobs.JobSpec``), ``in.ipynb`` (the notebook as nbgrader prepared it, hidden
regions removed: the kernel receives the cells one by one and never sees this file), ``stage/``
(the student's folder as the kernel may see it) and ``runtime/`` (connection file, IPC sockets).
It writes ``out.ipynb`` (the executed notebook), ``result.json`` and, when ``JobSpec.values``
names any, ``values.json`` (those names taken out after the last cell: ``evidence.py``).

Before any cell runs, a probe inside the sandboxed kernel checks that the sandbox holds: the
job folder, the work course, the submissions and the course's ``solutions/`` do not exist for
it, the venv is read-only, a port this process listens on cannot be reached, and the limits are
in force. If one fails, the result says so and the grader stops (no silent fallback).
Afterwards every process the kernel left (a fork bomb's sleepers) is killed: this process is a
subreaper, so orphans come to it, and a root grader's sandbox uid is swept too.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from course_grading import sandbox
from course_grading.evidence import take_values
from course_grading.jobs import JobSpec, Outcome
from course_grading.kernel import GivenSpecKernelManager, kernel_manager
from course_grading.processes import become_subreaper, kill_leftovers

PROBE = """
def _shapes_probe(hidden, venv, port):
    import json, os, resource, socket
    visible = [path for path in hidden if os.path.exists(path)]
    try:
        with open(os.path.join(venv, ".shapes-probe"), "w"):
            pass
        os.remove(os.path.join(venv, ".shapes-probe"))
        venv_writable = True
    except OSError:
        venv_writable = False
    probe = socket.socket()
    probe.settimeout(2)
    try:
        probe.connect(("127.0.0.1", port))
        network = True
    except OSError:
        network = False
    finally:
        probe.close()
    return json.dumps({
        "visible": visible, "venv_writable": venv_writable, "network": network,
        "uid": os.getuid(), "pid": os.getpid(),
        "memory": resource.getrlimit(resource.RLIMIT_AS)[0],
        "processes": resource.getrlimit(resource.RLIMIT_NPROC)[0],
    })
"""


class SandboxBroken(Exception):
    """The probe found the sandbox open; the message says how."""


class GradingClient(NotebookClient):
    """nbclient with nbgrader's execution rules, per-cell limits, an output cap and a probe."""

    def __init__(self, nb: nbformat.NotebookNode, spec: JobSpec, **kwargs) -> None:
        super().__init__(nb, **kwargs)
        self.spec = spec
        self.limit_of = {id(cell): limit for cell, limit in zip(nb.cells, spec.cell_timeouts)}
        self.timeout_func = lambda cell: self.limit_of.get(id(cell), spec.cell_timeouts[-1])
        self.on_cell_executed = self._record_hidden_error
        self.output_bytes = 0
        self.output_cut: list[int] = []
        self.hidden_errors: list[int] = []
        self.probe: dict | None = None
        self.kernel_pids: set[int] = set()  # the kernel (and bwrap): not leftovers

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
        if content["ename"] not in ("CellTimeoutError", "KeyboardInterrupt"):
            self.hidden_errors.append(cell_index)

    def output(self, outs, msg, display_id, cell_index):
        """Keep outputs until the notebook has printed ``limits.output_bytes``; cut the rest."""
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

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        launched = getattr(self.km.provisioner, "pid", None)
        self.kernel_pids |= {launched} if launched else set()
        if self.spec.sandbox:
            self.probe = await self._run_probe()
            self.kernel_pids.add(self.probe.get("pid", 0))
            failure = _probe_failure(self.probe, self.spec)
            if failure:
                raise SandboxBroken(failure)
        return kc

    async def _run_probe(self) -> dict:
        """Ask the kernel, before any cell, what it can see and reach (``PROBE``)."""
        listener = socket.create_server(("127.0.0.1", 0))
        try:
            port = listener.getsockname()[1]
            # the grader's files by their own paths, and through this process's /proc entry
            hidden = [*self.spec.hidden, f"/proc/{os.getpid()}/root{self.spec.hidden[0]}"]
            call = f"_shapes_probe({hidden!r}, {sys.prefix!r}, {port})"
            msg_id = self.kc.execute(
                PROBE, silent=True, store_history=False, user_expressions={"probe": call}
            )
            reply = await self.async_wait_for_reply(msg_id)
            self.kc.execute("del _shapes_probe", silent=True, store_history=False)
            listener.setblocking(False)
            try:
                listener.accept()
                reached = True
            except BlockingIOError:
                reached = False
        finally:
            listener.close()
        found = reply["content"].get("user_expressions", {}).get("probe", {})
        if found.get("status") != "ok":
            return {"error": found.get("evalue") or "the probe did not run"}
        probe = json.loads(ast.literal_eval(found["data"]["text/plain"]))
        probe["network"] = probe["network"] or reached
        return probe


def _probe_failure(probe: dict | None, spec: JobSpec) -> str:
    """Why the probe says the sandbox does not hold, or ``""`` when it holds."""
    if probe is None or "error" in probe:
        return f"the sandbox check did not run ({(probe or {}).get('error', 'no kernel')})"
    if probe["visible"]:
        return f"the kernel can see {probe['visible'][0]}"
    if probe["venv_writable"]:
        return "the kernel can write to the venv"
    if probe["network"]:
        return "the kernel can reach a port on 127.0.0.1"
    if spec.uid is not None and probe["uid"] != spec.uid:
        return f"the kernel runs as uid {probe['uid']}, not the sandbox's {spec.uid}"
    if probe["memory"] != spec.limits["memory_bytes"]:
        return f"the kernel's memory limit is {probe['memory']}, not {spec.limits['memory_bytes']}"
    if probe["processes"] != spec.limits["processes"]:
        return f"the kernel's process limit is {probe['processes']}"
    return ""


async def _execute(client: GradingClient, km: GivenSpecKernelManager, spec: JobSpec, job: Path):
    """Start the kernel, check the sandbox, run every cell; always shut the kernel down."""
    home = job / "home"
    if not spec.sandbox:  # the same private copy, on the host
        shutil.copytree(job / "stage", home / spec.lesson)
    env = sandbox.kernel_environment(sandbox.Limits(**spec.limits), home)
    with open(job / "kernel.log", "wb") as log:
        try:
            await client.async_execute(
                cwd=str(job / "runtime" if spec.sandbox else home / spec.lesson),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            if spec.values:  # the declared answers, as plain data (evidence.py: values.json)
                await take_values(client, spec.values, job / "values.json")
        finally:
            try:
                await asyncio.wait_for(km.shutdown_kernel(now=False), timeout=10)
            except Exception:  # noqa: BLE001 (a dead or stuck kernel: killed below)
                await km.shutdown_kernel(now=True)


def _failure(err: Exception, client: GradingClient, spec: JobSpec, job: Path) -> Outcome:
    """What a failed execution means; a sandboxed kernel that never started is the sandbox's."""
    if isinstance(err, SandboxBroken):
        return Outcome(status="sandbox failed", reason=str(err))
    if spec.sandbox and client.probe is None:  # no student code has run yet
        log = (job / "kernel.log").read_text(errors="replace").strip().splitlines()
        why = log[-1] if log else f"{type(err).__name__}: {err}"
        return Outcome(status="sandbox failed", reason=f"the sandboxed kernel did not start: {why}")
    if isinstance(err, asyncio.TimeoutError):
        return Outcome(status="timeout", reason=f"over {spec.notebook_timeout} s in all")
    if isinstance(err, DeadKernelError):
        return Outcome(status="dead", reason="the kernel died while running it")
    return Outcome(status="error", reason=f"{type(err).__name__}: {err}".strip(": "))


def run_job(job: Path) -> tuple[Outcome, frozenset[int]]:
    """Execute ``job`` (see module), write ``out.ipynb``; return the outcome and the pids of
    the kernel (and bwrap)."""
    spec = JobSpec.load(job)
    nb = nbformat.read(str(job / "in.ipynb"), as_version=4)
    km = kernel_manager(spec, job)
    client = GradingClient(
        nb,
        spec,
        km=km,
        timeout=spec.cell_timeouts[-1] if spec.cell_timeouts else 60,
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
    start = time.perf_counter()
    try:
        asyncio.run(asyncio.wait_for(_execute(client, km, spec, job), spec.notebook_timeout))
        outcome = Outcome(status="ok")
    except Exception as err:  # noqa: BLE001 (reported per submission, or stops the run)
        outcome = _failure(err, client, spec, job)
    outcome.seconds = time.perf_counter() - start
    outcome.hidden_errors, outcome.output_cut = client.hidden_errors, client.output_cut
    outcome.probe = client.probe
    nbformat.write(nb, str(job / "out.ipynb"))
    return outcome, frozenset(client.kernel_pids)


def run_one(job: Path) -> None:
    """Run one job, leave nothing running after it, write its ``result.json``."""
    spec = JobSpec.load(job)
    kill_leftovers(spec.uid)  # a grader killed mid-run may have left some
    kernel: frozenset[int] = frozenset()
    try:
        outcome, kernel = run_job(job)
    finally:
        left = kill_leftovers(spec.uid, grace=2.0, expected=kernel)
    outcome.leftovers = left
    outcome.save(job)


def serve() -> None:
    """Run the jobs whose folders arrive on stdin, one a line; answer each with a line."""
    for line in sys.stdin:
        job = Path(line.strip())
        try:
            run_one(job)
            print(f"done {job}", flush=True)
        except Exception as err:  # noqa: BLE001 (the grader reads the job's result or this)
            print(f"failed {job} {type(err).__name__}: {err}".replace("\n", " "), flush=True)


def main(argv: list[str] | None = None) -> int:
    """``--serve``: jobs from stdin (the grader's workers); ``JOB_DIR``: one job."""
    args = argv if argv is not None else sys.argv[1:]
    become_subreaper()  # orphans of the kernels come here
    if args == ["--serve"]:
        serve()
    else:
        run_one(Path(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
