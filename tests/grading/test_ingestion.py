"""Ingestion that drops nobody and follows no link (issue 19, items 5 and 6).

Fast tests build tiny submission folders in ``tmp_path`` and call the grader's ingestion
functions directly (``submissions.collect``, ``notebook_file``, ``inspection.inspect`` and
``repaired_copy``, ``run._timestamp``, the course's errors); one ``python -m course_grading
--jobs 2`` run on the fixture lesson then grades every case together (``test_the_class_*``).
Every guard is shown with the case that passes it and the case that fails it.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from hashlib import sha256
from pathlib import Path

import nbformat
import pytest
from class_builders import FIXTURE, FIXTURE_ROOT, filled, find, set_source, write

from course_grading import cli, notebook_file
from course_grading.errors import GradingError
from course_grading.judge.lesson import LessonSpec
from course_grading.nbgrader import course as wc
from course_grading.notebook_file import NotRead, read_no_follow
from course_grading.report import rows_of, write_reports
from course_grading.review.inspection import inspect, repaired_copy
from course_grading.run import _timestamp
from course_grading.submissions import Submission, collect, student_ids
from course_grading.workspace import MARKER, prepare_workspace

REPO = Path(__file__).resolve().parents[2]
SOURCE = FIXTURE_ROOT / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
RELEASE = FIXTURE_ROOT / wc.RELEASE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
LESSONS = [FIXTURE]
SANDBOX = shutil.which("bwrap") is not None  # as test_grading.py: these are not hostile to run


@pytest.fixture(scope="module")
def spec():
    return LessonSpec.from_notebooks(FIXTURE, SOURCE, RELEASE)


def good() -> nbformat.NotebookNode:
    return filled(RELEASE, SOURCE)


def by_key(subs: list[Submission]) -> dict[tuple[str, str], Submission]:
    return {(s.student, s.lesson): s for s in subs}


def reasons(sub: Submission) -> str:
    return "; ".join(sub.problems + sub.info)


# --- links are never followed ------------------------------------------------------------------


def shown(target: str) -> str:
    """A link's target as a reason shows it: whole up to 80 characters, else its first 79 and
    an ellipsis (a reason is one bounded line, wherever the checkout lies)."""
    return target if len(target) <= 80 else target[:79] + "…"


def test_a_long_link_target_is_cut_in_its_reason(tmp_path):
    target = "/" + "x" * 200 + "/solution.ipynb"
    (tmp_path / f"ann_{FIXTURE}.ipynb").symlink_to(target)
    (tmp_path / f"bob_{FIXTURE}.ipynb").symlink_to("/etc/passwd")  # short: shown whole
    subs, _ = collect(tmp_path, LESSONS)
    got = {s.student: reasons(s) for s in subs}
    assert f"symbolic link (to /{'x' * 78}…)" in got["ann"] and target not in got["ann"]
    assert "symbolic link (to /etc/passwd)" in got["bob"]


def test_a_link_in_a_submissions_place_is_not_graded(tmp_path):
    subs_dir = tmp_path / "subs"
    write(subs_dir / "ann" / FIXTURE / f"{FIXTURE}.ipynb", good())  # the case that passes
    (subs_dir / "linker" / FIXTURE).mkdir(parents=True)
    (subs_dir / "linker" / FIXTURE / f"{FIXTURE}.ipynb").symlink_to(SOURCE)
    (subs_dir / f"flat_{FIXTURE}.ipynb").symlink_to(SOURCE)
    (subs_dir / "folder").symlink_to(subs_dir / "ann", target_is_directory=True)
    (subs_dir / "notes.txt").symlink_to("/etc/passwd")
    subs, skipped = collect(subs_dir, LESSONS)
    got = by_key(subs)
    assert got[("ann", FIXTURE)].gradable and not got[("ann", FIXTURE)].problems
    for student in ("linker", "flat"):
        sub = got[(student, FIXTURE)]
        assert not sub.gradable and sub.status == "not graded", reasons(sub)
        assert f"symbolic link (to {shown(str(SOURCE))})" in reasons(sub)
        assert inspect(sub, LessonSpec.from_notebooks(FIXTURE, SOURCE, RELEASE)) is None
    rows = {Path(s.path).name: s.reason for s in skipped}
    assert "symbolic link (to /etc/passwd)" in rows["notes.txt"]
    assert "links are never followed" in rows["folder"]
    assert ("folder", FIXTURE) not in got  # the linked folder was not listed through


def test_reading_refuses_a_link_made_after_listing(tmp_path, spec):
    """``collect`` saw a file; a link put in its place before it is read is still refused."""
    path = tmp_path / f"ann_{FIXTURE}.ipynb"
    write(path, good())
    ((sub,), _) = collect(tmp_path, LESSONS)
    assert read_no_follow(path, 2**20)  # the case that passes
    path.unlink()
    path.symlink_to(SOURCE)
    with pytest.raises(NotRead, match="symbolic link"):
        read_no_follow(path, 2**20)
    assert inspect(sub, spec) is None and "symbolic link" in reasons(sub)


def test_a_fifo_is_refused_without_blocking(tmp_path, spec):
    fifo = tmp_path / f"pipe_{FIXTURE}.ipynb"
    os.mkfifo(fifo)
    ((sub,), _) = collect(tmp_path, LESSONS)
    assert not sub.gradable and "not a regular file" in reasons(sub)
    with pytest.raises(NotRead, match="not a regular file"):
        read_no_follow(fifo, 2**20)  # opened non-blocking: no writer needed


def test_a_linked_timestamp_is_never_read(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    folder = tmp_path / "subs" / "ann" / FIXTURE
    write(folder / f"{FIXTURE}.ipynb", good())
    sub = Submission("ann", FIXTURE, folder / f"{FIXTURE}.ipynb")
    assert _timestamp(sub) == ""  # no timestamp: nothing to say
    (folder / "timestamp.txt").write_text("2026-12-01 10:00:00.000000 UTC\n")
    assert _timestamp(sub) == "2026-12-01 10:00:00.000000 UTC" and not sub.problems
    (folder / "timestamp.txt").unlink()
    (folder / "timestamp.txt").symlink_to(secret)
    assert _timestamp(sub) == ""
    assert "timestamp.txt is a symbolic link" in reasons(sub) and "secret" not in reasons(sub)
    (folder / "timestamp.txt").unlink()
    (folder / "timestamp.txt").write_text("whenever\n")
    assert _timestamp(sub) == "" and "holds no date" in sub.problems[-1]


# --- nobody is dropped -------------------------------------------------------------------------


def test_a_folder_named_submitted_is_a_student_beside_other_students(tmp_path):
    for student in ("ann", "bob", "submitted"):
        write(tmp_path / student / FIXTURE / f"{FIXTURE}.ipynb", good())
    subs, _ = collect(tmp_path, LESSONS)
    assert sorted(s.student for s in subs) == ["ann", "bob", "submitted"]


def test_a_lone_submitted_folder_holding_a_lesson_is_a_student(tmp_path):
    write(tmp_path / "submitted" / FIXTURE / f"{FIXTURE}.ipynb", good())
    subs, _ = collect(tmp_path, LESSONS)
    assert [s.student for s in subs] == ["submitted"]


def test_an_nbgrader_course_folder_is_read_through_its_submitted_folder(tmp_path):
    """The case the rule lets through: plainly nbgrader's layout."""
    for name in ("source", "release", "autograded"):
        (tmp_path / name).mkdir()
    (tmp_path / "gradebook.db").write_bytes(b"")
    for student in ("ann", "bob"):
        write(tmp_path / "submitted" / student / FIXTURE / f"{FIXTURE}.ipynb", good())
    subs, skipped = collect(tmp_path, LESSONS)
    assert sorted(s.student for s in subs) == ["ann", "bob"]
    assert {Path(s.path).name for s in skipped} == {
        "source",
        "release",
        "autograded",
        "gradebook.db",
    }
    assert all("only submitted/ is graded" in s.reason for s in skipped)


