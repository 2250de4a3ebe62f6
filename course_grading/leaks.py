"""Nothing a student may not see reaches feedback: scan each feedback file before keeping it.

The instructor's material in a lesson is every line of a hidden-test region, of a solution
region (and of a written answer's model answer, which is a solution cell as a whole) and of a
mark scheme, less what the student version shows anyway (a line, or part of one). A feedback
file that contains one of these lines which the student's own cells do not contain is
withheld. This holds whatever the kernel did (a hook that printed the next cell, a file read
outside the sandbox) and also under ``--no-sandbox``.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat

#: Lines shorter than this (spaces left out) are too common to tell anything (``pass``, ``)``).
MIN_CHARS = 10

_REGIONS = [
    re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S),
    re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S),
    re.compile(r"=== BEGIN MARK SCHEME ===\n(.*?)=== END MARK SCHEME ===", re.S),
]
_DELIMITERS = re.compile(r"(BEGIN|END) (HIDDEN TESTS|SOLUTION|MARK SCHEME)")
_INVISIBLE = re.compile(r"<(style|script)\b.*?</\1>", re.S | re.I)
_TAG = re.compile(r"<[^>]+>")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
#: Output types whose text a feedback page renders as markup (scanned as what a reader sees).
_MARKUP = ("text/html", "image/svg+xml")


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
    ``y = f(x)``) is left out: finding it in feedback would prove nothing.
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
    """The text a reader of an HTML page sees: no tags, styles or scripts; entities decoded."""
    return html.unescape(_TAG.sub("", _INVISIBLE.sub("", page)))


def own_lines(notebook: Path) -> frozenset[str]:
    """Every line of every cell the student submitted (what they already had)."""
    nb = nbformat.read(str(notebook), as_version=4)
    lines: set[str] = set()
    for cell in nb.cells:
        lines |= _lines(cell.source)
    return frozenset(lines)


def found_in(text: str, secret: frozenset[str], own: frozenset[str]) -> list[str]:
    """The instructor lines in ``text`` (spaces normalised) that no line of the student's holds."""
    text, mine = _norm(text), "\n".join(sorted(own))
    return sorted(line for line in secret if line in text and line not in mine)


def leaked(page: Path, secret: frozenset[str], own: frozenset[str]) -> list[str]:
    """The instructor lines in the HTML file ``page`` that the student's cells do not hold."""
    return found_in(visible_text(page.read_text(encoding="utf-8", errors="replace")), secret, own)


def notebook_text(nb: nbformat.NotebookNode) -> str:
    """Every text a feedback page made from ``nb`` could show: sources and outputs.

    Markup outputs count twice, as written and as a reader sees them (tags gone); terminal
    colour codes are removed (feedback renders them as colours). Stricter than the page itself:
    it also holds what a page would only carry in a script.
    """
    parts: list[str] = []
    for cell in nb.cells:
        parts.append(cell.source)
        for out in cell.get("outputs", []):
            parts += [out.get("text", ""), out.get("ename", ""), out.get("evalue", "")]
            parts += out.get("traceback", [])
            for mime, value in out.get("data", {}).items():
                value = "".join(value) if isinstance(value, list) else value
                if isinstance(value, str):
                    parts.append(value)
                    if mime in _MARKUP:
                        parts.append(visible_text(value))
    return _ANSI.sub("", "\n".join(str(p) for p in parts))
