"""What the assessment pass hands in for an item, besides its blank and its solution.

Built from the item's registration (``course_grading.judge.items``: its forms), the solution and the
closest library call that ``items_NN.py`` lists, so that lessons only list what is particular to
them (their wrong answers and wrong methods, the library call, unavoidable printed forms):

* :func:`value_forms` and :func:`result_forms`: the right answer in every other reasonable form
  (Python, numpy and torch scalars, ``Fraction``, ``Decimal``, an integral float for an integer,
  the answer rounded as typed, a list for a tuple, ``"8 x 2048"`` for ``"8x2048"``...);
* :func:`shortcuts`: every way issue 20 found to score without the work, each with the pattern
  its verdict or the report must show (:data:`SHORTCUTS`);
* :func:`printed_answers`: where an answer shows in text a student reads (numbers as printed,
  shapes, words), for the spoiler test.
"""

from __future__ import annotations

import ast
import math
import re
import textwrap
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from course_lib.forms import Exact, Form, Integer, Ordered, Shape, Sig, Truth, Unordered, Word

IMPORTS = (
    "import numpy as np\nimport torch\nfrom fractions import Fraction\n"
    "from decimal import Decimal\n"
)
MIN_DIGITS = 2  # a single digit (2, 4) is in any text: it says nothing, so it is not looked for
#: A measured median with its range, as the lessons print times and speed-ups
#: (``17.1 [9.0–12.3]``, ``1.02× (0.98–1.10×)``): it changes from run to run, so no answer can be
#: read from it, and an answer that happens to equal one of its numbers is not a spoiler.
MEASURED = re.compile(r"\d[\d,]*(?:\.\d+)?×? [\[(]\d[\d,]*(?:\.\d+)?×?–\d[\d,]*(?:\.\d+)?×?[\])]")

# --- right answers in other forms --------------------------------------------------------------


def _number_forms(value: object, form: Form) -> list[tuple[str, str]]:
    """(what, expression) for other forms of the number ``value``."""
    x = float(value)
    found = [
        ("numpy float64", f"np.float64({x!r})"),
        ("a 0-d torch tensor (float64)", f"torch.tensor({x!r}, dtype=torch.float64)"),
        ("Fraction", f"Fraction({x!r})" if not x.is_integer() else f"Fraction({int(x)})"),
        ("Decimal", f"Decimal({repr(x) if not x.is_integer() else str(int(x))!r})"),
    ]
    if x.is_integer():
        found += [
            ("int", str(int(x))),
            ("integral float", repr(float(x))),
            ("numpy int64", f"np.int64({int(x)})"),
            ("a 0-d torch tensor (int64)", f"torch.tensor({int(x)})"),
            ("a 0-d numpy array", f"np.array({int(x)})"),
        ]
    if isinstance(form, Sig):
        typed = float(f"{x:.{form.digits}g}")
        found += [("rounded as typed", repr(typed)), ("numpy float32", f"np.float32({x!r})")]
    return found


def _forms_of(value: object, form: Form) -> list[tuple[str, str]]:
    if isinstance(form, (Exact, Integer, Sig)):
        return _number_forms(value, form)
    if isinstance(form, Shape):
        dims = Shape().canonical(value).split("x")
        return [
            ("spaces", " x ".join(dims).join('""')),
            ("the × sign", "×".join(dims).join('""')),
            ("capital X", "X".join(dims).join('""')),
            ("padded", f'"  {"x".join(dims)} "'),
            ("a tuple", "(" + ", ".join(dims) + ")"),
        ]
    if isinstance(form, Word):
        return [("upper case", repr(str(value).upper())), ("spaced", repr(f"  {value}  "))]
    if isinstance(form, Truth):
        return [("numpy bool", f"np.bool_({value!r})")]
    if isinstance(form, Ordered):
        items = list(value)  # type: ignore[call-overload]
        firsts = [_forms_of(v, p)[0][1] for v, p in zip(items, form.parts)]
        return [
            ("a list for the tuple", repr(items)),
            ("parts in numpy form", f"({', '.join(firsts)},)"),
        ]
    if isinstance(form, Unordered):
        members = sorted(value, key=repr)  # type: ignore[call-overload]
        return [("a list", repr(members)), ("a frozenset", f"frozenset({members!r})")]
    return []


