"""The item model: what an autograded test cell is worth and which trusted check decides it.

An :class:`Item` is one test cell of a lesson (its grade id, its answer cell, its points, what
it takes out of the submission and how each value is compared); a lesson module registers its
items on a :class:`Lesson` with :meth:`Lesson.item`, and :func:`items_of` finds a lesson's
registry by its folder name. A check's decision is a :class:`Verdict`; a check fails an item by
raising :class:`Reject`. The package's docstring (``course_grading.judge.items``) is the guide.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from course_grading.errors import GradingError
from course_grading.judge.editions import Edition, Number
from course_grading.judge.visible import Property
from course_lib.forms import Form, Sig

DECLARATION = "# ITEM:"
PACKAGE = __name__.rpartition(".")[0]  # course_grading.judge.items: the lessons' modules
_PYTHON_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# --- verdicts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A trusted check's decision on one item.

    ``message`` is for the student (feedback, the test cell's output, formgrader's comment) and
    never holds the expected value; ``review`` are flags for the instructor (the report,
    formgrader's flag), never a reason to change the points.
    """

    grade_id: str
    points: float
    max_points: float
    message: str
    review: tuple[str, ...] = ()
    seconds: float = field(default=0.0, compare=False)  # wall-clock time of its function calls

    @property
    def full(self) -> bool:
        return self.points >= self.max_points

    def line(self) -> str:
        """One line for the student: points and the message.

        Returns:
            ``"{points} of {max_points} point(s): {message}"``, points as ``%g`` (``"0.5 of 1
            point(s): ..."``).
        """
        return f"{self.points:g} of {self.max_points:g} point(s): {self.message}"


class Reject(Exception):
    """Raised by a check: the item scores 0, and the message says why (to the student)."""


#: A trusted check: called with one ``checking.Evidence``, it returns the full-marks message or
#: a :class:`Verdict`, and fails the item by raising :class:`Reject`. Its argument is typed
#: loosely because ``checking.Evidence`` reads an :class:`Item` (its import would be a cycle).
Check = Callable[[Any], str | Verdict]


# --- items ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One autograded test cell and the trusted check that grades it (the package's docstring)."""

    lesson: str
    grade_id: str  # the test cell's grade id
    answer: str  # the answer cell's grade id
    points: float
    check: Check
    values: tuple[str, ...] = ()  # names taken out of the kernel, as plain data
    function: str | None = None  # or: the function re-created from the answer cell
    allowed: tuple[str, ...] = ()  # course_lib modules staged for the function
    forbidden: tuple[str, ...] = ()  # course_lib modules its staging must never include
    own_work: bool = False  # a value item: 0 if the answer cell's source uses course_lib
    forms: Mapping[str, Form] = field(default_factory=dict)  # value name -> how it is compared
    returns: Form | None = None  # a function item: how each result is compared
    expected: Mapping[str, object] | Callable[..., Mapping[str, object]] | None = None
    visible: tuple[Property, ...] | None = None  # what the visible test may say
    edition: Edition | None = None  # its numbers are the class's: ``expected(numbers)``

    @property
    def name(self) -> str:
        return self.check.__name__

    @property
    def rules(self) -> dict[str, Any]:
        """A prediction's plausibility rules (``Evidence.recorded``).

        A prediction item scores a plausible value and nothing more: its visible ``Property``
        declares one ``course_lib.answers.Between`` per value, and its check applies the same.

        Returns:
            Value name -> its ``Between``; ``{}`` for an item that is not a prediction.
        """
        shown = [c for c in self.visible or () if isinstance(c, Property)]
        return {name: rule for check in shown for name, rule in check.rules.items()}

    def expected_values(self, numbers: Mapping[str, object] | None = None) -> Mapping[str, object]:
        """The declared expected values (computed once, for a callable).

        Args:
            numbers: an edition-bound item's numbers (``editions.Edition.draw``); ``None``: the
                self-study edition's. Other items ignore it.

        Returns:
            Value name -> the right value, as the registration gave it or as its function computed
            it on first use (the same mapping every later call); an edition-bound item's, from
            its edition's numbers; empty when none was declared.
        """
        if self.expected is None:
            return {}
        if self.edition is not None and callable(self.expected):
            return dict(self.expected(self.edition.public() if numbers is None else numbers))
        if callable(self.expected):
            return _expected_once(self.expected)
        return self.expected

    def declaration(self) -> dict:
        """What the test cell's hidden region declares (the package's docstring).

        Returns:
            ``{"check": name, "answer": answer cell's grade id}`` with ``"function": name`` for a
            function item or ``"values": [names]`` for a value item: the JSON a notebook must hold.
        """
        declared: dict = {"check": self.name, "answer": self.answer}
        if self.function:
            declared["function"] = self.function
        else:
            declared["values"] = list(self.values)
        return declared

    def declaration_line(self) -> str:
        """The declaration as the one line a test cell's hidden region holds.

        Returns:
            ``# ITEM: {...}``, the JSON of :meth:`declaration`.
        """
        return f"{DECLARATION} {json.dumps(self.declaration())}"


