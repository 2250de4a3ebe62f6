"""The course as a student sees it: JupyterLab in headless Chromium, every lesson run to the end.

For each lesson this starts JupyterLab on a free local port, opens the notebook in Debian's
Chromium through Playwright, runs all cells, checks that a slider widget rendered with a plot,
moves the slider with the keyboard and waits for the plot to be re-drawn, measures the width of
every control's track on the page (none under :data:`MIN_TRACK_PX`: six sliders once shared one
row on tracks of 3-26 px), saves a screenshot of the page and of every explorer
(``artifacts/browser/``, the widths in ``control-widths.json``), and shuts the server down by its
PID.

The notebooks opened are the student notebooks *with their exercises answered* (the solution
text), because JupyterLab stops "Run All" at the first error and a blank exercise raises
``NotImplementedError`` by design; one more case opens a blank student notebook and checks that a
student sees exactly that error.

Needs ``/usr/bin/chromium`` (``.ci/run`` installs Debian's package) and the ``playwright`` Python
package (dev extra); never downloads a browser.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import CHROMIUM, CHROMIUM_ARGS, wait_for_jupyter

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "browser"
MIN_TRACK_PX = 150  # a slider's track a mouse can use (64 positions on 13 px could not be)
MIN_BUTTON_PX = 40  # a dropdown or a toggle button: room for its word and a click
#: Every control of an explorer, and the part of it a person drags or clicks.
CONTROLS = ".widget-slider, .widget-hslider, .widget-dropdown, .widget-toggle-buttons"
TRACK = ".slider-container, select, .widget-toggle-button"
LESSONS = sorted(p.parent.name for p in ROOT.glob("solutions/*/*.ipynb"))

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
]
playwright_api = pytest.importorskip("playwright.sync_api")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over a scratch folder holding each lesson, answered and blank."""
    root = tmp_path_factory.mktemp("lab")
    for lesson in LESSONS:
        shutil.copy(ROOT / "solutions" / lesson / f"{lesson}.ipynb", root / f"{lesson}.ipynb")
    blank = ROOT / "notebooks" / LESSONS[0] / f"{LESSONS[0]}.ipynb"
    if blank.exists():
        shutil.copy(blank, root / "blank.ipynb")
    # JupyterLab 4 renders only the cells on screen by default; outputs below the fold would not
    # be in the page at all. Render every cell so the checks see every output.
    settings = root / ".lab-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    apputils = root / ".lab-settings" / "@jupyterlab" / "apputils-extension"
    apputils.mkdir(parents=True)  # no "get notified about Jupyter news?" toast over the plots
    (apputils / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NBGRADER_EXECUTION")}
    env["JUPYTER_CONFIG_DIR"] = str(root / ".jupyter")  # no user settings leak in
    jupyter = Path(sys.executable).with_name("jupyter")
    log = open(root / "server.log", "w")
    server = subprocess.Popen(
        [
            str(jupyter),
            "lab",
            "--no-browser",
            "--ip",
            "127.0.0.1",
            f"--port={port}",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--allow-root",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=None",
            f"--LabApp.user_settings_dir={root / '.lab-settings'}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_for_jupyter(server, url, root / "server.log", 90)
    try:
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the kernels it started
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


def _open_and_run_all(browser, url: str, name: str, timeout_s: float = 240):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # A workspace of its own, reset: only this notebook is open (a shared workspace would
    # restore every earlier lesson as a hidden tab, and locators would find their cells too).
    page.goto(f"{url}/lab/workspaces/{Path(name).stem}/tree/{name}?reset")
    # The execution indicator can say idle before the kernel connects; the status bar text
    # "| Idle" appears only once the kernel is really there (seen when this test was written).
    page.get_by_text("| Idle").first.wait_for(timeout=90_000)
    _run_all_cells(page)
    deadline = time.time() + timeout_s
    prompts = page.locator(".jp-CodeCell .jp-InputPrompt")
    while time.time() < deadline:
        texts = prompts.all_inner_texts()
        started = any(any(ch.isdigit() for ch in t) for t in texts)
        if started and not any("*" in t for t in texts) and page.get_by_text("| Idle").count():
            time.sleep(2)  # idle for a moment: the queue is really empty, outputs rendered
            if not any("*" in t for t in prompts.all_inner_texts()):
                break
        time.sleep(1)
    else:
        pytest.fail(f"{name}: cells still running after {timeout_s} s")
    return page


def _run_all_cells(page, tries: int = 3) -> None:
    """Run → Run All Cells from the menu bar (retried: the menu can be mid-layout at first)."""
    for attempt in range(tries):
        try:
            page.locator(".jp-Notebook:visible").first.click(timeout=10_000)
            page.get_by_role("menuitem", name="Run", exact=True).click(timeout=10_000)
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click(timeout=10_000)
            return
        except playwright_api.TimeoutError:
            page.keyboard.press("Escape")
            if attempt == tries - 1:
                raise


def control_widths(page) -> list[dict]:
    """Every control on the page: its label, its own width and its track's, in CSS pixels."""
    found = []
    for control in page.locator(CONTROLS).all():
        control.scroll_into_view_if_needed()
        label = control.locator(".widget-label").first
        track = control.locator(TRACK).first
        kind = "slider" if control.locator(".slider-container").count() else "button"
        found.append({
            "kind": kind,
            "label": label.inner_text() if label.count() else "",
            "control_px": round(control.bounding_box()["width"]),
            "track_px": round(track.bounding_box()["width"]) if track.count() else 0,
        })  # fmt: skip
    return found


def _least(width: dict) -> int:
    """The narrowest a control's part may be: a slider's track, else a button or a list."""
    return MIN_TRACK_PX if width["kind"] == "slider" else MIN_BUTTON_PX


def screenshot_explorers(page, lesson: str) -> int:
    """A screenshot of every explorer (its controls, status line and frame), for a person."""
    explorers = page.locator(".widget-vbox").filter(has=page.locator(".widget-output img")).all()
    for k, explorer in enumerate(explorers):
        explorer.scroll_into_view_if_needed()
        explorer.screenshot(path=str(ARTIFACTS / f"{lesson}-explorer-{k + 1}.png"))
    return len(explorers)


def record_widths(lesson: str, widths: list[dict]) -> None:
    path = ARTIFACTS / "control-widths.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    known[lesson] = widths
    path.write_text(json.dumps(known, indent=1, sort_keys=True))


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_runs_and_its_slider_redraws(lab, browser, lesson):
    page = _open_and_run_all(browser, lab, f"{lesson}.ipynb")
    tracebacks = [
        t for t in page.locator(".jp-OutputArea-output").all_inner_texts() if "Traceback" in t
    ]
    assert not tracebacks, f"{lesson}: a cell raised:\n{tracebacks[0][:1500]}"
    slider = page.locator(".widget-slider, .widget-hslider").first
    slider.wait_for(timeout=30_000)
    widget = page.locator(".widget-vbox").filter(has=page.locator(".widget-output")).first
    image = widget.locator(".widget-output img").first
    image.wait_for(timeout=60_000)
    before = image.get_attribute("src")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{lesson}-before.png"), full_page=False)
    handle = widget.locator(".noUi-handle, .ui-slider-handle").first
    handle.focus()
    page.keyboard.press("ArrowRight")
    deadline = time.time() + 120
    after = before
    while time.time() < deadline:
        img = widget.locator(".widget-output img").first
        if img.count():
            after = img.get_attribute("src")
            if after and after != before:
                break
        time.sleep(0.5)
    widget.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"{lesson}-after.png"), full_page=False)
    assert after != before, f"{lesson}: moving the slider did not re-draw its plot"
    widths = control_widths(page)
    record_widths(lesson, widths)
    assert screenshot_explorers(page, lesson) >= 1
    narrow = [w for w in widths if w["track_px"] < _least(w)]
    assert widths and not narrow, f"{lesson}: controls too narrow to use: {narrow}"
    page.close()


def test_the_width_check_sees_a_row_of_squeezed_sliders(browser):
    """Six sliders in one row of a 700 px page, as lesson 4's explorer once laid them out."""
    page = browser.new_page(viewport={"width": 700, "height": 600})
    page.set_content(
        "<div style='display:flex;width:680px'>"
        + "".join("<div class='widget-slider' style='display:flex;flex:1 1 0;min-width:0'>"
                  "<label class='widget-label'>blocks</label>"
                  "<div class='slider-container' style='flex:1'></div>"
                  "<div style='width:90px'>1024</div></div>" for _ in range(6))
        + "</div>"
    )  # fmt: skip
    narrow = [w for w in control_widths(page) if w["track_px"] < _least(w)]
    assert len(narrow) == 6
    page.close()


def test_blank_student_notebook_shows_not_implemented(lab, browser):
    if not (ROOT / "notebooks" / LESSONS[0]).exists():
        pytest.fail("notebooks/ has no student version: run `make release`")
    page = _open_and_run_all(browser, lab, "blank.ipynb", timeout_s=120)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "blank-student-notebook.png"), full_page=True)
    texts = " ".join(page.locator(".jp-OutputArea-output").all_inner_texts())
    assert "NotImplementedError" in texts
    page.close()
