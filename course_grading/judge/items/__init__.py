"""Trusted item checks: what earns each autograded point, decided outside the student's kernel.

**The item model.** Every autograded test cell of a lesson is an *item*. In the instructor
notebook (``solutions/``) the test cell keeps its visible part (instant feedback in the
student's kernel; its status grades nothing) and its hidden region holds only a declaration::

    ### BEGIN HIDDEN TESTS
    # ITEM: {"check": "predict_ratio", "answer": "predict-ratio", "values": [...]}
    ### END HIDDEN TESTS

``check`` names the trusted check, ``answer`` the answer cell's grade id, and the item takes
either ``values`` (here ``["predicted_ratio"]``: names read out of the student's kernel as plain
data, after the last cell) or a ``function`` (re-created from the answer cell's source in the
submitted file and called in a fresh sandbox, ``functions.py``). The points are nbgrader's, in
the test cell's metadata. The hidden region is removed before a submission runs, so not even the
declaration enters the kernel; the release removes it from the student version.

The checks live here, one module per lesson (``lesson_01.py`` ... and ``lesson_99.py`` for the
fixture lesson of the tests), registered by test-cell grade id, each with how its answers are
compared (a ``course_lib.forms.Form`` per value, or ``returns`` for a function's results: the
one normalisation the visible test uses too), the expected values, and what the visible test
may say (``course_grading.judge.visible``: a ``Property`` that says "plausible", or a ``Digest``
whose candidate space costs at least an hour to search)::

    ITEMS = Lesson("01_tokens_and_attention_memory")

    @ITEMS.item("test-predict-ratio", answer="predict-ratio", points=1,
                values={"predicted_ratio": Exact()}, expected={"predicted_ratio": 16},
                visible=Property("predicted_ratio", "every number above 1"), own_work=True)
    def predict_ratio(ev: Evidence) -> str:
        # what earns it: the exact factor between 2 × 1024 and 32 × 64
        return ev.expect_all()   # "predicted_ratio: your value 16.04; the check needs it exact"

**The API of a check.** A check is a function of one :class:`Evidence` and returns the message
for full marks (a ``str``) or a :class:`Verdict` (partial credit, review flags). It fails an
item by raising :class:`Reject` (``ev.require(condition, message)`` does), and the item scores
0 with that message. Messages are the instructor's words for the student: they may quote the
student's own value, never the expected one. ``Evidence`` gives the values read by their forms
(``ev.read``, ``ev.expect``, ``ev.expect_all``; the older ``ev.value``, ``ev.number``,
``ev.integer``, ``ev.text``: each rejects a missing, blank or not-plain value with a message),
the function (``ev.call([call(...), ...])``: one sandboxed run per item, every result plain
data, compared with ``ev.returned``; see :func:`call` and the input builders :func:`tensor`,
:func:`new`, :func:`predicate`, :func:`recorder`), a random generator seeded per student and
item (``ev.rng``: the same grade on every re-grade), and the answer cell's source as submitted.
``own_work=True`` on a value item scores 0 an answer cell whose source uses ``course_lib``,
copies a name an earlier cell of the student's computed with it, or runs code built at run time
(``uses.py``); any use of ``course_lib`` in the student's cells is also named in the report.
An item registered with forms and a visible test is ``migrated`` (``docs/instructors.md``, "How
to write an item"); the older registration (``values`` as a tuple of names) still works.

``tests/grading/test_items.py`` checks every declaration in every source notebook against this
registry (names, answer cell, points) and fails on a planted mismatch.
"""

from __future__ import annotations

import importlib
import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction

import nbformat

from course_grading.errors import GradingError
from course_grading.judge import functions, plain
from course_grading.judge import secret as course_secret
from course_grading.judge.plain import describe
from course_grading.judge.visible import Digest, Property
from course_lib.forms import (
    Exact,
    Form,
    Integer,
    Ordered,
    Shape,
    Sig,
    Truth,
    Unordered,
    Unreadable,
    Word,
)

DECLARATION = "# ITEM:"
_BEGIN, _END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
_PYTHON_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

__all__ = [
    "Digest",
    "Evidence",
    "Exact",
    "Form",
    "Integer",
    "Item",
    "Lesson",
    "Ordered",
    "Property",
    "Reject",
    "Shape",
    "Sig",
    "Truth",
    "Unordered",
    "Verdict",
    "Word",
    "call",
    "describe",
    "new",
    "predicate",
    "recorder",
    "tensor",
]


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
        """One line for the student: points and the message."""
        return f"{self.points:g} of {self.max_points:g} point(s): {self.message}"


