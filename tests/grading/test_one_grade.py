"""One source of truth for a grade (issue 40, item 3): a manual grade and comment entered in
either formgrader reach every output.

A class of two (``sobrien`` and ``zmuller``, the fixture lesson answered right: 3 autograded
points, 2 written points to grade by hand) is graded once by the grader itself. Then, on a copy
of the workspace each:

- **the workspace's formgrader** (``make formgrader``: the workspace's own SQLite gradebook):
  1.5 written points and a comment for ``sobrien``, entered through nbgrader's Gradebook API as
  formgrader's REST handler enters them; then ``make feedback``;
- **the hub's formgrader** (the class gradebook in PostgreSQL, which the classroom's
  ``autograde.py`` copies the workspace's grades into): the same, in the class gradebook,
  after ``merge_into_class_gradebook``; then ``python -m course_grading refresh`` with the
  class gradebook's URL in the environment, as the instructor's server has it.

Each time, every output says 4.5 for ``sobrien`` with nothing left to grade and the comment in
the feedback page: ``GRADING_OUT/feedback/`` (what docs/instructors.md calls ready to upload),
``report.csv``, ``report.md``, ``scores.csv``, and the Canvas and Moodle files of ``export``;
``zmuller`` stays at 3 with 2 points to grade. Before this, ``make feedback`` rewrote only
nbgrader's own pages (``GRADING_OUT/feedback/`` said 3/5 with no comment), and the export of a
classroom workspace read its stale SQLite copy (3, "not yet graded").
"""

from __future__ import annotations

import csv
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from class_builders import FIXTURE, REPO, filled, fixture_course, sandbox_problem, write
from nbgrader.api import Gradebook

from course_grading.nbgrader import course as wc
from course_grading.nbgrader.class_gradebook import merge_into_class_gradebook

WRITTEN = "written_reflect"
COMMENT = "Clear reasoning; next time quote the ratio your own run printed."
POINTS = 1.5
STAMPS = {"sobrien": "2026-12-01 16:00:00.000000 UTC", "zmuller": "2026-12-01 19:30:00.000000 UTC"}
CANVAS = (
    "Student,ID,SIS User ID,SIS Login ID,Section,99_fixture (4101)\n"
    "    Points Possible,,,,,5.00\n"
    '"O\'Brien, Seán",101,S-0001,sobrien,Section A,\n'
    '"Müller, Zoë",102,S-0002,zmuller,Section A,\n'
)


def _postgres_problem() -> str:
    if os.geteuid() != 0:
        return "needs root: the PostgreSQL server runs as the postgres account"
    try:
        pwd.getpwnam("postgres")
        sys.path.insert(0, str(REPO / "classroom"))
        import pgcluster

        pgcluster.find_bin()
    except (KeyError, FileNotFoundError, ImportError) as err:
        return f"needs Debian's PostgreSQL server and psycopg ({err})"
    return ""


def run(*command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO, env=env or wc.nbgrader_env()
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("one-grade")
    root, work = fixture_course(tmp)
    with open(root / wc.CONFIG_FILE, "a", encoding="utf-8") as config:  # the course's policy
        config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    answered = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    for who in ("sobrien", "zmuller"):  # nbgrader's collected layout, as the hub collects
        write(tmp / "class" / who / FIXTURE / f"{FIXTURE}.ipynb", answered)
        write(tmp / "class" / who / FIXTURE / "timestamp.txt", STAMPS[who] + "\n")
    out = tmp / "graded"
    command = [sys.executable, "-m", "course_grading", str(tmp / "class"), "--out", str(out)]
    command += ["--root", str(root), "--jobs", "2"]
    run(*command, *(["--no-sandbox"] if sandbox_problem() else []))
    (tmp / "canvas_export.csv").write_text(CANVAS, encoding="utf-8")
    return {"tmp": tmp, "root": root, "out": out, "class": tmp / "class"}


def copy_of(out: Path, dest: Path) -> Path:
    """A copy of a graded workspace whose nbgrader settings name the copy (they hold the
    folder's absolute path: ``refresh`` refuses a workspace that was moved)."""
    shutil.copytree(out, dest)
    config = dest / "course" / wc.CONFIG_FILE
    config.write_text(config.read_text("utf-8").replace(str(out), str(dest)), "utf-8")
    return dest


def enter_as_formgrader(url: str, course_id: str = "default_course") -> None:
    """1.5 points and a comment for sobrien's written answer, as formgrader's API handler
    enters them (``nbgrader/server_extensions/formgrader/apihandlers.py``)."""
    with Gradebook(url, course_id=course_id) as gb:
        grade = gb.find_grade(WRITTEN, FIXTURE, FIXTURE, "sobrien")
        grade.manual_score = POINTS
        grade.needs_manual_grade = False
        gb.find_comment(WRITTEN, FIXTURE, FIXTURE, "sobrien").manual_comment = COMMENT
        gb.db.commit()


def rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="", encoding="utf-8-sig") as fh:
        return {
            r.get("student") or r.get("username") or r["SIS Login ID"]: r
            for r in csv.DictReader(fh)
        }


