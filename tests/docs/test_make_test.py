"""``make test`` says why each test was skipped, and installs what ``.ci/run`` installs when it
can: the classroom's proxy and the planner page's Pyodide from npm (``npm ci --prefix classroom``,
``npm ci --prefix web``) when npm is there.

Checked on make's dry run (``make -n``), which prints the commands without running them; the
proxy's step runs a sub-make, which make runs even then, itself dry.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NPM_CI = "npm ci --prefix classroom"
PROXY = "classroom/node_modules/.bin/configurable-http-proxy"
PYODIDE = "web/node_modules/pyodide/pyodide.asm.wasm"


def dry_run(*targets: str, path: str | None = None) -> str:
    """``make -n TARGETS`` with the proxy's inputs taken as changed (``-W``)."""
    env = dict(os.environ, PATH=path if path is not None else os.environ["PATH"])
    command = ["make", "-n", "-W", "classroom/package-lock.json", *targets]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def proxy_target_ran(output: str) -> bool:
    """Whether the dry run went into the proxy's target: the sub-make printed its ``npm ci``
    (the proxy out of date) or said it is up to date (the recipe's own text is printed too, so
    only a line the sub-make wrote counts)."""
    # make\[N\]: the level is 1 from a shell and deeper when `make test` itself runs this test
    ran = rf"^{re.escape(NPM_CI)} |^make\[\d+\]: '{re.escape(PROXY)}' is up to date"
    return bool(re.search(ran, output, re.M))


def pytest_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if " -m pytest " in line]


def skip_reasons_off(lines: list[str]) -> list[str]:
    """The pytest commands that would not list skipped tests with their reasons."""
    return [
        line for line in lines if not any(a.startswith("-r") and "s" in a for a in line.split())
    ]


def test_every_pytest_run_of_make_test_lists_skip_reasons():
    lines = pytest_lines(dry_run("test"))
    assert len(lines) >= 2, lines  # the unit tests and the notebooks
    assert skip_reasons_off(lines) == []
    assert skip_reasons_off([".venv/bin/python -m pytest tests -q"])  # the check can fail


@pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm on PATH")
def test_make_test_installs_the_proxy_when_npm_is_there():
    # make test's unit step runs the proxy's target (a sub-make: it prints `npm ci` when the
    # proxy is out of date, "is up to date" otherwise), and that target runs npm ci.
    assert proxy_target_ran(dry_run("unit"))
    assert NPM_CI in dry_run(PROXY)
    assert "npm ci --prefix web" in dry_run("-W", "web/package-lock.json", PYODIDE)


def test_make_test_says_so_without_npm(tmp_path):
    (tmp_path / "make").symlink_to(shutil.which("make"))  # a PATH with make and nothing else
    output = dry_run("unit", path=str(tmp_path))
    assert not proxy_target_ran(output)
    assert re.search(r"^no npm: configurable-http-proxy and Pyodide not installed", output, re.M)