def test_every_entry_not_graded_gets_a_row_with_its_reason(tmp_path):
    write(tmp_path / f".hidden_{FIXTURE}.ipynb", good())
    write(tmp_path / "ann" / FIXTURE / f"{FIXTURE}.ipynb", good())
    write(tmp_path / "ann" / FIXTURE / "timestamp.txt", "2026-12-01 10:00:00 UTC")
    write(tmp_path / "ann" / FIXTURE / "data.csv", "1,2\n")
    write(tmp_path / "ann" / FIXTURE / ".ipynb_checkpoints" / f"{FIXTURE}-checkpoint.ipynb", "{}")
    write(tmp_path / "ann" / "99_other.ipynb", "{}")
    write(tmp_path / "notes.txt", "please grade kindly")
    subs, skipped = collect(tmp_path, LESSONS)
    rows = {str(Path(s.path).relative_to(tmp_path)): s.reason for s in skipped}
    assert rows == {
        f".hidden_{FIXTURE}.ipynb": "hidden (the name starts with '.'); not read",
        f"ann/{FIXTURE}/.ipynb_checkpoints": "Jupyter's checkpoints (the name starts with '.'); "
        "not read",
        f"ann/{FIXTURE}/data.csv": f"in the folder of {FIXTURE}; only {FIXTURE}.ipynb is graded",
        "ann/99_other.ipynb": "matches no lesson (<lesson>.ipynb or a <lesson>/ folder); "
        "not graded",
        "notes.txt": "file name matches no student/lesson pattern; not graded",
    }
    assert [(s.student, s.gradable) for s in subs] == [("ann", True)]


