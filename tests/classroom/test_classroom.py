"""A lesson goes round a real classroom: JupyterHub, the nbgrader exchange, PostgreSQL, Chromium.

``python classroom/run.py start`` (what ``make classroom`` runs) brings up a hub with one
instructor and two students (Unix accounts made for the run), the exchange and the gradebook in
PostgreSQL. Then, in headless Chromium (Debian's, through Playwright):

1. the instructor logs in and, in formgrader, generates and releases one lesson;
2. each student logs in and fetches it in the Assignments tab; one submits the solution (the
   answer cells filled as the instructor's version answers them, the written answer in their
   own words), the other the blank notebook;
3. the instructor collects in formgrader, autogrades (``run.py autograde``: the course's
   sandboxed grader, recorded in the class gradebook), enters a manual score and a comment for
   the written answer (one of them) in formgrader, and generates and releases feedback there;
   the lesson's grading workspace, made again from the class gradebook (``refresh``), and its
   Canvas and Moodle exports show the manual points (issue 40: they showed the autograded
   points alone, "not yet graded");
4. each student fetches feedback, opens it, and sees their own score and no hidden test;
5. the scores are read back from PostgreSQL with SQL: the solution scores every autograded
   point plus the manual points, the blank 0;
6. Ctrl-C (SIGINT) to run.py stops everything: no hub, proxy, user server, kernel or
   PostgreSQL is left, and the accounts are removed.

Screenshots of each step and the step times go to ``artifacts/classroom/``. The fixture stops
and removes everything also when a step fails.
"""

from __future__ import annotations

import csv
import glob
import importlib.util
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from helpers import CHROMIUM, CHROMIUM_ARGS
from hub_pages import LESSON, formgrader_button, in_list, lab, login, open_assignments
from lesson_checks import answered, lesson_facts, scores

from course_grading.judge import secret as course_secret
from course_grading.judge.items.model import lesson_of
from course_grading.nbgrader.steps import render_lesson

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "classroom" / "run.py"
ARTIFACTS = ROOT / "artifacts" / "classroom"
MANUAL_POINTS = 1.5
COMMENT = "Good reasoning; say which term grows with the square of the length."


def _why_not() -> str:
    """Why the classroom cannot run on this machine ('' when it can)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "needs root on Linux: the classroom creates Unix accounts and runs servers as them"
    if not CHROMIUM.exists():
        return "needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
    if not glob.glob("/usr/lib/postgresql/*/bin/postgres"):
        return "needs the PostgreSQL server (apt-get install postgresql)"
    proxy = ROOT / "classroom" / "node_modules" / ".bin" / "configurable-http-proxy"
    if not proxy.exists() and not shutil.which("configurable-http-proxy"):
        return "needs configurable-http-proxy (npm ci --prefix classroom)"
    for module in ("jupyterhub", "psycopg", "playwright"):
        if importlib.util.find_spec(module) is None:
            return f"needs {module} (pip install -e '.[classroom]')"
    return ""


WHY_NOT = _why_not()
pytestmark = [
    pytest.mark.classroom,
    pytest.mark.browser,
    pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT),
]


# --- the classroom, started and always stopped ------------------------------------------------
class Room:
    """A classroom started by ``classroom/run.py start`` in a state folder of its own."""

    def __init__(self, state: Path, prefix: str) -> None:
        self.state = state
        self.prefix = prefix
        self.log_path = ARTIFACTS / "run.log"
        self.log = open(self.log_path, "w")
        # the instructor's course secret, outside the state folder (the classroom makes none)
        self.secret_file = course_secret.create(state.parent / f"{state.name}-secret", term="T1")
        self.proc = subprocess.Popen(
            [sys.executable, str(RUN), "start", "--state", str(state), "--students", "2",
             "--prefix", prefix, "--port", "0", "--exit-with-parent",
             "--secret-file", str(self.secret_file)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C is simulated below, on purpose
        )  # fmt: skip
        self.ready: dict = {}

    def wait_ready(self, timeout: float = 180) -> dict:
        ready_file = self.state / "secrets" / "ready.json"
        deadline = time.monotonic() + timeout
        while not ready_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the classroom did not come up:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        self.ready = json.loads(ready_file.read_text())
        return self.ready

    def run(self, *args: str, timeout: float = 600) -> str:
        """``classroom/run.py ARGS --state STATE``; its output (the test fails if it fails)."""
        result = subprocess.run(
            [sys.executable, str(RUN), *args[:1], "--state", str(self.state), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output = result.stdout + result.stderr
        (ARTIFACTS / f"{args[0]}.log").write_text(output)
        assert result.returncode == 0, f"run.py {' '.join(args)} failed:\n{output[-3000:]}"
        return output

    def interrupt(self, timeout: float = 120) -> int | None:
        """Ctrl-C to run.py, as in a terminal; its exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                subprocess.run([sys.executable, str(RUN), "stop", "--state", str(self.state)])
                if self.proc.poll() is None:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=30)
                return None
        return self.proc.returncode

    def close(self) -> None:
        self.interrupt()
        for name, path in (
            ("jupyterhub.log", self.state / "hub" / "jupyterhub.log"),
            ("postgres.log", self.state / "postgres" / "server.log"),
        ):
            if path.exists():
                shutil.copyfile(path, ARTIFACTS / name)
        clean = subprocess.run(
            [sys.executable, str(RUN), "clean", "--state", str(self.state)],
            capture_output=True,
            text=True,
            timeout=180,
        )
        (ARTIFACTS / "clean.log").write_text(clean.stdout + clean.stderr)
        self.log.close()
        self.secret_file.unlink(missing_ok=True)  # clean leaves it: the instructor's own file


