"""Check each submission against its lesson, before nbgrader sees it and after it has run.

Before: is the file a notebook at all, within the size limits (``notebook_file``), which cells
were deleted, copied, edited or marked otherwise, does it hold what only the instructor version
has, is it blank (``inspect``); and the copy nbgrader may safely grade (``repaired_copy``,
every repair reported). After: timeouts, errors outside test cells and truncated output, read
from the graded copy (``review_autograded``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

from course_grading.course import nbgrader_cells
from course_grading.items import DECLARATION
from course_grading.leaks import instructor_marks
from course_grading.lesson import MARKED, LessonSpec, marks_of
from course_grading.notebook_file import read_notebook
from course_grading.submissions import Submission

if TYPE_CHECKING:  # autograde.py imports this module
    from course_grading.autograde import CellTimeouts

#: Errors outside test cells listed one by one in the report; the rest are counted.
MAX_ERRORS_REPORTED = 3


# --- before grading --------------------------------------------------------------------------


def _check_copied_and_deleted(sub: Submission, spec: LessonSpec, cells: list[dict]) -> None:
    positions: dict[str, list[int]] = {}
    for cell in cells:
        positions.setdefault(cell["grade_id"], []).append(cell["index"])
    for gid, where in positions.items():
        if len(where) > 1:
            cells_at = ", ".join(str(i + 1) for i in where)
            sub.flag(
                f"cells were copied: grade id {gid!r} appears {len(where)} times (cells "
                f"{cells_at}); nbgrader graded only the last copy, check it by hand"
            )
    expected = list(spec.tests) + spec.answers + list(spec.written) + spec.locked
    sub.deleted += [gid for gid in expected if gid not in positions]
    for gid in sub.deleted:
        kind = spec.kind(gid)
        if gid in spec.tests:
            sub.flag(f"{kind} {gid!r} was deleted; it is scored 0 of {spec.tests[gid]:g}")
        elif gid in spec.written:
            sub.flag(f"{kind} {gid!r} was deleted; it is scored 0 of {spec.written[gid]:g}")
        else:
            sub.flag(f"{kind} {gid!r} was deleted; later cells may fail without it")


def _check_edited_and_blank(sub: Submission, spec: LessonSpec, cells: list[dict]) -> None:
    last = {cell["grade_id"]: cell for cell in cells}
    for gid in list(spec.tests) + spec.locked:
        cell = last.get(gid)
        if cell and cell["source"] not in (spec.release_text.get(gid), spec.source_text.get(gid)):
            sub.flag(
                f"{spec.kind(gid)} {gid!r} was edited; nbgrader restored the original "
                "before grading"
            )
    for gid in spec.answers + list(spec.written):
        cell = last.get(gid)
        if cell and cell["source"] == spec.release_text.get(gid):
            sub.unchanged_answers.append(gid)
    answer_ids = spec.answers + list(spec.written)
    if answer_ids and set(answer_ids) <= set(sub.unchanged_answers):
        sub.flag("blank: no answer cell was changed from the student version")
    elif sub.unchanged_answers:
        sub.info.append(f"not attempted: {', '.join(sub.unchanged_answers)}")


def _check_marks(sub: Submission, spec: LessonSpec, cells: list[dict]) -> None:
    """Report every cell marked otherwise than in the lesson (``repaired_copy`` repairs it)."""
    last = {cell["grade_id"]: cell for cell in cells}
    for gid, want in spec.marks.items():
        if gid not in last:
            continue
        got, kind = marks_of(last[gid]), spec.kind(gid)
        if got["cell_type"] != want["cell_type"]:
            sub.flag(
                f"{kind} {gid!r} was turned into a {got['cell_type']} cell; it is graded as "
                f"the {want['cell_type']} cell the lesson has"
            )
        changed = [f"{k}: {want[k]} -> {got[k]}" for k in MARKED if got[k] != want[k]]
        if changed:
            sub.flag(
                f"{kind} {gid!r} had its nbgrader marks changed ({', '.join(changed)}); "
                "the lesson's marks were used"
            )
        if want["grade"] and got["grade"] and got.get("points") != want["points"]:
            points = got.get("points")
            shown = f"{points:g}" if isinstance(points, float) else repr(points)
            sub.flag(
                f"{kind} {gid!r} claims {shown} points; the lesson's {want['points']:g} were used"
            )


def _check_instructor_material(sub: Submission, spec: LessonSpec, nb) -> None:
    """Flag for review what only the instructor version has: its delimiters, a hidden test's
    item declaration, a written answer's model answer word for word."""
    found = []
    for index, cell in enumerate(nb.cells):
        marks = instructor_marks(cell.source)
        lines = (line.strip() for line in cell.source.splitlines())
        marks += [f"{DECLARATION} ..."] * any(line.startswith(DECLARATION) for line in lines)
        if marks:
            found.append(f"cell {index + 1} ({', '.join(marks)})")
    if found:
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        sub.flag(
            f"for review: holds what only the instructor version has: {'; '.join(found[:3])}"
            f"{more} (a copy of the solution notebook?); feedback showing the instructor's "
            "lines from such cells is withheld"
        )
    last = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    for gid in spec.written:
        model, cell = spec.source_text.get(gid, ""), last.get(gid)
        if cell and model != spec.release_text.get(gid) and _same(cell.source, model):
            sub.flag(
                f"for review: written answer {gid!r} is the lesson's model answer word for word"
            )


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split()) != ""


