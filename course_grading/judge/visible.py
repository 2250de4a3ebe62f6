"""What an item's visible test may tell a student, declared beside its trusted check.

The visible test runs in the student's kernel, for instant feedback; it grades nothing, but it
must not be an oracle: anything it says "right" to could be found by trying candidates. So no
visible test says "right". Each item declares its visible test as a :class:`Property`
("plausible"): a check of what the right answer must satisfy that does not determine it
(``ratio > 1``; a function's scores grow with ``seq_len``, the rest does not).
``tests/notebooks/test_assessment.py`` shows that wrong candidates pass it.

A prediction's ``Property`` also declares its plausibility rules (``rules``: one
``course_lib.answers.Between`` per value): the visible test applies them with
``predicted(name, value, form, rule)`` and the trusted check with ``Evidence.recorded``, the same
rule on the value read by the same form, and a plausible value earns the point whether or not it
is right.

Lesson 1's real-scale figures were once checked by a memory-hard scrypt digest priced at 5,500
hours of brute force over a range of numbers; issue 27 found a search over formulas built from
the question's own numbers confirming it at the 16th candidate, in 33 seconds. A digest is
priced by the candidates a student would try, and a student tries formulas, not numbers: it was
removed, with every digest of the course. ``tests/grading/test_items.py`` checks every visible
test cell against its registration (:func:`problems_in`), and that none calls ``check``.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from course_lib.answers import Between
from course_lib.forms import Form


class Item(Protocol):
    """What a visible test reads of an item (``course_grading.judge.items.Item`` has it).

    Declared here, not imported, so that the items may import this module and not the
    other way round.
    """

    @property
    def grade_id(self) -> str:
        """The test cell's grade id."""

    @property
    def function(self) -> str | None:
        """The graded function's name (``None``: a value item)."""

    @property
    def forms(self) -> Mapping[str, Form]:
        """Value name -> how it is compared."""

    @property
    def returns(self) -> Form | None:
        """How a function item's results are compared."""

    @property
    def visible(self) -> tuple[Property, ...] | None:
        """What the visible test may say."""


@dataclass(frozen=True)
class Property:
    """A visible property check: ``plausible(label, form, ...)`` after its asserts.

    With ``rules`` it is a prediction's whole check: one ``predicted(name, value, form, rule)``
    per value in the visible test, and the same rule, on the value read by the same form, in the
    trusted check (``Evidence.recorded``), which scores a plausible value and nothing more.
    """

    label: str
    accepts: str  # what it lets through, in words ("every number above 1")
    rules: Mapping[str, Between] = field(default_factory=dict)  # a prediction: name -> its rule

    kind = "property"

    def describe(self, item: Item) -> str:
        """One line for the assessment table: what the check lets through, and that it can
        never confirm an answer.

        Args:
            item: the item the check belongs to (not read: taken so every visible check is
                described the same way).

        Returns:
            ``"property (<accepts>): says plausible, never right"``; for a prediction, that a
            plausible value is recorded.
        """
        if self.rules:
            return f"prediction ({self.accepts}): says plausible and recorded, never right"
        return f"property ({self.accepts}): says plausible, never right"


def checks(item: Item) -> tuple[Property, ...]:
    """The item's visible checks (``()`` for an item that declares none: the fixture lesson's
    plain asserts).

    Args:
        item: a registered item.

    Returns:
        Its ``Property`` declarations, in declaration order.
    """
    return tuple(item.visible or ())


# --- a visible test cell against its registration ---------------------------------------------

_CALLS = ("check", "read_answer", "plausible", "predicted")


def _forms_namespace() -> dict[str, object]:
    import course_lib.forms as forms

    return {name: getattr(forms, name) for name in forms.__dict__ if name[:1].isupper()}


def _form(node: ast.expr, known: dict[str, object]) -> object:
    """The form an expression builds (``Sig(3)``, or a name the cell bound to one)."""
    if isinstance(node, ast.Name) and node.id in known:
        return known[node.id]
    try:
        return eval(compile(ast.Expression(node), "<test cell>", "eval"), _forms_namespace())
    except Exception:  # noqa: BLE001 (anything else is not a form: reported by the caller)
        return None