def every_output_has_it(out: Path, tmp: Path, env: dict) -> None:
    page = (out / "feedback" / "sobrien" / f"{FIXTURE}.html").read_text("utf-8")
    assert f"{FIXTURE} (Score: 4.5 / 5.0)" in page, page[:2000]
    assert COMMENT in page
    other = (out / "feedback" / "zmuller" / f"{FIXTURE}.html").read_text("utf-8")
    assert f"{FIXTURE} (Score: 3.0 / 5.0)" in other and COMMENT not in other
    report = rows(out / "report.csv")
    assert (report["sobrien"]["score"], report["sobrien"]["manual_pending"]) == ("4.5", "0")
    assert "needs manual grading" not in report["sobrien"]["reasons"]
    assert (report["zmuller"]["score"], report["zmuller"]["manual_pending"]) == ("3", "2")
    markdown = (out / "report.md").read_text("utf-8")
    assert f"| sobrien | {FIXTURE} | ok | 4.5 | 5 |" in markdown
    assert rows(out / "scores.csv")["sobrien"]["total"] == "4.5"
    exported = {}
    for fmt, extra in (("canvas", ["--gradebook", str(tmp / "canvas_export.csv")]), ("moodle", [])):
        target = tmp / f"{out.name}-{fmt}.csv"
        target.unlink(missing_ok=True)
        (tmp / f"{out.name}-{fmt}.review.csv").unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "course_grading", "export", str(out), "--format", fmt]
        run(*cmd, "--out", str(target), *extra, env=env)
        exported[fmt] = rows(target)
    assert exported["canvas"]["sobrien"]["99_fixture (4101)"] == "4.5"
    assert exported["moodle"]["sobrien"][FIXTURE] == "4.5"
    assert exported["canvas"]["zmuller"]["99_fixture (4101)"] == "3"


def test_a_grade_entered_in_the_workspaces_formgrader_reaches_every_output(graded):
    out = copy_of(graded["out"], graded["tmp"] / "workspace")
    enter_as_formgrader(f"sqlite:///{out / 'course' / 'gradebook.db'}")
    make = run("make", "--no-print-directory", "feedback", f"GRADING_OUT={out}")
    assert f"zmuller / {FIXTURE}: 2 written point(s) still to grade" in make.stdout
    every_output_has_it(out, graded["tmp"], wc.nbgrader_env())