def value_forms(right: dict[str, object], forms: dict[str, Form]) -> list[tuple[str, str]]:
    """(what, answer cell) for every other form of each right value, the others left right."""
    found = []
    for name, form in forms.items():
        for what, expression in _forms_of(right[name], form):
            others = "".join(f"{n} = {right[n]!r}\n" for n in forms if n != name)
            found.append((f"{name} as {what}", f"{IMPORTS}{others}{name} = {expression}\n"))
    return found


_CONVERT = {
    "a list for every tuple": "lambda v: list(v) if type(v) is tuple else v",
    "numpy scalars": (
        "lambda v: np.int64(v) if type(v) is int else np.float64(v) if type(v) is float else v"
    ),
    "integral floats for ints": "lambda v: float(v) if type(v) is int else v",
    "0-d torch tensors": "lambda v: torch.tensor(v) if type(v) in (int, float) else v",
}


def renamed(source: str, names: dict[str, str]) -> str:
    """``source`` with every use and binding of ``names`` renamed (comments are dropped)."""

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            node.id = names.get(node.id, node.id)
            return node

        def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
            node.name = names.get(node.name, node.name)
            self.generic_visit(node)
            return node

    return ast.unparse(Rename().visit(ast.parse(source)))


_WALK = """
def _walk(v, leaf):
    if type(v) in (tuple, list):
        return leaf(type(v)(_walk(x, leaf) for x in v))
    return leaf(v)
"""


def _wrapped(solution: str, function: str, convert: str) -> str:
    """An answer cell: the solution under another name, its results passed through ``convert``."""
    return (
        f"{IMPORTS}{renamed(solution, {function: '_right_' + function})}\n{_WALK}\n"
        f"_convert = {convert}\n"
        f"def {function}(*args, **kwargs):\n"
        f"    return _walk(_right_{function}(*args, **kwargs), _convert)\n"
    )


def result_forms(solution: str, function: str) -> list[tuple[str, str]]:
    """(what, answer cell): the solution returning its results in other reasonable forms."""
    return [(what, _wrapped(solution, function, c)) for what, c in _CONVERT.items()]


# --- shortcuts -------------------------------------------------------------------------------

ALWAYS = """class _Always:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __float__(self):
        return 1.0
    __hash__ = object.__hash__
"""

SUBCLASSED = """import dataclasses

def _subclassed(v):
    base = type(v)
    if base in (bool, type(None)) or base in (tuple, list):
        return v
    if dataclasses.is_dataclass(v) and not isinstance(v, type):  # a model's output: its fields
        fields = vars(v)
        return dataclasses.replace(v, **{f.name: _subclassed(fields[f.name])
                                         for f in dataclasses.fields(v) if f.init})
    return type("_Same" + base.__name__.title(), (base,),
                {"__eq__": lambda s, o: True, "__hash__": base.__hash__})(v)
"""

ZERO = """import dataclasses

def _zero(v):
    if type(v) is bool:
        return False
    if type(v) in (int, float):
        return type(v)(0)
    if type(v) is str:
        return ""
    if isinstance(v, torch.Tensor):
        return torch.zeros_like(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):  # a model's output: its fields
        fields = vars(v)
        return dataclasses.replace(v, **{f.name: _zero(fields[f.name])
                                         for f in dataclasses.fields(v) if f.init})
    return v
"""