def _calls(source: str) -> list[tuple[str, list[ast.expr], dict[str, object]]]:
    """(function, arguments, forms bound so far) of every visible-check call in ``source``."""
    from course_grading.review.names import cell_tree

    tree = cell_tree(source)
    found: list[tuple[str, list[ast.expr], dict[str, object]]] = []
    known: dict[str, object] = {}
    for stmt in tree.body if tree is not None else []:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name) and _form(stmt.value, known) is not None:
                known[target.id] = _form(stmt.value, known)
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in _CALLS:
                    found.append((node.func.id, list(node.args), dict(known)))
    return found


def _text(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def problems_in(item: Item, source: str) -> list[str]:
    """How the visible test cell ``source`` disagrees with ``item``'s registration: a value read
    with another form, a prediction checked by another rule, a declared check missing, a
    ``check(...)`` that would say "right". ``[]`` when they agree (an item that declares no
    visible check is held to the first and the last only).

    The cell is parsed, not run: only the expressions that may build a form or a rule (a value
    assigned to a name, a form or rule argument) are evaluated, against ``course_lib.forms``'
    public names and ``Between``.

    Args:
        item: the registration the cell should match.
        source: the visible test cell's source, as the notebook holds it.

    Returns:
        One message per disagreement, each starting with the item's grade id.
    """
    gid, found = item.grade_id, []
    allowed = [*item.forms.values(), *([item.returns] if item.returns else [])]
    labels: dict[str, list] = {}
    for kind, args, known in _calls(source):
        label = _text(args[0]) if args else None
        labels.setdefault(kind, []).append((label, args, known))
        if kind == "check":
            found.append(f"{gid}: check({label!r}) would say right: a visible test says plausible")
        if kind == "read_answer" and len(args) == 3:
            want = item.forms.get(label or "", item.returns if item.function else None)
            if _form(args[2], known) != want:
                found.append(f"{gid}: read_answer({label!r}) reads it as {ast.unparse(args[2])}, "
                             f"the registration compares it as {want!r}")  # fmt: skip
        if kind == "plausible":
            for node in args[2:]:
                if _form(node, known) not in allowed:
                    found.append(f"{gid}: plausible({label!r}) names {ast.unparse(node)}, a form "
                                 "the item does not compare with")  # fmt: skip
        if kind == "predicted":
            found += _prediction_problems(item, label, args, known)
    for check in checks(item):
        kind, names = (
            ("predicted", list(check.rules)) if check.rules else ("plausible", [check.label])
        )
        said = [label for label, _, _ in labels.get(kind, [])]
        for name in names:
            if said.count(name) != 1:
                found.append(
                    f"{gid}: the visible test has {said.count(name)} {kind}({name!r}) calls"
                )
    read = {label for kind in ("read_answer", "predicted") for label, _, _ in labels.get(kind, [])}
    for name in item.forms if checks(item) else ():
        if name not in read:
            found.append(f"{gid}: the visible test never reads {name} (read_answer or predicted)")
    return found


def _prediction_problems(
    item: Item, label: str | None, args: list[ast.expr], known: dict[str, object]
) -> list[str]:
    """How one ``predicted(name, value, form, rule)`` call disagrees with the registration: its
    form is not the one the item reads the value with, or its rule not the one the trusted check
    applies (``[]`` when both agree)."""
    rules = {n: r for c in checks(item) if isinstance(c, Property) for n, r in c.rules.items()}
    if label not in rules or len(args) < 4:
        return [f"{item.grade_id}: predicted({label!r}) is not one of its declared predictions, "
                "given as predicted(name, value, form, rule)"]  # fmt: skip
    found = []
    if _form(args[2], known) != item.forms.get(label):
        found.append(f"{item.grade_id}: predicted({label!r}) reads it as {ast.unparse(args[2])}, "
                     f"the registration as {item.forms.get(label)!r}")  # fmt: skip
    if _rule(args[3]) != rules[label]:
        found.append(f"{item.grade_id}: predicted({label!r})'s rule {ast.unparse(args[3])} is not "
                     f"the trusted check's {rules[label]!r}")  # fmt: skip
    return found


def _rule(node: ast.expr) -> object:
    """The ``Between`` an expression of a visible test builds (``None`` for anything else)."""
    try:
        built = eval(compile(ast.Expression(node), "<test cell>", "eval"), {"Between": Between})
    except Exception:  # noqa: BLE001 (anything else is not a rule: reported by the caller)
        return None
    return built if isinstance(built, Between) else None
