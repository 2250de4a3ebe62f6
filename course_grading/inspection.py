"""Check each submission against its lesson, before nbgrader sees it and after it has run.

Before: is the file a notebook at all (read without following a link, its size checked before
anything parses it), which cells were deleted, copied, edited or marked otherwise, does it hold
what only the instructor version has, is it blank (``inspect``); and the copy nbgrader may
safely grade (``repaired_copy``, every repair reported). After: timeouts, errors outside test
cells and truncated output, read from the graded copy (``review_autograded``).

Limits (each refusal is a reason in the report, and the submission is ``not graded``): the
file is at most ``MAX_NOTEBOOK_BYTES`` (its size is taken with ``fstat`` before it is read),
holds at most ``MAX_CELLS`` cells, no cell's source is over ``MAX_CELL_SOURCE_BYTES`` and all
of them together at most ``MAX_SOURCE_BYTES`` (each source is measured on the parsed JSON,
before nbformat, the cheat scan, nbgrader or a kernel sees it). Saved outputs are cleared
before grading; over ``HUGE_OUTPUT_BYTES`` (one cell's or all) they are reported.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import stat
from pathlib import Path

import nbformat

from course_grading.course import nbgrader_cells
from course_grading.items import DECLARATION
from course_grading.leaks import instructor_marks
from course_grading.lesson import MARKED, LessonSpec, marks_of
from course_grading.submissions import Submission

#: A notebook file larger than this is not read (the course's notebooks, figures saved, are
#: a few MiB at most).
MAX_NOTEBOOK_BYTES = 32 * 2**20
#: More cells than this is not a lesson's notebook (the longest lesson has 64).
MAX_CELLS = 1000
#: Source of one cell: the course's longest is 3.3 KB.
MAX_CELL_SOURCE_BYTES = 64 * 2**10
#: Source of all cells together: the course's longest notebook holds 42 KB.
MAX_SOURCE_BYTES = 512 * 2**10
#: Saved outputs above this size are reported (nbgrader clears them before grading anyway).
HUGE_OUTPUT_BYTES = 5 * 2**20

#: Errors outside test cells listed one by one in the report; the rest are counted.
MAX_ERRORS_REPORTED = 3


# --- reading what the student controls ---------------------------------------------------------


class NotRead(Exception):
    """A file the grader will not read; the message says why."""


def _size(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def read_no_follow(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, never through a link, at most ``limit`` of them.

    Raises:
        NotRead: ``path`` is a link, not a regular file, unreadable, or over ``limit`` bytes.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotRead(f"{path.name} is a symbolic link; links are never followed") from None
        raise NotRead(f"{path.name} cannot be read ({err.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRead(f"{path.name} is not a regular file")
        over = f"{path.name} is over the {_size(limit)} limit"
        if info.st_size > limit:
            raise NotRead(f"{path.name} is {_size(info.st_size)}, over the {_size(limit)} limit")
        data = fh.read(limit + 1)
    if len(data) > limit:  # it grew while we read it
        raise NotRead(over)
    return data


def _parse(sub: Submission, data: bytes) -> dict | None:
    """The JSON of a notebook file, or ``None`` after flagging why it is not one."""
    if not data.strip():
        sub.flag("the file is empty: not a notebook", gradable=False)
        return None
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        sub.flag("the file is not text (binary data): not a notebook", gradable=False)
        return None
    except json.JSONDecodeError as err:
        sub.flag(
            f"the file is not valid JSON (line {err.lineno}, column {err.colno}: "
            f"{err.msg}): damaged or not a notebook",
            gradable=False,
        )
        return None
    except RecursionError:
        sub.flag("the file is JSON nested too deeply to be a notebook", gradable=False)
        return None
    if not isinstance(raw, dict) or not isinstance(_raw_cells(raw), list):
        sub.flag("the file is JSON but not a Jupyter notebook (no list of cells)", gradable=False)
        return None
    return raw


def _raw_cells(raw: dict) -> list | None:
    """The cells of a notebook's JSON: nbformat 4's ``cells``, nbformat 3's worksheets'."""
    if raw.get("nbformat") == 3 and isinstance(raw.get("worksheets"), list):
        sheets = [w.get("cells") for w in raw["worksheets"] if isinstance(w, dict)]
        return [c for cells in sheets if isinstance(cells, list) for c in cells]
    cells = raw.get("cells")
    return cells if isinstance(cells, list) else None


def _text_bytes(value: object) -> int:
    parts = value if isinstance(value, list) else [value]
    return sum(len(p.encode("utf-8", "surrogatepass")) for p in parts if isinstance(p, str))


def _within_limits(sub: Submission, cells: list, file_bytes: int) -> bool:
    """Flag (not gradable) a notebook over the cell and source limits; report huge outputs."""
    if len(cells) > MAX_CELLS:
        sub.flag(f"{len(cells)} cells, over the limit of {MAX_CELLS}: not graded", gradable=False)
        return False
    cells = [c if isinstance(c, dict) else {} for c in cells]
    sources = [_text_bytes(c.get("source", c.get("input", ""))) for c in cells]  # v3: "input"
    big = [(i, n) for i, n in enumerate(sources) if n > MAX_CELL_SOURCE_BYTES]
    if big:
        where = ", ".join(f"cell {i + 1} ({_size(n)})" for i, n in big[:3])
        sub.flag(
            f"source over the {_size(MAX_CELL_SOURCE_BYTES)} limit for one cell: {where}; "
            "not graded, look at it by hand",
            gradable=False,
        )
        return False
    if sum(sources) > MAX_SOURCE_BYTES:
        sub.flag(
            f"its cells hold {_size(sum(sources))} of source, over the "
            f"{_size(MAX_SOURCE_BYTES)} limit for a notebook; not graded, look at it by hand",
            gradable=False,
        )
        return False
    outputs = [len(json.dumps(c.get("outputs", []))) for c in cells]
    if sum(outputs) > HUGE_OUTPUT_BYTES:
        most = max(range(len(outputs)), key=outputs.__getitem__)
        sub.flag(
            f"huge saved output ({_size(sum(outputs))}, {_size(outputs[most])} of it in cell "
            f"{most + 1}; file {_size(file_bytes)}); outputs were cleared before grading"
        )
    return True


def _read(sub: Submission) -> nbformat.NotebookNode | None:
    """Read ``sub.original`` as a notebook within the limits, or flag it not gradable and say
    why. An nbformat 3 notebook is upgraded (and the report says so)."""
    try:
        data = read_no_follow(sub.original, MAX_NOTEBOOK_BYTES)
    except NotRead as err:
        sub.flag(f"{err}: not graded", gradable=False)
        return None
    raw = _parse(sub, data)
    if raw is None or not _within_limits(sub, _raw_cells(raw) or [], len(data)):
        return None
    version, raw = raw.get("nbformat"), None
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as err:  # nbformat raises several types for malformed notebooks
        sub.flag(f"nbformat cannot read the notebook ({type(err).__name__}: {err})", gradable=False)
        return None
    if version != 4:
        sub.info.append(f"an nbformat {version} notebook: upgraded to nbformat 4 to grade it")
    return nb


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
    """
    if sub.original is None:
        return None
    nb = _read(sub)
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
