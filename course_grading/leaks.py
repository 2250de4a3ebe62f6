"""Nothing a student may not see reaches feedback: scan each feedback file before keeping it.

The instructor's material in a lesson is every line of a hidden-test region, of a solution
region (and of a written answer's model answer, which is a solution cell as a whole) and of a
mark scheme, less what the student version shows anyway (a line, or part of one). A feedback
file that contains one of these lines which the student's own cells do not contain is
withheld. This holds whatever the kernel did (a hook that printed the next cell, a file read
outside the sandbox) and also under ``--no-sandbox``.

A cell of the submission that holds the instructor version's region delimiters (a copy of the
solution notebook) is not the student's own: its lines vouch for nothing, so the model answer
it carries is found and the feedback withheld (``own_lines``).

The scan reads through simple disguises (``unmask``: zero-width characters, full-width
letters, escaped strings, base64) and reads HTML with a linear-time reader (``page_text``:
hidden elements, attributes and comments included). It runs in time linear in what it reads,
within ``SCAN_SECONDS``; a page it could not finish reading, or one larger than
``MAX_SCAN_CHARS``, counts as withheld (its one "line" is ``unchecked``'s reason).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from course_grading import page_text
from course_grading.scan_budget import Deadline, ScanBudgetExceeded
from course_grading.unmask import fold, readings

#: Lines shorter than this (spaces left out) are too common to tell anything (``pass``, ``)``).
MIN_CHARS = 10
#: Seconds one scan (a page, or a notebook's text) may take; past it the page is withheld.
SCAN_SECONDS = 30.0
#: Characters one scan reads at most (16 MiB of kept output gives pages well below this).
MAX_SCAN_CHARS = 128 * 2**20
#: The instructor version's delimiter lines; a student version has none of them.
INSTRUCTOR_MARKS = (
    "### BEGIN SOLUTION",
    "### END SOLUTION",
    "### BEGIN HIDDEN TESTS",
    "### END HIDDEN TESTS",
    "=== BEGIN MARK SCHEME ===",
    "=== END MARK SCHEME ===",
)
#: How a scan that could not finish says so, in place of the lines it found.
UNCHECKED = "(not checked: the scan {why})"

_REGIONS = [
    re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S),
    re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S),
    re.compile(r"=== BEGIN MARK SCHEME ===\n(.*?)=== END MARK SCHEME ===", re.S),
]
_DELIMITERS = re.compile(r"(BEGIN|END) (HIDDEN TESTS|SOLUTION|MARK SCHEME)")
_ANSI = re.compile(r"\x1b\[[0-9;?]*+[ -/]*+[@-~]")
#: Output types whose text a feedback page renders as markup (scanned as what a reader sees).
_MARKUP = ("text/html", "image/svg+xml")
#: Put in ``notebook_text`` where markup could not be read within the budget.
_UNREAD = "\x00course_grading.leaks: unread: "


def _norm(line: str) -> str:
    return " ".join(line.split())


def _lines(text: str) -> set[str]:
    return {_norm(line) for line in text.splitlines() if _norm(line)}


def _secret_text(cell: nbformat.NotebookNode) -> list[str]:
    meta = cell.metadata.get("nbgrader", {})
    texts = [m for region in _REGIONS for m in region.findall(cell.source)]
    if meta.get("solution") and not _REGIONS[1].search(cell.source):
        texts.append(cell.source)  # a whole-cell solution: a written answer's model answer
    return texts


def instructor_lines(source: Path, release: Path) -> frozenset[str]:
    """The lines of ``source`` (instructor version) a student of ``release`` never sees.

    A line that is part of a line the student version shows (a hidden ``f(x)`` beside a visible
    ``y = f(x)``) is left out: finding it in feedback would prove nothing. So is a line
    shorter than ``MIN_CHARS`` (spaces left out), a delimiter line, and any line the student
    version or the instructor version's non-solution cells show outside their regions.
    Lines are compared with runs of whitespace folded to one space.

    Args:
        source: the instructor version of the lesson's notebook.
        release: the student version of the same notebook.

    Returns:
        The normalised lines that give the instructor's material away when found in feedback.
    """
    source_nb = nbformat.read(str(source), as_version=4)
    public = set()
    release_cells = nbformat.read(str(release), as_version=4).cells
    for cell in release_cells:
        public |= _lines(cell.source)
    secret = set()
    for cell in source_nb.cells:
        for text in _secret_text(cell):
            secret |= _lines(text)
        visible = cell.source
        for region in _REGIONS:
            visible = region.sub("", visible)
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            public |= _lines(visible)
    shown = _norm("\n".join(cell.source for cell in release_cells))  # as feedback shows it
    keep = {
        line
        for line in secret - public
        if len(line.replace(" ", "")) >= MIN_CHARS
        and not _DELIMITERS.search(line)
        and line not in shown
    }
    return frozenset(keep)


def visible_text(page: str) -> str:
    """The text a reader of an HTML page sees: no tags, styles, scripts or hidden elements;
    entities decoded (``page_text``).

    Args:
        page: an HTML document or fragment.

    Returns:
        The shown text, as ``page_text.read`` gives it; read without a time budget.
    """
    return page_text.read(page).shown


def instructor_marks(source: str) -> list[str]:
    """The instructor version's delimiter lines (``INSTRUCTOR_MARKS``) that ``source`` holds.

    Args:
        source: a cell's source.

    Returns:
        The marks found as whole lines (surrounding spaces ignored), in ``INSTRUCTOR_MARKS``'
        order; ``[]`` for a cell a student version could hold.
    """
    lines = {line.strip() for line in source.splitlines()}
    return [mark for mark in INSTRUCTOR_MARKS if mark in lines]


def own_lines(notebook: Path) -> frozenset[str]:
    """Every line of every cell the student submitted (what they already had), except cells
    holding the instructor version's delimiters: those are a copy, not the student's own.

    An instructor line found in feedback is a leak only if none of these holds it: what the
    student wrote themselves cannot have been given away to them.

    Args:
        notebook: the student's submitted notebook.

    Returns:
        The normalised lines (whitespace runs folded to one space) of their own cells.
    """
    nb = nbformat.read(str(notebook), as_version=4)
    lines: set[str] = set()
    for cell in nb.cells:
        if not instructor_marks(cell.source):
            lines |= _lines(cell.source)
    return frozenset(lines)


def unchecked(found: list[str]) -> str:
    """Why a scan could not finish (``found`` is its answer), or ``""`` when it did.

    Args:
        found: what ``found_in`` or ``leaked`` returned.

    Returns:
        The reason inside an ``UNCHECKED`` answer (``"ran past its 30 s budget while looking
        for instructor lines"``, say), or ``""`` when ``found`` lists lines (or nothing) from a
        finished scan.
    """
    prefix = UNCHECKED.split("{", 1)[0]
    return found[0][len(prefix) : -1] if found and found[0].startswith(prefix) else ""


def _search(text: str, secret: frozenset[str], own: frozenset[str], deadline: Deadline):
    if len(text) > MAX_SCAN_CHARS:
        raise ScanBudgetExceeded(
            f"was given {len(text) / 2**20:.0f} Mi characters, over its "
            f"{MAX_SCAN_CHARS / 2**20:.0f} Mi limit"
        )
    if _UNREAD in text:
        raise ScanBudgetExceeded(text.split(_UNREAD, 1)[1].split("\n", 1)[0])
    haystack = "\n".join(readings(_ANSI.sub("", text), deadline))
    mine = "\n".join(fold(line) for line in sorted(own))
    found = []
    for line in sorted(secret):
        deadline.check("looking for instructor lines")
        key = fold(line)
        if key and key in haystack and key not in mine:
            found.append(line)
    return found


def found_in(
    text: str, secret: frozenset[str], own: frozenset[str], *, seconds: float = SCAN_SECONDS
) -> list[str]:
    """The instructor lines in ``text`` that no line of the student's holds, in any of its
    readings (``unmask.readings``); ``[UNCHECKED]`` when it cannot tell within ``seconds``.

    Args:
        text: what a feedback page shows (``notebook_text``, or a page's text).
        secret: ``instructor_lines`` of the lesson.
        own: ``own_lines`` of the student's submission.
        seconds: the scan's time budget.

    Returns:
        The instructor lines found, sorted; or one line, ``UNCHECKED`` with the reason.
    """
    try:
        return _search(text, secret, own, Deadline(seconds))
    except ScanBudgetExceeded as err:
        return [UNCHECKED.format(why=err)]


def leaked(
    page: Path, secret: frozenset[str], own: frozenset[str], *, seconds: float = SCAN_SECONDS
) -> list[str]:
    """The instructor lines in the HTML file ``page`` that the student's cells do not hold:
    in what it shows, in hidden elements, attributes, comments and scripts (``found_in``).

    A file over ``4 * MAX_SCAN_CHARS`` bytes is not read at all (a UTF-8 character is at most
    four bytes, so it would be over the character limit anyway).

    Args:
        page: a feedback HTML file.
        secret: ``instructor_lines`` of the lesson.
        own: ``own_lines`` of the student's submission.
        seconds: the time budget for reading the page and searching it together.

    Returns:
        The instructor lines found, sorted; or one line, ``UNCHECKED`` with the reason, when
        the page is too large or its scan ran past ``seconds``.
    """
    deadline = Deadline(seconds)
    if page.stat().st_size > MAX_SCAN_CHARS * 4:
        return [UNCHECKED.format(why=f"was given a page of {page.stat().st_size} bytes")]
    try:
        text = page_text.read(page.read_text(encoding="utf-8", errors="replace"), deadline)
        return _search(text.everything(), secret, own, deadline)
    except ScanBudgetExceeded as err:
        return [UNCHECKED.format(why=err)]


def notebook_text(nb: nbformat.NotebookNode, *, seconds: float = SCAN_SECONDS) -> str:
    """Every text a feedback page made from ``nb`` could show: sources and outputs.

    Markup outputs count as written and as read (``page_text``: what a reader sees, hidden
    elements, attributes, comments); terminal colour codes are removed (feedback renders them
    as colours). Stricter than the page itself: it also holds what a page would only carry in
    a script. Markup that cannot be read within ``seconds`` leaves a mark that makes
    ``found_in`` answer ``UNCHECKED``.

    Args:
        nb: the notebook a feedback page is made from (autograded, with outputs).
        seconds: the time budget for reading all of its markup outputs together.

    Returns:
        Every source, stream text, error name, value and traceback, and text output of
        ``nb``, one part per line group; each markup output followed by its ``page_text``
        reading.
    """
    deadline = Deadline(seconds)
    parts: list[str] = []
    for cell in nb.cells:
        parts.append(cell.source)
        for out in cell.get("outputs", []):
            parts += [out.get("text", ""), out.get("ename", ""), out.get("evalue", "")]
            parts += out.get("traceback", [])
            for mime, value in out.get("data", {}).items():
                value = "".join(value) if isinstance(value, list) else value
                if not isinstance(value, str):
                    continue
                parts.append(value)
                if mime in _MARKUP:
                    try:
                        parts.append(page_text.read(value, deadline).everything(value))
                    except ScanBudgetExceeded as err:
                        parts.append(f"{_UNREAD}{err}")
    return "\n".join(str(p) for p in parts)
