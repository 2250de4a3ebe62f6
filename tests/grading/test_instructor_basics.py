"""Due dates and late penalties through nbgrader's own mechanism, and ``--student`` regrading one
student without touching anyone else (issue 28, item 6).

One class of the fixture lesson in nbgrader's collected layout, each folder with the
``submission_secret.txt`` that ``nbgrader collect`` leaves: ``early`` (its ``timestamp.txt`` an hour
before the due date), ``late`` (two and a half hours after) and ``nostamp`` (no ``timestamp.txt``),
graded with ``--due`` and the course's late penalty set to nbgrader's ``zero``. Then manual
grades are entered in the workspace's gradebook, ``late``'s timestamp is corrected, and
``--student late`` regrades that student alone; then ``late`` changes the written answer that
was graded by hand and is regraded again.
"""

from __future__ import annotations

import copy
import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from class_builders import FIXTURE, digest, filled, find, fixture_course, sandbox_problem, write
from nbgrader.api import Gradebook

from course_grading import cli, due
from course_grading.judge import secret as course_secret
from course_grading.nbgrader import course as wc
from course_grading.nbgrader.class_gradebook import merge_into_class_gradebook

NO_SANDBOX = ["--no-sandbox"] if sandbox_problem() else []
DUE = f"{FIXTURE}=2026-12-01T17:00Z"
STAMPS = {"early": "2026-12-01 16:00:00.000000 UTC", "late": "2026-12-01 19:30:00.000000 UTC"}
WRITTEN = "written_reflect"


def grade(subs: Path, out: Path, root: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "course_grading", str(subs), "--out", str(out)]
    command += ["--root", str(root), "--jobs", "2", "--due", DUE, *NO_SANDBOX, *extra]
    return subprocess.run(command, capture_output=True, text=True, env=wc.nbgrader_env())


def rows_of(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "report.csv", newline="", encoding="utf-8") as fh:
        return {r["student"]: r for r in csv.DictReader(fh)}


def lines_of(path: Path, student: str) -> list[str]:
    return [line for line in path.read_text("utf-8").splitlines() if student in line]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("basics")
    root, work = fixture_course(tmp)
    with open(root / wc.CONFIG_FILE, "a", encoding="utf-8") as config:  # the course's policy
        config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    answered = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    subs = tmp / "class"
    for student in ("early", "late", "nostamp"):
        folder = subs / student / FIXTURE
        write(folder / f"{FIXTURE}.ipynb", answered)
        write(folder / "submission_secret.txt", f"{student}-hash\n")
        if student in STAMPS:
            write(folder / "timestamp.txt", STAMPS[student] + "\n")
    out = tmp / "out"
    proc = grade(subs, out, root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"tmp": tmp, "root": root, "subs": subs, "out": out, "answered": answered}


def test_late_penalties_come_from_nbgraders_plugin_and_the_timestamps(graded):
    rows = rows_of(graded["out"])
    assert set(rows) == {"early", "late", "nostamp"}  # no row for nbgrader's own files
    full = float(rows["early"]["auto_max"])
    assert float(rows["early"]["score"]) == full and "late" not in rows["early"]["reasons"]
    assert float(rows["late"]["auto_score"]) == full  # its answers are right...
    assert float(rows["late"]["score"]) == 0  # ... and nbgrader's "zero" method takes them all
    assert (
        "submitted 2 h 30 min after the due date (2026-12-01 17:00 UTC): late penalty "
        f"{full:g} point(s), score 0" in rows["late"]["reasons"]
    )
    assert "no timestamp.txt: nbgrader counts it on time" in rows["nostamp"]["reasons"]
    assert float(rows["nostamp"]["score"]) == full
    with Gradebook(f"sqlite:///{graded['out'] / 'course' / 'gradebook.db'}") as gb:
        late = gb.find_submission(FIXTURE, "late")
        assert late.late_submission_penalty == full and late.total_seconds_late == 9000
        assert gb.find_submission(FIXTURE, "early").late_submission_penalty == 0
    log = (graded["out"] / "course" / "nbgrader.log").read_text("utf-8")
    assert "Attribute 'checksum'" not in log  # the false warning is gone (overwrite.py)


def test_the_classroom_carries_the_class_due_date_and_the_penalty(graded, tmp_path):
    """``classroom/autograde.py`` passes the class gradebook's due date (formgrader sets it) to
    the grading command, and the merge copies nbgrader's penalty into the class gradebook."""
    work = fixture_course(tmp_path)[1]  # a class course: the lesson generated, a gradebook
    assert due.class_due_argument(work.db_url, "shapes", FIXTURE) == []  # no due date yet
    with Gradebook(work.db_url, course_id="shapes") as gb:
        gb.update_or_create_assignment(FIXTURE, duedate="2026-12-01 17:00:00 UTC")
    argument = due.class_due_argument(work.db_url, "shapes", FIXTURE)
    assert argument[0] == "--due"
    assert due.parse_due(argument[1:], [FIXTURE]) == due.parse_due([DUE], [FIXTURE])
    for student in ("early", "late", "nostamp"):
        (work.root / "submitted" / student / FIXTURE).mkdir(parents=True)
    # a copy: the merge records the workspace as the class gradebook's, and the tests below
    # regrade the module's own workspace
    out = shutil.copytree(graded["out"], tmp_path / "out")
    merge_into_class_gradebook(out, FIXTURE, work.root, work.db_url, "shapes")
    with Gradebook(work.db_url, course_id="shapes") as gb:
        late = gb.find_submission(FIXTURE, "late")
        assert late.late_submission_penalty == late.score > 0
        assert gb.find_submission(FIXTURE, "early").late_submission_penalty == 0


