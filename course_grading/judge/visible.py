"""What an item's visible test may tell a student, declared beside its trusted check.

The visible test runs in the student's kernel, for instant feedback; it grades nothing, but it
must not be an oracle: anything it says "right" to could be found by trying candidates. Each
item declares its visible test as one or more of:

* :class:`Property` ("plausible"): a check of what the right answer must satisfy that does not
  determine it (``ratio > 1``; a function's scores grow with ``seq_len``, the rest does not). It
  never says "right". ``tests/notebooks/test_assessment.py`` shows that wrong candidates pass it.
* :class:`Digest` ("right"): :func:`course_lib.answers.check` against a memory-hard digest of
  the right values, each read by the item's form (``course_lib.forms``). Its candidate space is
  declared here, per name: a range for a number (every number its form tells apart in that
  range: ``Sig(2)`` over ``[1e-3, 1e6]`` is 811 numbers) or an explicit count; the space of a
  digest over several names is their product. Searching it must cost at least
  :data:`MIN_SEARCH_SECONDS` on one core (:func:`search_seconds`, with the per-candidate cost
  measured by :func:`course_lib.answers.digest_seconds`).

The digest in the notebook is made from the registration (:func:`digest_of`, ``python -m
course_grading digest --item``), so the visible test compares with the same forms and the same
expected values as the trusted check; ``tests/grading/test_items.py`` checks every visible test
cell against its registration.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from course_lib.answers import Between, secret_digest
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
    def visible(self) -> tuple[Property | Digest, ...] | None:
        """What the visible test may say."""

    @property
    def migrated(self) -> bool:
        """Whether the item declares its comparison and its visible test."""

    def expected_values(self) -> Mapping[str, object]:
        """The declared expected values.

        Returns:
            Value name -> the right value (empty when none was declared).
        """


#: The least time a brute force of one visible digest may take on one core (seconds).
MIN_SEARCH_SECONDS = 3600.0


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
            item: the item the check belongs to (not read: a property has no search space;
                taken so every visible check is described the same way).

        Returns:
            ``"property (<accepts>): says plausible, never right"``.
        """
        return f"property ({self.accepts}): says plausible, never right"


@dataclass(frozen=True)
class Digest:
    """A visible digest check of ``names`` (one ``check(label, ...)`` call), and its space."""

    label: str
    names: tuple[str, ...]
    # name -> (low, high) of the plausible numbers, or an explicit number of candidates
    space: dict[str, tuple[float, float] | int] = field(default_factory=dict)
    why: str = ""  # why this space is the plausible one

    kind = "digest"

    def candidates(self, item: Item) -> int:
        """How many canonical answers a brute force must try (the product over names).

        For a name given a ``(low, high)`` range the count is what its form tells apart in that
        range (``item.forms[name].candidates``); an ``int`` entry is taken as the count.

        Args:
            item: the registration whose forms read each name.

        Returns:
            The size of the candidate space: the product of the per-name counts.

        Raises:
            ValueError: a name the digest covers has no entry in ``space``, or its form cannot
                count a range (give the count explicitly).
        """
        total = 1
        for name in self.names:
            given = self.space.get(name)
            if given is None:
                raise ValueError(f"{item.grade_id}: the digest's space has no entry for {name}")
            total *= given if isinstance(given, int) else item.forms[name].candidates(*given)
        return total

    def describe(self, item: Item) -> str:
        """One line for the assessment table: each name's form and range, and the total space.

        Args:
            item: the registration whose forms count each range.

        Returns:
            ``"digest of <name>: <form> in [low, high] (<count>), ...: <total> candidates"``.
        """
        parts = []
        for name in self.names:
            given = self.space[name]
            if isinstance(given, int):
                parts.append(f"{name}: {given:,} candidates")
            else:
                low, high = given
                count = item.forms[name].candidates(low, high)
                parts.append(f"{name}: {item.forms[name].spec} in [{low:g}, {high:g}] ({count:,})")
        return f"digest of {', '.join(parts)}: {self.candidates(item):,} candidates"


def checks(item: Item) -> tuple[Property | Digest, ...]:
    """The item's visible checks (``()`` for an item not yet declared this way).

    Args:
        item: a registered item.

    Returns:
        Its ``Property`` and ``Digest`` declarations, in declaration order.
    """
    return tuple(item.visible or ())


