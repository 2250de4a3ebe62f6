"""A student's JupyterLab (``make lab``) shows no instructor tools; the instructor's (``make
formgrader``, ``scripts/lab.py --instructor``) keeps them.

nbgrader's Lab extension ships both sides in one package: the student's *Validate* button and
*Assignment List*, and the instructor's *Create Assignment* sidebar, *Formgrader* and *Course
List* menus with their server extensions. ``scripts/lab.py`` puts ``jupyter-config/student/``
first on ``JUPYTER_CONFIG_PATH`` for a student, which switches the instructor's side off, as the
classroom's student role does (``classroom/course_folder.py``). Each case starts the real
``scripts/lab.py`` on a scratch folder holding lesson 1's student notebook, asks the server for
formgrader and Lab's page configuration, opens the notebook in Debian's Chromium, reads the
sidebar tabs, the *Nbgrader* menu and the notebook toolbar, and stops the server by its session.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from helpers import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

spec = importlib.util.spec_from_file_location("lab", ROOT / "scripts" / "lab.py")
lab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lab)

LESSON = "01_tokens_and_attention_memory"
ARTIFACTS = ROOT / "artifacts" / "browser"
INSTRUCTOR_TABS = {"Nbgrader Create Assignment"}
INSTRUCTOR_MENU = {"Course List", "Formgrader", "Formgrader (local)", "Create assignment"}
INSTRUCTOR_LAB = {
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:course-list",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url)) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code


def _page_config(url: str) -> dict:
    with urllib.request.urlopen(url + "/lab") as r:
        page = r.read().decode()
    start = page.index(">", page.index('id="jupyter-config-data"')) + 1
    return json.loads(page[start : page.index("</script>", start)])


def see_lab(tmp_path: Path, *flags: str) -> dict:
    """Start ``scripts/lab.py [flags] FOLDER`` and report what a browser sees there."""
    folder = tmp_path / "course"
    folder.mkdir()
    shutil.copy(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb", folder / "lesson.ipynb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "CI"))}
    env["HOME"] = str(tmp_path)  # every Jupyter folder a fresh one: no user settings leak in
    for name, sub in [("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                      ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                      ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")]:  # fmt: skip
        env[name] = str(tmp_path / sub)
    # every cell rendered (JupyterLab 4 renders only the cells on screen by default)
    tracker = tmp_path / "settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, str(ROOT / "scripts" / "lab.py"), *flags, str(folder),
               "--no-browser", f"--port={port}", "--ip=127.0.0.1",
               "--IdentityProvider.token="]  # fmt: skip
    log = open(tmp_path / "lab.log", "w")
    server = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    seen: dict = {}
    try:
        deadline = time.time() + 120
        while not _reachable(url):
            if server.poll() is not None or time.time() > deadline:
                pytest.fail(f"scripts/lab.py did not start: {(tmp_path / 'lab.log').read_text()}")
            time.sleep(0.5)
        seen["formgrader"] = _status(url + "/formgrader")
        seen["disabled"] = set(_page_config(url).get("disabledExtensions", []))
        seen.update(_browse(url))
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the kernel it started
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()
    return seen


def _reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/api", timeout=2)
        return True
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _browse(url: str) -> dict:
    """The notebook opened in Chromium: right sidebar tabs, Nbgrader menu items, toolbar."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}/lab/tree/lesson.ipynb")
            page.get_by_text("Validate").first.wait_for(timeout=120_000)  # the toolbar is up
            tabs = page.locator(".jp-SideBar.jp-mod-right .lm-TabBar-tab")
            seen = {"tabs": {t.get_attribute("title") for t in tabs.all()}}
            page.get_by_role("menuitem", name="Nbgrader").click(timeout=30_000)
            page.locator(".lm-Menu").first.wait_for(timeout=10_000)
            seen["menu"] = {t for t in page.locator(".lm-Menu-itemLabel").all_inner_texts() if t}
            seen["toolbar"] = page.locator(".jp-NotebookPanel-toolbar").first.inner_text()
            page.keyboard.press("Escape")
            details = page.locator(".jp-RenderedMarkdown details")
            seen["checks"] = details.count()
            seen["open"] = sum(d.get_attribute("open") is not None for d in details.all())
            if seen["checks"]:  # a student opens the first one: the model answer shows
                first = details.first
                first.locator("summary").click()
                seen["opened"] = first.get_attribute("open") is not None
                seen["answer"] = first.inner_text()
                first.scroll_into_view_if_needed()
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "check-your-answer-open.png"))
            return seen
        finally:
            browser.close()


@pytest.mark.browser
def test_a_students_lab_shows_no_instructor_tools_and_keeps_validate(tmp_path):
    seen = see_lab(tmp_path)
    assert seen["formgrader"] == 404, "formgrader's server extension is on in a student's Lab"
    assert INSTRUCTOR_LAB <= seen["disabled"], seen["disabled"]
    assert not INSTRUCTOR_TABS & seen["tabs"], f"instructor sidebar in a student's Lab: {seen}"
    assert not INSTRUCTOR_MENU & seen["menu"], f"instructor menu items: {seen['menu']}"
    assert "Assignment List" in seen["menu"]  # the student's side of nbgrader stays
    assert "Validate" in seen["toolbar"]
    # the self-study notebook's two Check your answer cells: closed, and open on a click
    assert seen["checks"] == 2 and seen["open"] == 0, seen
    assert seen["opened"] and "Model answer." in seen["answer"] and "Rubric" in seen["answer"]


@pytest.mark.browser
def test_the_instructors_lab_keeps_formgrader_and_create_assignment(tmp_path):
    seen = see_lab(tmp_path, lab.INSTRUCTOR_FLAG)
    assert seen["formgrader"] in (200, 302), seen["formgrader"]
    assert not INSTRUCTOR_LAB & seen["disabled"], seen["disabled"]
    assert INSTRUCTOR_TABS <= seen["tabs"] and INSTRUCTOR_MENU <= seen["menu"], seen


def test_the_student_config_switches_off_what_the_classroom_student_role_does():
    sys.path.insert(0, str(ROOT))
    from classroom import course_folder

    student = lab.STUDENT_CONFIG
    page = json.loads((student / "labconfig" / "page_config.json").read_text())
    server = json.loads((student / "jupyter_server_config.d" / "shapes_student.json").read_text())[
        "ServerApp"
    ]["jpserver_extensions"]
    assert set(page["disabledExtensions"]) == set(course_folder.INSTRUCTOR_ONLY_LAB)
    assert all(v is True for v in page["disabledExtensions"].values())
    assert set(server) == set(course_folder.INSTRUCTOR_ONLY_SERVER)
    assert not any(server.values())
    env = lab.lab_environment({"JUPYTER_CONFIG_PATH": "/elsewhere"})
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[:2] == [str(student), str(lab.CONFIG)]
    instructor = lab.lab_environment({}, instructor=True)
    assert str(student) not in instructor["JUPYTER_CONFIG_PATH"]
