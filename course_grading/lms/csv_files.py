"""Reading a CSV file an LMS exported, and writing a new one, with the ``csv`` module.

Read: the whole file as UTF-8 (a byte-order mark is noted and removed), the separator found as
Canvas's importer finds it (the one that splits the first lines into the same number of
fields, more than one), every record the same width as the header, or an error naming the row.
Rows are counted as records, the header being row 1, so a name holding a line break does not
shift the numbers.

Write: a new file only (``open(..., "x")``: an existing file, or a link in the way, is never
replaced), with the separator, byte-order mark and line ending of the file read, so that the
LMS reads it as it read its own export. Text cells go through the grader's formula guard
(``report.csv_text``), except the ids the LMS finds a student by, which must stay exact (a
guarded ``-jdoe`` is nobody to Moodle): those are written as they are and, where one could read
as a formula, listed for review. Numbers are written as the LMS exports them, at most two
decimals.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.report_text import csv_text, one_line, raise_field_limit

BOM = "\ufeff"
SEPARATORS = (",", ";", "\t")
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)?")


@dataclass(frozen=True)
class Table:
    """A CSV file as read: its records, and how it was written."""

    rows: list[list[str]]
    separator: str = ","
    bom: bool = False
    line_end: str = "\r\n"
    name: str = ""  # the file, for messages

    @property
    def header(self) -> list[str]:
        return self.rows[0]


def _text(path: Path, what: str) -> str:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise GradingError(f"cannot read the {what} {path} ({err.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise GradingError(
            f"the {what} {path} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}); use the file as the LMS exported it, or save it as 'CSV UTF-8'"
        ) from None


def _separator(text: str) -> str:
    """The separator that splits the first three records into one width above 1 (``,`` else)."""
    best, width = ",", 1
    for sep in SEPARATORS:
        try:
            first = list(zip(range(3), csv.reader(io.StringIO(text), delimiter=sep)))
        except csv.Error:
            continue
        widths = {len(row) for _, row in first}
        if len(widths) == 1 and (found := widths.pop()) > width:
            best, width = sep, found
    return best


def read_table(path: Path, what: str) -> Table:
    """Read the CSV file ``path`` (see the module docstring).

    Args:
        path: the file.
        what: what it is, in words, for messages (``"Canvas gradebook"``).

    Returns:
        Its records (row 1 is the header), separator, byte-order mark and line ending.

    Raises:
        GradingError: the file cannot be read, is not UTF-8, is not CSV, is empty, or has a
            record of another width than the header's (the message names the row).
    """
    text = _text(Path(path), what)
    raise_field_limit()  # a long cell (a name students chose) is read, never a crash
    bom = text.startswith(BOM)
    text = text.removeprefix(BOM)
    first_line = text.split("\n", 1)[0]
    line_end = "\r\n" if first_line.endswith("\r") else "\n"
    sep = _separator(text)
    rows: list[list[str]] = []
    try:
        for row in csv.reader(io.StringIO(text, newline=""), delimiter=sep, strict=True):
            if row and any(cell.strip() for cell in row):
                rows.append(row)
            elif rows:  # a blank line: Canvas skips it too; keep the count of records
                rows.append([""] * len(rows[0]))
    except csv.Error as err:
        raise GradingError(f"{what} {path}: row {len(rows) + 1} is not CSV ({err})") from None
    while rows and not any(c.strip() for c in rows[-1]):
        rows.pop()
    if not rows:
        raise GradingError(f"the {what} {path} is empty")
    for number, row in enumerate(rows, start=1):
        if len(row) != len(rows[0]):
            raise GradingError(
                f"{what} {path}: row {number} has {len(row)} cells, the header {len(rows[0])}; "
                "was the file edited? Export it again"
            )
    return Table(rows, sep, bom, line_end, str(path))


def number_text(value: float) -> str:
    """A score as an LMS exports one: at most two decimals, no exponent, no trailing zeros.

    Args:
        value: the score.

    Returns:
        ``"7.5"`` for 7.5, ``"7"`` for 7.0, ``"0.33"`` for 1/3.
    """
    text = f"{round(value, 2):.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def safe_cell(text: str) -> str:
    """A cell for the file written: a plain number as it is, any other text formula-guarded.

    Args:
        text: the cell's text.

    Returns:
        ``text`` unchanged if it is a number (``-1``, ``7.5``, ``7,5``), ``-`` (no grade, to
        Canvas and Moodle) or empty; otherwise ``report.csv_text(text)``: on one line, with a
        leading ``'`` before ``=``, ``+``, ``-``, ``@``, a tab or a carriage return.
    """
    if not text or text.strip() == "-" or _NUMBER.fullmatch(text.strip()):
        return text
    return csv_text(text)


def formula_like(text: str) -> bool:
    """Whether a spreadsheet could read ``text`` as a formula (``safe_cell`` would guard it).

    Args:
        text: a cell's text.

    Returns:
        ``True`` when ``safe_cell`` would add a leading ``'``.
    """
    return safe_cell(text) != text and csv_text(text) != one_line(text)


def parse_number(text: str) -> float | None:
    """A cell's number as an LMS writes it (``7.5`` or ``7,5``), or ``None`` if it is none.

    Args:
        text: the cell.

    Returns:
        The number, or ``None`` for anything else (blank, ``EX``, ``(read only)``, ...).
    """
    text = text.strip()
    return float(text.replace(",", ".")) if _NUMBER.fullmatch(text) else None


def write_new(paths_and_tables: list[tuple[Path, Table]]) -> None:
    """Write each table to its path, none of which may exist yet; nothing is replaced.

    Every path is checked before anything is written, so a refusal leaves no half output.

    Args:
        paths_and_tables: where to write each table; cells are written as they are (callers
            make them safe with ``safe_cell``).

    Raises:
        GradingError: a path exists already (a link included), or cannot be written.
    """
    taken = [str(p) for p, _ in paths_and_tables if p.exists() or p.is_symlink()]
    if taken:
        raise GradingError(
            f"{', '.join(taken)} exist(s) already; nothing is overwritten: choose another "
            "output file"
        )
    for path, table in paths_and_tables:
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer, delimiter=table.separator, lineterminator=table.line_end)
        writer.writerows(table.rows)
        try:
            with open(path, "x", encoding="utf-8", newline="") as fh:
                fh.write((BOM if table.bom else "") + buffer.getvalue())
        except OSError as err:
            raise GradingError(f"cannot write {path} ({err.strerror})") from None