def digest_of(item: Item, digest: Digest) -> str:
    """The digest string the visible test must hold: the registration's expected values, each
    read by its form.

    What ``python -m course_grading digest --item`` prints; made from the same expected values
    and forms as the trusted check, so the visible test can never disagree with it.

    Args:
        item: the registration holding the expected values and forms.
        digest: one of the item's declared digests.

    Returns:
        The memory-hard digest (``course_lib.answers.secret_digest``) of the expected values of
        ``digest.names``, salted with ``digest.label``.

    Raises:
        ValueError: the registration has no expected value for a name the digest covers.
    """
    expected = item.expected_values()
    missing = [n for n in digest.names if n not in expected]
    if missing:
        raise ValueError(f"{item.grade_id}: no expected value for {', '.join(missing)}")
    return secret_digest(
        digest.label, [expected[n] for n in digest.names], [item.forms[n] for n in digest.names]
    )


def search_seconds(item: Item, per_candidate: float) -> float:
    """Seconds a brute force of the item's visible digests takes on one core (``inf`` for an
    item with property checks only: there is nothing to search for).

    The weakest digest decides: ``min(candidates) * per_candidate``, to be compared with
    :data:`MIN_SEARCH_SECONDS`.

    Args:
        item: a registered item.
        per_candidate: seconds one digest evaluation takes on one core
            (``course_lib.answers.digest_seconds``).

    Returns:
        Seconds to search the smallest candidate space among its digests.
    """
    digests = [c for c in checks(item) if isinstance(c, Digest)]
    if not digests:
        return math.inf
    return min(d.candidates(item) for d in digests) * per_candidate


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
                    if any(k.arg == "sig" for k in node.keywords):
                        found.append(("sig=", [], {}))
    return found


def _text(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _names(node: ast.AST) -> tuple[str, ...]:
    parts = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
    return tuple(p.id if isinstance(p, ast.Name) else "?" for p in parts)


def problems_in(item: Item, source: str) -> list[str]:
    """How the visible test cell ``source`` disagrees with ``item``'s registration: a digest
    not made from the registration, a value read with another form, a declared check missing,
    an older ``sig=`` digest. ``[]`` when they agree (or the item is not declared this way).

    The cell is parsed, not run: only the expressions that may build a form (a value assigned
    to a name, a form argument) are evaluated, against ``course_lib.forms``' public names.

    Args:
        item: the registration the cell should match.
        source: the visible test cell's source, as the notebook holds it.

    Returns:
        One message per disagreement, each starting with the item's grade id.
    """
    if not item.migrated:
        return []
    gid, found = item.grade_id, []
    allowed = [*item.forms.values(), *([item.returns] if item.returns else [])]
    labels: dict[str, list] = {}
    for kind, args, known in _calls(source):
        if kind == "sig=":
            found.append(f"{gid}: an older digest compared at sig=: use the item's forms")
            continue
        label = _text(args[0]) if args else None
        labels.setdefault(kind, []).append((label, args, known))
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
        if isinstance(check, Property) and check.rules:
            predicted = [label for label, _, _ in labels.get("predicted", [])]
            for name in check.rules:
                if predicted.count(name) != 1:
                    found.append(f"{gid}: the visible test has {predicted.count(name)} "
                                 f"predicted({name!r}) calls")  # fmt: skip
            continue
        kind = "check" if isinstance(check, Digest) else "plausible"
        mine = [args for label, args, _ in labels.get(kind, []) if label == check.label]
        if len(mine) != 1:
            found.append(f"{gid}: the visible test has {len(mine)} {kind}({check.label!r}) calls")
        elif isinstance(check, Digest):
            written = _text(mine[0][2]) if len(mine[0]) > 2 else None
            if written != digest_of(item, check):
                found.append(f"{gid}: check({check.label!r})'s digest is not made from the "
                             "registration (python -m course_grading digest --item)")  # fmt: skip
            if _names(mine[0][1]) != check.names:
                found.append(f"{gid}: check({check.label!r}) is given {_names(mine[0][1])}, "
                             f"the registration digests {check.names}")  # fmt: skip
    read = {label for kind in ("read_answer", "predicted") for label, _, _ in labels.get(kind, [])}
    digested = {n for c in checks(item) if isinstance(c, Digest) for n in c.names}
    for name in item.forms:
        if name not in read | digested:
            found.append(f"{gid}: the visible test never reads {name} (read_answer or a digest)")
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