@pytest.fixture(scope="module")
def room():
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    state = Path(tempfile.mkdtemp(prefix="shapes-classroom-"))
    started = Room(state, prefix=f"shp{secrets.token_hex(3)}")
    try:
        started.wait_ready()
        yield started
    finally:
        started.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


# --- steps, timed and photographed -------------------------------------------------------------
class Steps:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float]] = []
        self.start = time.monotonic()

    @contextmanager
    def step(self, name: str):
        began = time.monotonic()
        try:
            yield
        finally:
            self.rows.append((name, time.monotonic() - began))
            self.write()

    def shot(self, page, name: str) -> None:
        page.screenshot(path=str(ARTIFACTS / f"{len(self.rows) + 1:02d}-{name}.png"))

    def write(self) -> None:
        lines = [f"{seconds:7.1f} s  {name}" for name, seconds in self.rows]
        lines.append(f"{time.monotonic() - self.start:7.1f} s  in all")
        (ARTIFACTS / "steps.txt").write_text("\n".join(lines) + "\n")


# --- processes -------------------------------------------------------------------------------
def running_as(uids: set[int]) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(x for x in status.read_text().splitlines() if x.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(uid_line.split()[1]) in uids:
            found.append(int(status.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}/status").exists()
        and "zombie" not in Path(f"/proc/{pid}/status").read_text()
    )


def comments(gradebook_url: str) -> list[str]:
    """Every manual comment of the class gradebook."""
    import psycopg

    url = gradebook_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, connect_timeout=10) as conn:
        rows = conn.execute("SELECT manual_comment FROM comment WHERE manual_comment IS NOT NULL")
        return [row[0] for row in rows.fetchall()]


def workspace_outputs(
    room, course: Path, teacher: str, student: str, score: float, most: float, pending: float
):
    """``refresh`` and both exports of the lesson's workspace, run as the instructor, show the
    points and the comment entered in the hub's formgrader (issue 40, item 3)."""
    workspace = course / "grading" / LESSON
    room.run("instructor", "--", "python", "-m", "course_grading", "refresh", str(workspace))
    page = (workspace / "feedback" / student / f"{LESSON}.html").read_text(encoding="utf-8")
    assert f"{LESSON} (Score: {score:.1f} / {most:.1f})" in page and COMMENT in page
    with open(workspace / "report.csv", newline="", encoding="utf-8") as fh:
        row = next(r for r in csv.DictReader(fh) if r["student"] == student)
    assert float(row["score"]) == pytest.approx(score), row
    assert float(row["manual_pending"]) == pytest.approx(pending), row  # the other answers
    roster = course / "canvas_export.csv"
    roster.write_text(
        f"Student,ID,SIS User ID,SIS Login ID,Section,{LESSON}\n    Points Possible,,,,,{most}\n"
        f"Someone,9001,S-1,{student},A,\n",
        encoding="utf-8",
    )
    owner = pwd.getpwnam(teacher)
    os.chown(roster, owner.pw_uid, owner.pw_gid)
    for fmt, extra in (("canvas", ["--gradebook", str(roster)]), ("moodle", [])):
        out = course / f"{fmt}.csv"
        room.run("instructor", "--", "python", "-m", "course_grading", "export", str(workspace),
                 "--format", fmt, "--out", str(out), *extra)  # fmt: skip
        with open(out, newline="", encoding="utf-8-sig") as fh:
            rows = {r[0] if fmt == "moodle" else r[3]: r[-1] for r in csv.reader(fh)}
        assert float(rows[student]) == pytest.approx(score), (fmt, rows)


