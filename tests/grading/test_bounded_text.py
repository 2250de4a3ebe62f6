"""Every text a student controls is bounded before it reaches a report, a CSV file or the
command's output, and ``export`` and ``--student`` read a class's own files whatever they hold
(issue 42, item 5).

One class of the fixture lesson, its course released as an edition (``metadata.shapes.edition``
set in the instructor version): ``ann`` answers honestly; ``bob`` hands in a notebook whose
``metadata.shapes.edition`` is 20 MB (it went whole into ``report.csv`` and ``report.md``, and
then ``export --format moodle`` and ``--student`` stopped on ``_csv.Error: field larger than
field limit (131072)``); ``cat`` raises an exception whose message is 5 MB; ``dan`` prints 20
MB; ``eve`` gives an added cell a 1 MB nbgrader grade id; ``zed``'s notebook is a symbolic link
whose target is 4,000 characters long (the row quotes where a link points). The reports must
hold no field over its limit, each cut saying so; a Canvas export whose *Student* cell is 1 MB
(a name a student chose) and the Moodle export both work, with review notes bounded; ``--student
ann`` regrades, every other row unchanged. A workspace written before fields were bounded (a 20
MB reasons cell put back by hand) is still exported and regraded. Each check is also shown
failing.
"""

from __future__ import annotations

import copy
import csv
import io
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from class_builders import FIXTURE, filled, fixture_course, sandbox_problem, write

from course_grading.lms.export import export_main
from course_grading.nbgrader import course as wc
from course_grading.report_text import CELL_LIMIT, LIMITS, bounded

NO_SANDBOX = ["--no-sandbox"] if sandbox_problem() else []
BIG = 20_000_000
EDITION = "fixture edition A"
STUDENTS = ("ann", "bob", "cat", "dan", "eve", "zed")


def grade(subs: Path, out: Path, root: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "course_grading", str(subs), "--out", str(out)]
    command += ["--root", str(root), "--jobs", "2", "--max-output", "1", *NO_SANDBOX, *extra]
    return subprocess.run(command, capture_output=True, text=True, env=wc.nbgrader_env())


def rows_of(path: Path) -> list[dict[str, str]]:
    csv.field_size_limit(2**31 - 1)  # (to see what a field holds, whatever its size)
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def oversized(out: Path) -> list[str]:
    """Every report field over its limit and every ``report.md`` line over the limits of its
    cells together; ``[]`` when all are bounded."""
    found = []
    for row in rows_of(out / "report.csv"):
        for name, text in row.items():
            limit = LIMITS.get(name, CELL_LIMIT) + 1  # (+ the formula guard's quote)
            if len(text) > limit:
                found.append(f"report.csv {name} of {row['student']!r}: {len(text):,}")
    line_limit = 2 * (2 * CELL_LIMIT + sum(LIMITS.values()))  # markdown escapes, at most 2x
    for number, line in enumerate((out / "report.md").read_text("utf-8").splitlines(), 1):
        if len(line) > line_limit:
            found.append(f"report.md line {number}: {len(line):,}")
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bounded")
    tmp.chmod(0o755)
    root, _ = fixture_course(tmp)
    source = root / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
    nb = nbformat.read(str(source), as_version=4)
    nb.metadata["shapes"] = {"edition": EDITION}  # the class's edition, as a release records it
    nbformat.write(nb, str(source))
    work = wc.make_work_course(root, tmp / "edition-release")
    wc.generate_assignments(work)
    honest = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    subs = tmp / "class"
    for student in STUDENTS[:-1]:
        nb = copy.deepcopy(honest)
        if student == "bob":
            nb.metadata["shapes"] = {"edition": "E" * BIG}
        elif student == "cat":
            nb.cells.append(nbformat.v4.new_code_cell("raise ValueError('x' * 5_000_000)"))
        elif student == "dan":
            nb.cells.append(nbformat.v4.new_code_cell(f"print('y' * {BIG})"))
        elif student == "eve":
            cell = nbformat.v4.new_code_cell("z = 1")
            cell.metadata["nbgrader"] = {"grade_id": "g" * 1_000_000, "solution": True}
            nb.cells.insert(3, cell)
        write(subs / student / FIXTURE / f"{FIXTURE}.ipynb", nb)
    link = subs / "zed" / FIXTURE / f"{FIXTURE}.ipynb"
    link.parent.mkdir(parents=True)
    link.symlink_to("/nonexistent/" + "x/" * 2000)
    out = tmp / "out"
    proc = grade(subs, out, root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"tmp": tmp, "root": root, "subs": subs, "out": out, "proc": proc}


