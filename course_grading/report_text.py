"""Text a student controls, made safe for the grader's reports, CSV files, pages and logs.

Every such text (an id, a file's name, an exception's message, a value quoted back, a field of
a notebook's metadata) goes through these before it is written:

- :func:`bounded`: at most a field's limit (``LIMITS``), the cut saying how long the text was;
- :func:`one_line`: control characters (newlines, terminal escapes) become spaces;
- :func:`csv_text`: no cell a spreadsheet could read as a formula (:func:`formula_start`: one
  starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return once read as NFKC and
  past any spaces and invisible characters) without a leading ``'``; :func:`unguarded` takes it
  off again where the grader reads its own files;
- :func:`markdown_text`: nothing live in Markdown (every ASCII punctuation character that means
  something there backslash-escaped).

:func:`read_rows` reads the grader's own CSV files with ``csv``'s field limit raised, so that a
workspace written before fields were bounded is still read.
"""

from __future__ import annotations

import csv
import re
import sys
import unicodedata
from pathlib import Path

_FORMULA = ("=", "+", "-", "@", "\t", "\r")
#: What can start a link, image, autolink, HTML, entity, code span or emphasis, or end a cell
#: (``_`` inside a word is not emphasis in CommonMark and stays, so ``99_fixture`` reads as is).
_PUNCTUATION = re.compile(r"([\\`*~!\[\]()<>&|:./@{}])")


#: Most characters of each report field that a student's text can fill; a longer text is cut
#: and ends saying so (:func:`bounded`). A student id is a file or folder name (255 bytes at
#: most, with ``submissions``' few added characters), so its limit never cuts one: the id is
#: how ``export`` and ``--student`` find a row.
LIMITS = {"student": 300, "lesson": 200, "file": 1_000, "reason": 2_000, "failed_test": 1_000}
#: Most characters of a row's reasons together, and of its failed items together (well under
#: the 131,072 characters Python's ``csv`` reads in one field by default).
CELL_LIMIT = 30_000


def bounded(text: str, limit: int) -> str:
    """``text``, or its start and a note of how long it was when it is longer than ``limit``.

    Args:
        text: any text.
        limit: most characters returned (the note included).

    Returns:
        ``text`` when it fits; else its first characters and ``"… (cut: 20,000,000
        characters)"``, ``limit`` characters in all (so a bounded text is never cut again).
    """
    if len(text) <= limit:
        return text
    note = f"… (cut: {len(text):,} characters)"
    return text[: max(0, limit - len(note))] + note


def bounded_all(texts: tuple[str, ...], limit: int) -> tuple[str, ...]:
    """Each text :func:`bounded` to ``limit``, as many as fit in ``CELL_LIMIT`` together.

    Args:
        texts: the texts of one field (a row's reasons).
        limit: most characters of each.

    Returns:
        The texts bounded; when they do not all fit, the last says how many more were left out.
    """
    kept: list[str] = []
    used = 0
    for number, text in enumerate(texts):
        text = bounded(text, limit)
        if used + len(text) > CELL_LIMIT - 100:
            kept.append(f"… (cut: {len(texts) - number:,} more)")
            break
        kept.append(text)
        used += len(text) + 2
    return tuple(kept)


def one_line(text: str) -> str:
    """``text`` on one line: every control character (newlines included) becomes a space.

    Args:
        text: any text (a student's name, a reason); other values are turned into text.

    Returns:
        The text, every unprintable character a space.
    """
    return "".join(ch if ch.isprintable() else " " for ch in str(text))


def formula_start(text: str) -> bool:
    """Whether a spreadsheet could read ``text`` as a formula: it starts with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return once read as NFKC (full-width ``＝`` is ``=``) and
    without the spaces and invisible characters before it (a no-break or zero-width space,
    which :func:`one_line` makes a plain space, hides nothing).

    Args:
        text: a cell's text.

    Returns:
        ``True`` when :func:`csv_text` guards it.
    """
    folded = unicodedata.normalize("NFKC", text)
    start = 0
    while start < len(folded) and _invisible(folded[start]):
        start += 1
    return folded.startswith(_FORMULA, start)


def _invisible(ch: str) -> bool:
    """A space, a format character (zero-width space and joiners, a byte-order mark) or a
    control character, but the tab and carriage return the guard looks for."""
    return ch not in "\t\r" and (ch.isspace() or unicodedata.category(ch) in ("Cf", "Cc"))


def csv_text(text: str) -> str:
    """A CSV cell no spreadsheet runs as a formula, on one line.

    Args:
        text: the cell's text.

    Returns:
        :func:`one_line` of it, with a leading ``'`` when it could read as a formula
        (:func:`formula_start`).
    """
    text = one_line(text)
    return "'" + text if formula_start(text) else text


def unguarded(cell: str) -> str:
    """A CSV cell :func:`csv_text` wrote, without the quote it put before a formula.

    Args:
        cell: the cell as written.

    Returns:
        The text as it was before it was guarded.
    """
    return cell[1:] if cell.startswith("'") and formula_start(cell[1:]) else cell


def markdown_text(text: str) -> str:
    """Text for a Markdown table cell: one line, its meaningful punctuation escaped, so nothing of
    it is a link, an image, HTML or a cell break (module docstring).

    Args:
        text: the cell's text.

    Returns:
        The escaped text.
    """
    return _PUNCTUATION.sub(r"\\\1", one_line(text))


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file the grader wrote (``report.csv``, ``function_times.csv``): the
    ``csv`` module's limit of 131,072 characters a field raised first, so a workspace written
    before fields were bounded (one 20 MB notebook field) is still read.

    Args:
        path: the file.

    Returns:
        Each row as a dict of its header's names, in order.
    """
    raise_field_limit()
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def raise_field_limit() -> None:
    """Let the ``csv`` module read a field of any size (the grader's own files and the LMS's
    exports are read whole anyway: what is read is bounded where it is written)."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