class Reject(Exception):
    """Raised by a check: the item scores 0, and the message says why (to the student)."""


# --- items ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One autograded test cell and the trusted check that grades it (module docstring)."""

    lesson: str
    grade_id: str  # the test cell's grade id
    answer: str  # the answer cell's grade id
    points: float
    check: Callable[[Evidence], str | Verdict]
    values: tuple[str, ...] = ()  # names taken out of the kernel, as plain data
    function: str | None = None  # or: the function re-created from the answer cell
    allowed: tuple[str, ...] = ()  # course_lib modules staged for the function
    forbidden: tuple[str, ...] = ()  # course_lib modules its staging must never include
    own_work: bool = False  # a value item: 0 if the answer cell's source uses course_lib
    forms: Mapping[str, Form] = field(default_factory=dict)  # value name -> how it is compared
    returns: Form | None = None  # a function item: how each result is compared
    expected: Mapping[str, object] | Callable[[], Mapping[str, object]] | None = None
    visible: tuple[Property | Digest, ...] | None = None  # what the visible test may say

    @property
    def name(self) -> str:
        return self.check.__name__

    @property
    def migrated(self) -> bool:
        """Whether the item declares its comparison and its visible test (issue 20's model)."""
        compared = (
            self.returns is not None if self.function else set(self.forms) == set(self.values)
        )
        return compared and bool(self.visible)

    def expected_values(self) -> Mapping[str, object]:
        """The declared expected values (computed once, for a callable)."""
        if self.expected is None:
            return {}
        if callable(self.expected):
            return _expected_once(self.expected)
        return self.expected

    def declaration(self) -> dict:
        """What the test cell's hidden region declares (module docstring)."""
        declared: dict = {"check": self.name, "answer": self.answer}
        if self.function:
            declared["function"] = self.function
        else:
            declared["values"] = list(self.values)
        return declared

    def declaration_line(self) -> str:
        return f"{DECLARATION} {json.dumps(self.declaration())}"


class Lesson:
    """The items of one lesson, registered with :meth:`item` in its module."""

    def __init__(self, lesson: str) -> None:
        self.lesson = lesson
        self.items: dict[str, Item] = {}

    def item(
        self,
        grade_id: str,
        *,
        answer: str,
        points: float,
        values: tuple[str, ...] | Mapping[str, Form] = (),
        function: str | None = None,
        returns: Form | None = None,
        expected: Mapping[str, object] | Callable[[], Mapping[str, object]] | None = None,
        visible: Property | Digest | tuple[Property | Digest, ...] | None = None,
        allowed: tuple[str, ...] = (),
        forbidden: tuple[str, ...] = (),
        own_work: bool = False,
    ) -> Callable:
        """Register the decorated check for the test cell ``grade_id`` (module docstring).

        ``values`` names the values taken out of the kernel; as a mapping it also says how each
        is compared (a ``course_lib.forms.Form``), and ``returns`` does the same for a
        function's results. ``expected`` holds the right values (or a function giving them),
        ``visible`` the visible test's checks (``course_grading.judge.visible``).
        """
        if bool(values) == bool(function):
            raise ValueError(f"{grade_id}: an item takes values or a function, one of them")
        forms = dict(values) if isinstance(values, Mapping) else {}
        for name in [*values, *([function] if function else [])]:
            if not _PYTHON_NAME.match(name):
                raise ValueError(f"{grade_id}: {name!r} is not a Python name")
        shown = (visible,) if isinstance(visible, (Property, Digest)) else visible
        for check in shown or ():
            if isinstance(check, Digest) and not set(check.names) <= set(forms):
                raise ValueError(f"{grade_id}: the digest names values without a form")

        def register(check: Callable) -> Callable:
            if grade_id in self.items:
                raise ValueError(f"{self.lesson}: two checks for {grade_id}")
            self.items[grade_id] = Item(
                self.lesson,
                grade_id,
                answer,
                float(points),
                check,
                tuple(values),
                function,
                tuple(allowed),
                tuple(forbidden),
                own_work,
                forms,
                returns,
                expected,
                tuple(shown) if shown else None,
            )
            return check

        return register


_COMPUTED: dict[int, Mapping[str, object]] = {}