def canvas_export(tmp: Path, students: list[str]) -> Path:
    """A Canvas gradebook export of the class: ``bob``'s and ``ghost``'s *Student* cells 1 MB
    names."""
    lines = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"{FIXTURE} (4101)"],
             ["    Points Possible", "", "", "", "", "5.00"]]  # fmt: skip
    for number, student in enumerate(students, start=101):
        name = f"{student.title()} " * 170_000 if student in ("bob", "ghost") else student
        lines.append([name, str(number), f"S-{number}", student, "Section A", ""])
    buffer = io.StringIO(newline="")
    csv.writer(buffer, lineterminator="\r\n").writerows(lines)
    path = tmp / "canvas_export.csv"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


def test_every_report_field_is_bounded_and_its_cut_said(graded):
    out = graded["out"]
    assert oversized(out) == []
    rows = {r["student"]: r for r in rows_of(out / "report.csv")}
    assert set(STUDENTS) <= set(rows), sorted(rows)
    edition = f"handed in on the {'E' * 40}"  # the label cut, and its length said
    assert edition in rows["bob"]["reasons"], rows["bob"]["reasons"][:300]
    assert f"(cut: {BIG:,} characters), graded on this class's {EDITION}" in rows["bob"]["reasons"]
    assert "the lesson does not know (grade id 'gggg" in rows["eve"]["reasons"]  # 1 MB before
    assert rows["eve"]["reasons"].endswith("g… (cut: 1,000,099 characters)"), rows["eve"]
    assert "symbolic link (to /nonexistent/x/x/" in rows["zed"]["reasons"], rows["zed"]
    assert float(rows["ann"]["auto_score"]) == float(rows["ann"]["auto_max"]) > 0
    # ...and the command's own summary on the terminal is bounded too
    assert max(map(len, graded["proc"].stdout.splitlines())) < CELL_LIMIT + 1000


def test_the_oversize_check_can_fail(graded, tmp_path):
    changed = tmp_path / "changed"
    changed.mkdir()
    for name in ("report.csv", "report.md"):
        text = (graded["out"] / name).read_text("utf-8")
        (changed / name).write_text(text.replace("handed in on the", "E" * 200_000), "utf-8")
    assert [p.split()[0] for p in oversized(changed)] == ["report.csv", "report.md"]


def test_bounded_cuts_at_its_limit_and_never_twice():
    cut = bounded("E" * BIG, 80)
    assert len(cut) == 80 and cut.endswith(f"… (cut: {BIG:,} characters)")
    assert bounded(cut, 80) == cut and bounded("short", 80) == "short"


def test_moodle_and_canvas_exports_read_the_class(graded, tmp_path, capsys):
    out = graded["out"]
    moodle = tmp_path / "moodle.csv"
    assert export_main([str(out), "--format", "moodle", "--out", str(moodle)]) == 0
    written = {r[0] for r in csv.reader(io.StringIO(moodle.read_text("utf-8-sig")))}
    assert set(STUDENTS) <= written, written
    students = sorted(STUDENTS)
    canvas = tmp_path / "canvas.csv"
    gradebook = canvas_export(tmp_path, [*students, "ghost"])  # ghost: a row nobody graded
    argv = [str(out), "--format", "canvas", "--gradebook", str(gradebook), "--out", str(canvas)]
    assert export_main(argv) == 0
    shown = capsys.readouterr().out
    longest = max(map(len, shown.splitlines()))
    assert "(Ghost Ghost Ghost" in shown and longest < 2 * LIMITS["reason"], longest
    review = rows_of(canvas.with_name("canvas.review.csv"))
    assert review and all(len(v) <= LIMITS["reason"] + 1 for r in review for v in r.values())


def test_student_regrades_one_student_and_leaves_the_others_as_they_were(graded):
    out = graded["out"]
    before = {r["student"]: r for r in rows_of(out / "report.csv")}
    proc = grade(graded["subs"], out, graded["root"], "--student", "ann")
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = {r["student"]: r for r in rows_of(out / "report.csv")}
    assert after == before


def test_a_workspace_written_before_fields_were_bounded_is_still_read(graded, tmp_path):
    """A 20 MB reasons cell, as the grader wrote before this version: export and ``--student``
    read it (``csv``'s limit of 131,072 characters a field stopped both)."""
    old = tmp_path / "old"
    subprocess.run(["cp", "-a", str(graded["out"]), str(old)], check=True)
    rows = rows_of(old / "report.csv")
    bob = next(r for r in rows if r["student"] == "bob")
    bob["reasons"] = "handed in on the " + "E" * BIG
    with open(old / "report.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    csv.field_size_limit(131_072)  # Python's default, which stopped both
    with open(old / "report.csv", newline="", encoding="utf-8") as fh:
        with pytest.raises(csv.Error, match="field larger than field limit"):
            list(csv.DictReader(fh))
    moodle = tmp_path / "moodle.csv"
    assert export_main([str(old), "--format", "moodle", "--out", str(moodle)]) == 0
    proc = grade(graded["subs"], old, graded["root"], "--student", "ann")
    assert proc.returncode == 0, proc.stderr[-3000:]
