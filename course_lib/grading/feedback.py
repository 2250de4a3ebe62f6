"""Feedback for students: nbgrader's HTML without the hidden tests.

nbgrader's autograde puts the hidden tests back into the graded notebook, and its feedback
shows them (jupyter/nbgrader#917). The course's ``nbgrader_config.py`` lists
``HideHiddenTests`` among ``GenerateFeedback.preprocessors`` so that every feedback file made
from a course folder (by the grading command or by hand) leaves them out.
"""

from __future__ import annotations

from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import ClearHiddenTests, GetGrades
from traitlets import List


class HideHiddenTests(ClearHiddenTests):
    """Feedback preprocessor: remove hidden tests again, and what their tracebacks reveal.

    nbgrader's autograde puts the hidden tests back into the graded notebook, and its feedback
    shows them (jupyter/nbgrader#917). This removes the ``### BEGIN/END HIDDEN TESTS`` region as
    the release does and, in the same cells, cuts every error traceback down to its last line
    (the exception and its message), since IPython tracebacks quote the failing source line.
    """

    display_data_priority = List(GetGrades.display_data_priority.default_value).tag(config=True)

    def preprocess_cell(
        self, cell: NotebookNode, resources: ResourcesDict, cell_index: int
    ) -> tuple[NotebookNode, ResourcesDict]:
        if not cell.metadata.get("nbgrader", {}).get("grade"):
            return cell, resources  # the student's own code, even if it quotes the delimiter
        had_hidden = self.begin_test_delimeter in cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if had_hidden and cell.cell_type == "code":
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    message = f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".rstrip(": ")
                    out["traceback"] = [message, "(the failing line belongs to a hidden test)"]
        return cell, resources