# --- the test --------------------------------------------------------------------------------
def test_a_lesson_goes_round_the_classroom(room, browser):
    ready, steps = room.ready, Steps()
    url, teacher_name = ready["url"], ready["instructor"]
    student_a, student_b = home_names = ready["students"]
    password = {name: entry["password"] for name, entry in ready["accounts"].items()}
    course = Path(ready["course_root"])
    solution = course / "solutions" / LESSON / f"{LESSON}.ipynb"

    with steps.step("everyone logs in; the hub starts three servers"):
        teacher = login(browser, url, teacher_name, password[teacher_name])
        students = {name: login(browser, url, name, password[name]) for name in home_names}
        lab(teacher, teacher_name)
        steps.shot(teacher, "instructor-lab")

    with steps.step("instructor: generate and release the lesson in formgrader"):
        teacher.goto(f"{url}/user/{teacher_name}/formgrader")
        teacher.locator("tr", has_text=LESSON).first.wait_for()
        formgrader_button(teacher, "assign")
        formgrader_button(teacher, "release")
        steps.shot(teacher, "instructor-released")
    facts = lesson_facts(solution, course / "notebooks" / LESSON / f"{LESSON}.ipynb")
    manual_id, manual_max = facts["manual"][0]  # the written answer graded in formgrader
    assert manual_max >= MANUAL_POINTS, facts["manual"]
    total_max = facts["auto_max"] + sum(points for _, points in facts["manual"])
    assert facts["hidden"], "the lesson has no hidden test to look for"

    for name, page in students.items():
        with steps.step(f"{name}: fetch the lesson in the Assignments tab"):
            lab(page, name)
            open_assignments(page)
            in_list(page, "released_assignments_list").get_by_role("button", name="Fetch").click()
            in_list(page, "fetched_assignments_list").wait_for()
            steps.shot(page, f"{name}-fetched")

    home = {name: Path(pwd.getpwnam(name).pw_dir) for name in (student_a, student_b)}
    fetched = {name: home[name] / LESSON / f"{LESSON}.ipynb" for name in home}
    with steps.step("students' files are their own"):
        for name, path in fetched.items():
            assert path.exists() and path.stat().st_uid == pwd.getpwnam(name).pw_uid
            assert home[name].stat().st_mode & 0o077 == 0, f"{home[name]} is open to others"
        other = pwd.getpwnam(student_b)
        peek = subprocess.run(["cat", str(fetched[student_a])], user=other.pw_uid,
                              group=other.pw_gid, extra_groups=[], capture_output=True)  # fmt: skip
        assert peek.returncode != 0, f"{student_b} can read {student_a}'s notebook"
        # In the hub's mount namespace the checkout shows no solutions to anyone.
        hub_pid = json.loads((room.state / "pids.json").read_text())["hub"]
        look = subprocess.run(
            ["nsenter", f"--target={hub_pid}", "--mount", f"--setuid={other.pw_uid}",
             f"--setgid={other.pw_gid}", "ls", str(ROOT / "solutions")],
            capture_output=True, text=True,
        )  # fmt: skip
        assert look.returncode != 0, f"a student can list the solutions: {look.stdout[:200]}"
        # Nor the grader: its item checks say what a right answer is. The instructor imports a
        # private copy; a student's Python in the same view finds no course_grading at all.
        as_student = ["nsenter", f"--target={hub_pid}", "--mount", f"--setuid={other.pw_uid}",
                      f"--setgid={other.pw_gid}"]  # fmt: skip
        grader = Path(ready["grader"])
        for command in (
            ["ls", str(grader)],
            ["ls", str(ROOT / "course_grading")],
            [sys.executable, "-c", "import course_grading.judge.items"],
        ):
            peek = subprocess.run([*as_student, *command], capture_output=True, text=True)
            assert peek.returncode != 0, f"a student reaches the grader: {command}: {peek.stdout}"
        # Nor the course secret the hidden inputs are drawn with (the instructor's alone).
        secret_file = Path(ready["course_secret"])
        peek = subprocess.run([*as_student, "cat", str(secret_file)], capture_output=True)
        assert peek.returncode != 0 and not peek.stdout, "a student reads the course secret"
        assert secret_file.stat().st_mode & 0o077 == 0, oct(secret_file.stat().st_mode)
        # and it is the instructor's file, byte for byte (the classroom made none of its own)
        assert secret_file.read_bytes() == room.secret_file.read_bytes()
        teacher_account = pwd.getpwnam(teacher_name)
        found = subprocess.run(
            ["nsenter", f"--target={hub_pid}", "--mount", f"--setuid={teacher_account.pw_uid}",
             f"--setgid={teacher_account.pw_gid}", "env", f"PYTHONPATH={grader}", sys.executable,
             "-c",
             "import course_grading.judge.items as i; print(i.__file__)"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert found.returncode == 0 and str(grader) in found.stdout, found.stdout + found.stderr

    with steps.step(f"{student_a} submits the solution, {student_b} the blank notebook"):
        # The hub released the class's edition (its numbers drawn from the course secret), so
        # the right answers are those of the class's solution, not of solutions/ as committed.
        secret = course_secret.load(ready["course_secret"])
        got = nbformat.read(str(fetched[student_a]), as_version=4).metadata["shapes"]["edition"]
        assert got == lesson_of(LESSON).edition.label(secret) != "self-study edition", got
        own = nbformat.read(str(solution), as_version=4)
        assert render_lesson(own, LESSON, secret) > 0
        class_solution = Path(tempfile.mkdtemp(prefix="shapes-class-")) / f"{LESSON}.ipynb"
        nbformat.write(own, str(class_solution))
        nbformat.write(answered(fetched[student_a], class_solution), str(fetched[student_a]))
        owner = pwd.getpwnam(student_a)
        os.chown(fetched[student_a], owner.pw_uid, owner.pw_gid)
        for name, page in students.items():
            in_list(page, "fetched_assignments_list").get_by_role("button", name="Submit").click()
            in_list(page, "submitted_assignments_list").wait_for()
            steps.shot(page, f"{name}-submitted")

    with steps.step("instructor: collect in formgrader"):
        teacher.reload()
        teacher.locator("tr", has_text=LESSON).first.wait_for()
        text = formgrader_button(teacher, "collect")
        assert student_a in text and student_b in text, text
        steps.shot(teacher, "instructor-collected")

    with steps.step("instructor: autograde (sandboxed grader, into the class gradebook)"):
        output = room.run("autograde", LESSON)
        assert "recorded in the class gradebook" in output or "nbgrader autograde" in output
        sandboxed = "recorded in the class gradebook" in output
        if sandboxed:  # graded with the course secret: real grades, not practice
            report = (course / "grading" / LESSON / "report.md").read_text(encoding="utf-8")
            assert report.startswith("# Grading report"), report[:300]
        (ARTIFACTS / "autograde-mode.txt").write_text(
            "sandboxed course_grading\n" if sandboxed else "plain nbgrader autograde\n"
        )
        after_auto = scores(ready["gradebook_url"])
        assert after_auto[student_a]["auto"] == pytest.approx(facts["auto_max"]), after_auto
        assert after_auto[student_b]["score"] == 0, after_auto

    with steps.step("instructor: manual score for the written answer in formgrader"):
        teacher.goto(f"{url}/user/{teacher_name}/formgrader/gradebook/{LESSON}/{LESSON}")
        link = teacher.locator("#main-table a.name-shown", has_text=student_a).first
        link.wait_for(state="attached")
        teacher.goto(url + link.get_attribute("href"))
        # The scores are filled in by the page's script once the grades have loaded.
        teacher.locator("input.score[placeholder]").first.wait_for(state="attached")
        box = teacher.locator(f'input.score[id="{manual_id}"]')
        box.scroll_into_view_if_needed()
        box.fill(f"{MANUAL_POINTS}")
        box.press("Tab")
        comment = teacher.locator(f'textarea[id="{manual_id}-comment"]')
        comment.fill(COMMENT)
        comment.press("Tab")  # formgrader saves a comment on its change event
        deadline = time.monotonic() + 30
        while scores(ready["gradebook_url"])[student_a][
            "manual"
        ] != MANUAL_POINTS or COMMENT not in comments(ready["gradebook_url"]):
            assert time.monotonic() < deadline, "the manual grade never reached the gradebook"
            time.sleep(0.5)
        steps.shot(teacher, "instructor-manual-grade")

    with steps.step("instructor: generate and release feedback in formgrader"):
        teacher.goto(f"{url}/user/{teacher_name}/formgrader")
        teacher.locator("tr", has_text=LESSON).first.wait_for()
        formgrader_button(teacher, "generate-feedback")
        formgrader_button(teacher, "release-feedback")
        steps.shot(teacher, "instructor-feedback-released")

    expected = {student_a: facts["auto_max"] + MANUAL_POINTS, student_b: 0.0}
    with steps.step("the lesson's workspace and exports read the hub's manual grade"):
        pending = sum(points for _, points in facts["manual"][1:])
        workspace_outputs(
            room, course, teacher_name, student_a, expected[student_a], total_max, pending
        )
    for name, page in students.items():
        with steps.step(f"{name}: fetch feedback, read own score, no hidden test"):
            submitted = in_list(page, "submitted_assignments_list")
            submitted.get_by_role("button", name="Fetch Feedback").click()
            view = page.locator("#submitted_assignments_list a", has_text="view feedback").first
            view.wait_for()
            view.click()  # Lab's file browser opens the feedback folder
            page.locator(".jp-DirListing-item", has_text=f"{LESSON}.html").first.wait_for()
            steps.shot(page, f"{name}-feedback-listed")
            (html,) = (home[name] / LESSON / "feedback").glob(f"*/{LESSON}.html")
            rel = urllib.parse.quote(str(html.relative_to(home[name])))
            feedback = page.context.new_page()
            feedback.goto(f"{url}/user/{name}/files/{rel}")
            text = feedback.locator("body").inner_text()
            steps.shot(feedback, f"{name}-feedback")
            headline = f"{LESSON} (Score: {expected[name]:.1f} / {total_max:.1f})"
            assert headline in text, f"{name}'s feedback lacks {headline!r}: {text[:500]}"
            assert "HIDDEN TESTS" not in text
            shown = [line for line in facts["hidden"] if line in text]
            assert not shown, f"{name}'s feedback shows hidden tests: {shown[:3]}"

    with steps.step("scores read back from PostgreSQL with SQL"):
        final = scores(ready["gradebook_url"])
        (ARTIFACTS / "scores.json").write_text(json.dumps(final, indent=2))
        assert final[student_a]["score"] == pytest.approx(expected[student_a]), final
        assert final[student_a]["auto"] == pytest.approx(facts["auto_max"]), final
        assert final[student_a]["manual"] == pytest.approx(MANUAL_POINTS), final
        assert final[student_b]["score"] == 0, final
        assert final[student_a]["max"] == pytest.approx(total_max), final

    with steps.step("Ctrl-C stops every process the classroom started"):
        pids = json.loads((room.state / "pids.json").read_text())
        pids["proxy"] = int((room.state / "hub" / "proxy.pid").read_text())
        uids = {pwd.getpwnam(n).pw_uid for n in (teacher_name, student_a, student_b)}
        assert running_as(uids), "no user server was running before the stop"
        for page in (teacher, *students.values()):
            page.context.close()
        assert room.interrupt() == 0, room.log_path.read_text()[-2000:]
        left = {name: pid for name, pid in pids.items() if alive(pid)}
        assert not left, f"still running after Ctrl-C: {left}"
        assert not running_as(uids), "processes of classroom accounts survived Ctrl-C"
        with socket.socket() as s:
            port = urllib.parse.urlsplit(url).port
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"
