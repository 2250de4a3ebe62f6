"""The text an HTML page holds, read in one pass that never goes back (linear time).

The leak scan (``leaks.py``) reads feedback pages and the HTML outputs of student cells, and a
student controls both. A backtracking regular expression (``<[^>]+>`` over a run of ``<``)
takes quadratic time there, and so does Python 3.11's ``html.parser`` (``x<``, ``<a b='`` or
``<!--`` repeated; an unclosed ``<![`` makes it raise). This reader follows the HTML
standard's tokenizer as far as text is concerned: each character is passed over once, a tag
or comment left open runs to the end of the page (as a browser reads it), and it never raises.

A page's text comes in three parts (``PageText``), entities decoded in each:

* ``shown``: what a reader sees: character data outside ``<script>``, ``<style>`` and
  comments, and outside elements hidden by a ``hidden`` attribute or an inline style
  (``display:none``, ``visibility:hidden``, ``font-size:0``, ``opacity:0``). Styles from a
  stylesheet are not interpreted, and implied end tags are not modelled;
* ``text``: all character data in order, hidden elements included (a tag stripper's result);
* ``extra``: what else the page carries: attribute values, comments, script and style
  contents, an unclosed tag.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from course_grading.review.scan_budget import Deadline

_TAG_START = re.compile(r"<[A-Za-z/!?]")
# A well-formed tag, read by the regular expression engine in one go; possessive quantifiers
# (``*+``, ``++``) never give back what they took, so a failed match costs its length once.
_TAG = re.compile(
    r"<(/?)([A-Za-z][^\s/>]*+)((?:\s++[^\s\"'>/=]++(?:\s*+=\s*+(?:\"[^\"]*+\"|'[^']*+'"
    r"|[^\s\"'=<>`]++))?+)*+)\s*+/?>"
)
_ATTRIBUTE = re.compile(r"""([^\s"'>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?""")
_IN_TAG = re.compile(r"[>=]")  # the end of a tag, or an attribute's value
_VALUE_END = re.compile(r"[\s>]")
_SPACE = " \t\n\r\f"
_HIDING = re.compile(
    r"display:none|visibility:(?:hidden|collapse)|(?:font-size|opacity):0(?![.\d]*[1-9])"
)
_VOID = frozenset(
    "area base br col embed hr img input keygen link meta param source track wbr".split()
)
#: Elements whose content is not markup: where it goes (``shown`` or ``extra``).
_RAW = {
    "script": "extra",
    "style": "extra",
    "iframe": "extra",
    "noembed": "extra",
    "noframes": "extra",
    "noscript": "extra",
    "template": "extra",
    "textarea": "shown",
    "title": "extra",
    "xmp": "shown",
}
_RAW_END = {name: re.compile(rf"</{name}[\s/>]", re.I) for name in _RAW}


@dataclass(frozen=True)
class PageText:
    """The text of a page: ``shown`` to a reader, all of it (``text``), and ``extra``."""

    shown: str
    text: str
    extra: str

    def everything(self, besides: str = "") -> str:
        """All three, one after the other (what the leak scan reads), each only once.

        Args:
            besides: text left out where a part equals it (the markup itself, already read as it
                is).

        Returns:
            ``shown``, ``text`` (when it differs from ``shown``) and ``extra``, one per line, empty
            parts and parts equal to ``besides`` left out.
        """
        parts = [self.shown]
        parts += [self.text] if self.text != self.shown else []
        parts += [self.extra]
        return "\n".join(part for part in parts if part and part != besides)


class _Reader:
    """One pass over ``page``; ``read`` returns its ``PageText``."""

    def __init__(self, page: str, deadline: Deadline | None) -> None:
        self.page, self.deadline = page, deadline or Deadline(None)
        self.shown: list[str] = []
        self.text: list[str] = []
        self.extra: list[str] = []
        self.hiding: str | None = None  # the name of the hidden element we are in
        self.depth = 0  # how many elements of that name are open inside it

    def data(self, chunk: str, where: str = "shown") -> None:
        if not chunk:
            return
        chunk = html.unescape(chunk)
        if where == "extra":
            self.extra.append(chunk)
            return
        self.text.append(chunk)
        if self.hiding is None:
            self.shown.append(chunk)

    def read(self) -> PageText:
        page, i, n, steps = self.page, 0, len(self.page), 0
        while i < n:
            steps += 1
            if steps % 1024 == 0:
                self.deadline.check("reading an HTML page")
            found = _TAG_START.search(page, i)
            if found is None:
                self.data(page[i:])
                break
            self.data(page[i : found.start()])
            i = self.markup(found.start())
        return PageText("".join(self.shown), "".join(self.text), "\n".join(self.extra))

    def markup(self, j: int) -> int:
        """Read the markup that starts at ``page[j] == "<"``; return where reading goes on."""
        page, n = self.page, len(self.page)
        if page.startswith("<!--", j):
            if page.startswith((">", "->"), j + 4):  # "<!-->" and "<!--->" are empty comments
                return page.index(">", j + 4) + 1
            end = page.find("-->", j + 4)
            self.extra.append(page[j + 4 : n if end < 0 else end])
            return n if end < 0 else end + 3
        if page[j + 1] in "!?" or (page[j + 1] == "/" and not page[j + 2 : j + 3].isalpha()):
            end = page.find(">", j + 2)  # a doctype, a processing instruction, a bogus comment
            self.extra.append(page[j + 2 : n if end < 0 else end])
            return n if end < 0 else end + 1
        return self.tag(j)

    def tag(self, j: int) -> int:
        """Read a start or end tag at ``j``: its name, attributes, and what it opens or hides."""
        page, n = self.page, len(self.page)
        simple = _TAG.match(page, j)
        attributes: dict[str, str] = {}
        if simple:
            for found in _ATTRIBUTE.finditer(simple.group(3)):
                value = html.unescape(next((v for v in found.groups()[1:] if v), ""))
                attributes[found.group(1).lower()] = value
                if value:
                    self.extra.append(value)
            name = simple.group(2).lower()
            return self.element(name, simple.group(1) == "/", attributes, simple.end())
        closing = page[j + 1] == "/"
        words: list[str] = []
        k = j + (2 if closing else 1)
        while True:
            stop = _IN_TAG.search(page, k)
            if stop is None:  # open to the end of the page: a browser drops it
                self.extra.append(page[j:])
                return n
            words += page[k : stop.start()].split()
            if stop.group() == ">":
                end = stop.end()
                break
            name = words.pop() if words else ""
            k = stop.end()
            while k < n and page[k] in _SPACE:
                k += 1
            if k < n and page[k] in "\"'":
                close = page.find(page[k], k + 1)
                if close < 0:
                    self.extra.append(page[j:])
                    return n
                value, k = page[k + 1 : close], close + 1
            else:
                value_end = _VALUE_END.search(page, k)
                k = n if value_end is None else value_end.start()
                value = page[stop.end() : k].strip()
            attributes[name.lower()] = html.unescape(value)
            self.extra.append(attributes[name.lower()])
        name = (words[0] if words else "").lower().rstrip("/")
        for bare in words[1:]:
            attributes.setdefault(bare.lower().rstrip("/"), "")
        return self.element(name, closing, attributes, end)

    def element(self, name: str, closing: bool, attributes: dict[str, str], end: int) -> int:
        """Keep track of hidden elements; read a raw-text element's content to its end tag."""
        if closing:
            if name == self.hiding:
                self.depth -= 1
                if self.depth == 0:
                    self.hiding = None
            return end
        if name == self.hiding:
            self.depth += 1
        elif self.hiding is None and name not in _VOID and _hides(attributes):
            self.hiding, self.depth = name, 1
        if name not in _RAW:
            return end
        close = _RAW_END[name].search(self.page, end)
        stop = len(self.page) if close is None else close.start()
        self.data(self.page[end:stop], _RAW[name])
        if close is None:
            return stop
        return self.element(name, True, {}, self.page.find(">", close.start()) + 1 or stop)


def _hides(attributes: dict[str, str]) -> bool:
    style = "".join(attributes.get("style", "").lower().split())
    return "hidden" in attributes or bool(_HIDING.search(style))


def read(page: str, deadline: Deadline | None = None) -> PageText:
    """The text of the HTML ``page`` (see the module docstring); linear in its length.

    Args:
        page: the page's markup, as a student's feedback would show it.
        deadline: the scan's time budget; ``None``: no limit.

    Returns:
        What a reader is shown, all the text, and the attribute values and comments.

    Raises:
        ScanBudgetExceeded: ``deadline`` passed while reading.
    """
    return _Reader(page, deadline).read()