def test_nbgraders_own_files_beside_a_collected_notebook_are_not_rows(tmp_path):
    """``nbgrader collect`` leaves ``timestamp.txt`` and ``submission_secret.txt`` beside every
    notebook: a row for each made every class report read as a failure. A link in their place
    is still a row (nothing behind it is read), and so is any other file."""
    folder = tmp_path / "ann" / FIXTURE
    write(folder / f"{FIXTURE}.ipynb", good())
    write(folder / "timestamp.txt", "2026-12-01 10:00:00.000000 UTC")
    write(folder / "submission_secret.txt", "1d2a9c...")
    assert collect(tmp_path, LESSONS)[1] == []
    (folder / "submission_secret.txt").unlink()
    (folder / "submission_secret.txt").symlink_to(tmp_path / "elsewhere")
    write(folder / "notes.txt", "kindly")
    rows = {Path(s.path).name: s.reason for s in collect(tmp_path, LESSONS)[1]}
    assert set(rows) == {"submission_secret.txt", "notes.txt"}


def test_ids_that_read_the_same_both_keep_their_row(tmp_path):
    write(tmp_path / f"josé_{FIXTURE}.ipynb", good())
    write(tmp_path / f"jos__{FIXTURE}.ipynb", good())
    write(tmp_path / f"Jane Doe_{FIXTURE}.ipynb", good())
    subs, skipped = collect(tmp_path, LESSONS)
    ids = sorted(s.student for s in subs)
    jose = "jos_-" + sha256("josé".encode()).hexdigest()[:6]
    assert ids == sorted(["Jane_Doe", "jos_", jose]) and not skipped
    (row,) = [s for s in subs if s.student == jose]
    assert (
        row.original.name == f"josé_{FIXTURE}.ipynb" and "another id reads the same" in row.info[0]
    )
    assert student_ids({"a b"}) == {"a b": "a_b"}  # no collision: no digest
    made_up = {"jos_", "josé", f"jos_-{sha256('josé'.encode()).hexdigest()[:6]}"}
    assert len(set(student_ids(made_up).values())) == 3  # a made-up id equal to a real one


def test_a_second_submission_gets_its_own_row(tmp_path):
    write(tmp_path / "twice" / FIXTURE / f"{FIXTURE}.ipynb", good())
    write(tmp_path / f"twice_{FIXTURE}.ipynb", good())
    (sub,), (row,) = collect(tmp_path, LESSONS)
    assert sub.original == tmp_path / "twice" / FIXTURE / f"{FIXTURE}.ipynb"
    assert "second submission" in sub.problems[0]
    assert row.path == str(tmp_path / f"twice_{FIXTURE}.ipynb") and "is graded" in row.reason


