"""Canvas: the instructor's gradebook export, filled with one column per lesson, as a new file.

The rules are Canvas's own, read from its exporter and importer (``lib/gradebook_exporter.rb``,
``app/models/gradebook_importer.rb`` in instructure/canvas-lms):

- header: ``Student`` (or ``LastName, FirstName``), ``ID``, then ``SIS Login ID``, or ``SIS User
  ID, SIS Login ID`` with an optional ``Integration ID`` and ``Root Account``, then ``Section``;
  custom columns, one column per assignment titled ``Title (id)``, and read-only totals follow;
- a row whose cells are only ``Manual Posting`` (or ``Muted``) or blank, and a row whose first
  cell holds ``Points Possible``, describe assignments; every other row is a student, found
  on import by ``ID``, else ``SIS User ID``, else ``SIS Login ID``, else by name. A student
  in several sections has one row naming them all (``A and B``);
- a column titled like an existing assignment (``Title (id)``, or its title alone) grades it; a
  column with a new title creates an assignment of that title, out of the points in its
  Points Possible cell; a title holding ``Current Score``, ``Final Grade``, ... is taken
  for a total and ignored; a blank cell is no score;
- the file may use ``;`` and a byte-order mark (per-user export settings): kept as they were.

What is written: the student columns as they were (up to ``Section``), then one column per
lesson; every other column is left out, so the upload changes nothing else (an old value
there would overwrite a grade entered in Canvas since the export). A row of no graded student,
or of an ambiguous one, keeps the cell Canvas exported (no change); so do ``EX`` (excused) and
``N/A`` (not assigned) cells. Text cells are formula-guarded (``csv_files.safe_cell``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from course_grading.errors import GradingError
from course_grading.lms.csv_files import Table, parse_number
from course_grading.lms.matching import LmsRow, Matches, match
from course_grading.lms.scores import ClassScores
from course_grading.report import one_line

WHAT = "Canvas gradebook"
RESERVED = {
    "Student", "LastName", "FirstName", "ID", "SIS User ID", "SIS Login ID", "Section",
    "Integration ID", "Root Account",
}  # fmt: skip
#: Canvas takes any column whose title holds one of these for a total, and ignores it.
TOTALS = (
    "Current Score", "Current Points", "Current Grade", "Final Score", "Final Points",
    "Final Grade", "Override Score", "Override Grade", "Override Status",
)  # fmt: skip
#: Which ids ``--match`` may use, and their columns.
ID_COLUMNS = {"login": "SIS Login ID", "sis": "SIS User ID", "id": "ID"}
_TITLE_ID = re.compile(r"(?P<title>.*) \((?P<id>\d+)\)")
_HIDDEN = re.compile(r"\s*(Muted|Manual Posting.*)?\s*", re.I)


@dataclass(frozen=True)
class Target:
    """Where a lesson's scores go: an existing column (its index) or a new one (``None``)."""

    lesson: str
    header: str
    index: int | None
    points_possible: float  # the column's, or the lesson's for a new column


