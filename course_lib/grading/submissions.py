"""Find student submissions, and check each one against its lesson before and after nbgrader.

nbgrader grades what it is given and stays quiet about several kinds of damage: a deleted test
cell is simply not graded (no warning), copied cells lose their grade id silently, a file that
is not a notebook stops that student's whole assignment. This module finds the submissions in
either layout an instructor is likely to have, and compares every notebook with the lesson's
source and release versions, so that each problem ends up in the report in plain words.

Layouts accepted (both may be mixed in one folder):

* nbgrader's ``<dir>/<student>/<lesson>/<lesson>.ipynb`` (or ``<dir>/submitted/...``), also
  ``<dir>/<student>/<lesson>.ipynb``;
* a flat LMS download: ``<dir>/<student>_<lesson>.ipynb``.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_lib.nbgrader_course import nbgrader_cells

#: Saved outputs above this size are reported (nbgrader clears them before grading anyway).
HUGE_OUTPUT_BYTES = 5 * 2**20

#: Errors outside test cells listed one by one in the report; the rest are counted.
MAX_ERRORS_REPORTED = 3

_SAFE_ID = re.compile(r"[^A-Za-z0-9._@+-]")


@dataclass
class LessonSpec:
    """What a lesson's notebook must contain, read from its source and release versions."""

    lesson: str
    tests: dict[str, float]  # autograder test cells: grade id -> points
    answers: list[str]  # autograded answer cells (solution, not graded)
    written: dict[str, float]  # manually graded answers: grade id -> points
    locked: list[str]  # other read-only cells (instructions, imports)
    source_text: dict[str, str]  # grade id -> source in the instructor version
    release_text: dict[str, str]  # grade id -> source in the student version

    @classmethod
    def from_notebooks(cls, lesson: str, source: Path, release: Path) -> LessonSpec:
        src = nbgrader_cells(nbformat.read(str(source), as_version=4))
        rel = nbgrader_cells(nbformat.read(str(release), as_version=4))
        tests, answers, written, locked = {}, [], {}, []
        for cell in src:
            gid = cell["grade_id"]
            if cell.get("grade") and cell.get("solution") or cell.get("task"):
                written[gid] = float(cell.get("points", 0))
            elif cell.get("grade"):
                tests[gid] = float(cell.get("points", 0))
            elif cell.get("solution"):
                answers.append(gid)
            elif cell.get("locked"):
                locked.append(gid)
        return cls(
            lesson,
            tests,
            answers,
            written,
            locked,
            {c["grade_id"]: c["source"] for c in src},
            {c["grade_id"]: c["source"] for c in rel},
        )

    @property
    def auto_max(self) -> float:
        return sum(self.tests.values())

    @property
    def manual_max(self) -> float:
        return sum(self.written.values())

    def kind(self, grade_id: str) -> str:
        """A plain name for the kind of cell ``grade_id`` is."""
        if grade_id in self.tests:
            return "test cell"
        if grade_id in self.written:
            return "written answer"
        if grade_id in self.answers:
            return "answer cell"
        return "read-only cell"


@dataclass
class Submission:
    """One student's notebook for one lesson, and everything found out about it."""

    student: str
    lesson: str
    original: Path | None  # the file as found; read, never written
    problems: list[str] = field(default_factory=list)  # reasons to look at it (flagged)
    info: list[str] = field(default_factory=list)  # worth knowing, not a problem
    gradable: bool = True
    deleted: list[str] = field(default_factory=list)  # grade ids missing from the notebook
    unchanged_answers: list[str] = field(default_factory=list)
    graded: bool = False
    auto_score: float = 0.0
    score: float = 0.0
    max_score: float = 0.0
    manual_pending: float = 0.0
    failed_tests: list[str] = field(default_factory=list)

    def flag(self, reason: str, *, gradable: bool = True) -> None:
        self.problems.append(reason)
        self.gradable = self.gradable and gradable

    @property
    def status(self) -> str:
        if self.original is None:
            return "missing"
        if not self.graded:
            return "not graded"
        return "flagged" if self.problems else "ok"


# --- finding submissions ---------------------------------------------------------------------


def safe_student_id(raw: str) -> str:
    """A student id usable as a folder name: letters, digits and ``._@+-``; others become ``_``."""
    return _SAFE_ID.sub("_", raw.strip()).lstrip(".") or "_"


