"""The check, from inside a sandboxed kernel before any cell runs, that the sandbox holds.

The kernel is asked what it can see and reach: the job folder, the work course, the
submissions, the course's ``solutions/`` and the grader's own package folders must not exist for
it, ``course_grading`` must not be importable, the venv must be read-only, a port this process
listens on must be unreachable, it must be pid 2 of a PID namespace holding nothing else, run as
its slot's uid under the seccomp filter and unable to make a user namespace (``seccomp.py``),
with ``/dev`` read-only, its tmpfs folders no larger than their limits, and its resource limits
in force. If one check fails, the job's result says which (``SandboxBroken``) and
the grader stops: there is no silent fallback.

The port check is decided on the grader's side: the kernel sends a random token down any
connection it makes, and only a connection carrying that token counts as the kernel reaching
the host. Any other process on the machine may connect to the listener meanwhile (it is an
ordinary port on 127.0.0.1); such a connection must not stop a class's grading.
"""

from __future__ import annotations

import base64
import os
import secrets
import socket
import sys
import time
from typing import TYPE_CHECKING

from course_grading.judge import plain
from course_grading.judge.evidence import QUOTED_BASE64
from course_grading.sandbox import bwrap as sandbox
from course_grading.sandbox.jobs import JobSpec

if TYPE_CHECKING:
    from nbclient import NotebookClient

PROBE = """
def _shapes_probe(hidden, venv, port, token, folders):
    import base64, ctypes, importlib, json, os, resource, socket
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
        probe.sendall(token.encode())
        network = True
    except OSError:
        network = False
    finally:
        probe.close()
    unshare = ctypes.CDLL(None, use_errno=True).unshare
    child = os.fork()
    if child == 0:  # a user namespace of its own, tried in a child the kernel throws away
        os._exit(0 if unshare(0x10000000) == 0 else 1)
    userns = os.waitpid(child, 0)[1] == 0
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    sizes = {}
    for folder in folders:
        try:
            found = os.statvfs(folder)
            sizes[folder] = found.f_blocks * found.f_frsize
        except OSError:
            sizes[folder] = -1
    return base64.b64encode(json.dumps({
        "visible": visible, "venv_writable": venv_writable, "network": network,
        "uid": os.getuid(), "pid": os.getpid(),
        "processes_seen": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "grader_importable": importable("course_grading"),
        "userns": userns, "seccomp": status.get("Seccomp", "").strip(),
        "dev_readonly": bool(os.statvfs("/dev").f_flag & os.ST_RDONLY),
        "sizes": sizes,
        "memory": resource.getrlimit(resource.RLIMIT_AS)[0],
        "processes": resource.getrlimit(resource.RLIMIT_NPROC)[0],
    }).encode()).decode("ascii")
"""


class SandboxBroken(Exception):
    """The probe found the sandbox open; the message says how."""


def folder_limits(limits: sandbox.Limits) -> dict[str, int]:
    """The tmpfs folders of a sandbox and their largest allowed sizes (bytes).

    Args:
        limits: the sandbox's limits (its tmpfs and shared-memory sizes).

    Returns:
        Each tmpfs folder's path, mapped to the most bytes it may hold.
    """
    return {
        "/tmp": limits.tmpfs_bytes,
        sandbox.HOME: limits.tmpfs_bytes,
        "/dev/shm": limits.shm_bytes,
        sandbox.RUNTIME: sandbox.RUNTIME_BYTES,
    }


