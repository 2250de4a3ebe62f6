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
may say (``course_grading.judge.visible``: a ``Property`` that says "plausible", never "right";
a prediction's declares the plausibility rule that is its whole check)::

    ITEMS = Lesson("01_tokens_and_attention_memory")

    @ITEMS.item("test-q1", answer="q1", points=1,
                values={"q1_cheaper": Shape("8x2048", "2x8192"), "q1_ratio": Exact()},
                expected={"q1_cheaper": "8x2048", "q1_ratio": 4},
                visible=Property("q1", "either shape, with any factor above 1"), own_work=True)
    def q1(ev: Evidence) -> str:
        # what earns it: the cheaper shape and the exact factor
        return ev.expect_all()   # "q1_ratio: your value 4.04; the check needs it exact"

    @ITEMS.item("test-predict-ratio", answer="predict-ratio", points=1,
                values={"predicted_ratio": Exact()},
                visible=Property("predicted_ratio", "every number above 1",
                                 rules={"predicted_ratio": Between(1)}), own_work=True)
    def predict_ratio(ev: Evidence) -> str:
        # a prediction: any plausible value earns the point, a right one no more
        return ev.recorded()     # "predicted_ratio: a plausible prediction, recorded; ..."

**The API of a check.** A check is a function of one :class:`Evidence` and returns the message
for full marks (a ``str``) or a :class:`Verdict` (partial credit, review flags). It fails an
item by raising :class:`Reject` (``ev.require(condition, message)`` does), and the item scores
0 with that message. Messages are the instructor's words for the student: they may quote the
student's own value, never the expected one. ``Evidence`` gives the values read by their forms
(``ev.read``, ``ev.expect``, ``ev.expect_all``, ``ev.recorded`` for a prediction: each rejects a
missing, blank or not-plain value with a message),
the function (``ev.call([call(...), ...])``: one sandboxed run per item, every result plain
data, compared with ``ev.returned``; see :func:`call` and the input builders :func:`tensor`,
:func:`new`, :func:`predicate`, :func:`recorder`), a random generator seeded per student and
item (``ev.rng``: the same grade on every re-grade), and the answer cell's source as submitted.
``own_work=True`` on a value item scores 0 an answer cell whose source uses ``course_lib``,
copies a name an earlier cell of the student's computed with it, or runs code built at run time
(``uses.py``); any use of ``course_lib`` in the student's cells is also named in the report.
Every value is registered with its form (``values={name: Form()}``; a tuple of names, the older
registration, is refused), and every lesson item with its visible test (``docs/instructors.md``,
"How to write an item"); only the fixture lesson's plain asserts declare none.

The package's modules: ``model.py`` (``Item``, ``Lesson``, ``Verdict``, ``Reject``, the registry
``items_of``), ``calls.py`` (a graded function's calls and their ``Result``), ``checking.py``
(``Evidence`` and ``verdict``), ``notebooks.py`` (declarations and hidden regions in notebooks);
every name is imported from the package itself.

``tests/grading/test_items.py`` checks every declaration in every source notebook against this
registry (names, answer cell, points) and fails on a planted mismatch.
"""

from __future__ import annotations

from course_grading.judge.items.calls import Result, call, new, predicate, recorder, tensor
from course_grading.judge.items.checking import Evidence, seed_for, seeded_torch, verdict
from course_grading.judge.items.model import (
    DECLARATION,
    Item,
    Lesson,
    Reject,
    Verdict,
    items_of,
    module_name,
)
from course_grading.judge.items.notebooks import (
    check_notebook,
    declaration_of,
    declarations,
    hidden_region,
    is_test_cell,
    problems,
    strip_hidden,
    strip_hidden_tests,
)
from course_grading.judge.plain import describe
from course_grading.judge.visible import Property
from course_lib.answers import Between
from course_lib.forms import (
    Exact,
    Form,
    Integer,
    Ordered,
    Shape,
    Sig,
    Truth,
    Unordered,
    Word,
)

__all__ = [
    "seeded_torch",
    "DECLARATION",
    "Between",
    "Evidence",
    "Exact",
    "Form",
    "Integer",
    "Item",
    "Lesson",
    "Ordered",
    "Property",
    "Reject",
    "Result",
    "Shape",
    "Sig",
    "Truth",
    "Unordered",
    "Verdict",
    "Word",
    "call",
    "check_notebook",
    "declaration_of",
    "declarations",
    "describe",
    "hidden_region",
    "is_test_cell",
    "items_of",
    "module_name",
    "new",
    "predicate",
    "problems",
    "recorder",
    "seed_for",
    "strip_hidden",
    "strip_hidden_tests",
    "tensor",
    "verdict",
]