class Lesson:
    """The items of one lesson, registered with :meth:`item` in its module."""

    def __init__(
        self,
        lesson: str,
        edition: Mapping[str, Number] | None = None,
        derived: Mapping[str, Callable[[dict], Any]] | None = None,
    ) -> None:
        """An empty registry for ``lesson``.

        Args:
            lesson: the lesson's folder name (``"01_tokens_and_attention_memory"``).
            edition: the numbers its edition-bound questions are asked with (``editions.py``),
                by the names its cells' templates use; ``None``: none.
            derived: names its templates may use beyond the numbers, computed from them at
                release (``editions.Edition.derived``).
        """
        self.lesson = lesson
        self.items: dict[str, Item] = {}
        self.edition = (
            Edition(lesson, dict(edition), derived=dict(derived or {})) if edition else None
        )

    def item(
        self,
        grade_id: str,
        *,
        answer: str,
        points: float,
        values: Mapping[str, Form] | None = None,
        function: str | None = None,
        returns: Form | None = None,
        expected: Mapping[str, object] | Callable[[], Mapping[str, object]] | None = None,
        visible: Property | tuple[Property, ...] | None = None,
        allowed: tuple[str, ...] = (),
        forbidden: tuple[str, ...] = (),
        own_work: bool = False,
        edition: bool = False,
    ) -> Callable:
        """Register the decorated check for the test cell ``grade_id`` (the package's docstring).

        Args:
            grade_id: the test cell's nbgrader grade id.
            answer: the grade id of the answer cell the item reads.
            points: the item's points, as the test cell's nbgrader metadata gives them.
            values: the names taken out of the kernel as plain data, each with how it is compared
                (a ``course_lib.forms.Form``). One of ``values`` and ``function``.
            function: the name of the graded function re-created from the answer cell.
            returns: how each of the function's results is compared (a ``Form``).
            expected: the right values by name, or a function giving them (computed once).
            visible: what the visible test may say (``course_grading.judge.visible``): one
                ``Property`` or several (a prediction's declares its rules).
            allowed: ``course_lib`` modules staged for the graded function.
            forbidden: ``course_lib`` modules its staging must never include.
            own_work: a value item scores 0 when the answer cell's source uses ``course_lib``.
            edition: the item's numbers are the class's (``editions.py``): ``expected`` is a
                function of the lesson's edition numbers, and a draw is kept only when it
                changes this item's answers.

        Returns:
            The decorator: it registers the check and returns it unchanged.

        Raises:
            ValueError: neither or both of ``values`` and ``function``, values without their forms
                (a tuple of names, the older registration), a name that is not a Python
                name, a prediction whose rules do not cover its values or that declares an expected
                value, or (when decorating) a second check for the same ``grade_id``.
        """
        forms = _forms(grade_id, values, function)
        shown = (visible,) if isinstance(visible, Property) else visible
        for check in shown or ():
            if check.rules and (set(check.rules) != set(forms) or expected is not None):
                raise ValueError(
                    f"{grade_id}: a prediction has one rule per value, each with a form, and no "
                    "expected value (a plausible value earns its point, never a right one)"
                )

        def register(check: Callable) -> Callable:
            if grade_id in self.items:
                raise ValueError(f"{self.lesson}: two checks for {grade_id}")
            self.items[grade_id] = Item(
                self.lesson,
                grade_id,
                answer,
                float(points),
                check,
                tuple(forms),
                function,
                tuple(allowed),
                tuple(forbidden),
                own_work,
                forms,
                returns,
                expected,
                tuple(shown) if shown else None,
                self.edition if edition else None,
            )
            if edition:
                _bound(self, self.items[grade_id])
            return check

        return register


