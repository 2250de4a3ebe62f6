"""Feedback for students: nbgrader's HTML without the hidden tests, and never with a leak.

nbgrader's autograde puts the hidden tests back into the graded notebook, and its feedback
shows them (jupyter/nbgrader#917). The course's ``nbgrader_config.py`` lists two preprocessors
in ``GenerateFeedback.preprocessors``, so that they hold for every feedback file made from a
course folder, by the grading command, by ``nbgrader generate_feedback`` by hand, or by
formgrader's *Generate Feedback* button after manual grading:

- ``HideHiddenTests`` leaves the hidden tests out;
- ``WithholdInstructorMaterial`` then refuses to render a notebook in which any line of a
  hidden test, a solution or a mark scheme still shows (a student's hook that printed each cell
  it saw run, say). That submission gets no feedback page (``withheld.py``: the page is
  removed as soon as nbgrader writes it), nbgrader's log names it in one warning line, and
  the run still succeeds (exit status 0); a record of what was found is kept outside
  ``feedback/``, in ``withheld_feedback/<student>/<lesson>/<notebook>.txt``.
"""

from __future__ import annotations

from pathlib import Path

from nbconvert.exporters.exporter import ResourcesDict
from nbconvert.preprocessors import Preprocessor
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import ClearHiddenTests, GetGrades
from traitlets import Bool, List

from course_grading.nbgrader.course import course_directory, lesson_paths
from course_grading.pages import withheld
from course_grading.review.leaks import found_in, instructor_lines, notebook_text, own_lines

#: Where the records of withheld feedback go, in the course folder (never released).
WITHHELD_DIR = "withheld_feedback"
#: The words a report row and nbgrader's log use for withheld feedback.
WITHHELD = "feedback withheld: it contains instructor material"


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
        """A test cell without its hidden region, its tracebacks cut to their last line; any other
        cell as it is.

        Args:
            cell: one cell of the graded notebook.
            resources: nbconvert's resources.
            cell_index: the cell's position.

        Returns:
            The cell (a copy where nbgrader's step changed it) and ``resources``.
        """
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


class FeedbackWithheld(RuntimeError):
    """Raised (and logged by nbgrader) for a notebook whose feedback cannot be checked."""


def withheld_record(root: Path | str, student: str, lesson: str, notebook: str) -> Path:
    """Where the record of a withheld feedback file is kept.

    Args:
        root: the course folder.
        student: the student's id.
        lesson: the lesson.
        notebook: the notebook's name, without ``.ipynb``.

    Returns:
        ``root/<WITHHELD_DIR>/<student>/<lesson>/<notebook>.txt``.
    """
    return Path(root) / WITHHELD_DIR / student / lesson / f"{notebook}.txt"


class WithholdInstructorMaterial(Preprocessor):
    """Feedback preprocessor: fail, rather than render feedback holding instructor material.

    Runs after ``HideHiddenTests``. The instructor's lines are those of ``leaks.instructor_lines``
    (source against release version); the student's own lines are their submitted notebook's.
    A notebook showing such material is replaced by ``withheld.notice()`` and its page noted
    for removal (``withheld.py``); nothing is raised, so nbgrader reports success. Anything it
    cannot check (a missing source, release or submitted notebook) is refused with
    ``FeedbackWithheld``, naming the path it missed: feedback is never released unchecked.
    """

    enabled = Bool(True).tag(config=True)  # nbconvert's preprocessors are off unless enabled

    def preprocess(
        self, nb: NotebookNode, resources: ResourcesDict
    ) -> tuple[NotebookNode, ResourcesDict]:
        """Pass the feedback notebook on only when it shows no instructor material.

        A withheld notebook's record (:func:`withheld_record`) lists the lines found; a record
        left by an earlier run is removed when the notebook is now clean.

        Args:
            nb: the feedback notebook, as ``HideHiddenTests`` left it.
            resources: nbconvert's resources; ``resources["nbgrader"]`` names the student, the
                lesson and the notebook.

        Returns:
            ``nb`` and ``resources``, unchanged.

        Raises:
            FeedbackWithheld: nbgrader gave no student or lesson, a notebook needed for the check is
                missing, or the notebook shows lines of hidden tests or solutions.
        """
        info = resources.get("nbgrader", {})
        student, lesson, name = info.get("student"), info.get("assignment"), info.get("notebook")
        if not (student and lesson and name):
            raise FeedbackWithheld("feedback not checked: nbgrader gave no student or lesson id")
        course = course_directory(self)
        source, release, submitted = lesson_paths(course, lesson, name, student)
        missing = [str(p) for p in (source, release, submitted) if not p.is_file()]
        if missing:
            raise FeedbackWithheld(
                f"feedback for {student}, {lesson} not made: cannot check it for instructor "
                f"material without {', '.join(missing)}"
            )
        found = found_in(notebook_text(nb), instructor_lines(source, release), own_lines(submitted))
        record = withheld_record(course.root, student, lesson, name)
        if not found:
            record.unlink(missing_ok=True)
            return nb, resources
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(
            f"{WITHHELD}: {len(found)} line(s) of hidden tests or solutions appear in what "
            f"{student}'s {lesson} notebook shows:\n" + "".join(f"  {line}\n" for line in found),
            encoding="utf-8",
        )
        page = Path(course.format_path(course.feedback_directory, student, lesson))
        withheld.hold_back(page / f"{name}.html")
        self.log.warning(
            "%s (%s, %s: %d line(s), e.g. %r); no feedback page for it; the lines found: %s",
            WITHHELD, student, lesson, len(found), found[0][:60], record,
        )  # fmt: skip
        return withheld.notice(), resources
