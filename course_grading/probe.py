"""The check, from inside a sandboxed kernel before any cell runs, that the sandbox holds.

The kernel is asked what it can see and reach: the job folder, the work course, the
submissions, the course's ``solutions/`` and the grader's own package folders must not exist for
it, ``course_grading`` must not be importable, the venv must be read-only, a port this process
listens on must be unreachable, it must be pid 2 of a PID namespace holding nothing else, run as
its slot's uid, with ``/dev`` read-only, its tmpfs folders no larger than their limits, and its
resource limits in force. If one check fails, the job's result says which (``SandboxBroken``) and
the grader stops: there is no silent fallback.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import sys

from course_grading import sandbox
from course_grading.jobs import JobSpec

PROBE = """
def _shapes_probe(hidden, venv, port, folders):
    import importlib, json, os, resource, socket
    def importable(name):
        try:
            importlib.import_module(name)
            return True
        except ImportError:
            return False
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
    sizes = {}
    for folder in folders:
        try:
            found = os.statvfs(folder)
            sizes[folder] = found.f_blocks * found.f_frsize
        except OSError:
            sizes[folder] = -1
    return json.dumps({
        "visible": visible, "venv_writable": venv_writable, "network": network,
        "uid": os.getuid(), "pid": os.getpid(),
        "processes_seen": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "grader_importable": importable("course_grading"),
        "dev_readonly": bool(os.statvfs("/dev").f_flag & os.ST_RDONLY),
        "sizes": sizes,
        "memory": resource.getrlimit(resource.RLIMIT_AS)[0],
        "processes": resource.getrlimit(resource.RLIMIT_NPROC)[0],
    })
"""


class SandboxBroken(Exception):
    """The probe found the sandbox open; the message says how."""


def folder_limits(limits: sandbox.Limits) -> dict[str, int]:
    """The tmpfs folders of a sandbox and their largest allowed sizes (bytes)."""
    return {
        "/tmp": limits.tmpfs_bytes,
        sandbox.HOME: limits.tmpfs_bytes,
        "/dev/shm": limits.shm_bytes,
        sandbox.RUNTIME: sandbox.RUNTIME_BYTES,
    }


async def run_probe(client, spec: JobSpec) -> dict:
    """Ask ``client``'s kernel, before any cell, what it can see and reach (``PROBE``)."""
    listener = socket.create_server(("127.0.0.1", 0))
    folders = list(folder_limits(sandbox.Limits(**spec.limits)))
    try:
        port = listener.getsockname()[1]
        # the grader's files by their own paths, and through this process's /proc entry
        hidden = [*spec.hidden, f"/proc/{os.getpid()}/root{spec.hidden[0]}"]
        hidden += [str(p) for p in sandbox.package_folders(sandbox.GRADER_PACKAGES)]
        call = f"_shapes_probe({hidden!r}, {sys.prefix!r}, {port}, {folders!r})"
        msg_id = client.kc.execute(
            PROBE, silent=True, store_history=False, user_expressions={"probe": call}
        )
        reply = await client.async_wait_for_reply(msg_id)
        client.kc.execute("del _shapes_probe", silent=True, store_history=False)
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


def probe_failure(probe: dict | None, spec: JobSpec) -> str:
    """Why the probe says the sandbox does not hold, or ``""`` when it holds."""
    if probe is None or "error" in probe:
        return f"the sandbox check did not run ({(probe or {}).get('error', 'no kernel')})"
    limits = sandbox.Limits(**spec.limits)
    too_large = [
        f"{folder} holds {probe['sizes'].get(folder, -1)} bytes, not at most {most}"
        for folder, most in folder_limits(limits).items()
        if not 0 < probe["sizes"].get(folder, -1) <= most
    ]
    failures = [
        (probe["visible"], f"the kernel can see {(probe['visible'] or [''])[0]}"),
        (probe["grader_importable"], "the kernel can import course_grading"),
        (probe["venv_writable"], "the kernel can write to the venv"),
        (probe["network"], "the kernel can reach a port on 127.0.0.1"),
        (probe["pid"] != 2, f"the kernel is pid {probe['pid']}, not 2 of its own namespace"),
        (probe["processes_seen"] != [1, 2], f"the kernel sees pids {probe['processes_seen'][:5]}"),
        (probe["uid"] != spec.uid, f"the kernel runs as uid {probe['uid']}, not {spec.uid}"),
        (not probe["dev_readonly"], "the kernel can write to /dev"),
        (too_large, "; ".join(too_large)),
        (probe["memory"] != limits.memory_bytes, f"its memory limit is {probe['memory']}"),
        (probe["processes"] != limits.processes, f"its process limit is {probe['processes']}"),
    ]
    return next((why for failed, why in failures if failed), "")
