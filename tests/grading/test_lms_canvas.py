"""Grades into Canvas (issue 28, item 4): the instructor's gradebook export, filled.

Checked against the rules of Canvas's own exporter and importer (``course_grading/lms/canvas.py``
names them) on a real-looking export (``fixtures/lms/canvas_gradebook.csv``): names with
commas, quotes and accents, a name Canvas itself formula-quoted, a student in two sections,
a muted ("Manual Posting") row, a custom column, totals, the Test Student, a student with no
submission; and on the same file written with ``;``, decimal commas and a byte-order mark. The
workspace is built through the grader's own report writer and nbgrader's API in about a
second (``lms_builders.py``), not by grading notebooks.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
from class_builders import FIXTURE, filled, fixture_course, sandbox_problem, write
from lms_builders import CANVAS_EXPORT, copy_workspace, make_workspace
from nbgrader.api import Gradebook

from course_grading.errors import GradingError
from course_grading.lms import review as rv
from course_grading.lms.export import export_grades, export_main
from course_grading.lms.scores import ClassScores, Score, from_workspace
from course_grading.nbgrader import course as wc

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("lms") / "grading")


@pytest.fixture
def workspace(base, tmp_path) -> Path:
    return copy_workspace(base, tmp_path / "grading")


def read_rows(path: Path) -> list[list[str]]:
    text = path.read_text(encoding="utf-8")
    sep = ";" if text.lstrip("\ufeff").startswith("Student;") else ","
    return list(csv.reader(io.StringIO(text.lstrip("\ufeff"), newline=""), delimiter=sep))


def by_id(rows: list[list[str]]) -> dict[str, list[str]]:
    return {row[1]: row for row in rows[1:] if row[1]}


def export(workspace: Path, tmp_path: Path, *extra: str, gradebook: Path = CANVAS_EXPORT):
    out = tmp_path / "canvas.csv"
    argv = [str(workspace), "--format", "canvas", "--gradebook", str(gradebook)]
    assert export_main([*argv, "--out", str(out), *extra]) == 0
    return out


COLUMNS = ("--column", "01_tokens=Lesson 1: Tokens")


def test_canvas_fills_one_column_per_lesson_by_login_sis_or_id(workspace, tmp_path, capsys):
    before = CANVAS_EXPORT.read_bytes()
    out = export(workspace, tmp_path, *COLUMNS)
    rows = read_rows(out)
    assert rows[0] == [
        "Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lesson 1: Tokens (4101)",
        "02_padding (4102)",
    ]  # fmt: skip
    assert rows[1][5:] == ["", "Manual Posting"] and rows[2][5:] == ["10.00", "12.00"]
    people = by_id(rows)
    assert people["101"][5:] == ["9", "11"]  # sobrien by SIS Login ID: 7 + 2, 10 + 1
    assert people["102"][4] == "Section A and Section B"  # one row for two sections
    assert people["102"][5:] == ["5.5", "EX"]  # by login (an e-mail); excused kept
    assert people["103"][5:] == ["4", "0"]  # josé, graded as jos_; not graded: 0
    assert people["104"][5] == "2" and people["104"][3] == "-dash"  # the id stays exact
    assert people["105"][5:] == ["", ""] and people["106"][5:] == ["", ""]  # left as they were
    assert CANVAS_EXPORT.read_bytes() == before  # the instructor's file is only read
    shown = capsys.readouterr().out
    assert "row 8 (Absent, Amy, ID 105)" in shown and "Student, Test" in shown
    assert f"{rv.NOT_IN_LMS}: nobody-in-canvas" in shown
    review = read_rows(rv.review_path(out))
    kinds = {(r[0], r[1], r[2]) for r in review[1:]}
    assert (rv.NOT_IN_LMS, "nobody-in-canvas", "") in kinds
    assert (rv.NOT_GRADED, "jos_", "02_padding") in kinds
    assert (rv.PENDING, "zmuller@uni.example", "01_tokens") in kinds
    assert (rv.REPLACED, "zmuller@uni.example", "01_tokens") in kinds  # was 8.00 in Canvas
    assert (rv.KEPT, "zmuller@uni.example", "02_padding") in kinds  # EX
    assert (rv.FORMULA_ID, "", "") in kinds  # -dash


def test_nobody_is_dropped_and_the_rows_keep_their_order(workspace, tmp_path):
    rows = read_rows(export(workspace, tmp_path, *COLUMNS))
    exported = read_rows(CANVAS_EXPORT)
    assert [r[:2] for r in rows[3:]] != [] and len(rows) == len(exported)
    assert [r[1] for r in rows] == [r[1] for r in exported]


def test_names_are_formula_guarded_ids_are_not(workspace, tmp_path):
    rows = read_rows(export(workspace, tmp_path))
    eve = by_id(rows)["104"]
    assert eve[0] == '\'="=HYPERLINK("http://x"),Eve"'  # the cell Canvas quoted, guarded again
    assert eve[3] == "-dash"  # Canvas finds the row by ID; the login must stay what it is
    assert all(not c.startswith(("=", "+", "@")) for row in rows for c in row)
    # The check can fail: the export's own cells start with "=" (the custom column too).
    assert any(c.startswith("=") for row in read_rows(CANVAS_EXPORT) for c in row)


def test_other_columns_are_left_out(workspace, tmp_path):
    """Only the lessons' columns are uploaded: an old value elsewhere would overwrite a grade
    entered in Canvas since the export (custom columns, other assignments, read-only totals)."""
    header = read_rows(export(workspace, tmp_path))[0]
    assert "Attendance" not in header and "Quiz 1 (4103)" not in header
    assert not [h for h in header if "Score" in h]
    assert "01_tokens" in header  # no column titled so: a new one, Canvas makes the assignment
    assert read_rows(tmp_path / "canvas.csv")[2][header.index("01_tokens")] == "10"


def test_semicolons_decimal_commas_and_byte_order_mark_are_kept(workspace, tmp_path):
    text = CANVAS_EXPORT.read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    for row in rows:
        row[:] = [c.replace(".00", ",00") for c in row]
    buffer = io.StringIO(newline="")
    csv.writer(buffer, delimiter=";", lineterminator="\n").writerows(rows)
    european = tmp_path / "export-de.csv"
    european.write_text("\ufeff" + buffer.getvalue(), encoding="utf-8")
    out = export(workspace, tmp_path, *COLUMNS, gradebook=european)
    raw = out.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbfStudent;ID;") and b"\r\n" not in raw
    people = by_id(read_rows(out))
    assert people["101"][5:] == ["9", "11"] and read_rows(out)[2][5:] == ["10,00", "12,00"]


def test_points_possible_must_agree_unless_rescaled(workspace, tmp_path):
    with pytest.raises(GradingError, match=r"out of 12 points, 01_tokens out of 10.*--rescale"):
        export(workspace, tmp_path, "--column", "01_tokens=02_padding (4102)")
    out = export(workspace, tmp_path, "--column", "01_tokens=Quiz 1", "--rescale")
    people = by_id(read_rows(out))
    assert people["101"][5] == "4.5" and people["102"][5] == "2.75"  # 9/10 and 5.5/10 of 5


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("Attendance", r"'Attendance' is not an assignment .*Points Possible cell is ''"),
        ("Current Score", r"'Current Score' is not an assignment .*'\(read only\)'"),
        ("Lesson 1 Final Score", r"holds 'Final Score', so Canvas would take it for a total"),
        ("Lesson 1 (9999)", r"names an assignment id no column of the file has"),
        ("SIS Login ID", r"one of Canvas's student columns"),
    ],
)
def test_a_column_canvas_would_misread_is_refused(workspace, tmp_path, name, error):
    with pytest.raises(GradingError, match=error):
        export(workspace, tmp_path, "--column", f"01_tokens={name}")
    assert not (tmp_path / "canvas.csv").exists()


def test_two_lessons_may_not_fill_one_column(workspace, tmp_path):
    with pytest.raises(GradingError, match=r"01_tokens and 02_padding would both fill column"):
        export(workspace, tmp_path, "--column", "01_tokens=02_padding", "--rescale")


def _edited(tmp_path: Path, edit) -> Path:
    lines = CANVAS_EXPORT.read_text(encoding="utf-8").split("\n")
    path = tmp_path / "edited.csv"
    path.write_text("\n".join(edit(lines)), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (lambda ls: ["Name,Email,Score", "Ann,a@x,1"], r"row 1 starts Name, Email, Score, not "),
        (lambda ls: [ls[0].replace("Section,", "Group,")] + ls[1:], r"no Section column"),
        (lambda ls: ls[:3] + [",,,,Section A" + "," * 12] + ls[3:], r"row 4 has no ID, SIS User"),
        (lambda ls: ls[:5] + [ls[5] + ",extra"] + ls[6:], r"row 6 has 18 cells, the header 17"),
        (lambda ls: ls[:2] + ls[3:], r"0 Points Possible rows"),
        (lambda ls: ls[:1] + ['"unclosed' + ls[3]] + ls[4:], r"row 2 is not CSV|row \d+ has"),
    ],
    ids=["not-canvas", "no-section", "no-ids", "ragged", "no-points-row", "broken-quote"],
)
def test_a_file_that_breaks_canvas_rules_is_refused_naming_the_row(
    workspace, tmp_path, edit, error
):
    with pytest.raises(GradingError, match=error):
        export(workspace, tmp_path, gradebook=_edited(tmp_path, edit))
    assert not (tmp_path / "canvas.csv").exists()


def test_a_file_that_is_not_utf8_is_refused(workspace, tmp_path):
    latin = tmp_path / "excel.csv"
    latin.write_bytes(CANVAS_EXPORT.read_text(encoding="utf-8").encode("cp1252"))
    with pytest.raises(GradingError, match=r"not UTF-8 text \(byte 0xe1 .*CSV UTF-8"):
        export(workspace, tmp_path, gradebook=latin)


def test_nothing_is_overwritten(workspace, tmp_path):
    out = tmp_path / "canvas.csv"
    out.write_text("the instructor's own notes\n")
    with pytest.raises(GradingError, match="exist"):
        export(workspace, tmp_path)
    assert out.read_text() == "the instructor's own notes\n"
    out.unlink()
    rv.review_path(out).symlink_to(tmp_path / "elsewhere")  # a link in the review's way
    with pytest.raises(GradingError, match="canvas.review.csv exist"):
        export(workspace, tmp_path)
    assert not out.exists() and not (tmp_path / "elsewhere").exists()  # no half output


def test_a_file_that_appears_while_writing_is_not_overwritten(workspace, tmp_path, monkeypatch):
    out = tmp_path / "canvas.csv"
    out.write_text("written a moment ago by someone else\n")
    monkeypatch.setattr(Path, "exists", lambda self: False)  # the check ran before it appeared
    with pytest.raises(GradingError, match=r"cannot write .*canvas.csv \(File exists\)"):
        export(workspace, tmp_path)
    assert out.read_text() == "written a moment ago by someone else\n"


def test_manual_grades_entered_after_the_run_are_exported(workspace, tmp_path):
    """The gradebook, not scores.csv (the sheet as the run left it), gives the score."""
    with Gradebook(f"sqlite:///{workspace / 'course' / 'gradebook.db'}") as gb:
        written = gb.find_grade("written", "01_tokens", "01_tokens", "zmuller@uni.example")
        written.manual_score, written.needs_manual_grade = 1.5, False
        late = gb.find_submission_notebook("02_padding", "02_padding", "sobrien")
        late.late_submission_penalty = 2.0
        gb.db.commit()
    stale = {r[0]: r for r in read_rows(workspace / "scores.csv")}
    assert stale["zmuller@uni.example"][1] == "5.5"  # the check can tell the two apart
    people = by_id(read_rows(export(workspace, tmp_path, *COLUMNS)))
    assert people["102"][5] == "7" and people["101"][6] == "9"  # 5.5 + 1.5; 11 - 2


def test_the_gradebook_is_only_read(workspace, tmp_path):
    db = workspace / "course" / "gradebook.db"
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    export(workspace, tmp_path)
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before


def test_a_folder_that_is_not_a_workspace_is_refused(workspace, tmp_path):
    with pytest.raises(GradingError, match="is not a grading workspace"):
        from_workspace(tmp_path)
    report = workspace / "report.csv"
    report.write_text(report.read_text().replace("student,lesson", "who,lesson", 1))
    with pytest.raises(GradingError, match="does not have the grader's columns"):
        from_workspace(workspace)


def test_a_report_the_gradebook_contradicts_is_refused(workspace):
    report = workspace / "report.csv"
    report.write_text(
        report.read_text().replace("jos_,02_padding,not graded", "jos_,02_padding,ok")
    )
    with pytest.raises(GradingError, match="says jos_'s 02_padding was graded, but its gradebook"):
        from_workspace(workspace)


def test_two_workspaces_export_together_but_not_the_same_submission_twice(base, tmp_path):
    scores = from_workspace(base)
    assert scores.scores[("-dash", "01_tokens")].points == 2  # report.csv guards "-dash"
    with pytest.raises(GradingError, match="has two scores for 01_tokens"):
        from_workspace(base, scores)


def _scores(*rows: tuple[str, str, float]) -> ClassScores:
    table = ClassScores()
    for student, lesson, points in rows:
        table.add(student, lesson, Score(points, 10.0))
    return table


def _people(tmp_path: Path, lines: list[str]) -> Path:
    header = "Student,ID,SIS User ID,SIS Login ID,Section,L1 (1)"
    path = tmp_path / "export.csv"
    path.write_text("\n".join([header, "    Points Possible,,,,,10", *lines]), encoding="utf-8")
    return path


def test_ambiguous_students_are_listed_and_not_filled(tmp_path):
    export_file = _people(
        tmp_path,
        [
            '"A, Ann",1,S1,ann,X,',
            '"B, Bob",2,ann2,bob,X,',  # Bob's SIS User ID is someone's login elsewhere
            '"C, Cy",3,S3,Cy,X,',
            '"C, Cy",3,S3,Cy,Y,',  # one user, two rows (an export with a row per section)
        ],
    )
    scores = _scores(("ann", "L1", 5), ("ann2", "L1", 6), ("bob", "L1", 7), ("cy", "L1", 8))
    scores.names["ann2"].add("bob")  # the gradebook gives ann2 bob's login too
    notes = export_grades(scores, "canvas", tmp_path / "o.csv", lms_file=export_file)
    rows = read_rows(tmp_path / "o.csv")
    assert [r[5] for r in rows[2:]] == ["5", "", "8", "8"]
    ambiguous = sorted(n.student for n in notes if n.kind == rv.AMBIGUOUS)
    assert ambiguous == ["ann2", "bob"]
    assert [n.detail for n in notes if n.kind == rv.SEVERAL_ROWS] == ["rows 5, 6"]


def test_one_student_matching_two_users_is_ambiguous(tmp_path):
    export_file = _people(tmp_path, ['"D, Dee",4,dee,dd,X,', '"E, Eve",5,S5,dee,X,'])
    notes = export_grades(_scores(("dee", "L1", 5)), "canvas", tmp_path / "o.csv",
                          lms_file=export_file)  # fmt: skip
    assert [r[5] for r in read_rows(tmp_path / "o.csv")[2:]] == ["", ""]
    assert [n.detail for n in notes if n.kind == rv.AMBIGUOUS] == [
        "matches row 3 (D, Dee, ID 4); row 4 (E, Eve, ID 5)"
    ]


def test_matching_by_case_then_grader_id(tmp_path):
    export_file = _people(
        tmp_path, ['"A",1,,Ann.Lee,X,', '"B",2,,josé,X,', '"C",3,,jos_,X,', '"D",4,,ann.lee,X,']
    )
    scores = _scores(("Ann.Lee", "L1", 1), ("jos_", "L1", 3), ("jos_-d994e1", "L1", 2))
    export_grades(scores, "canvas", tmp_path / "o.csv", lms_file=export_file)
    assert [r[5] for r in read_rows(tmp_path / "o.csv")[2:]] == ["1", "2", "3", ""]
    scores = _scores(("ANN.LEE", "L1", 4))  # Ann.Lee or ann.lee?
    notes = export_grades(scores, "canvas", tmp_path / "p.csv", lms_file=export_file)
    assert [r[5] for r in read_rows(tmp_path / "p.csv")[2:]] == ["", "", "", ""]
    assert [n.student for n in notes if n.kind == rv.AMBIGUOUS] == ["ANN.LEE"]


def test_a_student_the_classroom_named_from_an_lti_login_finds_their_row(tmp_path):
    export_file = _people(
        tmp_path,
        ['"M, Zoë",7,,Zoë.Müller@uni.example,X,', '"N",8,,zoe,X,', '"L",9,,ann.lee,X,'],
    )
    # classroom/lti.py's nbgrader ids: Zoë's made up from her login, Ann's her login itself
    scores = _scores(("zoe.muller@uni.example--gh6lyj5c6ovwx4oh", "L1", 6), ("ann.lee", "L1", 5))
    export_grades(scores, "canvas", tmp_path / "o.csv", lms_file=export_file)
    assert [r[5] for r in read_rows(tmp_path / "o.csv")[2:]] == ["6", "", "5"]


def test_an_exact_match_wins_over_one_ignoring_case(tmp_path):
    export_file = _people(tmp_path, ['"D",4,,ann.lee,X,'])
    scores = _scores(("ann.lee", "L1", 1), ("Ann.Lee", "L1", 4))
    notes = export_grades(scores, "canvas", tmp_path / "o.csv", lms_file=export_file)
    assert read_rows(tmp_path / "o.csv")[2][5] == "1"
    assert [n.student for n in notes if n.kind == rv.AMBIGUOUS] == ["Ann.Lee"]


def test_match_restricts_the_ids_used(tmp_path):
    export_file = _people(tmp_path, ['"A",1,S1,ann,X,'])
    notes = export_grades(_scores(("S1", "L1", 5)), "canvas", tmp_path / "o.csv",
                          lms_file=export_file, match="login")  # fmt: skip
    assert [n.kind for n in notes if n.student == "S1"] == [rv.NOT_IN_LMS]
    export_grades(_scores(("S1", "L1", 5)), "canvas", tmp_path / "p.csv", lms_file=export_file)
    assert read_rows(tmp_path / "p.csv")[2][5] == "5"
    with pytest.raises(GradingError, match="--match email: email is not one of login, sis, id"):
        export_grades(_scores(("S1", "L1", 5)), "canvas", tmp_path / "q.csv",
                      lms_file=export_file, match="email")  # fmt: skip


def test_the_command_prints_one_line_on_a_bad_file(workspace, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("Name,Email\nAnn,a@x\n")
    command = [sys.executable, "-m", "course_grading", "export", str(workspace), "--format"]
    command += ["canvas", "--gradebook", str(bad), "--out", str(tmp_path / "o.csv")]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=wc.nbgrader_env())
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("python -m course_grading: Canvas gradebook ")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_real_grading_run_exports_with_its_manual_grades(tmp_path):
    """The fixture lesson graded by the grader itself (about 10 s), a written answer then graded
    in its gradebook as formgrader would: the export reads both."""
    root, work = fixture_course(tmp_path)
    answered = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    for who in ("sobrien", "zmuller@uni.example"):
        write(tmp_path / "class" / f"{who}_{FIXTURE}.ipynb", answered)
    out = tmp_path / "grading"
    command = [sys.executable, "-m", "course_grading", str(tmp_path / "class"), "--out", str(out)]
    command += ["--root", str(root), "--jobs", "2"] + (
        ["--no-sandbox"] if sandbox_problem() else []
    )
    proc = subprocess.run(command, capture_output=True, text=True, env=wc.nbgrader_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gb:
        written = next(
            g for g in gb.find_submission_notebook(FIXTURE, FIXTURE, "sobrien").grades
            if g.needs_manual_grade
        )  # fmt: skip
        written.manual_score = written.max_score
        gb.db.commit()
    people = by_id(read_rows(export(out, tmp_path)))
    assert read_rows(tmp_path / "canvas.csv")[0][-1] == FIXTURE
    assert people["101"][-1] == "5" and people["102"][-1] == "3"  # 3 + 2 written; 3, pending
