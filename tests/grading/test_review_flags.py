"""Cells the lesson provides or asks for are the lesson's (issue 39, item 3).

Lessons 1, 4 and 5 came out "flagged" for honest work: lesson 1's explorer cell that its text
says to edit, lesson 4's "Scratch (not graded)" cell, lesson 5's "add a cell of your own" were
each named "uses course_lib in cell N (added by the student)". A cell the lesson provides for
editing is marked in the instructor notebook (``shapes.provided``: ``LessonSpec.provided``), is
named as the lesson's, and its lesson version's uses are not the student's; a lesson-imported
call in any cell of the student's other than an answer is no flag by itself. What stays flagged
(and scores 0 where the item says so): a library call whose result a graded value takes (in an
added cell or in a provided one), a graded value set again below its answer, and an import of
``course_lib`` beyond what the lesson imports.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from class_builders import filled

from course_grading.judge import items as trusted
from course_grading.judge.functions import FunctionSandbox
from course_grading.judge.lesson import PROVIDED, LessonSpec
from course_grading.judge.verdicts import course_lib_review, decide
from course_grading.nbgrader.course import find_lessons
from course_grading.review.cheats import cell_owner, scan
from course_grading.review.uses import answer_and_earlier, cells_after

REPO = Path(__file__).resolve().parents[2]
L1, L4, L5 = (
    "01_tokens_and_attention_memory",
    "04_activation_checkpointing",
    "05_choosing_the_numbers",
)


def _paths(lesson: str) -> tuple[Path, Path]:
    return (
        REPO / "solutions" / lesson / f"{lesson}.ipynb",
        REPO / "notebooks" / lesson / f"{lesson}.ipynb",
    )


def _spec(lesson: str) -> LessonSpec:
    source, release = _paths(lesson)
    return LessonSpec.from_notebooks(lesson, source, release)


def _answered(lesson: str) -> nbformat.NotebookNode:
    """The student version with every answer cell answered as the solution does."""
    source, release = _paths(lesson)
    return filled(release, source)


def _at(nb: nbformat.NotebookNode, key: str) -> int:
    """The index of the cell with id (or grade id) ``key``."""
    return next(
        i
        for i, c in enumerate(nb.cells)
        if c.get("id") == key or c.metadata.get("nbgrader", {}).get("grade_id") == key
    )


def _edit(nb, key: str, source: str):
    nb.cells[_at(nb, key)].source = source
    return nb


def _add(nb, after: str, source: str):
    nb.cells.insert(_at(nb, after) + 1, nbformat.v4.new_code_cell(source))
    return nb


EXPLORER = (
    "# Your explorer: set its inputs, then move the slider.\n"
    "budget_split_explorer(config, token_budget=8192, device=device)"
)
SCRATCH = (
    "# Scratch (not graded): try strides and lengths here\n"
    "deep = replace(config, n_layers=8, max_seq_len=8192)\n"
    "for s in (512, 640, 768):\n"
    "    print(s, activation_bytes(replace(deep, checkpointing='blocks', checkpoint_every=2), 1, "
    "s).total / 2**20)"
)
OWN_CELL = 'print(card_plan("Qwen2.5-7B", "A10G", "qlora", seq_len=1024).verdict())'
HONEST = {
    "lesson 1's explorer, its inputs set": (
        L1,
        lambda nb: _edit(nb, "cell-112", EXPLORER),
        "cell-112",
        "the lesson's explorer",
    ),
    "lesson 1's first explorer, its budget changed": (
        L1,
        lambda nb: _edit(nb, "cell-016", "budget_split_explorer(config, 4096, device=device)"),
        "cell-016",
        "the lesson's explorer",
    ),
    "lesson 4's scratch cell, used as it says": (
        L4,
        lambda nb: _edit(nb, "scratch-target", SCRATCH),
        "scratch-target",
        "the lesson's scratch cell",
    ),
    "lesson 5's cell of your own (section 9)": (
        L5,
        lambda nb: _add(nb, "l05-intro-q6", OWN_CELL),
        None,
        "added by the student",
    ),
}


@pytest.mark.parametrize("case", sorted(HONEST))
def test_a_cell_the_lesson_provides_or_asks_for_is_no_flag(case):
    lesson, change, key, owner = HONEST[case]
    spec, nb = _spec(lesson), _answered(lesson)
    assert course_lib_review(nb, spec) == []  # the solution's answers alone: nothing
    nb = change(nb)
    index = _at(nb, key) if key else _at(nb, "l05-intro-q6") + 1
    assert owner in cell_owner(nb, index, spec)
    assert course_lib_review(nb, spec) == [], case
    assert [f for f in scan(nb, spec) if f.cell == index] == [], case


def test_every_editable_lesson_cell_is_marked_as_the_lessons():
    """An unlocked code cell that is neither an answer nor a test is one the student may edit: it
    is marked, so a new explorer cannot come back as "added by the student"."""
    unmarked = []
    for lesson in find_lessons(REPO):
        for path in _paths(lesson):
            for cell in nbformat.read(str(path), as_version=4).cells:
                meta = cell.metadata.get("nbgrader", {})
                if cell.cell_type != "code" or meta.get("locked") or meta.get("grade_id"):
                    continue
                if not cell.metadata.get(PROVIDED[0], {}).get(PROVIDED[1]):
                    unmarked.append(f"{path.relative_to(REPO)}: {cell.get('id')}")
    assert not unmarked, unmarked
    assert set(_spec(L4).provided) == {"cell-017", "scratch-target"}


def _verdict(lesson: str, nb, gid: str, values: dict):
    spec = _spec(lesson)
    item = trusted.items_of(lesson)[gid]
    answer, earlier = answer_and_earlier(nb, spec, item.answer)
    later = cells_after(nb, spec, item.answer)
    return decide(item, spec, "ann", values, answer, FunctionSandbox(None), earlier, later=later)


def test_a_library_result_the_answer_takes_is_flagged_and_scores_0_even_from_a_provided_cell():
    search = (
        "deep = replace(config, n_layers=8, max_seq_len=8192)\n"
        "_best = max(s for s in range(128, 4097, 128) if activation_bytes(\n"
        "    replace(deep, checkpointing='blocks', checkpoint_every=2), 1, s).total <= 16 * 2**20)"
    )
    nb = _edit(_answered(L4), "scratch-target", search)
    nb = _edit(nb, "target-practice", "target_seq_len, target_every = _best, 2\n")
    flags = course_lib_review(nb, _spec(L4))
    assert any("the lesson's scratch cell" in f and "activation_bytes" in f for f in flags), flags
    got = _verdict(L4, nb, "test-target-practice", {"target_seq_len": 640, "target_every": 2})
    assert got.points == 0 and "takes `_best`" in got.message and "scratch cell" in got.message


def test_an_overwrite_below_the_answer_is_flagged_and_scores_0():
    nb = _add(
        _answered(L4),
        "target-practice",
        "target_every = 2 if activation_bytes(config, 1, 128).total else 3",
    )
    flags = course_lib_review(nb, _spec(L4))
    assert any("added by the student" in f and "activation_bytes" in f for f in flags), flags
    got = _verdict(L4, nb, "test-target-practice", {"target_seq_len": 640, "target_every": 2})
    assert got.points == 0 and "set again in" in got.message


def test_a_library_call_the_explorer_computes_for_an_answer_is_flagged():
    nb = _edit(
        _answered(L1), "cell-112", EXPLORER + "\n_s = int(attention_elements(1, 1, 256) ** 0.5)"
    )
    nb = _edit(nb, "target-practice", "target_batch_size, target_seq_len = 4096 // _s, _s\n")
    flags = course_lib_review(nb, _spec(L1))
    assert any("the lesson's explorer" in f and "attention_elements" in f for f in flags), flags
    got = _verdict(L1, nb, "test-target-practice", {"target_batch_size": 16, "target_seq_len": 256})
    assert got.points == 0 and "takes `_s`" in got.message and "explorer" in got.message


def test_an_import_beyond_what_the_lesson_imports_is_still_flagged():
    nb = _add(
        _answered(L5),
        "l05-intro-q6",
        "from course_lib.fit import find_largest\nprint(find_largest)",
    )
    flags = course_lib_review(nb, _spec(L5))
    assert any("added by the student" in f and "course_lib.fit" in f for f in flags), flags
    nb = _add(_answered(L5), "l05-intro-q6", "import course_lib.budget as b\nprint(b.__doc__)")
    assert course_lib_review(nb, _spec(L5)), "a module import of the student's own"


def test_a_cell_that_takes_a_provided_cells_id_hides_nothing():
    """A hostile notebook deletes the scratch cell and gives its id to a cell of its own: the
    label follows the id, what the cell does is still read (a hostile attempt of this branch's
    own: the cell id is the student's to write)."""
    nb = _answered(L4)
    index = _at(nb, "scratch-target")
    nb.cells[index].source = "import course_lib.budget as b\n_best = b.tokens_per_step(5, 128)"
    nb = _edit(nb, "target-practice", "target_seq_len, target_every = _best, 2\n")
    flags = course_lib_review(nb, _spec(L4))
    assert any("the lesson's scratch cell" in f and "course_lib.budget" in f for f in flags)
    got = _verdict(L4, nb, "test-target-practice", {"target_seq_len": 640, "target_every": 2})
    assert got.points == 0 and "takes `_best`" in got.message