@dataclass(frozen=True)
class Shortcut:
    """One way to score without the work (issues 20 and 27), and what must name it."""

    name: str
    values: bool  # tried on value items
    functions: bool  # tried on function items
    named: str  # a pattern the verdict's message or the report's flags must match
    letter: str = ""  # its letter in docs/instructors.md's tables

    def applies(self, item: object) -> bool:
        """Whether the class is tried on ``item`` (a registered item: a value or function item).

        Args:
            item: a ``course_grading.judge.items.Item``.

        Returns:
            ``functions`` for a function item, ``values`` for a value item.
        """
        return self.functions if getattr(item, "function", None) else self.values


SHORTCUTS = [
    Shortcut("library call in an added cell, copied by the answer cell", True, True,
             r"takes `_lib_|defined in another cell", "L"),
    Shortcut("caching answer cell (try: x = _cache / except NameError)", True, True, r"course_lib",
             "C"),
    Shortcut("library call skipped when sys.getprofile() is set", True, True, r"course_lib", "P"),
    Shortcut("always-equal object", True, True, r"not a plain value: .*_Always", "A"),
    Shortcut("int/float subclass of the right value", True, True, r"not a plain value: .*_Same",
             "S"),
    Shortcut("hard-coded visible inputs, junk elsewhere", False, True, r"not a plain value", "H"),
    Shortcut("degenerate output (zeros of the right shape)", False, True, r"returned", "Z"),
    # issue 27 (tests/notebooks/attacks.py)
    Shortcut("grader-source answer (expected= typed, or the grader's function pasted)", True,
             True, r"listed for review with .*the grader's checks|uses .*course_lib|recorded|"
             r"self-study ed", "G"),
    Shortcut("gate bypass (junk, then the value a later cell prints)", True, False,
             r"\S", "B"),  # its verdict says what is wrong with the value handed in
    Shortcut("seed table (the practice seed's inputs), graded with a course secret", False, True,
             r"KeyError", "T"),
    Shortcut("pasted library code (course_lib's functions in place of their import)", False,
             True, r"listed for review with .*course_lib/|uses .*course_lib", "D"),
    Shortcut("after-answer overwrite (the library call in a cell below the answer)", True, False,
             r"set again in", "O"),
    Shortcut("globals()['name'] lookup of a lesson-imported library name", True, True,
             r"course_lib\.", "N"),
]  # fmt: skip


def _indent(source: str) -> str:
    return textwrap.indent(source, "    ")


def shortcuts(
    *,
    names: list[str],
    function: str | None,
    library: str | None,
    solution: str,
    right: dict[str, object],
    visible_calls: str | None,
) -> list[tuple[Shortcut, str | None, str]]:
    """(shortcut, added cell or ``None``, answer cell) for every shortcut that applies."""
    targets = [function] if function else names
    junk = (
        f"def {function}(*args, **kwargs):\n    return None\n"
        if function
        else "".join(f"{n} = 0\n" for n in names)
    )
    built = {}
    if library is not None:
        lib = {n: f"_lib_{n}" for n in targets}
        built[0] = (renamed(library, lib), "".join(f"{n} = _lib_{n}\n" for n in targets))
        cached = "".join(f"{n} = _cache_{n}\n" for n in targets)
        keep = "".join(f"_cache_{n} = {n}\n" for n in targets)
        caching = f"try:\n{_indent(cached)}except NameError:\n{_indent(library)}\n{_indent(keep)}"
        built[1] = (None, caching)
        skipping = f"if sys.getprofile() is None:\n{_indent(library)}\nelse:\n{_indent(junk)}"
        built[2] = (None, "import sys\n" + skipping)
    if function:
        built[3] = (None, f"{ALWAYS}def {function}(*args, **kwargs):\n    return _Always()\n")
        wrapped = _wrapped(solution, function, "None")
        built[4] = (None, wrapped.replace("_convert = None", SUBCLASSED + "_convert = _subclassed"))
        if visible_calls is not None:
            built[5] = (None, _hard_coded(function, visible_calls))
        built[6] = (None, wrapped.replace("_convert = None", ZERO + "_convert = _zero"))
    else:
        built[3] = (None, ALWAYS + "".join(f"{n} = _Always()\n" for n in names))
        plain_right = [n for n in names if type(right.get(n)) not in (bool, tuple, list)]
        if plain_right:
            lines = [
                f"{n} = _subclassed({right[n]!r})\n"
                if n in plain_right
                else f"{n} = {right[n]!r}\n"
                for n in names
            ]
            built[4] = (None, SUBCLASSED + "".join(lines))
    return [(SHORTCUTS[i], added, answer) for i, (added, answer) in sorted(built.items())]