class Listener:
    """A port on the host's 127.0.0.1 that a sandboxed kernel must not reach, and the token a
    connection from the kernel carries (see module)."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.socket.getsockname()[1]
        self.token = secrets.token_hex(16)

    def reached(self, wait: float = 1.0) -> bool:
        """Whether a connection carrying the token arrived; other connections are read and
        dropped.

        Args:
            wait: seconds one connection may take to send its first bytes.

        Returns:
            True when some connection sent the token: the kernel reached the host.
        """
        self.socket.setblocking(False)
        while True:
            try:
                conn, _ = self.socket.accept()
            except BlockingIOError:
                return False
            with conn:
                if _read(conn, len(self.token), wait) == self.token.encode():
                    return True

    def close(self) -> None:
        """Stop listening (the port is free again)."""
        self.socket.close()


def _read(conn: socket.socket, size: int, wait: float) -> bytes:
    """Up to ``size`` bytes from ``conn``, for at most ``wait`` seconds in all."""
    data, deadline = b"", time.monotonic() + wait
    while len(data) < size and (left := deadline - time.monotonic()) > 0:
        conn.settimeout(left)
        try:
            more = conn.recv(size - len(data))
        except OSError:
            break
        if not more:
            break
        data += more
    return data


async def run_probe(client: NotebookClient, spec: JobSpec) -> dict:
    """Ask ``client``'s kernel, before any cell, what it can see and reach (``PROBE``).

    Args:
        client: the notebook client (the grader's ``GradingClient``) whose kernel has started
            and run no cell yet.
        spec: the job: the grader's hidden paths, the student's uid and the sandbox's limits.

    Returns:
        What the kernel found (see ``PROBE``) with ``reached_host`` added, or ``{"error":
        why}`` when the probe did not run or its answer could not be read.
    """
    listener = Listener()
    folders = list(folder_limits(sandbox.Limits(**spec.limits)))
    try:
        # the grader's files by their own paths, and through this process's /proc entry
        hidden = [*spec.hidden, f"/proc/{os.getpid()}/root{spec.hidden[0]}"]
        hidden += [str(p) for p in sandbox.package_folders(sandbox.GRADER_PACKAGES)]
        call = probe_call(hidden, sys.prefix, listener, folders)
        msg_id = client.kc.execute(
            PROBE, silent=True, store_history=False, user_expressions={"probe": call}
        )
        reply = await client.async_wait_for_reply(msg_id)
        client.kc.execute("del _shapes_probe", silent=True, store_history=False)
        reached = listener.reached()
    finally:
        listener.close()
    found = reply["content"].get("user_expressions", {}).get("probe", {})
    if found.get("status") != "ok":
        return {"error": found.get("evalue") or "the probe did not run"}
    probe = probe_reply(found.get("data", {}).get("text/plain"))
    probe["reached_host"] = reached
    return probe


def probe_call(hidden: list[str], venv: str, listener: Listener, folders: list[str]) -> str:
    """The expression that runs ``PROBE``'s function once it is defined.

    Args:
        hidden: paths the kernel must not see.
        venv: the virtual environment's folder, which the kernel must not be able to write.
        listener: the host port the kernel must not reach, and its token.
        folders: the tmpfs folders whose sizes the probe measures.

    Returns:
        Python source of the call, for the kernel's ``user_expressions``.
    """
    return f"_shapes_probe({hidden!r}, {venv!r}, {listener.port}, {listener.token!r}, {folders!r})"


def probe_failure(probe: dict | None, spec: JobSpec) -> str:
    """Why the probe says the sandbox does not hold, or ``""`` when it holds.

    Args:
        probe: what :func:`run_probe` returned (``None`` when no kernel started).
        spec: the job the probe ran for (its uid and limits are what the probe must find).

    Returns:
        The first way the sandbox is open, in words, or ``""``.
    """
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
        (probe.get("reached_host"), "the kernel can reach a port on the host's 127.0.0.1"),
        (probe["network"], "the kernel can connect to a port on 127.0.0.1"),
        (probe.get("userns", True), "the kernel can make a user namespace of its own"),
        (probe.get("seccomp") != "2", "the kernel runs without the sandbox's seccomp filter"),
        (probe["pid"] != 2, f"the kernel is pid {probe['pid']}, not 2 of its own namespace"),
        (probe["processes_seen"] != [1, 2], f"the kernel sees pids {probe['processes_seen'][:5]}"),
        (probe["uid"] != spec.uid, f"the kernel runs as uid {probe['uid']}, not {spec.uid}"),
        (not probe["dev_readonly"], "the kernel can write to /dev"),
        (too_large, "; ".join(too_large)),
        (probe["memory"] != limits.memory_bytes, f"its memory limit is {probe['memory']}"),
        (probe["processes"] != limits.processes, f"its process limit is {probe['processes']}"),
    ]
    return next((why for failed, why in failures if failed), "")


def probe_reply(text: object) -> dict:
    """The probe's answer from the kernel's ``text/plain`` reply: the quoted base64 of its JSON
    (read as ``evidence.py`` reads values: matched, decoded, bounded by ``plain.parse``).

    Args:
        text: the ``text/plain`` of the probe's user expression, as the kernel sent it.

    Returns:
        The probe's answer as a dict, or ``{"error": why}`` when it is not the probe's text.
    """
    found = QUOTED_BASE64.fullmatch(text) if isinstance(text, str) and len(text) < 2**20 else None
    if found is None:
        return {"error": "the probe's answer is not the text it writes"}
    try:
        answer = plain.parse(base64.b64decode(found.group(1), validate=True))
    except (plain.NotPlain, ValueError) as err:
        return {"error": f"the probe's answer could not be read ({err})"}
    return answer if isinstance(answer, dict) else {"error": "the probe's answer is not a dict"}
