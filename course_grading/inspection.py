"""Check each submission against its lesson, before nbgrader sees it and after it has run.

Before: is the file a notebook at all, which cells were deleted, copied or edited, is it blank
(``inspect``), and the copy nbgrader may safely grade (``repaired_copy``). After: timeouts,
errors outside test cells and truncated output, read from the graded copy
(``review_autograded``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import nbformat

from course_grading.course import nbgrader_cells
from course_grading.lesson import LessonSpec
from course_grading.submissions import Submission

#: Saved outputs above this size are reported (nbgrader clears them before grading anyway).
HUGE_OUTPUT_BYTES = 5 * 2**20

#: Errors outside test cells listed one by one in the report; the rest are counted.
MAX_ERRORS_REPORTED = 3


# --- before grading --------------------------------------------------------------------------


def _read(sub: Submission) -> tuple[nbformat.NotebookNode | None, bytes]:
    """Read ``sub.original`` as a notebook, or flag it not gradable and say why."""
    data = sub.original.read_bytes()
    if not data.strip():
        sub.flag("the file is empty: not a notebook", gradable=False)
        return None, data
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        sub.flag("the file is not text (binary data): not a notebook", gradable=False)
        return None, data
    except json.JSONDecodeError as err:
        sub.flag(
            f"the file is not valid JSON (line {err.lineno}, column {err.colno}: "
            f"{err.msg}): damaged or not a notebook",
            gradable=False,
        )
        return None, data
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        sub.flag("the file is JSON but not a Jupyter notebook (no list of cells)", gradable=False)
        return None, data
    try:
        return nbformat.reads(data.decode("utf-8"), as_version=4), data
    except Exception as err:  # nbformat raises several types for malformed notebooks
        sub.flag(f"nbformat cannot read the notebook ({type(err).__name__}: {err})", gradable=False)
        return None, data


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


def inspect(sub: Submission, spec: LessonSpec) -> nbformat.NotebookNode | None:
    """Read ``sub.original`` and record everything that nbgrader would not tell us.

    Returns the notebook, or ``None`` when it cannot be graded at all (then ``sub`` says why).
    """
    if sub.original is None:
        return None
    nb, data = _read(sub)
    if nb is None:
        return None
    output_bytes = sum(len(json.dumps(cell.get("outputs", []))) for cell in nb.cells)
    if output_bytes > HUGE_OUTPUT_BYTES:
        sub.flag(
            f"huge saved output ({output_bytes / 2**20:.1f} MiB, file "
            f"{len(data) / 2**20:.1f} MiB); outputs were cleared before grading"
        )
    cells = nbgrader_cells(nb)
    _check_copied_and_deleted(sub, spec, cells)
    _check_edited_and_blank(sub, spec, cells)
    return nb


def repaired_copy(
    nb: nbformat.NotebookNode, spec: LessonSpec, sub: Submission
) -> nbformat.NotebookNode:
    """The copy handed to nbgrader: outputs cleared and nbgrader metadata made safe.

    nbgrader 0.9 handles repeated grade ids by emptying the metadata of the earlier copies,
    and its own metadata check then raises ``SchemaTooOldError``, which aborts the whole
    autograde run, every later student included. So the earlier copies lose their nbgrader
    metadata here (nbgrader grades the last copy either way), as do cells whose grade id the
    lesson does not know; a known cell with another schema version gets version 3 (nbgrader
    restores the rest of its metadata from the gradebook).
    """
    nb = copy.deepcopy(nb)
    last = {}
    for index, cell in enumerate(nb.cells):
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid:
            last[gid] = index
    known = set(spec.source_text)
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {})
        if "nbgrader" not in meta:
            continue
        gid = meta["nbgrader"].get("grade_id")
        if gid not in known:
            del meta["nbgrader"]
            sub.info.append(
                f"cell {index + 1} carried nbgrader metadata the lesson does not "
                f"know (grade id {gid!r}); graded as an ordinary cell"
            )
        elif last[gid] != index:
            del meta["nbgrader"]
        elif meta["nbgrader"].get("schema_version") != 3:
            meta["nbgrader"]["schema_version"] = 3
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


# --- after grading ---------------------------------------------------------------------------


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def review_autograded(sub: Submission, spec: LessonSpec, autograded: Path, timeouts) -> None:
    """Record timeouts, errors outside test cells and truncated output from the graded copy.

    ``timeouts`` is the run's ``CellTimeouts``: it tells student code from the lesson's and
    the limit each had.
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
