"""What a lesson's notebook must contain, read from its instructor and student versions."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_grading.nbgrader.course import nbgrader_cells


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
    # the lesson's own code: every code cell that is not an answer, in the instructor version
    lesson_code: list[str] = field(default_factory=list)
    # sources of every non-answer cell of both versions (a cell with another source is the
    # student's: added or changed)
    lesson_sources: frozenset[str] = frozenset()
    # grade id -> what the instructor version marks it as: its cell type and nbgrader's flags
    # (``MARKED``); a submission's cell marked otherwise is repaired, and the report says so
    marks: dict[str, dict] = field(default_factory=dict)
    # cell id -> (what it is, its source) of every cell the lesson provides for the student to
    # edit (an explorer, a scratch cell: ``PROVIDED`` in its metadata): edited, still the lesson's
    provided: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def from_notebooks(cls, lesson: str, source: Path, release: Path) -> LessonSpec:
        """The spec of ``lesson`` from its instructor (``source``) and student versions.

        A cell's kind comes from the instructor version's nbgrader flags: graded and a
        solution (or a task) is a written answer, graded alone a test, a solution alone an
        autograded answer, locked alone a read-only cell.

        Args:
            lesson: the lesson id (its folder name).
            source: the instructor version of its notebook (``solutions/``).
            release: the student version (``notebooks/``).

        Returns:
            The spec: cells by kind with their points, each grade id's source in both versions,
            the lesson's own code and sources, and each cell's marks.
        """
        source_nb = nbformat.read(str(source), as_version=4)
        release_nb = nbformat.read(str(release), as_version=4)
        src, rel = nbgrader_cells(source_nb), nbgrader_cells(release_nb)
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
            [c.source for c in source_nb.cells if c.cell_type == "code" and not _is_answer(c)],
            frozenset(c.source for c in [*source_nb.cells, *release_nb.cells] if not _is_answer(c)),
            {c["grade_id"]: marks_of(c) for c in src},
            {
                str(c.get("id")): (c.metadata[PROVIDED[0]][PROVIDED[1]], c.source)
                for c in source_nb.cells
                if c.get("id") and c.get("metadata", {}).get(PROVIDED[0], {}).get(PROVIDED[1])
            },
        )

    @property
    def auto_max(self) -> float:
        return sum(self.tests.values())

    @property
    def manual_max(self) -> float:
        return sum(self.written.values())

    def kind(self, grade_id: str) -> str:
        """A plain name for the kind of cell ``grade_id`` is.

        Args:
            grade_id: an nbgrader grade id of this lesson.

        Returns:
            ``"test cell"``, ``"written answer"``, ``"answer cell"`` or, for anything else,
            ``"read-only cell"``; the words the report uses.
        """
        if grade_id in self.tests:
            return "test cell"
        if grade_id in self.written:
            return "written answer"
        if grade_id in self.answers:
            return "answer cell"
        return "read-only cell"


#: Where a cell the lesson provides for editing says what it is:
#: ``cell.metadata["shapes"]["provided"]``, ``"explorer"`` or ``"scratch cell"``.
PROVIDED = ("shapes", "provided")
#: The nbgrader flags that make a cell what it is (with its cell type and, if graded, points).
MARKED = ("grade", "solution", "locked", "task")


def marks_of(cell: dict) -> dict:
    """What an nbgrader cell (``nbgrader_cells``' form) is marked as: its cell type, its flags
    (``MARKED``, missing ones false) and, for a graded cell, its points.

    Args:
        cell: one entry of ``nbgrader_cells``: nbgrader's metadata with ``cell_type``.

    Returns:
        ``{"cell_type", "grade", "solution", "locked", "task"}`` and, when graded, ``"points"``:
        a float, or the value's text cut to 40 characters when it is not a number (a student's
        metadata may hold anything, and the report shows it).
    """
    marks = {"cell_type": cell.get("cell_type"), **{k: bool(cell.get(k)) for k in MARKED}}
    if marks["grade"]:
        try:
            marks["points"] = float(cell.get("points") or 0)
        except (TypeError, ValueError):  # a student's metadata may hold anything
            marks["points"] = str(cell.get("points"))[:40]
    return marks


def _is_answer(cell: nbformat.NotebookNode) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("solution"))
