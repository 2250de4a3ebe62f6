"""What a lesson's notebook must contain, read from its instructor and student versions."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_grading.course import nbgrader_cells


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

    @classmethod
    def from_notebooks(cls, lesson: str, source: Path, release: Path) -> LessonSpec:
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


def _is_answer(cell: nbformat.NotebookNode) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("solution"))
