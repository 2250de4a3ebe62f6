"""Class editions: the numbers a lesson's typed questions are asked with, drawn from the secret.

A question answered by a typed number ("the effective batch of 4 rows x 6 micro-batches on two
GPUs") has one right value, and a public repository holds it: in the solution, in the grader's
registration, in any classmate's notebook from last year. No check can tell a typed number's
source, so a class grades these questions with its **own numbers**: the instructor's course
secret draws them at release (``scripts/release.py --secret-file``, the grading workspace, and
nbgrader's own ``generate_assignment`` through :class:`RenderEdition`), and the trusted check
computes the right values from the same draw. Without a secret the numbers are the public ones
(the *self-study edition*, the one in ``notebooks/``).

**Where the numbers go.** A lesson declares its numbers once (:class:`Edition`: each with its
public value and the values a class may get), and every cell whose text uses them carries a
template in its metadata (``metadata.shapes.edition``): the cell's source with each number
written ``«expression»`` or ``«expression:format»`` (``«rows * accum»``, ``«row_tokens:,»``), an
expression of the edition's names (``«edition_name»`` is the edition's own name: "self-study
edition", or "class edition", 8 hex digits and the term: :meth:`Edition.label`). Rendered with
the public numbers, a template must give the cell's source exactly
(``tests/grading/test_editions.py`` reads every lesson): the source stays the readable, runnable
notebook, and the template says which of its numbers an edition changes.
The release renders each template and removes it, so a student version holds neither the
template (its solution region) nor any other edition's numbers.

**The draw.** ``HMAC-SHA256(lesson key, "edition")`` seeds the generator, where the lesson's key
is derived from the class's key (``secret.lesson_key``; the class's key is ``secret.load``'s:
the secret, and the term when the secret file names one, so one secret asks each term its own
numbers; a Dask worker holds the lesson's key, never the secret): every notebook of one class
gets the same numbers (classmates can discuss the questions), a re-grade draws them again
exactly, and nobody without the secret predicts them. A draw is kept only when every item
that depends on it has answers that differ from the self-study edition's, each by its own form
(:meth:`Edition.draw`): a public answer typed into a class edition earns nothing.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import operator
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from course_grading.errors import GradingError
from course_grading.judge.secret import LessonKeys, label_digest, lesson_key

#: Where a cell keeps its template: ``cell.metadata["shapes"]["edition"]``.
METADATA, KEY = "shapes", "edition"
#: Notebook metadata naming the edition a student version was rendered for.
LABEL_KEY = "edition"
SELF_STUDY = "self-study edition"
#: The name a template writes the edition's own name with (``«edition_name»``).
NAME = "edition_name"
_MARK = re.compile(r"«([^«»]+)»")
_SPEC = re.compile(r"(.*?):([<>^=]?[+ -]?[0-9]*[,_]?(?:\.[0-9]+)?[bdefgnoxX%]?)")
_TRIES = 1000

Numbers = dict[str, Any]


@dataclass(frozen=True)
class Number:
    """One number of an edition: its self-study value and the values a class may be asked with."""

    public: int | float
    choices: tuple[int | float, ...]


@dataclass
class Edition:
    """The numbers one lesson's edition-bound items are asked with (module docstring).

    ``answers`` are the items that depend on the numbers, registered by the lesson
    (``Lesson.item(..., edition=True)``): a draw is kept only when each of them has answers
    that differ from the public ones.
    """

    lesson: str
    numbers: Mapping[str, Number]
    answers: list[Callable[[Numbers], bool]] = field(default_factory=list)
    #: names a template may use beyond the numbers, each computed from them at release (a
    #: measured answer: the solution cell holds ``«name»``, never a table of answers by number)
    derived: Mapping[str, Callable[[Numbers], Any]] = field(default_factory=dict)

    def names(self, numbers: Numbers) -> Numbers:
        """What a template of this edition may name: its numbers and the derived values.

        Args:
            numbers: a draw (:meth:`draw`).

        Returns:
            The numbers, and each derived name's value computed from them.
        """
        return {**numbers, **{name: f(numbers) for name, f in self.derived.items()}}

    def public(self) -> Numbers:
        """The self-study edition's numbers.

        Returns:
            Name -> its public value.
        """
        return {name: n.public for name, n in self.numbers.items()}

    def draw(self, secret: bytes | LessonKeys | None) -> Numbers:
        """The class's numbers: drawn from ``secret``, the public ones without.

        Args:
            secret: the class's key (``secret.load``) or the lesson's key; ``None``: the
                self-study edition.

        Returns:
            Name -> its value in this class's edition.

        Raises:
            GradingError: no draw within 1,000 tries changes every item's answers (the choices
                are too narrow: a bug in the lesson's declaration).
        """
        if secret is None:
            return self.public()
        key = lesson_key(secret, self.lesson)
        rng = random.Random(hmac.new(key, b"edition", hashlib.sha256).digest())
        for _ in range(_TRIES):
            drawn = {name: rng.choice(n.choices) for name, n in sorted(self.numbers.items())}
            if all(differs(drawn) for differs in self.answers):
                return drawn
        raise GradingError(f"{self.lesson}: no edition changes every answer; widen its choices")

    def label(self, secret: bytes | LessonKeys | None) -> str:
        """The edition's name as a student version records it (``metadata.shapes.edition``).

        Args:
            secret: the class's key (``secret.load``) or the lesson's key, or ``None``.

        Returns:
            ``"self-study edition"``, or ``"class edition "``, 8 hex digits and the term in
            brackets if there is one. The digits come from the secret file's public random
            edition id, the term and the lesson, never from the secret, so a student's label
            checks no guess of the secret; for a key without an id (a one-line secret file, a
            key made in code), from an HMAC of the key, as before ids.
        """
        if secret is None:
            return SELF_STUDY
        term = getattr(secret, "term", "")  # a ClassKey's or LessonKeys'
        digest = label_digest(secret, self.lesson)
        return f"class edition {digest}" + (f" ({term})" if term else "")


def render(template: str, numbers: Mapping[str, Any]) -> str:
    """A template with each ``«expression»`` or ``«expression:format»`` replaced.

    Args:
        template: the cell's template (module docstring).
        numbers: the edition's numbers, the names an expression may use.

    Returns:
        The cell's source in this edition.

    Raises:
        GradingError: an expression uses a name the edition lacks, or does not evaluate.
    """

    def one(match: re.Match) -> str:
        text = match.group(1)
        spec = _SPEC.fullmatch(text)
        expression, form = (spec.group(1), spec.group(2)) if spec else (text, "")
        try:
            value = _value(ast.parse(expression.strip(), mode="eval").body, numbers)
        except (SyntaxError, ArithmeticError, KeyError, TypeError, ValueError) as err:
            raise GradingError(f"edition template «{text}»: {type(err).__name__}: {err}") from None
        return format(value, form)

    return _MARK.sub(one, template)


_OPERATORS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _value(node: ast.expr, names: Mapping[str, Any]) -> Any:
    """An expression of a template, evaluated without ``eval``: numbers, text, the edition's
    names, arithmetic, comparisons, tuples and ``a if test else b``; nothing else (no call, no
    attribute, no subscript), so a template can compute with its numbers and do nothing more."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, str):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise KeyError(f"no number named {node.id!r} in this edition")
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_value(node.left, names), _value(node.right, names))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, names)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _OPERATORS:
        left, right = _value(node.left, names), _value(node.comparators[0], names)
        return _OPERATORS[type(node.ops[0])](left, right)
    if isinstance(node, ast.Tuple):
        return tuple(_value(e, names) for e in node.elts)
    if isinstance(node, ast.IfExp):
        chosen = node.body if _value(node.test, names) else node.orelse
        return _value(chosen, names)
    raise ValueError(f"{type(node).__name__} is not allowed in a template (arithmetic only)")


