"""The README's first command, ``make lab``, as root and as an ordinary user.

JupyterLab refuses to start as root unless told ``--allow-root``; containers, cloud VMs and
teaching images run as root. ``make lab`` (``scripts/lab.py``) adds the flag as root and says so,
adds nothing for anyone else, and starts Lab with the repository's settings: no news toast, no
update check. Each case runs the real ``make lab`` on the existing ``.venv`` (the Makefile's stamp
keeps it from installing anything), waits for the URL it prints, asks the server for the Lab
settings through that URL, and stops the server and every process it started.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
URL = re.compile(r"(http://127\.0\.0\.1:\d+)/lab\?token=([0-9a-f]+)")
NOTICE = "started with --allow-root"
SETTINGS = "/lab/api/settings/@jupyterlab/apputils-extension:notification"

spec = importlib.util.spec_from_file_location("lab", ROOT / "scripts" / "lab.py")
lab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lab)


def _in_session(sid: int) -> list[str]:
    """Every process still in session ``sid`` (``make lab`` and what it started)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # the session id; a zombie is gone
            left.append(stat.parent.name)
    return left


def _stop(proc: subprocess.Popen) -> list[str]:
    """SIGTERM to the whole session, SIGKILL after 20 s; what was still there after that."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + wait
        while proc.poll() is None or _in_session(proc.pid):  # poll: make's exit is reaped
            if time.time() > deadline:
                break
            time.sleep(0.2)
        if not _in_session(proc.pid):
            break
    proc.wait(timeout=10)
    return _in_session(proc.pid)


def _get(url: str, headers: dict, wait: float = 20) -> dict:
    """``url``'s JSON; a connection refused is tried again for ``wait`` seconds (the server has
    printed its URL; under load it may not be answering yet)."""
    deadline = time.time() + wait
    while True:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as r:
                return json.load(r)
        except urllib.error.URLError as err:
            if isinstance(err, urllib.error.HTTPError) or time.time() > deadline:
                raise
            time.sleep(0.3)


def run_make_lab(command: list[str], home: Path, timeout: float = 120) -> dict:
    """Run ``command`` (``make lab`` as someone), read its URL and the Lab settings, stop it.

    Returns:
        ``output`` (what make and Lab printed), ``settings`` (the notification plugin's schema
        defaults as the server serves them), ``news`` and ``left`` (processes left behind).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "CI"))}
    env["HOME"] = str(home)  # every Jupyter folder a fresh one: no user settings leak in
    for name, folder in [("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                         ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")]:  # fmt: skip
        env[name] = str(home / folder)
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own session: every process it starts can be found
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    found = {"output": "", "settings": {}, "news": None, "left": []}
    try:
        deadline = time.time() + timeout
        while not (match := URL.search("".join(lines))):
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"make lab printed no URL: {''.join(lines)[-3000:]}")
            time.sleep(0.2)
        base, token = match.groups()
        headers = {"Authorization": f"token {token}"}
        schema = _get(base + SETTINGS, headers)["schema"]["properties"]
        found["settings"] = {key: value.get("default") for key, value in schema.items()}
        found["news"] = _get(base + "/lab/api/news", headers)
    finally:
        found["left"] = _stop(proc)
        reader.join(timeout=5)
        found["output"] = "".join(lines)
    return found


@pytest.fixture(scope="module", autouse=True)
def installed():
    """The cases reuse ``.venv``: make would reinstall it if its stamp were out of date."""
    stale = subprocess.run(["make", "-q", "setup"], cwd=ROOT, capture_output=True)
    if stale.returncode != 0:
        pytest.fail(
            "the .venv stamp is out of date: run `make setup` first (this test never installs)"
        )


def _check_quiet_lab(found: dict) -> None:
    assert found["settings"]["fetchNews"] == "false", found["settings"]  # no news toast
    assert found["settings"]["checkForUpdates"] is False
    assert found["news"] == {"news": []}  # and the server fetches none
    assert found["left"] == [], f"processes left running: {found['left']}"


@pytest.mark.skipif(os.geteuid() != 0, reason="the root case needs root")
def test_make_lab_starts_as_root_and_says_it_added_allow_root(tmp_path):
    found = run_make_lab(["make", "lab", "LAB_ARGS=--no-browser --port=0 --ip=127.0.0.1"], tmp_path)
    assert NOTICE in found["output"]
    assert "Running as root is not recommended" not in found["output"]
    _check_quiet_lab(found)


def _ordinary_user(command: list[str]):
    """``command`` as ``class_builders.ORDINARY_UID`` (the grading tests' helper), and that
    module (it also hands a folder to that uid)."""
    spec = importlib.util.spec_from_file_location(
        "class_builders", ROOT / "tests" / "grading" / "class_builders.py"
    )
    builders = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "tests" / "grading"))
    try:
        spec.loader.exec_module(builders)
    finally:
        sys.path.remove(str(ROOT / "tests" / "grading"))
    problem = builders.unreachable()
    if problem:
        pytest.skip(problem)
    return builders.as_ordinary_user(command), builders


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an ordinary uid needs root")
def test_make_lab_starts_as_an_ordinary_user_without_allow_root():
    home = Path(tempfile.mkdtemp(prefix="shapes-lab-"))  # where another uid may enter
    try:
        command, builders = _ordinary_user(
            ["make", "lab", "LAB_ARGS=--no-browser --port=0 --ip=127.0.0.1"]
        )
        builders.hand_to_ordinary_user(home)
        found = run_make_lab(command, home)
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=False)
    assert NOTICE not in found["output"]
    _check_quiet_lab(found)


def test_allow_root_is_added_for_root_only():
    assert lab.lab_command([], euid=0, python="py")[-1] == "--allow-root"
    assert "--allow-root" not in lab.lab_command([], euid=1000, python="py")
    assert lab.lab_command(["x", "--allow-root"], 0, "py").count("--allow-root") == 1
    assert lab.lab_command(["--port=0"], 1000, "py") == [
        "py",
        "-m",
        "jupyterlab",
        "notebooks",
        "--port=0",
    ]


def test_the_repositorys_lab_settings_come_first(tmp_path):
    env = lab.lab_environment({"JUPYTER_CONFIG_PATH": "/elsewhere"})
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [
        str(ROOT / "jupyter-config" / "student"),  # a student's Lab: no instructor tools
        str(ROOT / "jupyter-config"),
        "/elsewhere",
    ]
    overrides = ROOT / "jupyter-config" / "labconfig" / "default_setting_overrides.json"
    quiet = json.loads(overrides.read_text())["@jupyterlab/apputils-extension:notification"]
    assert quiet == {"fetchNews": "false", "checkForUpdates": False}
