"""Undo the simple disguises a printed text can wear, so the leak scan can read through them.

A line of a hidden test printed with a zero-width space between its letters, in full-width
letters, as an escaped string (``json.dumps``, ``repr``) or base64-encoded looks nothing like
the line, but a reader gets it back at once. ``readings`` gives every such reading of a text,
each ``fold``-ed (compatibility forms decomposed, invisible characters and combining marks
removed, white space collapsed), so that a plain substring test finds the line in any of them.
Everything here is linear in the text's length: ``str.translate``, ``unicodedata.normalize``,
and regular expressions without nested repetition.

Not undone (a leak so disguised is not found): look-alike letters from other scripts, other
encodings (hex, rot13, compression), text drawn in an image. The scan is a second line of
defence: no hidden test or expected value ever enters a student's kernel.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import sys
import unicodedata

from course_grading.scan_budget import Deadline

#: A run of base64 (or URL-safe base64) this long is decoded; shorter ones tell nothing.
MIN_BASE64 = 16
#: Base64 inside base64 is decoded this many times over.
BASE64_DEPTH = 2

_RUN = re.compile(rf"[A-Za-z0-9+/_-]{{{MIN_BASE64},}}=*")
_TAIL = re.compile(rf"[A-Za-z0-9+/_-]{{1,{MIN_BASE64 - 1}}}=*")
_GAP = re.compile(r"(?:\s|\\n)*")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|[nrt\"'\\/])")
_ESCAPED = {"n": "\n", "r": "\r", "t": "\t"}
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
#: Hangul fillers: letters (not marks) that draw nothing.
_FILLERS = (0x115F, 0x1160, 0x3164, 0xFFA0)


@functools.cache
def _invisible() -> dict[int, None]:
    """``str.translate``'s table removing format characters (zero-width spaces, joiners,
    direction marks, tags), combining marks and fillers. Built once per process (0.3 s)."""
    drop = ("Cf", "Mn", "Me")
    table = dict.fromkeys(
        cp for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)) in drop
    )
    return table | dict.fromkeys(_FILLERS)


def visible(text: str) -> str:
    """``text`` without its invisible characters and combining marks (``_invisible``); only
    its runs of non-ASCII characters are looked at (``str.translate`` is slow per character).

    Args:
        text: any text.

    Returns:
        ``text`` with every format character (Unicode category Cf), combining mark (Mn, Me)
        and Hangul filler removed; ``text`` itself when it is all ASCII.
    """
    if text.isascii():
        return text
    return _NON_ASCII.sub(lambda run: run.group().translate(_invisible()), text)


def fold(text: str) -> str:
    """``text`` as the scan compares it: compatibility forms decomposed (NFKD: full-width
    letters, ligatures, superscripts), invisible characters and combining marks removed, every
    run of white space one space.

    Both sides of the leak scan's substring test are folded, so a line and its disguised
    copy compare equal.

    Args:
        text: a line of the instructor's material, or a reading of a page.

    Returns:
        The folded text, without leading or trailing white space.
    """
    if not text.isascii():
        text = visible(unicodedata.normalize("NFKD", text))
    return " ".join(text.split())


def unescape(text: str) -> str:
    """Backslash escapes undone (``\\n``, ``\\"``, ``\\u200b``...): a string printed by
    ``repr`` or ``json.dumps``.

    One pass, left to right: an escape produced by undoing another is not undone again.

    Args:
        text: text that may hold a printed string literal.

    Returns:
        ``text`` with each ``u`` escape (4 hex digits), ``x`` escape (2 hex digits), newline,
        return and tab escape replaced by its character, and an escaped quote, slash or
        backslash by itself; other backslashes are left as they are.
    """

    def one(match: re.Match) -> str:
        code = match.group(1)
        if code[0] in "ux":
            return chr(int(code[1:], 16))
        return _ESCAPED.get(code, code)

    return _ESCAPE.sub(one, text)


def _decode(text: str, run: str, end: int) -> str:
    """What ``run`` (ending at ``end`` in ``text``) decodes to, with a short last line after it."""
    if len(run) % 4 == 0 and not run.endswith("="):
        gap = _GAP.match(text, end)  # always matches (maybe nothing)
        tail = _TAIL.match(text, gap.end() if gap else end)
        run += tail.group() if tail else ""
    data = run.rstrip("=").replace("-", "+").replace("_", "/")
    data += "=" * (-len(data) % 4)
    try:
        return base64.b64decode(data).decode("utf-8", "ignore")
    except (binascii.Error, ValueError):
        return ""


def base64_texts(text: str, deadline: Deadline) -> list[str]:
    """What every base64 run in ``text`` decodes to; runs broken over lines (a 76-character
    line each, as ``base64.encodebytes`` writes them) are joined first.

    A run is at least ``MIN_BASE64`` characters of the standard or the URL-safe alphabet;
    whatever does not decode, or decodes to nothing as UTF-8, is left out.

    Args:
        text: the text to search.
        deadline: the scan's time budget, checked every 1,024 runs.

    Returns:
        The decoded texts (invalid UTF-8 bytes dropped), in the order their runs appear.

    Raises:
        ScanBudgetExceeded: ``deadline`` passed.
    """
    found, group, end = [], "", -1
    for count, match in enumerate(_RUN.finditer(text)):
        if count % 1024 == 1023:
            deadline.check("decoding base64")
        joins = group and len(group) % 4 == 0 and not group.endswith("=")
        if joins and _GAP.fullmatch(text, end, match.start()):
            group += match.group()  # the next line of the same base64 text
        else:
            if group:
                found.append(_decode(text, group, end))
            group = match.group()
        end = match.end()
    if group:
        found.append(_decode(text, group, end))
    return [decoded for decoded in found if decoded]


def readings(text: str, deadline: Deadline) -> list[str]:
    """Every reading of ``text`` the scan tries, each ``fold``-ed: as it is, with backslash
    escapes undone, and what its base64 runs decode to (``BASE64_DEPTH`` levels deep).

    Args:
        text: what a feedback page shows (or holds).
        deadline: the scan's time budget.

    Returns:
        The folded readings: the text with invisible characters removed, its unescaped form
        when that differs, then each level's decoded base64 texts.

    Raises:
        ScanBudgetExceeded: ``deadline`` passed.
    """
    plain = visible(text)  # base64 with zero-width spaces in it
    unescaped = unescape(plain)
    layers = [plain] + ([unescaped] if unescaped != plain else [])
    out = list(layers)
    for _ in range(BASE64_DEPTH):
        deadline.check("undoing disguises")
        layers = [decoded for layer in layers for decoded in base64_texts(layer, deadline)]
        out += layers
    deadline.check("undoing disguises")
    return [fold(reading) for reading in out]