def collect(folder: Path, lessons: list[str]) -> tuple[list[Submission], list[str]]:
    """Find every submission under ``folder``; return them and the files that were not understood.

    Submissions are sorted by (student, lesson). A student/lesson pair found twice keeps the
    first path in sorted order and flags the others. Nothing is opened beyond listing.
    """
    folder = Path(folder)
    if (folder / "submitted").is_dir():
        folder = folder / "submitted"
    by_length = sorted(lessons, key=len, reverse=True)
    found: list[tuple[str, str, Path | None, str]] = []  # raw student, lesson, path, note
    unknown: list[str] = []

    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_file():
            lesson = next((x for x in by_length if entry.name.endswith(f"_{x}.ipynb")), None)
            if lesson and len(entry.name) > len(lesson) + 7:
                found.append((entry.name[: -len(lesson) - 7], lesson, entry, ""))
            else:
                unknown.append(str(entry))
            continue
        for item in sorted(entry.iterdir()):
            if item.name.startswith("."):
                continue
            stem = item.stem if item.is_file() and item.suffix == ".ipynb" else item.name
            if stem not in lessons:
                unknown.append(str(item))
            elif item.is_file():
                found.append((entry.name, stem, item, ""))
            else:
                notebook = item / f"{stem}.ipynb"
                if notebook.is_file():
                    found.append((entry.name, stem, notebook, ""))
                else:
                    others = sorted(p.name for p in item.glob("*.ipynb"))
                    seen = f" (found: {', '.join(others)})" if others else " (folder is empty)"
                    found.append(
                        (
                            entry.name,
                            stem,
                            None,
                            f"no {stem}.ipynb in {item}{seen}; rename the file to grade it",
                        )
                    )

    subs: dict[tuple[str, str], Submission] = {}
    for raw, lesson, path, note in found:
        student = safe_student_id(raw)
        key = (student, lesson)
        if key in subs:
            subs[key].flag(f"a second submission for this lesson was ignored: {path}")
            continue
        sub = Submission(student, lesson, path)
        if student != raw:
            sub.info.append(f"student id {raw!r} is used as {student!r}")
        if note:
            sub.flag(note, gradable=False)
        subs[key] = sub
    return [subs[key] for key in sorted(subs)], unknown


def add_missing(subs: list[Submission], lessons: list[str]) -> list[Submission]:
    """Add a ``missing`` row for every student without a submission for one of ``lessons``."""
    have = {(s.student, s.lesson) for s in subs}
    students = sorted({s.student for s in subs})
    extra = [
        Submission(st, le, None, problems=["no notebook submitted for this lesson"], gradable=False)
        for st in students
        for le in lessons
        if (st, le) not in have
    ]
    return sorted(subs + extra, key=lambda s: (s.student, s.lesson))


# --- before grading --------------------------------------------------------------------------


def inspect(sub: Submission, spec: LessonSpec) -> nbformat.NotebookNode | None:
    """Read ``sub.original`` and record everything that nbgrader would not tell us.

    Returns the notebook, or ``None`` when it cannot be graded at all (then ``sub`` says why).
    """
    if sub.original is None:
        return None
    data = sub.original.read_bytes()
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
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        sub.flag("the file is JSON but not a Jupyter notebook (no list of cells)", gradable=False)
        return None
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as err:  # nbformat raises several types for malformed notebooks
        sub.flag(f"nbformat cannot read the notebook ({type(err).__name__}: {err})", gradable=False)
        return None

    output_bytes = sum(len(json.dumps(cell.get("outputs", []))) for cell in nb.cells)
    if output_bytes > HUGE_OUTPUT_BYTES:
        sub.flag(
            f"huge saved output ({output_bytes / 2**20:.1f} MiB, file "
            f"{len(data) / 2**20:.1f} MiB); outputs were cleared before grading"
        )

    cells = nbgrader_cells(nb)
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
    for gid in expected:
        if gid not in positions:
            sub.deleted.append(gid)
    for gid in sub.deleted:
        kind = spec.kind(gid)
        if gid in spec.tests:
            sub.flag(f"{kind} {gid!r} was deleted; it is scored 0 of {spec.tests[gid]:g}")
        elif gid in spec.written:
            sub.flag(f"{kind} {gid!r} was deleted; it is scored 0 of {spec.written[gid]:g}")
        else:
            sub.flag(f"{kind} {gid!r} was deleted; later cells may fail without it")

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
