"""nbgrader's ``OverwriteCells`` without its false checksum warning for hidden tests.

When a submission is autograded, ``OverwriteCells`` puts every locked cell back as the gradebook
recorded it from the instructor's version. A test cell with hidden tests was released without
them, so its source never matches the recorded one and nbgrader logs ``Attribute 'checksum' for
cell ... has changed!`` for every such cell of every submission (five per lesson-5 notebook;
upstream jupyter/nbgrader#1961), though the student changed nothing. :class:`RestoreLockedCells`
is the same step, cell for cell, except that it stays quiet when the submitted cell is exactly
the released one (the recorded source with its hidden-test region removed); a test cell the
student did edit is still reported, and restored, as before.

The course's ``nbgrader_config.py`` names it in ``Autograde.sanitize_preprocessors`` (so
``nbgrader autograde`` and formgrader's button use it) and the grading command's own sanitize
step uses it (``gradebook.SANITIZE``).
"""

from __future__ import annotations

from typing import Any

from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import ClearHiddenTests, OverwriteCells


def released_source(source: str, cell_type: str = "code") -> str:
    """What nbgrader's release makes of a recorded cell's source: its hidden tests removed.

    Args:
        source: the cell's source as the gradebook recorded it (instructor version).
        cell_type: ``"code"`` or ``"markdown"``.

    Returns:
        The source with every ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS`` region
        removed, as ``nbgrader generate_assignment`` removes it (nbgrader's own
        ``ClearHiddenTests``, default delimiters).
    """
    cell = NotebookNode(cell_type=cell_type, source=source, metadata={})
    ClearHiddenTests()._remove_hidden_test_region(cell)
    return cell.source


class RestoreLockedCells(OverwriteCells):
    """``OverwriteCells``, quiet about a checksum that differs only by the hidden tests."""

    _as_released = False

    def preprocess_cell(
        self, cell: NotebookNode, resources: ResourcesDict, cell_index: int
    ) -> tuple[NotebookNode, ResourcesDict]:
        """nbgrader's restore, told first whether the cell is exactly as released.

        Args:
            cell: a cell of the submitted notebook.
            resources: nbgrader's resources for the notebook.
            cell_index: its index.

        Returns:
            The cell (a locked one restored from the gradebook) and the resources.
        """
        self._as_released = self._unchanged_since_release(cell)
        return super().preprocess_cell(cell, resources, cell_index)

    def _unchanged_since_release(self, cell: NotebookNode) -> bool:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is None:
            return False
        try:
            recorded = self.gradebook.find_source_cell(
                grade_id, self.notebook_id, self.assignment_id
            )
        except MissingEntry:
            return False
        if not recorded.locked or recorded.cell_type != cell.cell_type:
            return False
        released = released_source(recorded.source, recorded.cell_type)
        return released != recorded.source and cell.source == released

    def report_change(self, name: str, attr: str, old: Any, new: Any) -> None:
        """nbgrader's warning, except for the checksum of a cell exactly as it was released.

        Args:
            name: the cell's grade id.
            attr: what differs (``cell_type``, ``locked``, ``points``, ``checksum``).
            old: the recorded value.
            new: the submitted value.
        """
        if attr == "checksum" and self._as_released:
            self.log.debug("Cell %s is as released (its hidden tests are put back)", name)
            return
        super().report_change(name, attr, old, new)
