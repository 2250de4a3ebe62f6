"""Canvas's and Moodle's submission downloads come in (issue 40, item 2).

Each download is built here file by file as the LMS names them (``lms/downloads.py`` cites the
code each rule is read from): Canvas's flat zip of ``<name>[_LATE]_<user id>_<attachment
id>_<file>``, resubmissions with ``-1``, a text entry, a file that is not a notebook, an
anonymous student, a user the roster does not know; Moodle's folder per student and plugin
(``Full Name_<participant id>_assignsubmission_file_/``) and its flat form, a browser's
`` (1)`` copy, an online-text entry and a participant the grading worksheet does not list.

Before, the flat layout took ``leealice_501_98765`` for the student id (which no export
matches), a ``_LATE_`` file for a second student, and dropped a ``-1`` resubmission as
unrecognised; a zip was not read at all.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from class_builders import FIXTURE, REPO, filled, fixture_course, sandbox_problem, write

from course_grading.errors import GradingError
from course_grading.lms import downloads
from course_grading.nbgrader import course as wc
from course_grading.submissions import collect

LESSONS = [FIXTURE, "01_tokens_and_attention_memory"]
NB = "{}"  # the content does not matter to the naming rules
CANVAS = {
    "leealice_501_98765_99_fixture.ipynb": NB,  # first upload
    "leealice_501_98790_99_fixture-1.ipynb": NB,  # uploaded again under the same name: latest
    "obriensean_LATE_502_98801_99_fixture.ipynb": NB,
    "müllerzoë_503_98802_notes.pdf": "%PDF",
    "müllerzoë_503_98803_99_fixture.ipynb": NB,
    "müllerzoë_503_text.html": "<p>hi</p>",
    "anon_Ab12c_98804_99_fixture.ipynb": NB,
    "nguyenvan_504_98805_99_fixture.ipynb": NB,  # a user the roster does not know
    "leealice_501_98806_homework.ipynb": NB,  # a notebook that names no lesson
}
CANVAS_ROSTER = (
    "Student,ID,SIS User ID,SIS Login ID,Section,99_fixture (4101)\n"
    "    Points Possible,,,,,5.00\n"
    '"Lee, Alice",501,S-1,alee,A,\n'
    '"O\'Brien, Sean",502,S-2,sobrien,A,\n'
    '"Müller, Zoë",503,S-3,zmuller@uni.example,A,\n'
)
MOODLE = {
    "Alice Lee_1234_assignsubmission_file_/99_fixture.ipynb": NB,
    "Bob Ray_1235_assignsubmission_file_/99_fixture.ipynb": NB,
    "Bob Ray_1235_assignsubmission_file_/99_fixture (1).ipynb": NB,  # the later copy
    "Carol Du_1236_assignsubmission_onlinetext_/onlinetext.html": "<p>text</p>",
    "Dan Ek_1237_assignsubmission_file_99_fixture.ipynb": NB,  # Moodle < 3.1: flat
    "Eve Kay_1299_assignsubmission_file_/99_fixture.ipynb": NB,  # not in the worksheet
}
WORKSHEET = (
    "Identifier,Full name,Email address,Status,Grade,Maximum Grade\n"
    "Participant 1234,Alice Lee,alee@uni.example,Submitted,,5.00\n"
    "Participant 1235,Bob Ray,bray@uni.example,Submitted,,5.00\n"
    "Participant 1236,Carol Du,cdu@uni.example,Submitted,,5.00\n"
    "Participant 1237,Dan Ek,dek@uni.example,Submitted,,5.00\n"
)


def lay_out(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def roster(tmp_path: Path, text: str) -> downloads.Roster:
    (tmp_path / "roster.csv").write_text(text, encoding="utf-8")
    return downloads.read_roster(tmp_path / "roster.csv")


def by_student(subs) -> dict:
    return {s.student: s for s in subs}


def reasons(skipped) -> dict[str, str]:
    return {Path(s.path).name: s.reason for s in skipped}


def test_canvas_names_without_a_roster_grade_each_user_under_canvas_id(tmp_path):
    subs, skipped = collect(lay_out(tmp_path / "canvas", CANVAS), LESSONS)
    found = by_student(subs)
    assert sorted(found) == ["501", "502", "503", "504", "anon_Ab12c"]  # the export's ID column
    assert found["501"].original.name == "leealice_501_98790_99_fixture-1.ipynb"  # the latest
    assert "the latest of several files for this lesson is graded" in found["501"].info
    assert found["501"].status != "flagged" and not found["501"].problems
    assert any("Canvas marked it late" in i for i in found["502"].info)
    assert any("anonymous grading hides who this is" in p for p in found["anon_Ab12c"].problems)
    rows = reasons(skipped)
    assert (
        "the latest (leealice_501_98790_99_fixture-1.ipynb) is graded"
        in (rows["leealice_501_98765_99_fixture.ipynb"])
    )
    assert "notes.pdf: not a notebook" in rows["müllerzoë_503_98802_notes.pdf"]
    assert "not a notebook" in rows["müllerzoë_503_text.html"]
    assert "names no lesson (homework.ipynb" in rows["leealice_501_98806_homework.ipynb"]
    assert len(subs) + len(skipped) == len(CANVAS)  # nobody dropped


def test_canvas_with_its_gradebook_export_grades_by_login_and_names_an_unknown_user(tmp_path):
    folder = lay_out(tmp_path / "canvas", CANVAS)
    subs, _ = collect(folder, LESSONS, roster(tmp_path, CANVAS_ROSTER))
    found = by_student(subs)
    assert {"alee", "sobrien", "zmuller@uni.example", "504"} <= set(found)
    assert any("not in the Canvas roster" in p for p in found["504"].problems)
    assert found["504"].gradable  # graded all the same, and listed


def test_moodle_folders_and_flat_files_by_participant_and_worksheet(tmp_path):
    folder = lay_out(tmp_path / "moodle", MOODLE)
    subs, skipped = collect(folder, LESSONS, roster(tmp_path, WORKSHEET))
    found = by_student(subs)
    assert set(found) == {
        "alee@uni.example",
        "bray@uni.example",
        "dek@uni.example",
        "participant-1299",
    }
    assert found["bray@uni.example"].original.name == "99_fixture (1).ipynb"
    assert not found["alee@uni.example"].problems
    assert any("not in the Moodle roster" in p for p in found["participant-1299"].problems)
    rows = reasons(skipped)
    assert "onlinetext.html: not a notebook" in rows["onlinetext.html"]
    assert "the latest (99_fixture (1).ipynb) is graded" in rows["99_fixture.ipynb"]
    without = by_student(collect(folder, LESSONS)[0])  # no worksheet: named, and asked for
    assert "participant-1234" in without
    assert any("--roster" in p for p in without["participant-1234"].problems)


def test_a_roster_that_is_neither_lms_file_is_refused(tmp_path):
    with pytest.raises(GradingError, match="neither Canvas's gradebook export"):
        roster(tmp_path, "Name,Mark\nAnn,3\n")


def test_plain_flat_names_are_read_as_before(tmp_path):
    """A student id of digits (``1234567_01_tokens...``) stays the flat layout's."""
    files = {f"1234567_{FIXTURE}.ipynb": NB, f"ann_lee_{FIXTURE}.ipynb": NB}
    subs, skipped = collect(lay_out(tmp_path / "flat", files), LESSONS)
    assert sorted(s.student for s in subs) == ["1234567", "ann_lee"] and not skipped


