"""Grading a class of broken submissions with a real grading run (``course_grading``).

One class of simulated students goes through one ``python -m course_grading`` run. Most
submissions are built from the fast fixture lesson ``tests/grading/fixtures/solutions/99_fixture``
(no torch: about a second of kernel time each); the real lessons in ``solutions/`` add two (a
correct submission of the first lesson and a deleted test cell in the last; each costs a full run
of that lesson's notebook). Each case asserts its status, its score and the reason in the
report, and the submitted files must be byte-identical afterwards.
"""

from __future__ import annotations

import copy
import csv
import html
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from class_builders import FIXTURE, FIXTURE_ROOT, digest, drop, filled, find, set_source, write

from course_grading.autograde import Options
from course_grading.errors import GradingError
from course_grading.judge.lesson import LessonSpec
from course_grading.nbgrader import course as wc
from course_grading.pages.feedback import HideHiddenTests
from course_grading.run import grade
from course_grading.submissions import collect
from course_grading.workspace import MARKER, prepare_workspace

REPO = Path(__file__).resolve().parents[2]
STUDENT_TIMEOUT = 10  # seconds per cell of student code: the infinite loop costs this much
LESSON_TIMEOUT = 600  # seconds per cell of the lessons' own code (slow on a busy machine)
# These submissions are broken, not hostile: without bubblewrap they are graded unsandboxed
# (tests/grading/test_hostile_class.py is the one that needs the sandbox, and skips without it).
SANDBOX = shutil.which("bwrap") is not None


# --- the class ------------------------------------------------------------------------------


def fixture_cases(release: Path, source: Path) -> dict[str, tuple[object, dict]]:
    """Fixture-lesson submissions: name -> (notebook or raw file content, expectation).

    Expectations: ``status``, ``auto`` (autograded points of 3), and ``reason`` (a regular
    expression the report's reasons must match) where something is wrong.
    """
    good = filled(release, source)
    blank = nbformat.read(str(release), as_version=4)
    cases: dict[str, tuple[object, dict]] = {}
    for i in range(8):
        cases[f"correct{i:02d}"] = (copy.deepcopy(good), {"status": "ok", "auto": 3})
    cases["instructor_file"] = (  # a copy of the solution notebook: graded, for review
        nbformat.read(str(source), as_version=4),
        {"status": "flagged", "auto": 3, "reason": "only the instructor version has.*withheld"},
    )
    cases["blank1"] = (copy.deepcopy(blank), {"status": "flagged", "auto": 0, "reason": "blank"})
    cases["blank2"] = (copy.deepcopy(blank), {"status": "flagged", "auto": 0, "reason": "blank"})
    part = set_source(copy.deepcopy(blank), "answer_tokens", find(good, "answer_tokens").source)
    cases["partial"] = (part, {"status": "ok", "auto": 2, "reason": "not attempted"})
    wrong = set_source(
        copy.deepcopy(good),
        "answer_tokens",
        "def tokens_per_batch(batch_size, seq_len):\n    return batch_size + seq_len",
    )
    wrong = set_source(wrong, "answer_ratio", "attention_ratio = 4")
    cases["wrong"] = (wrong, {"status": "ok", "auto": 0})
    bad_import = copy.deepcopy(good)
    bad_import.cells.insert(1, nbformat.v4.new_code_cell("import torhc  # a typo"))
    cases["import_error"] = (
        bad_import,
        {
            "status": "flagged",
            "auto": 3,
            "reason": r"added or changed by the student\) raised "
            r"ModuleNotFoundError",
        },
    )
    cases["import_in_answer"] = (
        set_source(
            copy.deepcopy(good), "answer_ratio", "import no_such_module\nattention_ratio = 8.0"
        ),
        {"status": "flagged", "auto": 2, "reason": r"'answer_ratio'\) raised ModuleNotFound"},
    )
    cases["infinite_loop"] = (
        set_source(copy.deepcopy(good), "answer_ratio", "while True:\n    pass"),
        {"status": "flagged", "auto": 2, "reason": r"still running after \d+ s"},
    )
    return cases | damaged_cases(good, blank)