def _hard_coded(function: str, calls: str) -> str:
    return (
        f"import base64, pickle\n{ALWAYS}"
        "try:\n"
        f"    _seen = pickle.loads(base64.b64decode({calls!r}))\n"
        "except Exception:  # inputs that cannot be rebuilt where it runs (a lesson's own\n"
        "    _seen = []     # classes, without course_lib) match no call: junk everywhere\n"
        f"def {function}(*args, **kwargs):\n"
        "    for seen_args, seen_kwargs, result in _seen:\n"
        "        if repr((seen_args, seen_kwargs)) == repr((args, kwargs)):\n"
        "            return result\n"
        "    return _Always()\n"
    )


# --- answers shown in text -------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:[eE]([-+]?\d+))?(\s*%)?")
_SHAPE = re.compile(r"(?<![\w.])(\d[\d,]*)\s*[x×X]\s*(\d[\d,]*)(?![\w.])")


def numbers_in(text: str) -> list[tuple[str, float, int, int]]:
    """(as printed, value, significant digits, digits written) of every number in ``text``
    (``63.5 %`` is 0.635; ``2,000`` has 1 significant digit and 4 written)."""
    found = []
    for m in _NUMBER.finditer(text):
        whole, frac, exp, pct = m.groups()
        written = (whole.replace(",", "") + (frac or "")[1:]).lstrip("0") or "0"
        significant = written if frac else written.rstrip("0") or "0"
        value = float(whole.replace(",", "") + (frac or "") + (f"e{exp}" if exp else ""))
        found.append((m.group(0), value / 100 if pct else value, len(significant), len(written)))
    return found


def _shows_number(answer: float, printed: float, significant: int, written: int) -> bool:
    """Whether ``printed`` is ``answer`` (at least two digits written) or ``answer`` rounded to
    the printed number's significant digits (at least two)."""
    if answer == 0:
        return False
    if written >= MIN_DIGITS and math.isclose(answer, printed, rel_tol=1e-12):
        return True
    if significant < MIN_DIGITS or float(answer).is_integer():
        return False  # a whole number shows only as itself (256 is not "260")
    return math.isclose(float(f"{answer:.{significant}g}"), printed, rel_tol=1e-9)


def printed_answers(value: object, form: Form | None, text: str) -> list[str]:
    """How ``value`` (compared by ``form``) shows in ``text``: the printed forms found."""
    if isinstance(form, Ordered):
        return [s for v, p in zip(value, form.parts) for s in printed_answers(v, p, text)]  # type: ignore[call-overload]
    if isinstance(form, Unordered) or type(value) in (tuple, list, set, frozenset):
        return [s for v in value for s in printed_answers(v, None, text)]  # type: ignore[attr-defined]
    if isinstance(form, Shape) or (type(value) is str and re.fullmatch(r"\d+x\d+", value)):
        want = Shape().canonical(value)
        return [m.group(0) for m in _SHAPE.finditer(text) if Shape().canonical(m.group(0)) == want]
    if type(value) is str:
        word = " ".join(value.split())
        if len(word) < 3:
            return []
        return [m.group(0) for m in re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.I)]
    if type(value) in (int, float, Fraction, Decimal) and type(value) is not bool:
        answer = float(value)  # type: ignore[arg-type]
        return [p for p, v, sig, w in numbers_in(text) if _shows_number(answer, v, sig, w)]
    return []
