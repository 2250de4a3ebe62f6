"""``make classroom-stop`` and ``make classroom-clean`` act on the classroom ``make classroom``
started (issue 40, item 6): both take its ``CLASSROOM_ARGS``, so a classroom started with a
custom ``--state`` is the one they stop, not the default one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    os.geteuid() != 0, reason="run.py stop needs root (it stops accounts' processes)"
)
@pytest.mark.parametrize("target", ["classroom-stop", "classroom-clean"])
def test_stop_and_clean_take_the_starts_arguments(tmp_path, target):
    state = tmp_path / "my-classroom"  # nothing runs there: the command says so and exits 0
    args = f"--state {state} --students 2 --port 0 --prefix demo"
    proc = subprocess.run(
        ["make", "--no-print-directory", target, f"CLASSROOM_ARGS={args}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"no classroom running from {state}\n" in proc.stdout, proc.stdout
    assert "/srv/shapes-classroom" not in proc.stdout