def test_a_readable_notebook_wins_over_a_missing_one(tmp_path):
    write(tmp_path / "ann" / FIXTURE / "Untitled.ipynb", good())
    write(tmp_path / f"ann_{FIXTURE}.ipynb", good())
    (sub,), skipped = collect(tmp_path, LESSONS)
    assert sub.gradable and sub.original == tmp_path / f"ann_{FIXTURE}.ipynb"
    assert any("no 99_fixture.ipynb" in s.reason for s in skipped)


# --- what a notebook holds -----------------------------------------------------------------------


def _sub(tmp_path: Path, content) -> Submission:
    path = tmp_path / f"ann_{FIXTURE}.ipynb"
    write(path, content)
    return Submission("ann", FIXTURE, path)


def test_an_nbformat_3_notebook_is_upgraded(tmp_path, spec):
    v3 = nbformat.convert(good(), 3)
    sub = _sub(tmp_path, nbformat.writes(v3, version=3))
    nb = inspect(sub, spec)
    assert nb is not None and nb.nbformat == 4 and sub.gradable, reasons(sub)
    assert "nbformat 3 notebook: upgraded" in reasons(sub) and not sub.problems
    assert find(nb, "answer_tokens").source == find(good(), "answer_tokens").source
    broken = _sub(tmp_path, json.dumps({"nbformat": 3, "metadata": {}}))  # no worksheets
    assert inspect(broken, spec) is None and "not a Jupyter notebook" in reasons(broken)


def test_sizes_are_checked_before_anything_parses(tmp_path, spec, monkeypatch):
    sub = _sub(tmp_path, good())
    assert inspect(sub, spec) is not None and sub.gradable  # the case that passes
    over = _sub(tmp_path, good())
    monkeypatch.setattr(notebook_file, "MAX_NOTEBOOK_BYTES", 1000)

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed a file over the size limit")

    monkeypatch.setattr(notebook_file.json, "loads", no_parse)
    assert inspect(over, spec) is None and not over.gradable
    assert "KiB, over the 1 KiB limit: not graded" in reasons(over)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda nb: set_source(nb, "answer_ratio", "x = [" + "1, " * 40_000 + "]"), "one cell"),
        (
            lambda nb: nb.cells.extend(
                nbformat.v4.new_code_cell("# " + "x" * 60_000) for _ in range(10)
            ),
            "limit for a notebook",
        ),
        (
            lambda nb: nb.cells.extend(nbformat.v4.new_code_cell("") for _ in range(1001)),
            "cells, over the limit",
        ),
    ],
    ids=["one big cell", "many big cells", "many cells"],
)
def test_a_notebook_over_the_cell_limits_is_not_graded(tmp_path, spec, change, reason):
    nb = good()
    change(nb)
    sub = _sub(tmp_path, nb)
    assert inspect(sub, spec) is None and not sub.gradable and sub.status == "not graded"
    assert reason in reasons(sub), reasons(sub)


def test_huge_saved_output_is_reported_and_cleared(tmp_path, spec):
    nb = good()
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="x" * 6 * 2**20)]
    sub = _sub(tmp_path, nb)
    read = inspect(sub, spec)
    assert read is not None and sub.gradable
    assert "huge saved output (6.0 MiB, 6.0 MiB of it in cell 2" in reasons(sub)
    assert repaired_copy(read, spec, sub).cells[1].outputs == []