def inspect(sub: Submission, spec: LessonSpec) -> nbformat.NotebookNode | None:
    """Read ``sub.original`` and record everything that nbgrader would not tell us.

    Returns the notebook, or ``None`` when it cannot be graded at all (then ``sub`` says why).

    What it finds goes into ``sub`` (problems, info, deleted and unchanged cells): copied or
    deleted cells, edited test or read-only cells, answers left as the student version has
    them (all of them: blank), cells marked otherwise than the lesson marks them, and what
    only the instructor version holds.

    Args:
        sub: the submission, with ``original`` as found; its findings are added to it.
        spec: the lesson the notebook should match.

    Returns:
        The notebook as read (not yet repaired: see ``repaired_copy``), or ``None`` when
        there is no file or it is not a readable notebook within the limits.
    """
    if sub.original is None:
        return None
    nb = read_notebook(sub)
    if nb is None:
        return None
    cells = nbgrader_cells(nb)
    _check_copied_and_deleted(sub, spec, cells)
    _check_edited_and_blank(sub, spec, cells)
    _check_marks(sub, spec, cells)
    _check_instructor_material(sub, spec, nb)
    return nb


def _remarked(cell: nbformat.NotebookNode, want: dict) -> nbformat.NotebookNode:
    """``cell`` marked as the lesson marks it: its nbgrader flags, points and cell type."""
    meta = cell.metadata["nbgrader"]
    for key in MARKED:
        if bool(meta.get(key)) != want[key]:
            meta[key] = want[key]
    if "points" in want:
        meta["points"] = want["points"]
    meta["schema_version"] = 3
    if cell.cell_type == want["cell_type"]:
        return cell
    make = (
        nbformat.v4.new_code_cell if want["cell_type"] == "code" else nbformat.v4.new_markdown_cell
    )
    remade = make(source=cell.source, metadata=cell.metadata)
    if "id" in cell:
        remade.id = cell.id
    return remade


