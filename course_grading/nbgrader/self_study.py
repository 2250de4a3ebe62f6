"""The self-study edition's *Check your answer* cells: a written answer's model answer and rubric.

A student working alone can check what an autograded item's visible test tells them, but a
written answer (graded by hand, by rubric) has nobody to read it. So the self-study edition
(``notebooks/``, released without a course secret) puts one collapsed markdown cell after every
written answer cell: the model answer and the rubric from the instructor version's solution
region, closed until the student opens it (``<details>``). A class edition (released with the
course secret) leaves them out: a class's written answers are graded, and their model answers
stay with the instructor.

The cells are made at release from the instructor notebook (``solutions/``), so the model answer
a student reads is the one a grader reads; nothing in ``solutions/`` repeats it. Each carries
``metadata.shapes.self_study`` (``"model-answer"``), its grade id in its cell id
(``check-<grade id>``), and is neither editable nor deletable in JupyterLab. A notebook rendered
for a class carries ``metadata.shapes.self_study = false`` and never gets them.
"""

from __future__ import annotations

import re

import nbformat

#: Marks a *Check your answer* cell: ``cell.metadata["shapes"]["self_study"]``.
METADATA, KEY, KIND = "shapes", "self_study", "model-answer"
_REGION = re.compile(r"### BEGIN SOLUTION\n(.*?)\n?### END SOLUTION", re.S)
SUMMARY = (
    "<summary><b>Check your answer</b> (self-study): the model answer and the rubric a grader "
    "uses. Open it once you have written yours.</summary>"
)
INTRO = (
    "*Read the rubric as if you were the grader and the student were you. Where the model answer "
    "quotes a measurement, your run printed its own numbers: compare the reasoning, not the "
    "digits.*"
)


def written_answers(nb: nbformat.NotebookNode) -> list[int]:
    """Indices of the written (manually graded) answer cells of an instructor notebook.

    Args:
        nb: an instructor notebook (``solutions/``).

    Returns:
        The index of every markdown cell nbgrader marks as graded and a solution, in order.
    """
    return [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        and cell.metadata.get("nbgrader", {}).get("grade")
        and cell.metadata.get("nbgrader", {}).get("solution")
    ]


def check_cell(answer: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The *Check your answer* cell of one written answer cell.

    Args:
        answer: a written answer cell of an instructor notebook, its model answer and rubric
            between ``### BEGIN SOLUTION`` and ``### END SOLUTION``.

    Returns:
        A new markdown cell (module docstring).

    Raises:
        ValueError: the cell has no solution region (nothing to show).
    """
    grade_id = answer.metadata["nbgrader"]["grade_id"]
    found = _REGION.search(answer.source)
    if found is None or not found.group(1).strip():
        raise ValueError(f"written answer {grade_id!r} has no model answer in a solution region")
    text = found.group(1).strip().replace("*Model answer (for graders).*", "*Model answer.*")
    cell = nbformat.v4.new_markdown_cell(f"<details>\n{SUMMARY}\n\n{INTRO}\n\n{text}\n\n</details>")
    cell.id = f"check-{grade_id}"[:64]
    cell.metadata.update({METADATA: {KEY: KIND}, "editable": False, "deletable": False})
    return cell


def is_check_cell(cell: nbformat.NotebookNode) -> bool:
    """Whether ``cell`` is a *Check your answer* cell (what :func:`add_check_cells` adds).

    Args:
        cell: a notebook cell.

    Returns:
        True for a cell marked ``metadata.shapes.self_study == "model-answer"``.
    """
    return cell.get("metadata", {}).get(METADATA, {}).get(KEY) == KIND


def mark_class_edition(nb: nbformat.NotebookNode) -> int:
    """Mark ``nb`` as rendered for a class (``metadata.shapes.self_study = false``), in place.

    A class's notebook may pass through the release twice (the work course renders it with the
    secret, then nbgrader's ``generate_assignment`` runs ``RenderEdition`` again, with or without
    the secret in its environment): the mark keeps the second pass from adding the self-study
    cells, also to a lesson without edition numbers.

    Args:
        nb: an instructor notebook being rendered with the course secret.

    Returns:
        1 when the mark was added, 0 when it was there.
    """
    shapes = nb.metadata.setdefault(METADATA, {})
    if shapes.get(KEY) is False:
        return 0
    shapes[KEY] = False
    return 1


def add_check_cells(nb: nbformat.NotebookNode) -> int:
    """Put a *Check your answer* cell after every written answer of ``nb``, in place.

    For the self-study edition only (the release calls it without a course secret).

    Args:
        nb: an instructor notebook, before nbgrader strips its solutions.

    Returns:
        How many cells were added: one per written answer that has a model answer (a written
        answer without a solution region has nothing to show, and gets none); 0 when ``nb`` has
        them already, or when it was rendered for a class (:func:`mark_class_edition`).
    """
    if nb.metadata.get(METADATA, {}).get(KEY) is False:
        return 0
    if any(is_check_cell(cell) for cell in nb.cells):
        return 0
    added = 0
    for i in reversed(written_answers(nb)):
        if _REGION.search(nb.cells[i].source) is None:
            continue
        nb.cells.insert(i + 1, check_cell(nb.cells[i]))
        added += 1
    return added
