"""Feedback made by hand after grading (formgrader's *Generate Feedback*) is checked too.

The grading command scans the feedback it makes, but an instructor regenerates feedback after
manual grading, with ``nbgrader generate_feedback`` or formgrader's button (the same converter).
The course's ``nbgrader_config.py`` puts ``WithholdInstructorMaterial`` in that converter, so a
student whose notebook prints instructor material gets no feedback file there either. Hidden
tests no longer enter a kernel (``tests/grading/test_cheating_class.py`` proves a spy finds
none), so the spy here prints a line of the written answer's model answer, as if it had got it
somewhere. One class of the fixture lesson: a spy and an honest student, graded by the command,
then feedback generated again by hand in its course.
"""

from __future__ import annotations

import copy
import csv
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from class_builders import FIXTURE, filled, fixture_course, sandbox_problem, write

from course_grading.nbgrader import course as wc
from course_grading.pages.feedback import WITHHELD, withheld_record
from course_grading.review.leaks import instructor_lines, leaked, own_lines

# The withholding holds either way; where bwrap cannot run, grade without it.
NO_SANDBOX = ["--no-sandbox"] if sandbox_problem() else []
SPY = (  # the model answer's line, put together at run time (not a line of the spy's own)
    "print('Linear activations scale with batch × seq, attention scores with batch × heads'"
    " + ' × seq²: moving tokens from the batch into the sequence grows the quadratic term.')"
)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("withheld")
    root, work = fixture_course(tmp)
    honest = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    spy = copy.deepcopy(honest)
    spy.cells.insert(0, nbformat.v4.new_code_cell(SPY))
    subs, out = tmp / "class", tmp / "out"
    write(subs / f"honest_{FIXTURE}.ipynb", honest)
    write(subs / f"spy_{FIXTURE}.ipynb", spy)
    command = [sys.executable, "-m", "course_grading", str(subs), "--out", str(out)]
    command += ["--root", str(root), "--jobs", "1", "--timeout", "60", *NO_SANDBOX]
    proc = subprocess.run(command, capture_output=True, text=True, env=wc.nbgrader_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "report.csv", newline="", encoding="utf-8") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    course = out / "course"
    secret = instructor_lines(
        course / "source" / FIXTURE / f"{FIXTURE}.ipynb",
        course / "release" / FIXTURE / f"{FIXTURE}.ipynb",
    )
    return {"out": out, "course": course, "rows": rows, "secret": secret, "subs": subs}


def _spy_printed_hidden_tests(course: Path, secret: frozenset[str]) -> bool:
    nb = nbformat.read(str(course / "autograded" / "spy" / FIXTURE / f"{FIXTURE}.ipynb"), 4)
    printed = " ".join(
        " ".join(o.get("text", "").split()) for c in nb.cells for o in c.get("outputs", [])
    )
    return any(line in printed for line in secret)


def test_the_grading_command_withholds_the_spys_feedback(graded):
    assert _spy_printed_hidden_tests(graded["course"], graded["secret"])  # the attack worked
    assert WITHHELD in graded["rows"]["spy"]["reasons"]
    assert graded["rows"]["spy"]["status"] == "flagged"
    assert not (graded["out"] / "feedback" / "spy").exists()
    assert not (graded["course"] / "feedback" / "spy" / FIXTURE / f"{FIXTURE}.html").exists()
    assert (graded["out"] / "feedback" / "honest" / f"{FIXTURE}.html").is_file()
    assert WITHHELD not in graded["rows"]["honest"]["reasons"]


def test_feedback_regenerated_by_hand_is_withheld_too(graded):
    """What formgrader's button runs, after a stale leaky page was left where release looks."""
    course, secret = graded["course"], graded["secret"]
    stale = course / "feedback" / "spy" / FIXTURE / f"{FIXTURE}.html"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text(f"<pre>{sorted(secret)[0]}</pre>", encoding="utf-8")
    record = withheld_record(course, "spy", FIXTURE, FIXTURE)
    record.unlink()
    proc = wc.run_nbgrader(["generate_feedback", FIXTURE, "--force"], cwd=course)
    log = proc.stdout  # stderr is merged into it
    # Withholding is the step working: exit 0, no traceback, one line naming the student.
    assert proc.returncode == 0, log[-3000:]
    assert "Traceback" not in log and "There was an error" not in log
    assert [line for line in log.splitlines() if WITHHELD in line and "spy" in line]
    assert not stale.exists(), "the stale page would still be released"
    # release_feedback sends every page in feedback/<student>/<lesson>/: none is left for the spy
    assert not list((course / "feedback" / "spy").rglob("*.html"))
    lines = record.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith(WITHHELD) and any(line.strip() in secret for line in lines[1:])
    page = course / "feedback" / "honest" / FIXTURE / f"{FIXTURE}.html"
    assert page.is_file()
    own = own_lines(graded["subs"] / f"honest_{FIXTURE}.ipynb")
    assert not leaked(page, secret, own)


def test_feedback_that_cannot_be_checked_still_fails(graded):
    """A real failure of the step (the submission it must be checked against is gone) is
    still a non-zero exit: only withholding is not a failure."""
    course = graded["course"]
    submitted = course / "submitted" / "honest" / FIXTURE / f"{FIXTURE}.ipynb"
    kept = submitted.read_bytes()
    submitted.unlink()
    try:
        proc = wc.run_nbgrader(["generate_feedback", FIXTURE, "--force"], cwd=course)
    finally:
        submitted.write_bytes(kept)
    assert proc.returncode != 0 and "cannot check it for instructor material" in proc.stdout
    assert not (course / "feedback" / "honest" / FIXTURE / f"{FIXTURE}.html").exists()
