"""The same export as an nbgrader export plugin, for a course folder's (or the class's) gradebook.

    nbgrader export --exporter course_grading.lms.nbgrader_export.CanvasExport \\
        --to canvas.csv --CanvasExport.lms_file=CANVAS_EXPORT.csv
    nbgrader export --exporter course_grading.lms.nbgrader_export.MoodleExport \\
        --to moodle.csv [--MoodleExport.lms_file=MOODLE_EXPORT.csv] [--MoodleExport.id_field=email]

nbgrader's ``ExportPlugin`` API (``nbgrader/plugins/export.py``): the app makes the plugin with
the app as its parent, sets ``to`` (``--to``), ``assignment`` and ``student`` (``--assignment``,
``--student``: only those), and calls ``export(gradebook)``. Scores are the gradebook's, as
``nbgrader export`` computes them (points less late penalty; 0 for no submission); students'
e-mail addresses and LMS user ids in the gradebook are matched too. The options of ``python -m
course_grading export`` are traits here (``columns`` is a dict, lesson -> column). A problem
is one error line in nbgrader's log and exit status 2, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from nbgrader.api import Gradebook
from nbgrader.plugins import ExportPlugin
from traitlets import Bool, Dict, Enum, Unicode

from course_grading.errors import GradingError
from course_grading.lms import review as rv
from course_grading.lms.export import export_grades
from course_grading.lms.scores import from_gradebook


class LmsExport(ExportPlugin):
    """Base of the LMS exporters: the options, the scores, the messages."""

    lms_format = ""  # set by each subclass: "canvas" or "moodle"

    lms_file = Unicode("", help="the LMS's own export (Canvas: required)").tag(config=True)
    columns = Dict(
        value_trait=Unicode(), help="lesson -> the column it fills (header or title)"
    ).tag(config=True)
    match = Unicode("", help="ids to match students by, comma-separated").tag(config=True)

    def export(self, gradebook: Gradebook) -> None:
        """Write ``self.to`` (and its review file) from ``gradebook``; log the notes.

        Args:
            gradebook: the gradebook ``nbgrader export`` opened.

        Raises:
            SystemExit: with status 2 after logging the reason, when nothing could be written.
        """
        out = Path(self.to or f"{self.lms_format}.csv")
        scores = from_gradebook(
            gradebook, [str(a) for a in self.assignment], [str(s) for s in self.student]
        )
        try:
            notes = export_grades(
                scores,
                self.lms_format,
                out,
                lms_file=Path(self.lms_file) if self.lms_file else None,
                columns=dict(self.columns),
                match=self.match or None,
                **self._options(),
            )
        except GradingError as err:
            self.log.error("%s", err)
            raise SystemExit(2) from None
        self.log.info("wrote %s; review before uploading: %s", out, rv.review_path(out))
        for line in rv.summary(notes):
            self.log.warning("%s", line)

    def _options(self) -> dict:
        return {}


class CanvasExport(LmsExport):
    """Fill a Canvas gradebook export (``lms_file``) with one column per assignment."""

    lms_format = "canvas"
    rescale = Bool(False, help="enter scores out of a column's points possible").tag(config=True)

    def _options(self) -> dict:
        return {"rescale": self.rescale}


class MoodleExport(LmsExport):
    """A file for Moodle's CSV grade import, by username or e-mail address."""

    lms_format = "moodle"
    id_field = Enum(["username", "email"], "username", help="the user field").tag(config=True)

    def _options(self) -> dict:
        return {"id_field": self.id_field}
