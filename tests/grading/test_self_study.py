"""The self-study edition checks its own written answers; a class edition does not get the key.

``course_grading/nbgrader/self_study.py`` puts a collapsed *Check your answer* cell (the model
answer and the rubric of the instructor version) after every written answer, in the self-study
edition only. Both sides are shown: ``notebooks/`` as committed, and one lesson released through
the release's own code with and without a course secret.
"""

from __future__ import annotations

import re
import shutil

import nbformat
import pytest
from class_builders import REPO

from course_grading.nbgrader import course as wc
from course_grading.nbgrader import release as rel
from course_grading.nbgrader import self_study
from course_grading.nbgrader.steps import render_lesson

LESSONS = wc.find_lessons(REPO)
SECRET = b"self-study-test-secret-0123456789"


def _read(folder: str, lesson: str) -> nbformat.NotebookNode:
    return nbformat.read(str(REPO / folder / lesson / f"{lesson}.ipynb"), as_version=4)


def _written_ids(nb: nbformat.NotebookNode) -> list[str]:
    return [nb.cells[i].metadata["nbgrader"]["grade_id"] for i in self_study.written_answers(nb)]


def _model_answer(solution: nbformat.NotebookNode, grade_id: str) -> str:
    cell = next(
        c for c in solution.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )
    return re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S).group(1)


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_self_study_notebook_has_one_check_cell_after_each_written_answer(lesson):
    solution, student = _read(wc.SOURCE_DIR, lesson), _read(wc.RELEASE_DIR, lesson)
    written = _written_ids(solution)
    assert written, f"{lesson} has no written answer"
    checks = [i for i, c in enumerate(student.cells) if self_study.is_check_cell(c)]
    assert len(checks) == len(written), (lesson, len(checks), written)
    for i, grade_id in zip(checks, written):
        answer, check = student.cells[i - 1], student.cells[i]
        assert answer.metadata["nbgrader"]["grade_id"] == grade_id  # right after its answer
        assert "YOUR ANSWER HERE" in answer.source  # the student's cell stays blank
        text = check.source
        assert text.startswith("<details>\n<summary>") and text.endswith("</details>")
        assert "<details open" not in text  # closed until the student opens it
        assert "BEGIN SOLUTION" not in text and "*Model answer.*" in text
        body = _model_answer(solution, grade_id).replace("*Model answer (for graders).*", "")
        assert body.strip().splitlines()[-1] in text  # the grader's rubric, word for word
        assert re.search(r"^- \[\d", text, re.M), "the rubric's points are shown"
        assert check.metadata.get("editable") is False and check.metadata.get("deletable") is False


def _release(tmp_path, lesson: str, secret: bytes | None) -> tuple[nbformat.NotebookNode, str]:
    """``lesson`` released by the release's own code, in a course folder of its own: the
    student notebook, and its text in the normal form."""
    root = tmp_path / ("class" if secret else "self-study")
    shutil.copytree(REPO / wc.SOURCE_DIR / lesson, root / wc.SOURCE_DIR / lesson)
    shutil.copy(REPO / wc.CONFIG_FILE, root / wc.CONFIG_FILE)
    _, files = rel.build_release(root, root / "work", secret)
    text = files[f"{lesson}/{lesson}.ipynb"]
    return nbformat.reads(text, as_version=4), text


def test_a_class_edition_has_no_check_cell_and_the_self_study_one_has_them(tmp_path):
    """One release with the secret (``make lint``'s release check keeps ``notebooks/`` the
    release without one)."""
    lesson = "01_tokens_and_attention_memory"
    written = _written_ids(_read(wc.SOURCE_DIR, lesson))
    class_nb, class_text = _release(tmp_path, lesson, SECRET)
    self_nb = _read(wc.RELEASE_DIR, lesson)  # the same code's release without a secret
    assert class_nb.metadata["shapes"]["edition"].startswith("class edition")
    assert not any(self_study.is_check_cell(c) for c in class_nb.cells)
    assert "Check your answer" not in class_text
    assert "Model answer" not in class_text  # no model answer leaks otherwise
    assert sum(self_study.is_check_cell(c) for c in self_nb.cells) == len(written) == 2


def test_rendering_twice_adds_no_second_cell_and_a_class_render_adds_none():
    lesson = "02_padding_and_packing"
    nb = _read(wc.SOURCE_DIR, lesson)
    written = len(_written_ids(nb))
    render_lesson(nb, lesson, None)
    assert sum(map(self_study.is_check_cell, nb.cells)) == written
    assert self_study.add_check_cells(nb) == 0
    class_nb = _read(wc.SOURCE_DIR, lesson)
    render_lesson(class_nb, lesson, SECRET)
    assert not any(map(self_study.is_check_cell, class_nb.cells))


def test_a_written_answer_without_a_model_answer_gets_no_check_cell():
    cell = nbformat.v4.new_markdown_cell("nothing for the grader")
    cell.metadata["nbgrader"] = {"grade": True, "solution": True, "grade_id": "w", "points": 1}
    with pytest.raises(ValueError, match="'w' has no model answer"):
        self_study.check_cell(cell)
    nb = nbformat.v4.new_notebook(cells=[cell])
    assert self_study.add_check_cells(nb) == 0 and len(nb.cells) == 1  # the release goes on