def damaged_cases(good, blank) -> dict[str, tuple[object, dict]]:
    """Submissions whose notebook was damaged: edited, deleted or copied cells, huge output,
    a crash, and files that are not notebooks."""
    cases: dict[str, tuple[object, dict]] = {}
    edited = set_source(copy.deepcopy(blank), "test_tokens", "assert True  # nothing to see here")
    cases["edited_test"] = (
        edited,
        {"status": "flagged", "auto": 0, "reason": "'test_tokens' was edited; nbgrader restored"},
    )
    edited_ok = set_source(copy.deepcopy(good), "test_ratio", "pass")
    cases["edited_test_ok"] = (edited_ok, {"status": "flagged", "auto": 3, "reason": "edited"})
    cases["deleted_test"] = (
        drop(copy.deepcopy(good), "test_ratio"),
        {
            "status": "flagged",
            "auto": 2,
            "reason": "test cell 'test_ratio' was deleted; it is scored 0",
        },
    )
    cases["deleted_written"] = (
        drop(copy.deepcopy(good), "written_reflect"),
        {"status": "flagged", "auto": 3, "reason": "written answer 'written_reflect' was deleted"},
    )
    dup = copy.deepcopy(good)
    for n, gid in enumerate(("answer_tokens", "test_tokens")):
        pasted = copy.deepcopy(find(dup, gid))
        pasted.id = f"pasted-{n}"  # JupyterLab gives a pasted cell a new id, not a new grade id
        dup.cells.append(pasted)
    cases["copied_cells"] = (
        dup,
        {"status": "flagged", "auto": 3, "reason": "grade id 'answer_tokens' appears 2 times"},
    )
    huge = copy.deepcopy(good)
    huge.cells[1].outputs = [
        nbformat.v4.new_output("stream", text="x" * 99 + "\n") for _ in range(80_000)
    ]
    cases["huge_saved_output"] = (
        huge,
        {"status": "flagged", "auto": 3, "reason": "huge saved output"},
    )
    loud = set_source(
        copy.deepcopy(good),
        "answer_ratio",
        "for i in range(5000):\n    print(i)\nattention_ratio = 8.0",
    )
    cases["loud_output"] = (loud, {"status": "flagged", "auto": 3, "reason": "truncated"})
    crash = set_source(copy.deepcopy(good), "answer_ratio", "import os\nos._exit(1)")
    cases["kernel_crash"] = (
        crash,
        {
            "status": "not graded",
            "auto": 0,
            "reason": r"exits the kernel \(os\._exit\).*could not grade it: the kernel died",
        },
    )
    text = nbformat.writes(good)
    cases["truncated_json"] = (
        text[: len(text) // 2],
        {"status": "not graded", "auto": 0, "reason": "not valid JSON"},
    )
    cases["python_script"] = (
        "def tokens_per_batch(b, s):\n    return b * s\n",
        {"status": "not graded", "auto": 0, "reason": "not valid JSON"},
    )
    cases["json_not_notebook"] = (
        json.dumps({"answer": 8}),
        {"status": "not graded", "auto": 0, "reason": "not a Jupyter notebook"},
    )
    cases["empty_file"] = ("", {"status": "not graded", "auto": 0, "reason": "empty"})
    return cases


def build_class(root: Path, subs_dir: Path, work: wc.WorkCourse) -> dict[tuple, dict]:
    """Write the class into ``subs_dir`` (both layouts); return (student, lesson) -> expectation."""
    expect: dict[tuple, dict] = {}
    cases = fixture_cases(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    for i, (student, (content, exp)) in enumerate(sorted(cases.items())):
        if i % 2:
            path = subs_dir / f"{student}_{FIXTURE}.ipynb"  # LMS download
        else:
            path = subs_dir / student / FIXTURE / f"{FIXTURE}.ipynb"  # nbgrader layout
        write(path, content)
        expect[(student, FIXTURE)] = exp

    # a folder with a wrongly named notebook, a student id with a space, a double submission,
    # a file that fits no pattern
    write(subs_dir / "renamed" / FIXTURE / "Untitled.ipynb", cases["correct00"][0])
    expect[("renamed", FIXTURE)] = {"status": "missing", "auto": 0, "reason": "Untitled.ipynb"}
    write(subs_dir / f"Jane Doe_{FIXTURE}.ipynb", cases["correct00"][0])
    expect[("Jane_Doe", FIXTURE)] = {"status": "ok", "auto": 3, "reason": "used as 'Jane_Doe'"}
    write(subs_dir / "twice" / FIXTURE / f"{FIXTURE}.ipynb", cases["correct00"][0])
    write(subs_dir / f"twice_{FIXTURE}.ipynb", cases["blank1"][0])
    expect[("twice", FIXTURE)] = {"status": "flagged", "auto": 3, "reason": "second submission"}
    write(subs_dir / "notes.txt", "please grade kindly\n")

    real = [lesson for lesson in work.lessons if lesson != FIXTURE]
    if real:
        first, last = real[0], real[-1]
        good = filled(work.release_notebook(first), work.source_notebook(first))
        spec = LessonSpec.from_notebooks(
            first, work.source_notebook(first), work.release_notebook(first)
        )
        write(subs_dir / "correct00" / first / f"{first}.ipynb", good)
        expect[("correct00", first)] = {"status": "ok", "auto": spec.auto_max}

        good = filled(work.release_notebook(last), work.source_notebook(last))
        spec = LessonSpec.from_notebooks(
            last, work.source_notebook(last), work.release_notebook(last)
        )
        first_test = next(iter(spec.tests))
        write(subs_dir / f"deleter_{last}.ipynb", drop(good, first_test))
        expect[("deleter", last)] = {
            "status": "flagged",
            "auto": spec.auto_max - spec.tests[first_test],
            "reason": f"test cell '{first_test}' was deleted",
        }
    return expect


# --- the run ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """Build the course (real lessons + fixture), the class, and grade it once via the CLI."""
    tmp = tmp_path_factory.mktemp("grading")
    root = tmp / "course_root"
    (root / wc.SOURCE_DIR).mkdir(parents=True)
    shutil.copy(REPO / wc.CONFIG_FILE, root / wc.CONFIG_FILE)
    for lesson in wc.find_lessons(REPO):
        shutil.copytree(REPO / wc.SOURCE_DIR / lesson, root / wc.SOURCE_DIR / lesson)
    shutil.copytree(FIXTURE_ROOT / wc.SOURCE_DIR / FIXTURE, root / wc.SOURCE_DIR / FIXTURE)

    # The student versions the class starts from (release only; no execution).
    work = wc.make_work_course(root, tmp / "release")
    wc.generate_assignments(work)
    subs_dir = tmp / "submissions"
    expect = build_class(root, subs_dir, work)
    before = digest(subs_dir)

    out = tmp / "out"
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_grading",
            str(subs_dir),
            "--out",
            str(out),
            "--root",
            str(root),
            "--timeout",
            str(STUDENT_TIMEOUT),
            "--lesson-timeout",
            str(LESSON_TIMEOUT),
            *([] if SANDBOX else ["--no-sandbox"]),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env=wc.nbgrader_env(),
        check=False,
    )
    elapsed = time.perf_counter() - start
    with open(out / "report.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return {
        "proc": proc,
        "rows": rows,
        "expect": expect,
        "out": out,
        "subs": subs_dir,
        "before": before,
        "elapsed": elapsed,
        "root": root,
    }


def test_class_is_large_enough(graded_class):
    assert len(graded_class["expect"]) >= 30
    assert graded_class["proc"].returncode == 0, graded_class["proc"].stderr[-3000:]
    print(
        f"grading run: {graded_class['elapsed']:.0f} s for {len(graded_class['expect'])} "
        "submissions"
    )


def test_a_run_without_a_secret_says_first_that_it_is_practice(graded_class):
    first = (graded_class["out"] / "report.md").read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("**practice grading: no course secret was given, so the hidden")


def test_each_submissions_function_time_is_reported_apart_from_the_report(graded_class):
    with open(graded_class["out"] / "function_times.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    tokens = [r for r in rows if r["lesson"] == FIXTURE and r["item"] == "test_tokens"]
    assert len(tokens) >= 10 and all(float(r["seconds"]) > 0 for r in tokens), rows[:5]
    assert "function calls (summed over slots)" in graded_class["proc"].stdout


def test_a_graded_function_pasted_from_the_solution_is_listed_for_review(graded_class):
    """``correct00`` hands in the instructor's own notebook of the first real lesson: each of its
    graded functions is in a cluster with the solution (one line each, never one per pair),
    beside the report, and still scores."""
    out = graded_class["out"]
    report = (out / "report.md").read_text(encoding="utf-8")
    section = report.split("## Possible copies, for review", 1)[1]
    listed = [ln for ln in section.splitlines() if "correct00" in ln]
    assert listed and all("the instructor's solution" in ln for ln in listed), listed
    page = (out / "copies.md").read_text(encoding="utf-8")
    lines = [ln for ln in page.splitlines() if ln.startswith("**") and "correct00" in ln]
    assert len(lines) == len(listed) and "In common, from" in page, lines
    row = next(r for r in graded_class["rows"] if r["student"] == "correct00")
    assert row["status"] == "ok"  # listed, never taken off


def test_real_lessons_take_part(graded_class):
    real = {lesson for (_, lesson) in graded_class["expect"] if lesson != FIXTURE}
    if not real:
        pytest.fail("no lessons in solutions/: the class has only the fixture lesson")


def test_every_case_gets_its_outcome(graded_class):
    rows = {(r["student"], r["lesson"]): r for r in graded_class["rows"]}
    wrong = []
    for key, exp in sorted(graded_class["expect"].items()):
        row = rows.get(key)
        if row is None:
            wrong.append(f"{key}: no row in the report")
            continue
        got = (row["status"], float(row["auto_score"]))
        if got != (exp["status"], float(exp["auto"])):
            wrong.append(
                f"{key}: got {got}, expected {(exp['status'], exp['auto'])}: {row['reasons']}"
            )
        if "reason" in exp and not re.search(exp["reason"], row["reasons"]):
            wrong.append(f"{key}: reasons {row['reasons']!r} do not match {exp['reason']!r}")
        if exp["status"] in ("flagged", "not graded", "missing") and not row["reasons"]:
            wrong.append(f"{key}: flagged without a reason")
    assert not wrong, "\n".join(wrong)


def test_correct_submissions_get_full_autograded_marks(graded_class):
    rows = [r for r in graded_class["rows"] if r["student"].startswith("correct")]
    assert rows
    for r in rows:
        assert float(r["auto_score"]) == float(r["auto_max"]) > 0, r
        assert r["failed_tests"] == "", r


def test_nothing_is_lost(graded_class):
    """Originals unchanged; every file has a row in the report (the wrongly named notebook and
    the second submission too); nothing written beside them."""
    assert digest(graded_class["subs"]) == graded_class["before"]
    files = {r["file"] for r in graded_class["rows"]}
    for path in graded_class["subs"].rglob("*"):
        if path.is_file():
            assert str(path) in files, path
    unknown = [r for r in graded_class["rows"] if r["status"] == "unrecognised"]
    assert sorted(Path(r["file"]).name for r in unknown) == sorted(
        ["notes.txt", "Untitled.ipynb", f"twice_{FIXTURE}.ipynb"]
    )


def test_scores_csv_and_feedback(graded_class):
    out = graded_class["out"]
    with open(out / "scores.csv", newline="", encoding="utf-8") as fh:
        scores = {r["student"]: r for r in csv.DictReader(fh)}
    assert float(scores["correct01"][FIXTURE]) == 3.0
    assert float(scores["blank1"][FIXTURE]) == 0.0
    assert float(scores["deleted_test"][FIXTURE]) == 2.0
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| infinite_loop | 99_fixture | flagged |" in report
    feedback = sorted((out / "feedback").rglob("*.html"))
    assert len(feedback) >= 20
    wrong_html = _html_text(out / "feedback" / "wrong" / f"{FIXTURE}.html")
    assert "tokens_per_batch(16, 1024)" in wrong_html  # visible test: shown
    assert "AssertionError" in wrong_html  # its failure: shown
    for page in feedback:
        text = _html_text(page)
        assert "BEGIN HIDDEN TESTS" not in text, page
        assert "tokens_per_batch(3, 5)" not in text, page  # a hidden assert
        assert "isclose(attention_ratio" not in text, page


def _html_text(path: Path) -> str:
    """The visible text of an HTML file (tags removed, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


def test_rerun_refuses_to_drop_manual_grades(graded_class, tmp_path):
    """A run over a workspace whose gradebook holds manual grades stops before deleting it."""
    out = tmp_path / "out"
    (out / "course").mkdir(parents=True)
    (out / MARKER).write_text("", encoding="utf-8")
    db = out / "course" / "gradebook.db"
    shutil.copyfile(graded_class["out"] / "course" / "gradebook.db", db)
    with sqlite3.connect(db) as con:
        con.execute("UPDATE grade SET manual_score = 1 WHERE id IN (SELECT id FROM grade LIMIT 1)")
    with pytest.raises(GradingError, match="manual grade"):
        prepare_workspace(out, force=False)
    assert db.is_file()
    prepare_workspace(out, force=True)
    assert not db.exists()


def test_workspace_must_be_ours(tmp_path):
    (tmp_path / "thesis.tex").write_text("years of work", encoding="utf-8")
    with pytest.raises(GradingError, match="not a grading workspace"):
        prepare_workspace(tmp_path, force=True)
    assert (tmp_path / "thesis.tex").is_file()


def test_rerun_gives_the_same_report(tmp_path):
    """Grading the same two submissions twice into one workspace gives identical files."""
    root = tmp_path / "root"
    shutil.copytree(FIXTURE_ROOT / wc.SOURCE_DIR, root / wc.SOURCE_DIR)
    shutil.copy(REPO / wc.CONFIG_FILE, root / wc.CONFIG_FILE)
    release = FIXTURE_ROOT / wc.RELEASE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
    source = FIXTURE_ROOT / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
    subs = tmp_path / "subs"
    write(subs / f"ann_{FIXTURE}.ipynb", filled(release, source))
    write(subs / f"bob_{FIXTURE}.ipynb", drop(filled(release, source), "test_tokens"))
    before = digest(subs)
    out = tmp_path / "out"
    reports = []
    for _ in range(2):
        grade(subs, out, root, options=Options(cell_timeout=STUDENT_TIMEOUT, sandbox=SANDBOX))
        reports.append([(out / name).read_bytes() for name in ("report.csv", "scores.csv")])
    assert reports[0] == reports[1]
    assert b"test cell 'test_tokens' was deleted" in reports[0][0]
    assert digest(subs) == before


# --- fast checks without nbgrader runs ----------------------------------------------------


def test_collect_understands_both_layouts(tmp_path):
    write(tmp_path / "ann" / "01_a" / "01_a.ipynb", "{}")
    write(tmp_path / "bob_01_a.ipynb", "{}")
    write(tmp_path / "bob_x_02_b_c.ipynb", "{}")  # student ids may contain underscores
    write(tmp_path / "cy" / "02_b_c.ipynb", "{}")
    write(tmp_path / "dee" / "01_a" / "copy.ipynb", "{}")
    write(tmp_path / "zzz.ipynb", "{}")
    subs, skipped = collect(tmp_path, ["01_a", "02_b_c"])
    got = {(s.student, s.lesson): s.original is not None for s in subs}
    assert got == {
        ("ann", "01_a"): True,
        ("bob", "01_a"): True,
        ("bob_x", "02_b_c"): True,
        ("cy", "02_b_c"): True,
        ("dee", "01_a"): False,
    }
    assert [s.path for s in skipped] == [
        str(tmp_path / p) for p in ("dee/01_a/copy.ipynb", "zzz.ipynb")
    ]


def test_hidden_tests_preprocessor_hides_region_and_traceback():
    cell = nbformat.v4.new_code_cell(
        "assert f(1) == 1\n### BEGIN HIDDEN TESTS\nassert f(2) == 99\n### END HIDDEN TESTS",
        metadata={
            "nbgrader": {
                "grade": True,
                "grade_id": "t",
                "locked": True,
                "points": 1,
                "schema_version": 3,
                "solution": False,
            }
        },
    )
    cell.outputs = [
        nbformat.v4.new_output(
            "error",
            ename="AssertionError",
            evalue="",
            traceback=["---", "assert f(2) == 99", "Error"],
        )
    ]
    out, _ = HideHiddenTests().preprocess_cell(cell, {}, 0)
    assert "f(2)" not in out.source and "f(1)" in out.source
    assert "f(2)" not in json.dumps(out.outputs)