def _forms(
    grade_id: str, values: Mapping[str, Form] | None, function: str | None
) -> dict[str, Form]:
    """The registration's forms by value name, once its values and function are checked."""
    if bool(values) == bool(function):
        raise ValueError(f"{grade_id}: an item takes values or a function, one of them")
    if values is not None and not isinstance(values, Mapping):
        raise ValueError(f"{grade_id}: give each value with its form, {{name: Form()}}")
    forms = dict(values or {})
    for name in [*forms, *([function] if function else [])]:
        if not _PYTHON_NAME.match(name):
            raise ValueError(f"{grade_id}: {name!r} is not a Python name")
    return forms


def _bound(lesson: Lesson, item: Item) -> None:
    """Bind an edition-bound item to its lesson's edition: a draw must change its answers."""
    if lesson.edition is None or not callable(item.expected):
        raise ValueError(
            f"{item.grade_id}: an edition-bound item needs the lesson's edition and "
            "expected=function(numbers)"
        )
    lesson.edition.answers.append(_changes(item))


def _changes(item: Item) -> Callable[[dict], bool]:
    """Whether a draw suits ``item``: some value's public answer, compared by its form, is not
    the drawn edition's, and no drawn answer read to significant figures sits on a rounding
    boundary (:func:`clear_of_rounding`)."""

    def changes(numbers: dict) -> bool:
        public = item.expected_values()  # when first drawn: a measured answer is not at import
        drawn = item.expected_values(numbers)
        if not all(clear_of_rounding(item.forms[n], drawn[n]) for n in item.forms):
            return False
        return not all(item.forms[n].same(public[n], drawn[n]) for n in item.forms)

    return changes


def clear_of_rounding(form: Form, value: object) -> bool:
    """Whether a right answer typed to ``form``'s precision reads as the exact one: a value
    compared to significant figures keeps its rounding a tenth of the last digit either side.

    Args:
        form: how the value is compared.
        value: the right value.

    Returns:
        False for a ``Sig`` value within that margin of a rounding boundary (4.294967296 at 3
        figures: 4.295 typed reads 4.30); True for any other.
    """
    if not isinstance(form, Sig) or not isinstance(value, (int, float)):
        return True
    x, margin = float(value), 10 ** -(form.digits + 1)
    return {form.canonical(x * (1 - margin)), form.canonical(x * (1 + margin))} == {
        form.canonical(x)
    }


_COMPUTED: dict[int, Mapping[str, object]] = {}


def _expected_once(compute: Callable[[], Mapping[str, object]]) -> Mapping[str, object]:
    if id(compute) not in _COMPUTED:
        _COMPUTED[id(compute)] = dict(compute())
    return _COMPUTED[id(compute)]


def module_name(lesson: str) -> str:
    """The module holding a lesson's trusted checks.

    Args:
        lesson: the lesson's folder name (``"01_tokens_and_attention_memory"``).

    Returns:
        ``course_grading.judge.items.lesson_01``: ``lesson_`` and the lesson's number.
    """
    return f"{PACKAGE}.lesson_{lesson.split('_', 1)[0]}"


def lesson_of(lesson: str) -> Lesson | None:
    """The registry of ``lesson``, or ``None`` when it has no module of checks.

    Args:
        lesson: the lesson's folder name.

    Returns:
        Its :class:`Lesson` (items and edition), or ``None``.

    Raises:
        ModuleNotFoundError: the lesson's module exists but imports one that does not.
    """
    try:
        return importlib.import_module(module_name(lesson)).ITEMS
    except ModuleNotFoundError as err:
        if err.name != module_name(lesson):
            raise
        return None


def items_of(lesson: str) -> dict[str, Item]:
    """The registered items of ``lesson``.

    Args:
        lesson: the lesson's folder name.

    Returns:
        Test-cell grade id -> its :class:`Item`, as the lesson's module registered them.

    Raises:
        GradingError: the lesson has no module of checks, or its module registers another
            lesson's.
        ModuleNotFoundError: the lesson's module exists but imports one that does not.
    """
    try:
        module = importlib.import_module(module_name(lesson))
    except ModuleNotFoundError as err:
        if err.name != module_name(lesson):
            raise
        raise GradingError(
            f"lesson {lesson} has no trusted checks: write {module_name(lesson)} "
            "(docs/instructors.md, 'How to write an item')"
        ) from None
    registered: Lesson = module.ITEMS
    if registered.lesson != lesson:
        raise GradingError(
            f"{module.__name__} holds the checks of {registered.lesson}, not of {lesson}: "
            "rename the lesson folder or the module"
        )
    return registered.items
