"""Grades into Moodle, and both exports as nbgrader export plugins (issue 28, item 4).

Moodle's CSV grade import (``course_grading/lms/moodle.py`` names its rules) stops at the first
user it cannot find, reads ``-`` as no grade and refuses a grade above its maximum, so the file
holds only students it can name, exactly, and says which it left out. The roster is a
real-looking Moodle grade export (``fixtures/lms/moodle_grades.csv``).

The plugins run under a real ``nbgrader export`` in a course folder whose gradebook is the
workspace's.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
from lms_builders import CANVAS_EXPORT, MOODLE_EXPORT, copy_workspace, make_workspace

from course_grading.errors import GradingError
from course_grading.lms import review as rv
from course_grading.lms.export import export_main
from course_grading.nbgrader import course as wc


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("lms") / "grading")


@pytest.fixture
def workspace(base, tmp_path) -> Path:
    return copy_workspace(base, tmp_path / "grading")


def read_rows(path: Path) -> list[list[str]]:
    text = path.read_text(encoding="utf-8").removeprefix("\ufeff")
    return list(csv.reader(io.StringIO(text, newline="")))


def moodle(workspace: Path, tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "moodle.csv"
    assert export_main([str(workspace), "--format", "moodle", "--out", str(out), *extra]) == 0
    return out


def test_without_a_roster_every_student_by_username(workspace, tmp_path):
    out = moodle(workspace, tmp_path, "--column", "01_tokens=Lesson 1")
    assert out.read_bytes().startswith(b"\xef\xbb\xbfusername,Lesson 1,02_padding\n")
    rows = {r[0]: r[1:] for r in read_rows(out)[1:]}
    assert rows == {
        "-dash": ["2", "-"],  # exact: Moodle looks the user up by it; "-" is no grade
        "jos_": ["4", "0"],
        "nobody-in-canvas": ["10", "-"],
        "sobrien": ["9", "11"],
        "zmuller@uni.example": ["5.5", "0"],
    }
    kinds = {(r[0], r[1]) for r in read_rows(rv.review_path(out))[1:]}
    # the review file is for reading in a spreadsheet: guarded there
    assert (rv.FORMULA_ID, "'-dash") in kinds and (rv.MISSING, "zmuller@uni.example") in kinds


def test_by_email_only_ids_that_are_addresses(workspace, tmp_path, capsys):
    rows = read_rows(moodle(workspace, tmp_path, "--id", "email"))
    assert rows == [["email", "01_tokens", "02_padding"], ["zmuller@uni.example", "5.5", "0"]]
    shown = capsys.readouterr().out
    for student in ("-dash", "jos_", "sobrien", "nobody-in-canvas"):
        assert f"{rv.UNREADABLE_ID}: {student}: no email known" in shown


def test_with_a_roster_only_matched_students_under_the_roster_id(workspace, tmp_path, capsys):
    before = MOODLE_EXPORT.read_bytes()
    out = moodle(workspace, tmp_path, "--gradebook", str(MOODLE_EXPORT))
    rows = {r[0]: r[1:] for r in read_rows(out)[1:]}
    assert rows == {
        "-dash": ["2", "-"],
        "josé": ["4", "0"],  # graded as jos_
        "sobrien": ["9", "11"],
        "zmuller": ["5.5", "0"],  # matched by e-mail address, written by username
    }
    assert MOODLE_EXPORT.read_bytes() == before
    shown = capsys.readouterr().out
    assert f"{rv.NOT_IN_LMS}: nobody-in-canvas" in shown
    assert f"{rv.NOT_GRADED_ROW}: row 6 (Amy Absent, Jr.)" in shown
    by_email = read_rows(moodle(workspace, tmp_path / "..", "--gradebook", str(MOODLE_EXPORT),
                                "--id", "email"))  # fmt: skip
    assert by_email[1:] == [
        ["eve@uni.example", "2", "-"],
        ["jose.nunez@uni.example", "4", "0"],
        ["sean.obrien@uni.example", "9", "11"],
        ["zmuller@uni.example", "5.5", "0"],
    ]


def test_a_roster_without_user_fields_is_refused(workspace, tmp_path):
    roster = tmp_path / "names.csv"
    roster.write_text("First name,Last name\nAnn,Lee\n")
    with pytest.raises(GradingError, match="no Username, Email address or ID number column"):
        moodle(workspace, tmp_path, "--gradebook", str(roster))
    roster.write_text("First name,Username\nAnn,alee\n")
    with pytest.raises(GradingError, match="no Email address column to export"):
        moodle(workspace, tmp_path, "--gradebook", str(roster), "--id", "email")


def test_a_grade_above_moodles_maximum_is_listed(tmp_path):
    from lms_builders import make_workspace as build

    ws = build(tmp_path / "big", {"L": (150.0, 0.0)}, {("ann", "L"): (120.0, 0.0)}, [])
    out = moodle(ws, tmp_path)
    assert read_rows(out)[1] == ["ann", "120"]
    notes = read_rows(rv.review_path(out))[1:]
    assert [(n[0], n[5]) for n in notes] == [(rv.OVER_MAXIMUM, "120 > 100: raise it")]


def test_ids_that_differ_only_in_case_are_one_moodle_user_and_neither_row_is_written(
    tmp_path, capsys
):
    """Issue 42: ``Alice`` and ``alice`` were both written; Moodle compares usernames without
    case, so whichever row it read last would have set one user's grade."""
    from lms_builders import make_workspace as build

    graded = {("Alice", "L"): (7.0, 0.0), ("alice", "L"): (3.0, 0.0), ("bob", "L"): (5.0, 0.0)}
    out = moodle(build(tmp_path / "case", {"L": (10.0, 0.0)}, graded, []), tmp_path)
    assert read_rows(out)[1:] == [["bob", "5"]]
    notes = [n for n in read_rows(rv.review_path(out))[1:] if n[0] == rv.SAME_USER]
    assert sorted(n[1] for n in notes) == ["Alice", "alice"], notes
    shown = capsys.readouterr().out
    assert f"{rv.SAME_USER}: Alice" in shown and "alice (username alice)" in shown


