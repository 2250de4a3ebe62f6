"""The student's own run beside the grader's, in the cells that written answers quote.

Grading runs every notebook again, so the graded copy and the feedback show the grader's
outputs. A written answer quotes the student's run, as its question asks ("quote the range of the
pairs your run printed"): lesson 4's step times, a GPU's allocator peaks, a float's last digits.
Below the grader's ×1.37 an honest ×1.12 reads as invented, and the grader's own run may even
order two timings the other way.

The instructor notebook marks each cell whose output written answers quote:
``metadata.shapes.quoted_by`` lists their grade ids. :class:`ShowStudentRun`, a step right after
execution (in ``gradebook.RECORD`` and in ``nbgrader_config.py``'s autograde steps), labels the
grader's outputs of each marked cell and adds, below them, the text that cell showed in the file
as submitted, labelled as the student's run. Both the graded copy and every page made from it
(formgrader's view, the feedback) then show the two runs side by side. The grading command
stages each submission with its outputs cleared: :func:`keep_student_runs` leaves the quoted
cells their run (as bounded text) in that copy, so the step finds it there as nbgrader's
``autograde`` finds it in the file as submitted.

What crosses is the student's and untrusted, so only text crosses, and little of it: stream
text to stdout, the ``text/plain`` of results and displays, an error's name and message; a figure
or HTML is named, never copied; ANSI escapes and control characters are removed, a carriage
return keeps what a terminal would show, and at most ``QUOTED_LINES`` lines and
``QUOTED_CHARS`` characters are kept per cell, and a line imitating this step's labels is left
out. It lands as a ``text/plain`` display, which every
page shows escaped (and ``NeutraliseActiveContent`` runs after this step anyway). A student can
write any number into their own file; that is why the grader's run stays beside it.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode, from_dict
from nbgrader.preprocessors import NbGraderPreprocessor

from course_grading.nbgrader.course import course_directory, lesson_paths

#: Where a cell's mark lives: ``metadata[METADATA][MARK]``, the written answers' grade ids.
METADATA, MARK = "shapes", "quoted_by"
#: The output metadata key that tells this step's outputs apart (``"grader"`` or ``"student"``).
RUN_KEY = "run"
#: At most this much of the student's run is kept per cell.
QUOTED_LINES, QUOTED_CHARS = 60, 4000
GRADER_LABEL = (
    "[the grader's run] Grading ran this cell again; its output below comes from the grader's "
    "machine, not the student's."
)
STUDENT_LABEL = (
    "[the student's own run, as submitted] The written answer(s) {ids} quote this cell's output "
    "from the student's run: read the student's numbers here."
)
#: A line of the student's text that imitates a label (to pass their numbers off as the
#: grader's) is replaced by this.
IMITATION = "[a line imitating the grader's labels, left out]"
_LABELS = re.compile(r"\[the (grader's run|student's own run)", re.I)
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _grade_id(cell: NotebookNode) -> str | None:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    gid = meta.get("grade_id") if isinstance(meta, dict) else None
    return gid if isinstance(gid, str) else None


def quoted_cells(source: NotebookNode) -> dict[str, list[str]]:
    """The cells of an instructor notebook whose outputs written answers quote.

    Args:
        source: the lesson's instructor notebook (trusted: never the submitted file).

    Returns:
        Each marked code cell's grade id -> the grade ids of the written answers quoting it.
    """
    found = {}
    for cell in source.cells:
        ids = cell.get("metadata", {}).get(METADATA, {}).get(MARK)
        if cell.cell_type == "code" and (gid := _grade_id(cell)) and ids:
            found[gid] = [str(i) for i in ids]
    return found


def _plain_text(value: object) -> str:
    text = "".join(value) if isinstance(value, list) else value if isinstance(value, str) else ""
    text = _ANSI.sub("", text)
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]  # what a terminal shows
    return _CONTROL.sub("", "\n".join(lines))


def _output_text(output: NotebookNode) -> str:
    kind = output.get("output_type")
    if kind == "stream":
        return _plain_text(output.get("text")) if output.get("name") == "stdout" else ""
    if kind == "error":
        return _plain_text(f"{output.get('ename', 'Error')}: {output.get('evalue', '')}\n")
    data = output.get("data", {}) if isinstance(output.get("data"), dict) else {}
    if "application/vnd.jupyter.widget-view+json" in data:
        return ""  # a progress bar or a slider: nothing to quote
    if any(str(mime).startswith("image/") for mime in data):
        return "[a figure: not copied]\n"
    text = _plain_text(data.get("text/plain"))
    return text + "\n" if text and not text.endswith("\n") else text


def run_text(cell: NotebookNode) -> str:
    """What a submitted cell showed, as bounded plain text (module docstring).

    Args:
        cell: the cell in the file as submitted (untrusted).

    Returns:
        Its outputs' text, at most ``QUOTED_LINES`` lines and ``QUOTED_CHARS`` characters
        (a last line says how much was left out); ``""`` when it showed nothing to quote.
    """
    outputs = cell.get("outputs", []) if isinstance(cell.get("outputs"), list) else []
    text = "".join(_output_text(o) for o in outputs if isinstance(o, dict))[: 4 * QUOTED_CHARS]
    lines = text.rstrip("\n").split("\n") if text.strip() else []
    lines = [IMITATION if _LABELS.search(line) else line for line in lines]
    kept = "\n".join(lines[:QUOTED_LINES])[:QUOTED_CHARS]
    if len(kept) < len("\n".join(lines)):
        kept += "\n[... the rest of the student's output is left out]"
    return kept


def keep_student_runs(
    staged: NotebookNode, submitted: NotebookNode, source: NotebookNode
) -> list[str]:
    """Give the quoted cells of the grading command's staged copy their run, as bounded text.

    The grading command stages a copy of each submission with every output cleared
    (``review/inspection.repaired_copy``); the quoted cells' runs would be lost before this
    step could show them, so the copy keeps them, reduced to :func:`run_text` already.

    Args:
        staged: the staged copy, cell for cell the submitted notebook (outputs cleared).
        submitted: the notebook as submitted (untrusted).
        source: the lesson's instructor notebook (its marks).

    Returns:
        The grade ids of the cells whose run was kept.
    """
    marks = quoted_cells(source)
    kept = []
    for mine, theirs in zip(staged.cells, submitted.cells):
        gid = _grade_id(theirs)
        if gid in marks and mine.get("cell_type") == "code" and (text := run_text(theirs)):
            mine.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
            kept.append(gid)
    return kept


def _label(text: str, run: str) -> NotebookNode:
    return from_dict(
        {
            "output_type": "display_data",
            "data": {"text/plain": text},
            "metadata": {METADATA: {RUN_KEY: run}},
        }
    )


def _ours(output: NotebookNode) -> bool:
    meta = output.get("metadata", {})
    return isinstance(meta, dict) and RUN_KEY in meta.get(METADATA, {})


def show_student_run(
    executed: NotebookNode, submitted: NotebookNode, source: NotebookNode
) -> list[str]:
    """Label the grader's outputs of every quoted cell of ``executed`` and add the student's run
    below them, in place. Running it again gives the same notebook.

    Args:
        executed: the notebook as the grader ran it.
        submitted: the file as the student submitted it (untrusted: only its outputs' text of
            the marked cells is read, through :func:`run_text`).
        source: the lesson's instructor notebook, whose marks say which cells are quoted.

    Returns:
        The grade ids of the cells given both runs.
    """
    marks = quoted_cells(source)
    theirs: dict[str, NotebookNode] = {}
    for cell in submitted.cells:
        gid = _grade_id(cell)
        if gid in marks and cell.get("cell_type") == "code":
            theirs[gid] = cell  # the last copy, the one nbgrader grades
    shown = []
    for cell in executed.cells:
        gid = _grade_id(cell)
        if cell.cell_type != "code" or gid not in marks:
            continue
        outputs = [o for o in cell.outputs if not _ours(o)]
        text = run_text(theirs[gid]) if gid in theirs else ""
        ids = ", ".join(marks[gid])
        student = STUDENT_LABEL.format(ids=ids) + "\n" + (
            text or "[the submitted file holds no output of this cell: it was not run, or its "
            "outputs were cleared]"
        )  # fmt: skip
        cell.outputs = [_label(GRADER_LABEL, "grader"), *outputs, _label(student, "student")]
        shown.append(gid)
    return shown


class ShowStudentRun(NbGraderPreprocessor):
    """Autograde step after execution: both runs in every quoted cell (module docstring).

    It reads the lesson's instructor notebook and the file as submitted from the course folder
    (``resources["nbgrader"]`` names the lesson, the notebook and the student).
    """

    def preprocess(
        self, nb: NotebookNode, resources: ResourcesDict
    ) -> tuple[NotebookNode, ResourcesDict]:
        """Show the student's own run beside the grader's in every quoted cell of ``nb``.

        Args:
            nb: the executed notebook.
            resources: nbgrader's resources.

        Returns:
            ``nb``, its quoted cells labelled, and ``resources`` unchanged.
        """
        info = resources["nbgrader"]
        source, _, submitted = lesson_paths(
            course_directory(self), info["assignment"], info["notebook"], info["student"]
        )
        marked = _read(source)
        if marked is None or not quoted_cells(marked):
            return nb, resources
        theirs = _read(submitted)
        if theirs is None:  # nbgrader read it already; nothing of it is shown if it cannot be
            theirs = nbformat.v4.new_notebook()
        show_student_run(nb, theirs, marked)
        return nb, resources


def _read(path: Path) -> NotebookNode | None:
    try:
        return nbformat.read(str(path), as_version=4)
    except Exception:  # noqa: BLE001 (nbformat raises several types for a damaged file)
        return None
