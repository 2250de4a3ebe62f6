"""The lessons' assessment holds: answer cells name what to set, visible tests tell right from
wrong, the trusted checks score the blank, every listed wrong answer and the closest library
call 0 and the solution full marks, no cell above a question gives its answer away, and every
written answer has a rubric whose points add up.

One instrumented pass per lesson (``assessment.run_lesson``) runs the solution in a live kernel
and probes every autograded item with the blank, the wrong answers and the library call listed in
``items_NN.py``; each candidate is scored by the item's trusted check as the grader scores it.
"""

from __future__ import annotations

import ast
import importlib
import re

import nbformat
import pytest
from assessment import ROOT, is_answer, lesson_paths, nbgrader_meta, run_lesson, spoilers

LESSONS = sorted(p.parent.name for p in ROOT.glob("solutions/*/*.ipynb"))
MIN_WRONG_COVERAGE = 0.9  # share of autograded items whose visible test is shown a wrong value


def items_of(lesson: str) -> dict:
    return importlib.import_module(f"items_{lesson[:2]}").ITEMS


@pytest.fixture(scope="module", params=LESSONS)
def probed(request):
    lesson = request.param
    return lesson, items_of(lesson), run_lesson(lesson, items_of(lesson))


def defined_names(source: str) -> set[str]:
    """Public names an answer cell's solution defines at top level."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("lesson", LESSONS)
def test_answer_cells_name_what_to_set(lesson):
    solution, student = (nbformat.read(p, as_version=4) for p in lesson_paths(lesson))
    blanks = {nbgrader_meta(c)["grade_id"]: c.source for c in student.cells if is_answer(c)}
    for cell in solution.cells:
        if not is_answer(cell):
            continue
        gid, blank = nbgrader_meta(cell)["grade_id"], blanks[nbgrader_meta(cell)["grade_id"]]
        assert re.search(r"ensure_answered\(|raise NotImplementedError\([\"']", blank), (
            f"{lesson} {gid}: the blank must raise NotImplementedError with a message "
            "(ensure_answered(...) or raise NotImplementedError('write ...'))"
        )
        missing = {n for n in defined_names(cell.source) if n not in blank}
        assert not missing, f"{lesson} {gid}: the blank does not name {sorted(missing)}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_item_is_listed(lesson):
    solution = nbformat.read(lesson_paths(lesson)[0], as_version=4)
    graded = {nbgrader_meta(c)["grade_id"] for c in solution.cells if is_answer(c)}
    assert set(items_of(lesson)) == graded, f"items_{lesson[:2]}.py must list exactly {graded}"


def test_blank_answers_fail_their_visible_test_and_score_zero(probed):
    lesson, _, probes = probed
    passed = [gid for gid, p in probes.items() if p.blank_visible is None]
    assert not passed, f"{lesson}: the visible test accepts a blank answer for {passed}"
    scored = [gid for gid, p in probes.items() if p.blank_points != 0]
    assert not scored, f"{lesson}: a blank answer scores points on {scored}"


def test_wrong_answers_fail_their_visible_test(probed):
    lesson, _, probes = probed
    accepted = [(gid, w) for gid, p in probes.items() for w, err in p.wrong_visible if err is None]
    assert not accepted, f"{lesson}: visible tests accept wrong answers: {accepted}"
    scored = [(gid, w, m) for gid, p in probes.items() for w, pts, m in p.wrong_points if pts]
    assert not scored, f"{lesson}: the trusted checks score wrong answers: {scored}"
    covered = sum(bool(p.wrong_visible) for p in probes.values()) / len(probes)
    assert covered >= MIN_WRONG_COVERAGE, (
        f"{lesson}: only {covered:.0%} of the autograded items are shown a wrong value"
    )


def test_the_closest_library_call_scores_zero(probed):
    lesson, items, probes = probed
    unlisted = [gid for gid, item in items.items() if item.library is None]
    assert not unlisted, f"{lesson}: give the closest library call for {unlisted}"
    scored = [(gid, p.library_message) for gid, p in probes.items() if p.library_points != 0]
    assert not scored, f"{lesson}: the library call earns the points of {scored}"
    # A library answer that cannot even run (a renamed function, an undefined name) proves
    # nothing about the hidden tests: it must run, and the tests must reject it.
    broken = broken_library_answers(probes)
    assert not broken, f"{lesson}: the library answer itself fails, so it tests nothing: {broken}"


def test_solutions_score_full_marks_on_the_trusted_checks(probed):
    lesson, _, probes = probed
    assert probes, f"{lesson} has no autograded item"
    missed = {
        gid: p.solution_message
        for gid, p in probes.items()
        if p.solution_max and p.solution_points != p.solution_max
    }
    assert not missed, f"{lesson}: the solution loses points: {missed}"
    assert sum(p.solution_max for p in probes.values()) > 0


def test_no_cell_above_a_question_gives_its_answer_away(probed):
    lesson, items, probes = probed
    found = {gid: spoilers(p, items[gid].allowed) for gid, p in probes.items()}
    found = {gid: s for gid, s in found.items() if s}
    assert not found, f"{lesson}: answers shown above their question: {found}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_written_answers_have_rubrics_that_add_up(lesson):
    solution = nbformat.read(lesson_paths(lesson)[0], as_version=4)
    written = [
        c for c in solution.cells if nbgrader_meta(c).get("solution") and c.cell_type == "markdown"
    ]
    assert written, f"{lesson} has no written answer"
    for cell in written:
        meta = nbgrader_meta(cell)
        parts = [float(x) for x in re.findall(r"^\s*- \[(\d+(?:\.\d+)?)\]", cell.source, re.M)]
        assert parts, f"{lesson} {meta['grade_id']}: no '- [N] criterion' rubric lines"
        assert sum(parts) == meta["points"], (
            f"{lesson} {meta['grade_id']}: rubric parts add up to {sum(parts)}, "
            f"the cell is worth {meta['points']}"
        )
        text = cell.source.lower()
        assert "partial" in text, f"{lesson} {meta['grade_id']}: say what earns partial credit"
        assert "differ" in text, (
            f"{lesson} {meta['grade_id']}: say that numbers measured on a student's machine differ"
        )


def broken_library_answers(probes: dict) -> dict[str, str]:
    """Items whose library answer raised before its check ran (``Probe.library_error``)."""
    return {gid: p.library_error for gid, p in probes.items() if p.library_error}


def test_a_broken_library_answer_is_caught():
    from assessment import Probe

    probes = {
        "renamed": Probe("renamed", library_error="answer raised NameError"),
        "rejected": Probe("rejected", library_points=0.0),
    }
    assert broken_library_answers(probes) == {"renamed": "answer raised NameError"}


def test_the_probes_can_fail():
    # A visible test that only checks the type accepts a wrong value: the pass must see that.
    from assessment import Probe, printed_forms

    p = Probe("x", wrong_visible=[("predicted_ratio = 4", None)], above="we expect 16× here")
    assert any(err is None for _, err in p.wrong_visible)
    p.values = {"predicted_ratio": 16.0}
    assert "16" in printed_forms(16.0)
    assert spoilers(p, []) == ["predicted_ratio = 16.0 shows as '16'"]
    assert spoilers(p, ["16"]) == []