def test_bad_options_say_what_to_do(workspace, tmp_path):
    with pytest.raises(GradingError, match=r"--column 'nope=X': 'nope' is not among 01_tokens"):
        moodle(workspace, tmp_path, "--column", "nope=X")
    with pytest.raises(GradingError, match=r"--column '01_tokens': give LESSON=COLUMN"):
        moodle(workspace, tmp_path, "--column", "01_tokens")
    with pytest.raises(GradingError, match=r"no scores for 03_x in the grading output"):
        moodle(workspace, tmp_path, "--lessons", "03_x")
    with pytest.raises(GradingError, match="--format canvas needs --gradebook"):
        export_main([str(workspace), "--format", "canvas", "--out", str(tmp_path / "c.csv")])
    rows = read_rows(moodle(workspace, tmp_path, "--lessons", "02_padding"))
    assert rows[0] == ["username", "02_padding"]


# --- nbgrader export --exporter ... -------------------------------------------------------------


def nbgrader_export(course: Path, *args: str) -> subprocess.CompletedProcess:
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    command = [str(Path(sys.executable).with_name("nbgrader")), "export", *args]
    return subprocess.run(
        command, cwd=course, capture_output=True, text=True, env=wc.nbgrader_env()
    )


def test_the_nbgrader_plugins_export_the_gradebook(workspace, tmp_path):
    course = workspace / "course"
    plugin = "course_grading.lms.nbgrader_export"
    out = tmp_path / "nb-canvas.csv"
    proc = nbgrader_export(
        course, f"--exporter={plugin}.CanvasExport", f"--to={out}",
        f"--CanvasExport.lms_file={CANVAS_EXPORT}", "--CanvasExport.columns=01_tokens=Quiz 1",
        "--CanvasExport.rescale=True",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"wrote {out}" in proc.stderr and "nobody-in-canvas" in proc.stderr
    rows = {r[1]: r for r in read_rows(out)[3:]}
    # nbgrader export's rules: no submission is 0 (Amy and the Test Student are not in it)
    assert rows["101"][5:] == ["4.5", "11"] and rows["103"][5:] == ["2", "0"]
    moodle_out = tmp_path / "nb-moodle.csv"
    proc = nbgrader_export(
        course, f"--exporter={plugin}.MoodleExport", f"--to={moodle_out}",
        f"--MoodleExport.lms_file={MOODLE_EXPORT}", "--assignment=02_padding",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert read_rows(moodle_out)[0] == ["username", "02_padding"]
    assert read_rows(moodle_out)[1:] == [["-dash", "0"], ["josé", "0"], ["sobrien", "11"],
                                         ["zmuller", "0"]]  # fmt: skip


def test_a_plugin_problem_is_one_error_line_and_nothing_written(workspace, tmp_path):
    out = tmp_path / "nb.csv"
    proc = nbgrader_export(
        workspace / "course",
        "--exporter=course_grading.lms.nbgrader_export.CanvasExport",
        f"--to={out}",
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "[ExportApp | ERROR] --format canvas needs --gradebook" in proc.stderr
    assert not out.exists()


def test_a_roster_of_nobody_says_nobodys_score_is_in_the_file(workspace, tmp_path, capsys):
    """Issue 40, item 6: Moodle's grade export of an empty course (its header only) matched
    nobody, and the command said it wrote "5 student(s)". It counts what is in the file now."""
    roster = tmp_path / "empty_course.csv"
    roster.write_text(MOODLE_EXPORT.read_text(encoding="utf-8").splitlines()[0] + "\n", "utf-8")
    assert read_rows(moodle(workspace, tmp_path, "--gradebook", str(roster))) == [
        ["username", "01_tokens", "02_padding"]
    ]
    shown = capsys.readouterr().out
    assert "the scores of 0 of 5 graded student(s)" in shown and "student(s))" in shown
    assert "nobody's score is in it" in shown
    (tmp_path / "all").mkdir()
    moodle(workspace, tmp_path / "all", "--id", "email")  # one address among five ids
    assert "the scores of 1 of 5 graded student(s)" in capsys.readouterr().out
