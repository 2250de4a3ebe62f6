"""Fingerprints of code: what is left of a cell once names, layout and comments are gone.

Copies are found by comparing fingerprints (``clusters.py``), never text: a copy is renamed,
re-indented, re-commented and its docstring rewritten, so its text differs from its source
wherever a student can type, and agrees wherever the program is the same. The cell is parsed
and every statement printed back as Python prints it (``ast.unparse``: brackets, quotes, line
breaks and comments are gone; a compound statement contributes its header, its body its own
statements), then cut into Python's tokens and normalised:

* every name that is neither a keyword nor a builtin becomes ``V`` (``total``, ``n_tok`` and
  ``grand`` read the same); attribute names and keyword-argument names stay (``.backward``,
  ``num_items_in_batch=``: what is called is part of the program);
* every string becomes ``S``; numbers stay (a formula's constants are part of it);
* docstrings (a string alone as a statement) go; each statement ends with ``;``.

A fingerprint is the set of hashes of every run of :data:`K` consecutive normalised tokens (a
*k-gram*), each with the lines of the statements it came from; two cells share the k-grams of
what they have in common. A k-gram's hash folds its tokens' BLAKE2b hashes (FNV-1a), so a
fingerprint depends on the text alone, never on the process (Python's ``hash`` of a string is
salted per process). A
cell with fewer than :data:`MIN_GRAMS` k-grams of its own is too short to judge: two short
functions written from one formula are the same program without either being copied. Code
that does not parse is cut line by line with a plain pattern instead.

``K``, the normalisation and the measure ``clusters.py`` uses were chosen on the honest corpus
(``tests/grading/honest_corpus``, ``benchmarks/review_calibration.py``).
"""

from __future__ import annotations

import ast
import builtins
import copy
import hashlib
import keyword
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

K = 6  # tokens in a k-gram: about one short statement
MIN_GRAMS = 20  # fewer k-grams of a cell's own than this: too short to judge
_KEPT_NAMES = frozenset(keyword.kwlist) | frozenset(dir(builtins))
#: Python's tokens as ``ast.unparse`` prints them: strings (any prefix, any quotes), numbers,
#: names, operators (longest first).
_STRING = (
    r"(?:[rRbBuUfF]{1,2})?"
    r"(?:'\'\'(?:\\.|[^\\])*?'\'\'"
    r'|"\"\"(?:\\.|[^\\])*?"\"\"'
    r"|'(?:\\.|[^'\\\n])*'"
    r'|"(?:\\.|[^"\\\n])*")'
)
_NUMBER = r"0[xXoObB][\da-fA-F_]+|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?[jJ]?"
_OPERATOR = r"\*\*=|//=|>>=|<<=|->|\.\.\.|:=|[-+*/%&|^@<>=!]=|\*\*|//|<<|>>|\S"
_PRINTED = re.compile(
    rf"(?P<string>{_STRING})|(?P<number>{_NUMBER})|(?P<name>[^\W\d]\w*)|(?P<op>{_OPERATOR})"
)
#: Code the parser refuses is cut with this, line by line (IPython syntax, a typo).
_FALLBACK = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|'[^'\n]*'|\"[^\"\n]*\"|\S")
_SOLUTION_MARK = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.MULTILINE)
_BODIES = ("body", "orelse", "finalbody")


@dataclass(frozen=True)
class Fingerprint:
    """The k-grams of one piece of code (the lesson's blank removed) and where each came from.

    ``grams`` maps each k-gram's hash to the lines ``(first, last)`` (from 1) of the statements
    of its first occurrence; ``digest`` names the whole normalised program: two cells with the
    same digest are the same program, however named, laid out and commented.
    """

    text: str
    grams: dict[int, tuple[int, int]] = field(compare=False)
    digest: str

    @property
    def judgeable(self) -> bool:
        """Whether the code has :data:`MIN_GRAMS` k-grams of its own (not too short to judge)."""
        return len(self.grams) >= MIN_GRAMS

    def lines_of(self, hashes: Iterable[int]) -> list[int]:
        """The lines (from 1) that the k-grams ``hashes`` come from, sorted.

        Args:
            hashes: k-gram hashes (those not in this fingerprint are ignored).

        Returns:
            Every line from the first to the last of each k-gram's statements, once.
        """
        found: set[int] = set()
        for h in hashes:
            if h in self.grams:
                first, last = self.grams[h]
                found.update(range(first, last + 1))
        return sorted(found)


def without_solution_marks(source: str) -> str:
    """An instructor's cell as a student would hand it in answered: nbgrader's ``### BEGIN
    SOLUTION`` and ``### END SOLUTION`` lines removed.

    Args:
        source: a cell of the instructor notebook.

    Returns:
        The source without its solution delimiters.
    """
    return _SOLUTION_MARK.sub("", source)