def test_a_zip_is_unpacked_member_by_member_and_nothing_leaves_it(tmp_path):
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, text in CANVAS.items():
            zf.writestr(name, text)
        zf.writestr("../escape.ipynb", NB)
        link = zipfile.ZipInfo("leealice_501_98900_99_fixture-2.ipynb")
        link.external_attr = 0o120777 << 16  # a symbolic link to /etc/passwd
        zf.writestr(link, "/etc/passwd")
    out = tmp_path / "out"
    folder, _, rows = downloads.open_submissions(archive, out, None)
    assert folder == out / "download" and not (tmp_path / "escape.ipynb").exists()
    assert {Path(r.path).name: r.reason for r in rows} == {
        "escape.ipynb": "its path leaves the archive's folder; not unpacked",
        "leealice_501_98900_99_fixture-2.ipynb": (
            "a symbolic link in the archive; links are never followed"
        ),
    }
    assert sorted(os.listdir(folder)) == sorted(CANVAS)
    with pytest.raises(GradingError, match="not a zip archive|does not exist"):
        downloads.open_submissions(tmp_path / "roster.txt", out, None)


def _rows(path: Path) -> list[dict[str, str]]:
    text = path.read_text(encoding="utf-8").removeprefix("\ufeff")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def test_a_canvas_zip_is_graded_and_its_grades_find_their_canvas_rows(tmp_path):
    """The fixture lesson, answered, downloaded from Canvas as a zip (a resubmission, a late
    one, a PDF, a user who left), graded by the grader with Canvas's gradebook export as the
    roster, then exported into that export: each score lands in its student's row."""
    root, work = fixture_course(tmp_path)
    answered = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    blank = work.release_notebook(FIXTURE).read_text(encoding="utf-8")
    archive = tmp_path / "course-99_fixture submissions.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name in (
            "leealice_501_98790_99_fixture-1.ipynb",
            "obriensean_LATE_502_98801_99_fixture.ipynb",
            "nguyenvan_504_98805_99_fixture.ipynb",
        ):
            write(tmp_path / "nb.ipynb", answered)
            zf.write(tmp_path / "nb.ipynb", name)
        zf.writestr("leealice_501_98765_99_fixture.ipynb", blank)  # the earlier, blank upload
        zf.writestr("müllerzoë_503_98802_notes.pdf", "%PDF")
    (tmp_path / "canvas_export.csv").write_text(CANVAS_ROSTER, encoding="utf-8")
    out = tmp_path / "grading"
    command = [sys.executable, "-m", "course_grading", str(archive), "--out", str(out)]
    command += ["--root", str(root), "--roster", str(tmp_path / "canvas_export.csv")]
    command += ["--jobs", "2"] + (["--no-sandbox"] if sandbox_problem() else [])
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=wc.nbgrader_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _rows(out / "report.csv")
    graded = {r["student"]: r for r in report if r["status"] != "unrecognised"}
    assert set(graded) == {"alee", "sobrien", "504"}
    assert graded["alee"]["score"] == graded["alee"]["auto_max"] != "0"  # the -1 upload
    assert "Canvas marked it late" in graded["sobrien"]["reasons"]
    assert (
        graded["504"]["status"] == "flagged"
        and "not in the Canvas roster" in graded["504"]["reasons"]
    )
    unplaced = " ".join(r["reasons"] for r in report if r["status"] == "unrecognised")
    assert "an earlier file of alee" in unplaced and "notes.pdf: not a notebook" in unplaced
    export = [sys.executable, "-m", "course_grading", "export", str(out), "--format", "canvas"]
    export += [
        "--gradebook",
        str(tmp_path / "canvas_export.csv"),
        "--out",
        str(tmp_path / "up.csv"),
    ]
    proc = subprocess.run(export, capture_output=True, text=True, cwd=REPO, env=wc.nbgrader_env())
    assert proc.returncode == 0, proc.stderr
    uploaded = {r["SIS Login ID"]: r["99_fixture (4101)"] for r in _rows(tmp_path / "up.csv")[1:]}
    assert uploaded["alee"] == uploaded["sobrien"] == graded["alee"]["score"]
    assert "graded, but in no row of the LMS file: 504" in proc.stdout
