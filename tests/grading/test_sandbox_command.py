"""The sandbox's command line and its refusal to fall back silently (no kernel started here).

``test_hostile_class.py`` checks from inside real kernels that the sandbox holds; these check
what is asked of bwrap, and that a machine without it stops the grading command in one line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from course_grading import sandbox
from course_grading.autograde import Options
from course_grading.errors import GradingError
from course_grading.run import grade

REPO = Path(__file__).resolve().parents[2]
KERNEL = ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]


def _argv(tmp_path, uid=None, limits=None):
    return sandbox.kernel_argv(
        bwrap="bwrap",
        stage=tmp_path / "stage",
        runtime=tmp_path / "runtime",
        lesson="99_fixture",
        uid=uid,
        limits=limits or sandbox.Limits(),
        kernel=KERNEL,
    )


def _binds(argv: list[str]) -> list[tuple[str, str, str]]:
    return [
        (argv[i], argv[i + 1], argv[i + 2])
        for i in range(len(argv) - 2)
        if argv[i] in ("--bind", "--ro-bind")
    ]


def test_the_kernel_sees_no_repository_and_writes_only_its_runtime(tmp_path):
    argv = _argv(tmp_path)
    binds = _binds(argv)
    writable = [dest for kind, _, dest in binds if kind == "--bind"]
    assert writable == [str(tmp_path / "runtime")]
    bound = {src for _, src, _ in binds}
    assert str(REPO) not in bound and str(REPO / "solutions") not in bound
    assert str(REPO / "course_lib") in bound  # the package folder alone (editable install)
    for flag in ("--unshare-net", "--unshare-ipc", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert "--unshare-pid" not in argv  # ipykernel quits inside a PID namespace
    assert argv.index("--clearenv") < argv.index("--setenv")


def test_tmp_is_mounted_before_the_runtime_folder_under_it(tmp_path):
    argv = _argv(tmp_path)
    tmpfs = argv.index("/tmp", argv.index("--tmpfs"))
    runtime = argv.index(str(tmp_path / "runtime"))
    assert tmpfs < runtime  # a later mount would hide the runtime folder


def test_limits_and_the_dropped_uid_reach_the_kernel_command(tmp_path):
    limits = sandbox.Limits(memory_bytes=2**30, processes=64)
    argv = _argv(tmp_path, uid=2_000_000_123, limits=limits)
    script = argv[argv.index("-c") + 1]
    assert "setpriv --reuid=2000000123" in script and "--no-new-privs" in script
    assert f"--as={2**30}" in argv and "--nproc=64" in argv
    assert argv[-len(KERNEL) :] == KERNEL
    assert "setpriv" not in _argv(tmp_path)[_argv(tmp_path).index("-c") + 1]


def test_no_bwrap_stops_the_command_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    (tmp_path / "subs").mkdir()
    with pytest.raises(GradingError) as stop:
        grade(tmp_path / "subs", tmp_path / "out", REPO, options=Options())
    message = str(stop.value)
    assert "bubblewrap is not installed" in message and "--no-sandbox" in message
    assert "\n" not in message
    assert not (tmp_path / "out").exists()  # it stopped before doing anything


def test_namespaces_refused_stop_the_command_in_one_line(monkeypatch):
    refused = subprocess.CompletedProcess(
        [], 1, "", "bwrap: No permissions to creating new namespace\n"
    )
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: "/usr/bin/bwrap")
    monkeypatch.setattr(sandbox.subprocess, "run", lambda *a, **k: refused)
    with pytest.raises(GradingError, match="cannot create namespaces here .*No permissions"):
        sandbox.check_available()


def test_help_needs_no_sandbox_and_lists_the_new_options():
    out = subprocess.run(
        [sys.executable, "-m", "course_grading", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for option in ("--jobs", "--no-sandbox", "--memory", "--max-processes", "--notebook-timeout"):
        assert option in out
