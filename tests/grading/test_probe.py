"""The sandbox probe: each check it makes can fail, and a stray connection is not a breach.

``test_hostile_class.py`` runs the probe in real kernels through the whole grader; here its
network check runs in bwrap sandboxes made with the grader's own namespace arguments, with and
without the network namespace, and ``probe_failure`` is shown each broken field.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading

import pytest

from course_grading.sandbox import bwrap as sandbox
from course_grading.sandbox import probe, seccomp
from course_grading.sandbox.jobs import JobSpec

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def _spec(uid: int = 1234) -> JobSpec:
    return JobSpec(
        lesson="99_fixture", sandbox=True, bwrap="bwrap", limits=sandbox.Limits().as_dict(),
        cell_timeouts=[], notebook_timeout=60, hidden=[], uid=uid,
    )  # fmt: skip


def _holding(spec: JobSpec) -> dict:
    """A probe's answer from a sandbox that holds."""
    limits = sandbox.Limits(**spec.limits)
    return {
        "visible": [], "venv_writable": False, "network": False, "reached_host": False,
        "uid": spec.uid, "pid": 2, "processes_seen": [1, 2], "grader_importable": False,
        "dev_readonly": True, "sizes": probe.folder_limits(limits),
        "memory": limits.memory_bytes, "processes": limits.processes,
        "userns": False, "seccomp": "2",
    }  # fmt: skip


def _probe_in_bwrap(namespaces: list[str], filtered: bool = False) -> dict:
    """Run the probe's function in ``bwrap --ro-bind / / <namespaces>``, as a kernel would
    (``filtered``: under the sandbox's seccomp filter too)."""
    listener = probe.Listener()
    try:
        call = probe.probe_call([], sys.prefix, listener, [])
        code = f"{probe.PROBE}\nprint(repr({call}))"
        argv = ["bwrap", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", *namespaces]
        argv = [*argv, "--", sys.executable, "-c", code]
        done = subprocess.run(
            seccomp.wrap(argv) if filtered else argv, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        found = probe.probe_reply(done.stdout.strip())  # read as the grader reads the kernel's
        assert "error" not in found, (found, done.stdout[:200])
        found["reached_host"] = listener.reached()
    finally:
        listener.close()
    return found


@needs_bwrap
def test_the_graders_namespaces_keep_the_kernel_off_the_hosts_ports():
    found = _probe_in_bwrap(sandbox._namespaces(None))
    assert found["network"] is False and found["reached_host"] is False


@needs_bwrap
def test_without_a_network_namespace_the_probe_says_so():
    """The failing case: the same sandbox sharing the host's network is caught, on both sides."""
    namespaces = [a for a in sandbox._namespaces(None) if a != "--unshare-net"]
    found = _probe_in_bwrap(namespaces)
    assert found["network"] is True and found["reached_host"] is True
    spec = _spec()
    broken = {**_holding(spec), "network": True, "reached_host": True}
    says = probe.probe_failure(broken, spec)
    assert says == "the kernel can reach a port on the host's 127.0.0.1"


@needs_bwrap
def test_under_the_filter_the_kernel_can_make_no_user_namespace():
    """The failing case first: without the filter, a root grader's sandbox (no user namespace
    of its own) lets the kernel make one, and the probe names it."""
    found = _probe_in_bwrap(sandbox._namespaces(None))
    assert found["userns"] is True and found["seccomp"] == "0"
    spec = _spec()
    says = probe.probe_failure({**_holding(spec), "userns": True}, spec)
    assert says == "the kernel can make a user namespace of its own"
    found = _probe_in_bwrap(sandbox._namespaces(None), filtered=True)
    assert found["userns"] is False and found["seccomp"] == "2"
    says = probe.probe_failure({**_holding(spec), "seccomp": "0"}, spec)
    assert says == "the kernel runs without the sandbox's seccomp filter"


def test_a_stray_connection_to_the_listener_is_not_the_kernel():
    listener = probe.Listener()
    try:
        for stray in (b"", b"GET / HTTP/1.0\r\n\r\n", listener.token[:-1].encode()):
            with socket.create_connection(("127.0.0.1", listener.port)) as conn:
                conn.sendall(stray)
        silent = socket.create_connection(("127.0.0.1", listener.port))  # connects, says nothing
        try:
            assert listener.reached(wait=0.3) is False
        finally:
            silent.close()
        with socket.create_connection(("127.0.0.1", listener.port)) as conn:
            conn.sendall(listener.token.encode())
        assert listener.reached() is True
    finally:
        listener.close()


def test_a_token_sent_in_pieces_still_counts():
    listener = probe.Listener()
    token = listener.token.encode()

    def send() -> None:
        with socket.create_connection(("127.0.0.1", listener.port)) as conn:
            for i in range(0, len(token), 5):
                conn.sendall(token[i : i + 5])

    sender = threading.Thread(target=send)
    sender.start()
    sender.join()
    try:
        assert listener.reached() is True
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("visible", ["/srv/course/solutions"], "the kernel can see /srv/course/solutions"),
        ("grader_importable", True, "the kernel can import course_grading"),
        ("venv_writable", True, "the kernel can write to the venv"),
        ("reached_host", True, "the kernel can reach a port on the host's 127.0.0.1"),
        ("network", True, "the kernel can connect to a port on 127.0.0.1"),
        ("pid", 7, "the kernel is pid 7, not 2 of its own namespace"),
        ("processes_seen", [1, 2, 3], "the kernel sees pids [1, 2, 3]"),
        ("uid", 0, "the kernel runs as uid 0, not 1234"),
        ("dev_readonly", False, "the kernel can write to /dev"),
        ("memory", -1, "its memory limit is -1"),
        ("processes", -1, "its process limit is -1"),
        ("userns", True, "the kernel can make a user namespace of its own"),
        ("seccomp", "0", "the kernel runs without the sandbox's seccomp filter"),
    ],
)
def test_each_broken_field_is_named(field, value, says):
    spec = _spec()
    assert probe.probe_failure(_holding(spec), spec) == ""
    assert probe.probe_failure({**_holding(spec), field: value}, spec) == says


def test_a_tmpfs_larger_than_its_limit_is_named():
    spec = _spec()
    found = _holding(spec)
    found["sizes"] = {**found["sizes"], "/tmp": 2**40}
    assert probe.probe_failure(found, spec).startswith(f"/tmp holds {2**40} bytes, not at most")


def test_a_probe_that_did_not_run_is_a_failure():
    assert probe.probe_failure({"error": "NameError"}, _spec()).startswith(
        "the sandbox check did not run (NameError)"
    )
    assert "did not run" in probe.probe_failure(None, _spec())