def test_every_repair_of_a_test_cell_is_reported(tmp_path, spec):
    nb = good()
    tokens = find(nb, "test_tokens")
    nb.cells[nb.cells.index(tokens)] = nbformat.v4.new_markdown_cell(
        tokens.source, metadata=tokens.metadata
    )
    find(nb, "test_ratio").metadata.nbgrader["points"] = 100
    find(nb, "answer_ratio").metadata.nbgrader["solution"] = False
    sub = _sub(tmp_path, nb)
    read = inspect(sub, spec)
    said = reasons(sub)
    assert "test cell 'test_tokens' was turned into a markdown cell" in said
    assert "test cell 'test_ratio' claims 100 points; the lesson's 1 were used" in said
    assert (
        "answer cell 'answer_ratio' had its nbgrader marks changed (solution: True -> False)"
        in said
    )
    fixed = repaired_copy(read, spec, sub)
    assert find(fixed, "test_tokens").cell_type == "code"
    assert find(fixed, "test_ratio").metadata.nbgrader["points"] == 1
    assert find(fixed, "answer_ratio").metadata.nbgrader["solution"] is True
    honest = _sub(tmp_path, good())  # the case that passes: nothing to repair, nothing said
    inspect(honest, spec)
    assert not honest.problems and not honest.info


def test_a_copy_of_the_solution_notebook_is_flagged_for_review(tmp_path, spec):
    sub = _sub(tmp_path, nbformat.read(str(SOURCE), as_version=4))
    inspect(sub, spec)
    said = reasons(sub)
    assert "for review: holds what only the instructor version has" in said
    assert "### BEGIN SOLUTION" in said and "### BEGIN HIDDEN TESTS" in said
    assert "written answer 'written_reflect' is the lesson's model answer" in said
    honest = _sub(tmp_path, good())
    inspect(honest, spec)
    assert "instructor version" not in reasons(honest)


# --- errors a person can act on ------------------------------------------------------------------