class CanvasGradebook:
    """A Canvas gradebook export, checked against Canvas's header rules.

    Args:
        table: the export as read (``csv_files.read_table``).

    Raises:
        GradingError: the file breaks a rule (module docstring): no ``Student, ID`` header, no
            ``Section`` after the student columns, not one Points Possible row, a student row
            without any id. The message names the row or column.
    """

    def __init__(self, table: Table) -> None:
        self.table = table
        self.columns = self._student_columns(table.header)
        self.info_end = self.columns["Section"] + 1
        points = [i for i, row in enumerate(table.rows) if self._is_points(i, row)]
        if len(points) != 1:
            raise self._error(
                f"{len(points)} Points Possible rows (Canvas's export has one, after the header): "
                "export it again"
            )
        self.points_row = points[0]
        self.people = [
            self._person(i, row)
            for i, row in enumerate(table.rows)
            if i and not self._describes_assignments(i, row)
        ]

    def _error(self, text: str) -> GradingError:
        return GradingError(f"{WHAT} {self.table.name}: {text}")

    def _student_columns(self, header: list[str]) -> dict[str, int]:
        cells = [c.strip() for c in header]
        names = 2 if cells[:2] == ["LastName", "FirstName"] else 1
        if cells[names : names + 1] != ["ID"] or cells[0] not in ("Student", "LastName"):
            raise self._error(
                f"row 1 starts {', '.join(cells[:3])}, not Student, ID (or LastName, FirstName, "
                "ID) as Canvas's export does: give the file of Grades > Export"
            )
        columns, at = {"ID": names}, names + 1
        if cells[at : at + 2] == ["SIS User ID", "SIS Login ID"]:
            columns |= {"SIS User ID": at, "SIS Login ID": at + 1}
            at += 2
            for optional in ("Integration ID", "Root Account"):
                at += cells[at : at + 1] == [optional]
        elif cells[at : at + 1] == ["SIS Login ID"]:
            columns["SIS Login ID"], at = at, at + 1
        if cells[at : at + 1] != ["Section"]:
            found = repr(cells[at]) if at < len(cells) else "missing"
            raise self._error(
                f"row 1 has no Section column after the student columns (column {at + 1} is "
                f"{found})"
            )
        columns["Section"] = at
        return columns

    def _is_points(self, index: int, row: list[str]) -> bool:
        return index > 0 and "Points Possible" in row[0]

    def _describes_assignments(self, index: int, row: list[str]) -> bool:
        return self._is_points(index, row) or all(_HIDDEN.fullmatch(c) for c in row)

    def _person(self, index: int, row: list[str]) -> LmsRow:
        ids = {name: row[i].strip() for name, i in self.columns.items() if name != "Section"}
        found = tuple(v for v in ids.values() if v)
        if not found:
            raise self._error(
                f"row {index + 1} has no ID, SIS User ID or SIS Login ID: Canvas could find "
                "that student only by name, and so could not this export; export it again"
            )
        name = one_line(" ".join(row[: self.columns["ID"]]).strip())
        label = f"{name}, ID {ids['ID']}" if ids["ID"] else name
        return LmsRow(index + 1, found, ids["ID"] or found[0], label)

    @property
    def id_columns(self) -> list[int]:
        """The columns Canvas finds a student by (written exactly, never formula-guarded)."""
        return [i for name, i in self.columns.items() if name != "Section"]

    def points_possible(self, index: int) -> str:
        """The Points Possible cell of column ``index``.

        Args:
            index: a column of the file.

        Returns:
            The cell as exported (``"10.00"``, ``"(read only)"``, ``""``).
        """
        return self.table.rows[self.points_row][index]

    def target(self, lesson: str, name: str, lesson_max: float) -> Target:
        """The column ``lesson`` fills: the one titled ``name``, or a new one so titled.

        Args:
            lesson: the lesson.
            name: the column's header (``Title (id)``) or an assignment's title.
            lesson_max: the lesson's maximum score, the new column's points possible.

        Returns:
            The column.

        Raises:
            GradingError: ``name`` is a student column, or names several columns, or a column
                that is not an assignment, or a new title Canvas would misread.
        """
        if name in RESERVED:
            raise self._error(f"{name!r} is one of Canvas's student columns, not an assignment")
        header = [c.strip() for c in self.table.header]
        found = [
            i
            for i in range(self.info_end, len(header))
            if name in (header[i], (m := _TITLE_ID.fullmatch(header[i])) and m["title"])
        ]
        if len(found) > 1:
            listed = ", ".join(repr(header[i]) for i in found)
            raise self._error(
                f"several columns are titled {name!r} ({listed}): choose one with "
                f"--column {lesson}='{header[found[0]]}'"
            )
        if not found:
            return Target(lesson, self._new_title(lesson, name), None, lesson_max)
        pp = parse_number(self.points_possible(found[0]))
        if pp is None:
            raise self._error(
                f"column {header[found[0]]!r} is not an assignment Canvas grades (its Points "
                f"Possible cell is {self.points_possible(found[0])!r}): choose another --column"
            )
        return Target(lesson, header[found[0]], found[0], pp)

    def _new_title(self, lesson: str, name: str) -> str:
        total = next((t for t in TOTALS if t in name), None)
        why = ""
        if total:
            why = f"holds {total!r}, so Canvas would take it for a total"
        elif not name.strip():
            why = "is blank"
        elif _TITLE_ID.fullmatch(name):
            why = "names an assignment id no column of the file has"
        if why:
            raise self._error(
                f"a new column for {lesson} titled {name!r} {why}: give --column {lesson}=TITLE"
            )
        return name.strip()

    def matches(self, scores: ClassScores, keys: tuple[str, ...]) -> Matches:
        """Match the graded students to the file's rows, by the ids ``keys`` choose.

        Args:
            scores: the graded class.
            keys: which ids to match by (``ID_COLUMNS``' names: ``login``, ``sis``, ``id``).

        Returns:
            The matches (``matching.match``).
        """
        indexes = [self.columns[ID_COLUMNS[k]] for k in keys if ID_COLUMNS[k] in self.columns]
        rows = []
        for person in self.people:
            row = self.table.rows[person.number - 1]
            ids = tuple(row[i].strip() for i in indexes if row[i].strip())
            rows.append(LmsRow(person.number, ids, person.person, person.label))
        return match(scores.names, rows)