def _expected_once(compute: Callable[[], Mapping[str, object]]) -> Mapping[str, object]:
    if id(compute) not in _COMPUTED:
        _COMPUTED[id(compute)] = dict(compute())
    return _COMPUTED[id(compute)]


def module_name(lesson: str) -> str:
    """``course_grading.judge.items.lesson_01`` for ``01_tokens_and_attention_memory``."""
    return f"{__name__}.lesson_{lesson.split('_', 1)[0]}"


def items_of(lesson: str) -> dict[str, Item]:
    """The registered items of ``lesson``; a ``GradingError`` when it has no module."""
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


# --- declarations in notebooks ------------------------------------------------------------------


def is_test_cell(cell: nbformat.NotebookNode) -> bool:
    """An autograded test cell: graded, not an answer, code."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def hidden_region(source: str) -> str | None:
    """The text between the hidden-test delimiters, or ``None`` without a region."""
    lines = source.split("\n")
    begin = next((i for i, line in enumerate(lines) if _BEGIN in line), None)
    if begin is None:
        return None
    end = next((i for i in range(begin + 1, len(lines)) if _END in lines[i]), len(lines))
    return "\n".join(lines[begin + 1 : end])


def strip_hidden(source: str) -> str:
    """``source`` without its hidden-test regions (an unclosed one runs to the end)."""
    kept, hiding = [], False
    for line in source.split("\n"):
        if _BEGIN in line:
            hiding = True
        elif hiding and _END in line:
            hiding = False
        elif not hiding:
            kept.append(line)
    return "\n".join(kept).rstrip("\n")


def strip_hidden_tests(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose test cells hold no hidden region: what a kernel may receive."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    for cell in nb.cells:
        if is_test_cell(cell):
            cell.source = strip_hidden(cell.source)
    return nb


def declaration_of(source: str) -> dict | None:
    """The declaration in a test cell's hidden region; ``None`` without one.

    Raises ``ValueError`` (with the reason) for a malformed one.
    """
    region = hidden_region(source)
    if region is None:
        return None
    found = [line.strip() for line in region.split("\n") if line.strip().startswith(DECLARATION)]
    other = [
        line.strip()
        for line in region.split("\n")
        if line.strip() and not line.strip().startswith("#")
    ]
    if other:
        raise ValueError(f"the hidden region holds code, not only a declaration: {other[0]!r}")
    if len(found) != 1:
        raise ValueError(f"the hidden region holds {len(found)} declarations; give one")
    try:
        declared = json.loads(found[0][len(DECLARATION) :])
    except json.JSONDecodeError as err:
        raise ValueError(f"the declaration is not JSON ({err.msg})") from None
    if not isinstance(declared, dict):
        raise ValueError("the declaration is not a JSON object")
    return declared


def declarations(nb: nbformat.NotebookNode) -> dict[str, tuple[dict | None, float]]:
    """Test-cell grade id -> (its declaration or ``None``, its points), for every test cell."""
    found = {}
    for cell in nb.cells:
        if is_test_cell(cell):
            meta = cell.metadata["nbgrader"]
            try:
                declared = declaration_of(cell.source)
            except ValueError as err:
                declared = {"malformed": str(err)}
            found[meta["grade_id"]] = (declared, float(meta.get("points", 0)))
    return found


def problems(lesson: str, nb: nbformat.NotebookNode) -> list[str]:
    """How the declarations in ``nb`` (a lesson's source notebook) disagree with the registry."""
    try:
        items = items_of(lesson)
    except GradingError as err:
        return [str(err)]
    declared = declarations(nb)
    answers = {
        cell.metadata["nbgrader"]["grade_id"]
        for cell in nb.cells
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution")
        and not cell.metadata["nbgrader"].get("grade")
    }
    found = []
    for gid, (declaration, points) in declared.items():
        item = items.get(gid)
        if declaration is None:
            found.append(f"{lesson} {gid}: a test cell without a declaration")
        elif "malformed" in declaration:
            found.append(f"{lesson} {gid}: {declaration['malformed']}")
        elif item is None:
            found.append(f"{lesson} {gid}: declared, but {module_name(lesson)} has no check")
        elif declaration != item.declaration():
            found.append(
                f"{lesson} {gid}: the notebook declares {declaration}, the registry "
                f"{item.declaration()}"
            )
        elif points != item.points:
            found.append(
                f"{lesson} {gid}: {points:g} point(s) in the notebook, {item.points:g} in the check"
            )
        if item is not None and item.answer not in answers:
            found.append(f"{lesson} {gid}: no answer cell {item.answer!r} in the notebook")
    for gid in sorted(set(items) - set(declared)):
        found.append(f"{lesson} {gid}: a check without a test cell in the notebook")
    return found


def check_notebook(lesson: str, nb: nbformat.NotebookNode) -> dict[str, Item]:
    """The items of ``lesson``; a ``GradingError`` listing every mismatch with ``nb``."""
    found = problems(lesson, nb)
    if found:
        raise GradingError(
            "the lesson's item declarations and trusted checks disagree; fix the notebook or "
            "course_grading/items: " + "; ".join(found)
        )
    return items_of(lesson)


# --- calls to a graded function -------------------------------------------------------------------


def _input(value: object) -> object:
    """An input in the runner's form: built ones as they are, containers of them, plain data."""
    if isinstance(value, _Built):
        return value.spec
    if type(value) in (list, tuple):
        return {type(value).__name__: [_input(x) for x in value]}
    if type(value) is dict:
        return {"dict": [[_input(k), _input(v)] for k, v in value.items()]}
    return plain.encode(value)


@dataclass(frozen=True)
class _Built:
    """An input the runner builds (a tensor, a model, a predicate...) and how to show it."""

    spec: dict
    shown: str = "…"


def tensor(data: list, dtype: str = "int64") -> _Built:
    """A torch tensor built in the sandbox from nested lists."""
    return _Built({"tensor": {"data": plain.encode(data), "dtype": dtype}}, "tensor(…)")


def new(target: str, *args: object, seed: int | None = None, shown: str = "…", **kwargs) -> _Built:
    """An object built in the sandbox: ``module:name`` called with ``args`` (seeded torch)."""
    spec = {
        "callable": target,
        "args": [_input(a) for a in args],
        "kwargs": {k: _input(v) for k, v in kwargs.items()},
        "seed": seed,
    }
    return _Built({"new": spec}, shown)


def predicate(limit: int) -> _Built:
    """``fits(n)``: True for ``1 <= n <= limit``; every call is recorded (``probes``)."""
    return _Built({"predicate": {"limit": limit}}, "fits")


def recorder(params_of: int) -> _Built:
    """An optimiser stand-in recording the flat gradient of argument ``params_of`` at step()."""
    return _Built({"recorder": {"params_of": params_of}}, "optimizer")


def call(
    *args: object,
    seed: int | None = None,
    take: str | None = None,
    after: tuple[dict, ...] = (),
    **kwargs: object,
) -> dict:
    """One call of the graded function, in the runner's request form (``sandbox/inside/runner.py``).

    ``take``: an attribute path of the result to return (``"logits"``); ``after``: what to
    collect once it returned: ``{"grads": k}``, ``{"probes": k}``, ``{"steps": k}``.
    """
    shown = ", ".join(a.shown if isinstance(a, _Built) else describe(a, 30) for a in args)
    return {
        "args": [_input(a) for a in args],
        "kwargs": {k: _input(v) for k, v in kwargs.items()},
        "seed": seed,
        "take": take,
        "after": list(after),
        "shown": shown,
    }


@dataclass
class Result:
    """What one call gave: a plain value, or the exception it raised."""

    shown: str  # ``tokens_per_batch(2, 8192)``, for messages
    returned: object = None
    raised: dict | None = None  # {"type", "message", "name", "stage"}
    not_plain: str | None = None
    after: list = field(default_factory=list)
    stopped: str | None = None  # why the judge stopped the call (or did not make it)

    def value(self) -> object:
        """The returned value; :class:`Reject` if the call was stopped, raised or returned no
        plain value."""
        if self.stopped:
            raise Reject(f"{self.shown} was stopped: {self.stopped}")
        if self.raised:
            raise Reject(f"{self.shown} raised {_exception_text(self.raised)}")
        if self.not_plain:
            raise Reject(f"{self.shown} returned something that is {self.not_plain}")
        return self.returned


def _exception_text(raised: dict) -> str:
    text = raised["type"] + (f": {raised['message']}" if raised["message"] else "")
    if raised["type"] == "NameError" and raised.get("name"):
        return (
            f"NameError: your function uses `{raised['name']}`, which is defined in another "
            "cell: a graded function's cell must hold everything it needs, imports included"
        )
    if raised["type"] in ("ModuleNotFoundError", "ImportError") and "course_lib" in text:
        return f"{text} (graded functions run where course_lib is not available: write it yourself)"
    return text


# --- evidence ---------------------------------------------------------------------------------


def seed_for(lesson: str, grade_id: str, student: str) -> int:
    """The practice seed of one item for one student (no course secret: ``judge/secret.py``)."""
    return course_secret.seed(None, lesson, grade_id, student, None)


class Evidence:
    """Everything a check may look at for one item of one submission (module docstring)."""

    def __init__(
        self,
        item: Item,
        student: str,
        *,
        values: dict[str, object] | None = None,
        answer_source: str | None = None,
        sandbox: functions.FunctionSandbox | None = None,
        secret: bytes | None = None,
    ) -> None:
        self.item, self.student = item, student
        self._values = values or {}
        self.answer_source = answer_source
        self._sandbox = sandbox
        self.seed = course_secret.seed(secret, item.lesson, item.grade_id, student, answer_source)
        self.rng = random.Random(self.seed)
        self.review: list[str] = []
        self.call_times: list[tuple[float, float]] = []  # (CPU, wall) seconds of every call

    # values
    def value(self, name: str) -> object:
        """The student's value of ``name`` as plain data; :class:`Reject` otherwise."""
        if name not in self.item.values:
            raise GradingError(f"{self.item.grade_id}: the check reads {name!r}, not declared")
        found = self._values.get(name, plain.NotPlain("not set: the notebook never defined it"))
        if isinstance(found, plain.NotPlain):
            raise Reject(f"{name}: {found}")
        return found

    def number(self, name: str) -> int | float:
        """A finite number (``int``, ``float``, ``Fraction``, ``Decimal``; not ``bool``), as an
        ``int`` when it is whole and a ``float`` otherwise."""
        value = self.value(name)
        if type(value) not in (int, float, Fraction, Decimal):
            raise Reject(f"{name}: a number is needed, got {_kind(value)}")
        try:
            return Exact().value(value)
        except Unreadable as why:
            raise Reject(f"{name}: {why}") from None

    def integer(self, name: str) -> int:
        """A whole number: an ``int`` (not ``bool``), or a float, Fraction or Decimal with no
        fraction."""
        value = self.number(name)
        if isinstance(value, float):
            raise Reject(f"{name}: a whole number is needed, got {describe(value)}")
        return value

    def form(self, name: str) -> Form:
        """How ``name`` is compared (the registration's ``values``)."""
        if name not in self.item.forms:
            raise GradingError(f"{self.item.grade_id}: no form declared for {name!r}")
        return self.item.forms[name]

    def read(self, name: str) -> object:
        """``name`` read by its form: a Python number, text or tuple; :class:`Reject` with the
        form's reason if it cannot be read."""
        value = self.value(name)
        try:
            return self.form(name).value(value)
        except Unreadable as why:
            raise Reject(f"{name}: {why}") from None

    def expect(self, name: str, expected: object = None) -> object:
        """``name`` read and compared with ``expected`` (default: the registration's) by its
        form; :class:`Reject` saying what was checked, without the expected value."""
        got = self.read(name)
        if expected is None:
            expected = self.item.expected_values()[name]
        if not self.form(name).same(self.value(name), expected):
            raise Reject(
                f"{name}: your value {describe(self.value(name))}; the check needs it "
                f"{self.form(name).needs}"
            )
        return got

    def expect_all(self) -> str:
        """Every declared value compared with its expected value; the full-marks message."""
        for name in self.item.values:
            self.expect(name)
        return f"{', '.join(self.item.values)}: right"

    def returned(self, result: Result, expected: object, wrong: str = "not right") -> object:
        """A call's result read by the item's ``returns`` form and compared with ``expected``;
        :class:`Reject` naming the call and what came back (never the expected value)."""
        got = result.value()
        form = self.item.returns
        if form is None:
            raise GradingError(f"{self.item.grade_id}: no form declared for the results")
        try:
            read = form.value(got)
            right = form.same(got, expected)
        except Unreadable as why:
            raise Reject(f"{result.shown} returned {describe(got)}: {why}") from None
        if not right:
            raise Reject(f"{result.shown} returned {describe(got)}: {wrong}")
        return read

    def text(self, name: str) -> str:
        value = self.value(name)
        if type(value) is not str:
            raise Reject(f"{name}: a string is needed, got {_kind(value)}")
        return value

    @staticmethod
    def require(condition: object, message: str) -> None:
        """:class:`Reject` with ``message`` unless ``condition`` holds."""
        if not condition:
            raise Reject(message)

    # functions
    def call(self, calls: list[dict]) -> list[Result]:
        """Every call of ``calls`` in one fresh sandbox run; one :class:`Result` each.

        :class:`Reject` when the answer cell is missing, does not run on its own, does not
        define the function, or the run gives no answer (time, memory, a crash).
        """
        item = self.item
        if item.function is None:
            raise GradingError(f"{item.grade_id}: the check calls a function, none declared")
        if self.answer_source is None:
            raise Reject(f"the answer cell {item.answer!r} is not in your notebook")
        source = _python_source(self.answer_source)
        shown = [c.pop("shown", "…") for c in calls]
        ran = functions.run(
            source,
            item.function,
            calls,
            allowed=item.allowed,
            forbidden=item.forbidden,
            settings=self._sandbox or functions.FunctionSandbox(),
            key=(item.lesson, item.grade_id),
        )
        if ran.answer is None:
            raise Reject(f"{item.function}: {ran.failure}")
        if ran.answer["error"]:
            error = ran.answer["error"]
            raise Reject(f"your answer cell, run on its own, raised {_exception_text(error)}")
        if not ran.answer["defined"]:
            raise Reject(f"your answer cell does not define a function {item.function}")
        answers = ran.answer["calls"]
        if len(answers) != len(calls):
            raise Reject(f"{item.function}: the run ended before every call was made")
        results = []
        for text, got in zip(shown, answers):
            self.call_times.append((got.get("cpu", 0.0), got.get("wall", 0.0)))
            results.append(
                Result(
                    f"{item.function}({text})",
                    got.get("returned"),
                    got.get("raised"),
                    got.get("not_plain"),
                    got.get("after", []),
                    got.get("stopped"),
                )
            )
        return results


def _kind(value: object) -> str:
    return f"{type(value).__name__} {describe(value, 30)}"


def _python_source(source: str) -> str:
    """The cell as Python: IPython's syntax (``%magic``, ``!cmd``) turned into calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(source)
    except (SyntaxError, ValueError) as err:
        raise Reject(f"your answer cell is not valid Python ({type(err).__name__})") from None


def verdict(
    item: Item,
    ev: Evidence,
    uses: list[str],
    *,
    borrowed: Sequence[str] = (),
    unread: Sequence[str] = (),
) -> Verdict:
    """Run ``item``'s check on ``ev``; a ``Verdict`` whatever the check raised but a grader bug.

    ``uses``: the certain ``course_lib`` uses in the answer cell (``uses.py``) outside the
    item's allowed modules. An ``own_work`` value item and every function item score 0 with
    them. An ``own_work`` item also scores 0 when its answer cell copies a name an earlier cell
    of the student's computed with ``course_lib`` (``borrowed``, ``uses.borrowed``), or runs
    code built at run time that the grader cannot read (``unread``).
    """
    decided = _decided(item, ev, uses, borrowed, unread)
    seconds = sum(wall for _, wall in ev.call_times)
    return replace(decided, seconds=seconds) if seconds else decided


def _decided(
    item: Item, ev: Evidence, uses: list[str], borrowed: Sequence[str], unread: Sequence[str]
) -> Verdict:
    try:
        if item.own_work and uses:
            raise Reject(
                f"your answer cell uses {', '.join(uses[:3])}: this item is worked out by "
                "hand, without course_lib"
            )
        if item.own_work and borrowed:
            raise Reject(
                f"your answer cell takes {borrowed[0]}: this item is worked out by hand, "
                "without course_lib, in its answer cell"
            )
        if item.own_work and unread:
            raise Reject(
                f"your answer cell runs code the grader cannot read ({unread[0]}): write the "
                "work out plainly in the answer cell"
            )
        if item.function and uses:
            raise Reject(
                f"your answer cell uses {', '.join(uses[:3])}, which this item does not allow: "
                "write it yourself"
            )
        got = item.check(ev)
    except Reject as why:
        return Verdict(item.grade_id, 0.0, item.points, str(why), tuple(ev.review))
    if isinstance(got, Verdict):
        return got
    return Verdict(item.grade_id, item.points, item.points, str(got), tuple(ev.review))