def template_of(cell: Mapping) -> str | None:
    """A cell's edition template, if it has one.

    Args:
        cell: a notebook cell.

    Returns:
        The template text, or ``None``.
    """
    found = cell.get("metadata", {}).get(METADATA, {}).get(KEY)
    return "".join(found) if isinstance(found, list) else found


def render_notebook(nb: Any, numbers: Mapping[str, Any], label: str) -> int:
    """Render every templated cell of ``nb`` in place and drop the templates.

    Args:
        nb: an ``nbformat`` notebook (the instructor's, before the release).
        numbers: the edition's numbers.
        label: the edition's name, recorded in the notebook's metadata (``shapes.edition``).

    Returns:
        How many cells were rendered (0: the notebook has no templates, it is left as it was).
    """
    rendered = 0
    for cell in nb.cells:
        template = template_of(cell)
        if template is None:
            continue
        cell.source = render(template, {**numbers, NAME: label})
        del cell.metadata[METADATA][KEY]
        if not cell.metadata[METADATA]:
            del cell.metadata[METADATA]
        rendered += 1
    if rendered:
        nb.metadata.setdefault(METADATA, {})[LABEL_KEY] = label
    return rendered


def template_problems(nb: Any, numbers: Mapping[str, Any]) -> list[str]:
    """Templates that do not give their cell's source with the self-study numbers.

    Args:
        nb: an instructor notebook (``solutions/``).
        numbers: the self-study edition's numbers.

    Returns:
        One line per cell whose template renders to another text, or does not render.
    """
    problems = []
    for index, cell in enumerate(nb.cells):
        template = template_of(cell)
        if template is None:
            continue
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell {index}")
        try:
            text = render(template, {**numbers, NAME: SELF_STUDY})
        except GradingError as err:
            problems.append(f"{grade_id}: {err}")
            continue
        if text != cell.source:
            lines = zip(text.splitlines(), cell.source.splitlines())
            first = next(((a, b) for a, b in lines if a != b), (text[-60:], cell.source[-60:]))
            problems.append(f"{grade_id}: the template gives {first[0]!r}, the cell {first[1]!r}")
    return problems


def choices(public: int | float, values: Sequence[int | float]) -> Number:
    """A :class:`Number` (shorthand for a lesson's declaration).

    Args:
        public: the self-study value.
        values: the values a class may get (the public one among them or not).

    Returns:
        The number.
    """
    return Number(public, tuple(values))
