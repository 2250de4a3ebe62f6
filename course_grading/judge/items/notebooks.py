"""Item declarations in notebooks: test cells, their hidden regions, and the registry's check.

A test cell's hidden region holds one declaration line (``# ITEM: {...}``) and nothing else;
it is removed before a notebook reaches a kernel (:func:`strip_hidden_tests`), and every
declaration of a lesson's source notebook must agree with the lesson's registered items
(:func:`problems`, :func:`check_notebook`).
"""

from __future__ import annotations

import json

import nbformat

from course_grading.errors import GradingError
from course_grading.judge.items.model import DECLARATION, Item, items_of, module_name

_BEGIN, _END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"


def is_test_cell(cell: nbformat.NotebookNode) -> bool:
    """Whether ``cell`` is an autograded test cell: graded, not an answer, code.

    Args:
        cell: a notebook cell.

    Returns:
        True for a code cell whose nbgrader metadata has ``grade`` and not ``solution``.
    """
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def hidden_region(source: str) -> str | None:
    """The text between the hidden-test delimiters.

    Args:
        source: a test cell's source.

    Returns:
        The lines after ``BEGIN HIDDEN TESTS`` up to ``END HIDDEN TESTS`` (or the end, when it is
        not closed), or ``None`` without a region.
    """
    lines = source.split("\n")
    begin = next((i for i, line in enumerate(lines) if _BEGIN in line), None)
    if begin is None:
        return None
    end = next((i for i in range(begin + 1, len(lines)) if _END in lines[i]), len(lines))
    return "\n".join(lines[begin + 1 : end])


def strip_hidden(source: str) -> str:
    """``source`` without its hidden-test regions (an unclosed one runs to the end).

    Args:
        source: a cell's source.

    Returns:
        The source with every delimited region and its delimiters removed, trailing newlines
        dropped.
    """
    kept, hiding = [], False
    for line in source.split("\n"):
        if _BEGIN in line:
            hiding = True
        elif hiding and _END in line:
            hiding = False
        elif not hiding:
            kept.append(line)
    return "\n".join(kept).rstrip("\n")


def strip_hidden_tests(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose test cells hold no hidden region: what a kernel may receive.

    Args:
        nb: a notebook; it is left unchanged.

    Returns:
        A deep copy with :func:`strip_hidden` applied to every test cell.
    """
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    for cell in nb.cells:
        if is_test_cell(cell):
            cell.source = strip_hidden(cell.source)
    return nb


def declaration_of(source: str) -> dict | None:
    """The declaration in a test cell's hidden region.

    Args:
        source: the test cell's source.

    Returns:
        The declared JSON object (``{"check": ..., "answer": ..., "values": [...]}``), or
        ``None`` when the cell has no hidden region.

    Raises:
        ValueError: the region holds code, no declaration or more than one, or one that is not
            a JSON object (the message says which).
    """
    region = hidden_region(source)
    if region is None:
        return None
    found = [line.strip() for line in region.split("\n") if line.strip().startswith(DECLARATION)]
    other = [
        line.strip()
        for line in region.split("\n")
        if line.strip() and not line.strip().startswith("#")
    ]
    if other:
        raise ValueError(f"the hidden region holds code, not only a declaration: {other[0]!r}")
    if len(found) != 1:
        raise ValueError(f"the hidden region holds {len(found)} declarations; give one")
    try:
        declared = json.loads(found[0][len(DECLARATION) :])
    except json.JSONDecodeError as err:
        raise ValueError(f"the declaration is not JSON ({err.msg})") from None
    if not isinstance(declared, dict):
        raise ValueError("the declaration is not a JSON object")
    return declared


def declarations(nb: nbformat.NotebookNode) -> dict[str, tuple[dict | None, float]]:
    """Every test cell's declaration and points.

    Args:
        nb: a lesson's source notebook.

    Returns:
        Test-cell grade id -> (its declaration, ``None`` without one or ``{"malformed": why}``
        for a broken one; its nbgrader points).
    """
    found = {}
    for cell in nb.cells:
        if is_test_cell(cell):
            meta = cell.metadata["nbgrader"]
            try:
                declared = declaration_of(cell.source)
            except ValueError as err:
                declared = {"malformed": str(err)}
            found[meta["grade_id"]] = (declared, float(meta.get("points", 0)))
    return found


def problems(lesson: str, nb: nbformat.NotebookNode) -> list[str]:
    """How the declarations in a lesson's source notebook disagree with the registry.

    Args:
        lesson: the lesson's folder name.
        nb: its source notebook (``solutions/``).

    Returns:
        One line per mismatch (a test cell without a declaration or check, a check without a
        test cell, other names or points, a missing answer cell); empty when they agree.
    """
    try:
        items = items_of(lesson)
    except GradingError as err:
        return [str(err)]
    declared = declarations(nb)
    answers = {
        cell.metadata["nbgrader"]["grade_id"]
        for cell in nb.cells
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution")
        and not cell.metadata["nbgrader"].get("grade")
    }
    found = []
    for gid, (declaration, points) in declared.items():
        item = items.get(gid)
        if declaration is None:
            found.append(f"{lesson} {gid}: a test cell without a declaration")
        elif "malformed" in declaration:
            found.append(f"{lesson} {gid}: {declaration['malformed']}")
        elif item is None:
            found.append(f"{lesson} {gid}: declared, but {module_name(lesson)} has no check")
        elif declaration != item.declaration():
            found.append(
                f"{lesson} {gid}: the notebook declares {declaration}, the registry "
                f"{item.declaration()}"
            )
        elif points != item.points:
            found.append(
                f"{lesson} {gid}: {points:g} point(s) in the notebook, {item.points:g} in the check"
            )
        if item is not None and item.answer not in answers:
            found.append(f"{lesson} {gid}: no answer cell {item.answer!r} in the notebook")
    for gid in sorted(set(items) - set(declared)):
        found.append(f"{lesson} {gid}: a check without a test cell in the notebook")
    return found


def check_notebook(lesson: str, nb: nbformat.NotebookNode) -> dict[str, Item]:
    """The items of ``lesson``, once its source notebook agrees with them.

    Args:
        lesson: the lesson's folder name.
        nb: its source notebook.

    Returns:
        Test-cell grade id -> :class:`Item` (:func:`items_of`).

    Raises:
        GradingError: listing every mismatch :func:`problems` finds.
    """
    found = problems(lesson, nb)
    if found:
        raise GradingError(
            "the lesson's item declarations and trusted checks disagree; fix the notebook or "
            "course_grading/items: " + "; ".join(found)
        )
    return items_of(lesson)