def fingerprint(source: str, blank: frozenset[int] = frozenset()) -> Fingerprint:
    """The fingerprint of ``source`` (module docstring), the k-grams in ``blank`` left out.

    Args:
        source: the code.
        blank: k-gram hashes that are not the author's (the lesson's blank of the cell,
            :func:`blank_grams`).

    Returns:
        Its :class:`Fingerprint`.
    """
    toks = list(_program_tokens(source))
    ids = [_token_id(text) for text, _, _ in toks]
    grams: dict[int, tuple[int, int]] = {}
    for start in range(max(len(toks) - K + 1, 0)):
        h = 0
        for t in ids[start : start + K]:  # FNV-1a over the tokens' own 64-bit hashes
            h = ((h ^ t) * _FNV) & _MASK
        if h not in blank:
            grams.setdefault(h, (toks[start][1], toks[start + K - 1][2]))
    digest = hashlib.blake2b("\x1f".join(t for t, _, _ in toks).encode(), digest_size=16)
    return Fingerprint(source, grams, digest.hexdigest())


@lru_cache(maxsize=256)
def blank_grams(blank: str) -> frozenset[int]:
    """The k-grams of the lesson's blank cell: boilerplate on every side (the signature, the
    docstring, the ``raise NotImplementedError``).

    Args:
        blank: the cell as the student version hands it out; ``""``: none.

    Returns:
        Its k-gram hashes.
    """
    return frozenset(fingerprint(blank).grams) if blank.strip() else frozenset()


_FNV, _MASK = 0x100000001B3, (1 << 64) - 1


@lru_cache(maxsize=65536)
def _token_id(text: str) -> int:
    """A normalised token's 64-bit BLAKE2b hash: the same in every process."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def _program_tokens(source: str) -> Iterator[tuple[str, int, int]]:
    """``(token, first line, last line)`` of the program: its statements printed back, each
    followed by ``;`` (module docstring); line by line when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        yield from _fallback_tokens(source)
        return
    for code, first, last in _statements(tree.body):
        for text in _normal_tokens(code):
            yield text, first, last
        yield ";", first, last


def _statements(body: list[ast.stmt]) -> Iterator[tuple[str, int, int]]:
    """``(code, first line, last line)`` of each statement of ``body``, in order: a compound
    statement as its header alone (``for x in y:``), then its bodies' statements."""
    for stmt in body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring, or a bare constant: no program
        bodies = [(f, getattr(stmt, f)) for f in _BODIES if getattr(stmt, f, None)]
        handlers = getattr(stmt, "handlers", None) or []
        if not bodies and not handlers:
            yield ast.unparse(stmt), stmt.lineno, stmt.end_lineno or stmt.lineno
            continue
        yield _header(stmt), stmt.lineno, stmt.lineno
        for name, sub in bodies:
            if name != "body":
                yield f"{name}:", sub[0].lineno, sub[0].lineno
            yield from _statements(sub)
        for handler in handlers:
            kind = f" {ast.unparse(handler.type)}" if handler.type is not None else ""
            yield f"except{kind}:", handler.lineno, handler.lineno
            yield from _statements(handler.body)


def _header(stmt: ast.stmt) -> str:
    """A compound statement's first line as Python prints it (``def f(a, b):``), its bodies and
    decorators left out."""
    shell = copy.copy(stmt)
    for name in (*_BODIES, "handlers", "decorator_list"):
        if isinstance(getattr(shell, name, None), list):
            setattr(shell, name, [])
    shell.body = [ast.Pass()]  # type: ignore[attr-defined]
    return ast.unparse(shell).splitlines()[0]


def _normal_tokens(code: str) -> Iterator[str]:
    """The tokens of one printed statement, normalised (module docstring). The statement is
    ``ast.unparse``'s, so a pattern reads it as Python's tokenizer would, faster."""
    raw = [(m.lastgroup, m.group()) for m in _PRINTED.finditer(code)]
    depth = 0
    for i, (kind, text) in enumerate(raw):
        if kind == "string":
            text = "S"
        elif kind == "name" and text not in _KEPT_NAMES:
            after = raw[i + 1][1] if i + 1 < len(raw) else ""
            attribute = i > 0 and raw[i - 1][1] == "."
            if not (attribute or (after == "=" and depth > 0)):  # a keyword argument stays
                text = "V"
        depth += (text in ("(", "[", "{")) - (text in (")", "]", "}"))
        yield text


def _fallback_tokens(source: str) -> Iterator[tuple[str, int, int]]:
    """Tokens of code the parser refuses, cut by a plain pattern, comments dropped."""
    for number, line in enumerate(source.splitlines(), start=1):
        line = line.split("#", 1)[0]
        for match in _FALLBACK.finditer(line):
            word = match.group()
            if word[0] in "'\"":
                word = "S"
            elif (word[0].isalpha() or word[0] == "_") and word not in _KEPT_NAMES:
                word = "V"
            yield word, number, number
        if line.strip():
            yield ";", number, number