@pytest.fixture(scope="module")
def class_gradebook():
    """A PostgreSQL gradebook as the classroom runs it (``classroom/pgcluster.py``)."""
    if why := _postgres_problem():
        pytest.skip(why)
    import pgcluster

    folder = Path(tempfile.mkdtemp(prefix="shapes-pg-"))
    folder.chmod(0o755)  # the postgres account enters it
    cluster = pgcluster.Cluster(folder / "pg")
    try:
        cluster.init()
        cluster.start(_free_port())
        yield cluster.ensure_database("shapes_gradebook", "shapes_grader", secrets.token_hex(8))
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_due_date_decided_after_manual_grading_keeps_every_manual_grade(graded):
    """Issue 40, item 6: the class was graded without a due date, then graded by hand; the due
    date comes later. A whole run with --due would need --force and lose the manual grades;
    ``refresh --due`` sets it, and nbgrader's late penalty (the course's "zero") is decided on
    each submission's timestamp, every manual grade and comment kept."""
    out = copy_of(graded["out"], graded["tmp"] / "due-later")
    db = f"sqlite:///{out / 'course' / 'gradebook.db'}"
    enter_as_formgrader(db)
    again = [sys.executable, "-m", "course_grading", str(graded["class"]), "--out", str(out)]
    again += ["--root", str(graded["root"]), "--due", f"{FIXTURE}=2026-12-01T17:00Z"]
    proc = subprocess.run(again, capture_output=True, text=True, cwd=REPO, env=wc.nbgrader_env())
    assert proc.returncode == 2 and "refresh" in proc.stderr and "--due" in proc.stderr
    refresh = [sys.executable, "-m", "course_grading", "refresh", str(out)]
    run(*refresh, "--due", f"{FIXTURE}=2026-12-01T17:00Z")
    with Gradebook(db) as gb:
        assert gb.find_grade(WRITTEN, FIXTURE, FIXTURE, "sobrien").manual_score == POINTS
        assert gb.find_comment(WRITTEN, FIXTURE, FIXTURE, "sobrien").manual_comment == COMMENT
        assert gb.find_submission(FIXTURE, "zmuller").late_submission_penalty == 3
        assert not gb.find_submission(FIXTURE, "sobrien").late_submission_penalty
    report = rows(out / "report.csv")
    assert (
        report["sobrien"]["score"] == "4.5"
        and "after the due date" not in report["sobrien"]["reasons"]
    )
    assert report["zmuller"]["score"] == "0"
    assert (
        "submitted 2 h 30 min after the due date (2026-12-01 17:00 UTC): late penalty 3 point(s), "
        "score 0" in report["zmuller"]["reasons"]
    )
    assert "Score: 0.0 / 5.0" not in (out / "feedback" / "sobrien" / f"{FIXTURE}.html").read_text()
    assert rows(out / "scores.csv")["zmuller"]["total"] == "0"


def test_a_moved_workspace_is_refused_not_refreshed_from_its_old_place(graded):
    moved = graded["tmp"] / "moved"
    shutil.copytree(graded["out"], moved)
    proc = subprocess.run(
        [sys.executable, "-m", "course_grading", "refresh", str(moved)],
        capture_output=True, text=True, cwd=REPO, env=wc.nbgrader_env(),
    )  # fmt: skip
    assert proc.returncode == 2 and f"was moved here from {graded['out']}" in proc.stderr


def test_a_grade_entered_in_the_hubs_formgrader_reaches_every_output(graded, class_gradebook):
    tmp, url = graded["tmp"], class_gradebook
    course = tmp / "class-course"  # the instructor's course folder on the hub
    shutil.copytree(graded["root"], course)
    shutil.copytree(graded["class"], course / "submitted")
    generate = [sys.executable, "-m", "nbgrader", "generate_assignment", FIXTURE, "--force"]
    subprocess.run(
        [*generate, f"--CourseDirectory.db_url={url}", "--CourseDirectory.course_id=shapes"],
        cwd=course, env=wc.nbgrader_env(), capture_output=True, check=True,
    )  # fmt: skip
    out = copy_of(graded["out"], tmp / "hub-workspace")
    merge_into_class_gradebook(out, FIXTURE, course, url, "shapes")
    enter_as_formgrader(url, "shapes")  # in the hub's formgrader, into PostgreSQL
    env = {**wc.nbgrader_env(), "SHAPES_GRADEBOOK_URL": url}
    refresh = [sys.executable, "-m", "course_grading", "refresh", str(out)]
    assert "the class gradebook" in run(*refresh, env=env).stdout
    every_output_has_it(out, tmp, env)
    # without the class gradebook's URL nothing reads the stale copy: one line, exit 2
    bare = {k: v for k, v in env.items() if k != "SHAPES_GRADEBOOK_URL"}
    for command in (refresh, [sys.executable, "-m", "course_grading", "export", str(out),
                              "--format", "moodle", "--out", str(tmp / "never.csv")]):  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=bare)
        assert proc.returncode == 2, proc.stderr
        assert "recorded in the class gradebook" in proc.stderr and "Traceback" not in proc.stderr
    other = {**env, "SHAPES_GRADEBOOK_URL": f"sqlite:///{tmp / 'another.db'}"}
    proc = subprocess.run(refresh, capture_output=True, text=True, cwd=REPO, env=other)
    assert proc.returncode == 2 and "names another gradebook" in proc.stderr, proc.stderr
