"""What a lesson's notebook must contain, read from its instructor and student versions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_lib.grading.course import nbgrader_cells


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