def test_bad_due_dates_and_bad_students_are_one_line_and_exit_2(graded, capsys):
    subs, out, root = graded["subs"], graded["out"], graded["root"]
    base = [str(subs), "--out", str(out), "--root", str(root), *NO_SANDBOX]
    cases = {
        ("--due", "tomorrow"): "give LESSON=WHEN",
        ("--due", f"{FIXTURE}=whenever"): "'whenever' is no date nbgrader can read",
        ("--due", "07_none=2026-12-01"): "no lesson '07_none'",
        ("--student", "nobody"): "the students are: early, late, nostamp",
        ("--student", "late", "--due", f"{FIXTURE}=2026-12-02T00:00Z"): "--due differs",
        ("--student", "late", "--lessons", FIXTURE): "--lessons does not go with --student",
    }
    for extra, message in cases.items():
        assert cli.main([*base, *extra]) == 2, extra
        assert message in capsys.readouterr().err, extra
    fresh = [str(subs), "--out", str(graded["tmp"] / "fresh"), "--root", str(root)]
    assert cli.main([*fresh, "--student", "late", *NO_SANDBOX]) == 2
    assert "grade the class first (without --student)" in capsys.readouterr().err
    secret = course_secret.create(graded["tmp"] / "secret")
    assert cli.main([*base, "--student", "late", "--secret-file", str(secret)]) == 2
    assert "graded without one than the course secret given now" in capsys.readouterr().err
    assert set(rows_of(out)) == {"early", "late", "nostamp"}  # nothing was touched


@pytest.fixture(scope="module")
def regraded(graded):
    out, subs = graded["out"], graded["subs"]
    db = f"sqlite:///{out / 'course' / 'gradebook.db'}"
    with Gradebook(db) as gb:  # the instructor grades two written answers in formgrader
        gb.find_grade(WRITTEN, FIXTURE, FIXTURE, "early").manual_score = 2
        gb.find_comment(WRITTEN, FIXTURE, FIXTURE, "early").manual_comment = "Well argued."
        gb.find_grade(WRITTEN, FIXTURE, FIXTURE, "late").manual_score = 1.5
        gb.db.commit()
    before = {
        "csv": {s: lines_of(out / "report.csv", s) for s in ("early", "nostamp")},
        "md": {s: lines_of(out / "report.md", s) for s in ("early", "nostamp")},
        "scores": {s: lines_of(out / "scores.csv", s) for s in ("early", "nostamp")},
        "files": {s: digest(out / "course" / "autograded" / s) for s in ("early", "nostamp")},
        "pages": digest(out / "feedback" / "early"),
        "course pages": digest(out / "course" / "feedback" / "early"),
    }
    write(subs / "late" / FIXTURE / "timestamp.txt", "2026-12-01 16:30:00.000000 UTC\n")
    proc = grade(subs, out, graded["root"], "--student", "late")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"before": before, "rows": rows_of(out), "db": db, "stdout": proc.stdout}


def test_student_regrades_one_student_and_keeps_their_manual_grade(graded, regraded):
    late = regraded["rows"]["late"]
    full = float(late["auto_max"])
    assert float(late["score"]) == full + 1.5  # on time now, the manual 1.5 kept
    assert "after the due date" not in late["reasons"]
    assert "needs manual grading" not in late["reasons"]  # graded by hand, answer unchanged
    with Gradebook(regraded["db"]) as gb:
        assert gb.find_grade(WRITTEN, FIXTURE, FIXTURE, "late").manual_score == 1.5
        assert gb.find_submission(FIXTURE, "late").late_submission_penalty == 0
    assert (graded["out"] / "feedback" / "late" / f"{FIXTURE}.html").is_file()
    assert "graded 1 row(s)" in regraded["stdout"]


def test_student_leaves_every_other_student_as_it_was(graded, regraded):
    out, before = graded["out"], regraded["before"]
    for student in ("early", "nostamp"):
        assert lines_of(out / "report.csv", student) == before["csv"][student]
        assert lines_of(out / "report.md", student) == before["md"][student]
        assert lines_of(out / "scores.csv", student) == before["scores"][student]
        assert digest(out / "course" / "autograded" / student) == before["files"][student]
    assert digest(out / "feedback" / "early") == before["pages"]
    assert digest(out / "course" / "feedback" / "early") == before["course pages"]
    with Gradebook(regraded["db"]) as gb:
        assert gb.find_grade(WRITTEN, FIXTURE, FIXTURE, "early").manual_score == 2
        comment = gb.find_comment(WRITTEN, FIXTURE, FIXTURE, "early").manual_comment
        assert comment == "Well argued."
    statuses = [row["status"] for row in regraded["rows"].values()]
    counted = re.findall(
        r"^\d+ (?:ok|flagged|not graded|missing)\b.*$", (out / "report.md").read_text("utf-8"), re.M
    )
    expected = ", ".join(f"{statuses.count(s)} {s}" for s in ("ok", "flagged") if s in statuses)
    assert counted == [expected + "."]


def test_a_written_answer_changed_since_it_was_graded_by_hand_is_flagged(graded, regraded):
    changed = copy.deepcopy(graded["answered"])
    find(changed, WRITTEN).source = "I rewrote this after the grade."
    write(graded["subs"] / "late" / FIXTURE / f"{FIXTURE}.ipynb", changed)
    proc = grade(graded["subs"], graded["out"], graded["root"], "--student", "late")
    assert proc.returncode == 0, proc.stderr[-3000:]
    late = rows_of(graded["out"])["late"]
    assert late["status"] == "flagged"
    assert f"written answer '{WRITTEN}' changed since it was graded by hand" in late["reasons"]
    with Gradebook(regraded["db"]) as gb:  # kept, for the instructor to look at again
        assert gb.find_grade(WRITTEN, FIXTURE, FIXTURE, "late").manual_score == 1.5