def repaired_copy(
    nb: nbformat.NotebookNode, spec: LessonSpec, sub: Submission
) -> nbformat.NotebookNode:
    """The copy handed to nbgrader: outputs cleared and nbgrader metadata made safe.

    nbgrader 0.9 handles repeated grade ids by emptying the metadata of the earlier copies,
    and its own metadata check then raises ``SchemaTooOldError``, which aborts the whole
    autograde run, every later student included. So the earlier copies lose their nbgrader
    metadata here (nbgrader grades the last copy either way), as do cells whose grade id the
    lesson does not know; the last copy of a known cell is marked as the lesson marks it (cell
    type, flags, points: ``_check_marks`` reported each change) with schema version 3
    (nbgrader restores the rest of its metadata from the gradebook). Every repair is reported.

    Args:
        nb: the submitted notebook (``inspect``'s answer); not changed.
        spec: the lesson whose marks the cells are given.
        sub: the submission; the repairs not already reported by ``inspect`` are added to its
            info.

    Returns:
        A deep copy of ``nb`` with the metadata repaired and every code cell's outputs and
        execution count cleared.
    """
    nb = copy.deepcopy(nb)
    last = {}
    for index, cell in enumerate(nb.cells):
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid:
            last[gid] = index
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {})
        if "nbgrader" not in meta:
            continue
        gid = meta["nbgrader"].get("grade_id")
        if gid not in spec.marks:
            del meta["nbgrader"]
            sub.info.append(
                f"cell {index + 1} carried nbgrader metadata the lesson does not "
                f"know (grade id {gid!r}); graded as an ordinary cell"
            )
        elif last[gid] != index:
            del meta["nbgrader"]
        else:
            version = meta["nbgrader"].get("schema_version")
            if version != 3:
                sub.info.append(f"cell {index + 1}: nbgrader schema version {version} set to 3")
            nb.cells[index] = _remarked(cell, spec.marks[gid])
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


# --- after grading ---------------------------------------------------------------------------


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def review_autograded(
    sub: Submission, spec: LessonSpec, autograded: Path, timeouts: CellTimeouts
) -> None:
    """Record timeouts, errors outside test cells and truncated output from the graded copy.

    ``timeouts`` is the run's ``CellTimeouts``: it tells student code from the lesson's and
    the limit each had.

    A cell that failed a test is an ordinary result, and a ``NotImplementedError`` from an
    exercise left untouched is reported as not attempted; neither is flagged here. Only each
    cell's first error counts.

    Args:
        sub: the submission; each finding is flagged on it.
        spec: the lesson (which grade ids are tests).
        autograded: nbgrader's graded copy of the notebook, with its outputs.
        timeouts: the run's per-cell limits (``autograde.CellTimeouts``).
    """
    nb = nbformat.read(str(autograded), as_version=4)
    truncated = False
    errors: list[str] = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        students = timeouts.is_students(cell)
        owner = (
            ""
            if gid
            else (" (added or changed by the student)" if students else " (the lesson's code)")
        )
        where = f"cell {index + 1}" + (f" ({gid!r})" if gid else owner)
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and "... Output truncated ..." in out.get(
                "text", ""
            ):
                truncated = True
            if out.get("output_type") != "error":
                continue
            ename, evalue = out.get("ename", "Error"), _first_line(out.get("evalue", ""))
            if ename in ("KeyboardInterrupt", "CellTimeoutError") or "Timeout" in ename:
                sub.flag(
                    f"{where} was still running after {timeouts(cell)} s and was stopped "
                    "(an infinite loop?); grading went on with the next cell"
                )
            elif gid in spec.tests:
                continue  # a failing test is an ordinary result, reported as failed_tests
            elif ename == "NotImplementedError" and sub.unchanged_answers:
                continue  # an exercise stub left in place: reported as not attempted
            else:
                errors.append(f"{where} raised {ename}" + (f": {evalue}" if evalue else ""))
            break
    for error in errors[:MAX_ERRORS_REPORTED]:
        sub.flag(error)
    if len(errors) > MAX_ERRORS_REPORTED:
        sub.flag(f"{len(errors) - MAX_ERRORS_REPORTED} more cell(s) raised errors")
    if truncated:
        sub.flag("printed more output than nbgrader keeps (1000 lines); it was truncated")