def _course(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(FIXTURE_ROOT / wc.SOURCE_DIR / FIXTURE, root / wc.SOURCE_DIR / FIXTURE)
    shutil.copy(REPO / wc.CONFIG_FILE, root / wc.CONFIG_FILE)
    return root


def test_a_bad_lesson_folder_is_one_line_and_exit_2(tmp_path, capsys):
    root = _course(tmp_path)
    write(tmp_path / "subs" / f"ann_{FIXTURE}.ipynb", good())
    args = [str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--root", str(root)]
    shutil.copy(SOURCE, root / wc.SOURCE_DIR / FIXTURE / "copy.ipynb")
    assert cli.main([*args, "--no-sandbox"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("python -m course_grading: ")  # one line, no traceback
    assert "a lesson folder must hold exactly one notebook" in err[-1] and "Traceback" not in err
    with pytest.raises(GradingError, match="rename or move the others"):
        wc.find_lessons(root)
    (root / wc.SOURCE_DIR / FIXTURE / "copy.ipynb").unlink()
    assert wc.find_lessons(root) == [FIXTURE]  # the case that passes


def test_a_failing_release_is_a_grading_error(tmp_path):
    root = _course(tmp_path)
    nb = nbformat.read(str(SOURCE), as_version=4)
    find(nb, "test_ratio").metadata.nbgrader["grade_id"] = "test_tokens"  # a repeated grade id
    nbformat.write(nb, str(root / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"))
    work = wc.make_work_course(root, tmp_path / "work")
    with pytest.raises(
        GradingError, match=r"failed .*Duplicate grade id: test_tokens.*\.log"
    ) as err:
        wc.generate_assignments(work)
    assert "\n" not in str(err.value)
    with pytest.raises(GradingError, match="is not empty"):
        wc.make_work_course(root, tmp_path / "work")


def test_a_workspace_that_cannot_be_made_is_a_grading_error(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(GradingError, match="cannot prepare the workspace .* --out"):
        prepare_workspace(tmp_path / "file" / "out", force=False)
    prepare_workspace(tmp_path / "out", force=False)  # the case that passes
    assert (tmp_path / "out" / MARKER).is_file()


# --- the report ------------------------------------------------------------------------------


def test_names_a_student_controls_are_written_as_text(tmp_path):
    subs_dir = tmp_path / "subs"
    write(subs_dir / f"@sum_{FIXTURE}.ipynb", good())
    write(subs_dir / "<img src=x onerror=alert(1)>\n\x1b[31m.txt", "x")
    subs, skipped = collect(subs_dir, LESSONS)
    rows = rows_of(subs, {}, skipped)
    out = tmp_path / "out"
    out.mkdir()
    write_reports(out, rows)
    md = (out / "report.md").read_text()
    # every < is escaped (CommonMark: a backslash before any ASCII punctuation makes it text)
    assert re.search(r"(?<!\\)<", md) is None and "\x1b" not in md and "\\<img" in md
    with open(out / "report.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert table[0]["student"] == "'@sum"
    assert all("\n" not in cell and "\x1b" not in cell for r in table for cell in r.values())
    assert all("\x1b" not in reason for r in rows for reason in r.reasons)  # the terminal too


# --- one run: every case together ----------------------------------------------------------------

LT_BOMB = "from IPython.display import HTML, display\ndisplay(HTML('<' * 400_000))"
DISPLAYS = "from IPython.display import display, Markdown\ndisplay(Markdown('**8** times'))"
OK = {"status": "ok", "auto": 3}


def _remarked(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with a test cell turned to markdown and another claiming 100 points."""
    tokens = find(nb, "test_tokens")
    markdown = nbformat.v4.new_markdown_cell(tokens.source, metadata=tokens.metadata)
    nb.cells[nb.cells.index(tokens)] = markdown
    find(nb, "test_ratio").metadata.nbgrader["points"] = 100
    return nb


def class_cases(root: Path) -> dict[str, tuple[object, dict]]:
    """Flat submissions, ``<student>_<lesson>.ipynb``: student -> (content, expectation)."""
    nb, answer = good(), find(good(), "answer_ratio").source

    def with_answer(code: str) -> nbformat.NotebookNode:
        return set_source(good(), "answer_ratio", f"{code}\n{answer}")

    jose = "jos_-" + sha256("josé".encode()).hexdigest()[:6]
    return {
        "honest": (nb, OK),
        "josé": (nb, {**OK, "id": jose}),
        "jos_": (nb, OK),
        "@sum": (nb, OK),
        "oldformat": (
            nbformat.writes(nbformat.convert(good(), 3), version=3),
            {**OK, "reason": "upgraded to nbformat 4"},
        ),
        "displayer": (with_answer(DISPLAYS), OK),  # item 7: an honest import costs nothing
        "ltbomb": (with_answer(LT_BOMB), OK),
        "big": (
            with_answer(f"big = [{', '.join(map(str, range(430_000)))}]"),
            {"status": "not graded", "auto": 0, "reason": "limit for one cell"},
        ),
        "copier": (
            nbformat.read(str(root / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"), as_version=4),
            {"status": "flagged", "auto": 3, "reason": "instructor version has.*feedback withheld"},
        ),
        "remarked": (
            _remarked(good()),
            {"status": "flagged", "auto": 3, "max": 5, "reason": "markdown cell.*claims 100"},
        ),
    }


def build_class(subs: Path, root: Path, outside: Path) -> dict[str, dict]:
    """Every ingestion case in one class folder; student -> expected status, points, reason."""
    expect = {}
    for student, (content, exp) in class_cases(root).items():
        write(subs / f"{student}_{FIXTURE}.ipynb", content)
        expect[student] = exp
    write(subs / "submitted" / FIXTURE / f"{FIXTURE}.ipynb", good())  # beside other students
    expect["submitted"] = OK
    (subs / "linker" / FIXTURE).mkdir(parents=True)
    (subs / "linker" / FIXTURE / f"{FIXTURE}.ipynb").symlink_to(
        root / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
    )
    expect["linker"] = {"status": "not graded", "auto": 0, "reason": "symbolic link"}
    write(subs / "stamper" / FIXTURE / f"{FIXTURE}.ipynb", good())
    (subs / "stamper" / FIXTURE / "timestamp.txt").symlink_to(outside)
    write(subs / "stamper" / FIXTURE / "data.csv", "1,2\n")
    expect["stamper"] = {"status": "flagged", "auto": 3, "reason": "timestamp.txt is a symbolic"}
    os.mkfifo(subs / f"fifo_{FIXTURE}.ipynb")
    expect["fifo"] = {"status": "not graded", "auto": 0, "reason": "not a regular file"}
    write(subs / f".hidden_{FIXTURE}.ipynb", good())
    write(subs / "<img src=x onerror=alert(1)>.txt", "x")
    return expect


def _tree(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` without following a link: its SHA-256, or its link text."""
    found = {}
    for here, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(here) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                found[rel] = "-> " + os.readlink(path)
            elif path.is_file() and not path.is_fifo():
                found[rel] = sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ingestion")
    root = _course(tmp)
    outside = tmp / "shadow"
    outside.write_text("root:$6$not-for-students:19000:0:99999:7:::\n")
    subs = tmp / "subs"
    expect = build_class(subs, root, outside)
    before = _tree(subs)
    out = tmp / "out"
    start = time.perf_counter()
    command = [sys.executable, "-m", "course_grading", str(subs), "--out", str(out)]
    command += ["--root", str(root), "--jobs", "2", "--timeout", "20"]
    command += [] if SANDBOX else ["--no-sandbox"]
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=1200, env=wc.nbgrader_env(), check=False
    )
    print(f"ingestion class: {time.perf_counter() - start:.0f} s; {proc.stdout.splitlines()[-1:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "report.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return {"rows": rows, "expect": expect, "out": out, "subs": subs, "before": before}


def test_the_class_every_case_gets_its_outcome(graded):
    rows = {  # report.csv guards "@sum" against spreadsheet formulas: "'@sum"
        r["student"].removeprefix("'"): r for r in graded["rows"] if r["status"] != "unrecognised"
    }
    wrong = []
    for student, exp in graded["expect"].items():
        row = rows.get(exp.get("id", student))
        if row is None:
            wrong.append(f"{student}: no row")
            continue
        got = (row["status"], float(row["auto_score"]))
        if got != (exp["status"], float(exp["auto"])):
            wrong.append(
                f"{student}: got {got}, expected {exp['status'], exp['auto']}: {row['reasons']}"
            )
        if "reason" in exp and not re.search(exp["reason"], row["reasons"]):
            wrong.append(f"{student}: {row['reasons']!r} does not match {exp['reason']!r}")
        if "max" in exp and float(row["max_score"]) != exp["max"]:
            wrong.append(f"{student}: max {row['max_score']}, expected {exp['max']}")
    assert not wrong, "\n".join(wrong)
    assert len(rows) == len(graded["expect"])  # "submitted" did not swallow the class


def test_the_class_drops_nobody_and_changes_nothing(graded):
    assert _tree(graded["subs"]) == graded["before"]
    files = {r["file"] for r in graded["rows"]}
    for here, _, names in os.walk(graded["subs"]):
        for name in names:  # files, links and the FIFO (os.walk lists no link as a folder)
            if name != "timestamp.txt":  # read with its notebook
                assert os.path.join(here, name) in files, name
    skipped = {Path(r["file"]).name: r["reasons"] for r in graded["rows"] if r["student"] == "?"}
    assert set(skipped) == {
        f".hidden_{FIXTURE}.ipynb",
        "<img src=x onerror=alert(1)>.txt",
        "data.csv",
    }
    assert "hidden" in skipped[f".hidden_{FIXTURE}.ipynb"]
    assert f"only {FIXTURE}.ipynb is graded" in skipped["data.csv"]


def test_the_class_never_shows_what_a_link_points_at(graded):
    out, secret = graded["out"], "not-for-students"  # what the linked timestamp.txt holds
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".md", ".csv", ".html", ".txt", ".log", ".ipynb"):
            assert secret not in path.read_text(errors="replace"), path
    assert not (out / "course" / "submitted" / "stamper" / FIXTURE / "timestamp.txt").exists()
    assert not (out / "course" / "submitted" / "linker").exists()
    assert not (out / "feedback" / "linker").exists()
    report = (out / "report.md").read_text()
    assert re.search(r"(?<!\\)<", report) is None and "\\<img" in report  # every < escaped


def test_the_class_withholds_the_model_answer_from_a_copy_of_the_solution(graded):
    out = graded["out"]
    assert not (out / "feedback" / "copier").exists()
    assert (out / "feedback" / "honest" / f"{FIXTURE}.html").is_file()
    assert (out / "feedback" / "ltbomb" / f"{FIXTURE}.html").is_file()
