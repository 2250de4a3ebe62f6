"""The trusted item checks: declarations against the registry, plain data, graded functions.

Fast tests (no kernel). The cheating class (``test_cheating_class.py``) grades real submissions.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from class_builders import FIXTURE, FIXTURE_ROOT, sandbox_problem

from course_grading.errors import GradingError
from course_grading.judge import functions, items, plain, staging, visible
from course_grading.judge.items import Evidence, Reject, call
from course_grading.nbgrader import course as wc
from course_grading.report import Row, csv_text, markdown_text, write_reports
from course_grading.review.names import Bindings
from course_grading.review.uses import uses
from course_grading.sandbox.inside.encode import encode

REPO = Path(__file__).resolve().parents[2]
LESSONS = [(REPO, lesson) for lesson in wc.find_lessons(REPO)] + [(FIXTURE_ROOT, FIXTURE)]
FIXTURE_SOURCE = FIXTURE_ROOT / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
SANDBOX = not sandbox_problem()


def _source(root: Path, lesson: str) -> nbformat.NotebookNode:
    return nbformat.read(str(root / wc.SOURCE_DIR / lesson / f"{lesson}.ipynb"), as_version=4)


# --- declarations and the registry ----------------------------------------------------------


@pytest.mark.parametrize(("root", "lesson"), LESSONS, ids=[lesson for _, lesson in LESSONS])
def test_every_declaration_matches_the_registry(root, lesson):
    nb = _source(root, lesson)
    assert items.problems(lesson, nb) == []
    tests = [c for c in nb.cells if items.is_test_cell(c)]
    assert tests and len(tests) == len(items.items_of(lesson))


@pytest.mark.parametrize(("root", "lesson"), LESSONS, ids=[lesson for _, lesson in LESSONS])
def test_no_hidden_region_holds_code(root, lesson):
    """A hidden region is a declaration only: no hidden test, no expected value."""
    for cell in _source(root, lesson).cells:
        region = items.hidden_region(cell.source) if items.is_test_cell(cell) else None
        if region is not None:
            lines = [line for line in region.split("\n") if line.strip()]
            assert len(lines) == 1 and lines[0].startswith(items.DECLARATION), region


def _planted(change) -> list[str]:
    nb = copy.deepcopy(_source(FIXTURE_ROOT, FIXTURE))
    change(next(c for c in nb.cells if c.metadata["nbgrader"].get("grade_id") == "test_ratio"))
    return items.problems(FIXTURE, nb)


@pytest.mark.parametrize(
    ("change", "found"),
    [
        (lambda c: c.metadata["nbgrader"].update(points=2), r"2 point\(s\) in the notebook, 1"),
        (lambda c: setattr(c, "source", c.source.replace("attention_ratio", "ratio")), "declares"),
        (lambda c: setattr(c, "source", c.source.replace('"ratio"', '"tokens"')), "declares"),
        (lambda c: setattr(c, "source", items.strip_hidden(c.source)), "without a declaration"),
        (
            lambda c: setattr(c, "source", c.source.replace("# ITEM", "assert 1\n# ITEM")),
            "holds code",
        ),
        (lambda c: setattr(c, "source", c.source.replace("{", "{{")), "not JSON"),
        (lambda c: c.metadata["nbgrader"].update(grade_id="test_other"), "has no check"),
    ],
)
def test_a_planted_mismatch_is_found(change, found):
    import re

    problems = _planted(change)
    assert problems and any(re.search(found, p) for p in problems), problems


def test_a_lesson_without_checks_stops_grading():
    with pytest.raises(GradingError, match="has no trusted checks"):
        items.items_of("42_unknown_lesson")
    nb = _source(FIXTURE_ROOT, FIXTURE)
    with pytest.raises(GradingError, match="disagree"):
        items.check_notebook(FIXTURE, _strip_one(nb))


def _strip_one(nb):
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb.cells if items.is_test_cell(c))
    cell.source = items.strip_hidden(cell.source)
    return nb


def test_hidden_regions_never_reach_a_runnable_notebook():
    nb = _source(FIXTURE_ROOT, FIXTURE)
    runnable = items.strip_hidden_tests(nb)
    text = json.dumps(runnable)
    assert "BEGIN HIDDEN" not in text and items.DECLARATION not in text
    assert "assert tokens_per_batch(16, 1024)" in text  # the visible test stays
    assert items.DECLARATION in json.dumps(nb)  # the original is left alone
    assert items.strip_hidden("a\n### BEGIN HIDDEN TESTS\nsecret") == "a"  # unclosed: to the end


# --- plain data ---------------------------------------------------------------------------------


class Always(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class Equal:
    def __eq__(self, other):
        return True


class Sneaky(int):
    pass


class Floaty:
    def __float__(self):
        return 8.0


def _round_trip(value, tensors=False):
    return plain.decode(plain.parse(json.dumps(encode(value, tensors))), tensors=tensors)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -3,
        2**70,
        16.04,
        "8x2048",
        "",
        [1, 2.5, "a"],
        (1, 2),
        ((1, 2), [3, (4,)]),
        {"a": 1, 2: (3, 4), (1, "b"): None},
        {"b", "c"},
        frozenset({1, 2}),
        [],
        (),
    ],
)
def test_plain_values_come_out_as_they_went_in(value):
    got = _round_trip(value)
    assert got == value and type(got) is type(value)


def test_tuple_and_list_stay_distinct_and_floats_keep_their_kind():
    assert type(_round_trip((1,))) is tuple and type(_round_trip([1])) is list
    assert type(_round_trip(4.0)) is float and type(_round_trip(4)) is int
    assert math.isnan(_round_trip(float("nan"))) and _round_trip(float("-inf")) == -math.inf


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (np.float64(0.635), 0.635),
        (np.int64(640), 640),
        (np.bool_(True), True),
        (np.array(3.5), 3.5),
        (np.longdouble(16), 16.0),  # issue 42: was refused as "nested too deep"
        (np.array(0.5, dtype=np.longdouble), 0.5),
        (torch.tensor(16.0), 16.0),
        (torch.tensor(7), 7),
        ((np.int32(2), torch.tensor(3)), (2, 3)),
    ],
)
def test_numpy_and_torch_scalars_arrive_as_python_scalars(value, expected):
    got = _round_trip(value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (Always(3.0), "Always"),
        (Equal(), "Equal"),
        (Sneaky(16), "Sneaky"),
        (Floaty(), "Floaty"),
        ([1, Equal()], "Equal"),
        ({"k": Always(1)}, "Always"),
        (np.ones(3), "ndarray"),
        (torch.ones(2), "Tensor"),
        (1 + 2j, "complex"),
    ],
)
def test_anything_else_is_not_a_plain_value(value, named):
    with pytest.raises(plain.NotPlain, match=f"not a plain value: .*{named}"):
        _round_trip(value)


@pytest.mark.parametrize(
    "data",
    [
        "[1, 2]",  # a bare list: every container is tagged
        '{"int": 3}',  # an unknown tag
        '{"list": [1], "tuple": [2]}',  # two tags
        "NaN",  # a bare NaN
        '{"dict": [[{"list": []}, 1]]}',  # an unhashable key
        '{"tensor": {"dtype": "int64", "shape": [2], "data": [1]}}',  # tensors not allowed here
        '{"list": ' * 40 + "1" + "}" * 40,  # too deep
        "not json",
    ],
)
def test_malformed_data_is_refused(data):
    with pytest.raises(plain.NotPlain):
        plain.decode(plain.parse(data))


def test_size_is_bounded_on_both_sides():
    assert encode(list(range(300_000))) == {"too_large": encode(list(range(300_000)))["too_large"]}
    with pytest.raises(plain.NotPlain, match="too large"):
        plain.decode({"too_large": "x"})
    with pytest.raises(plain.NotPlain, match="too large"):
        plain.parse("1" * (plain.MAX_BYTES + 1))


class SameTensor(torch.Tensor):
    def __eq__(self, other):
        return True

    __hash__ = torch.Tensor.__hash__


def test_a_tensor_subclass_is_not_plain_even_where_tensors_are():
    with pytest.raises(plain.NotPlain, match="not a plain value: .*SameTensor"):
        _round_trip(torch.ones(2).as_subclass(SameTensor), tensors=True)
    kept = _round_trip(torch.nn.Parameter(torch.ones(2)), tensors=True)  # a model's weight is fine
    assert kept == plain.Tensor("float32", (2,), (1.0, 1.0))


def test_tensors_come_back_with_shape_and_dtype():
    got = _round_trip(torch.tensor([[True, False], [False, True]]), tensors=True)
    assert got == plain.Tensor("bool", (2, 2), (True, False, False, True))
    assert got.nested() == [[True, False], [False, True]]


# --- evidence helpers ---------------------------------------------------------------------------


WHOLE = items.Integer()


def _evidence(form: items.Form = WHOLE, **values):
    """Evidence of an item reading every one of ``values`` by ``form``."""
    item = items.items_of(FIXTURE)["test_ratio"]
    item = items.Item(item.lesson, item.grade_id, item.answer, 1, item.check, tuple(values),
                      forms=dict.fromkeys(values, form))  # fmt: skip
    return Evidence(item, "ann", values=values)


def test_evidence_reads_numbers_strictly():
    ev = _evidence(a=4.0, b=4.5, c=True, d="4", e=plain.NotPlain("not a plain value: X"))
    assert ev.read("a") == 4 and type(ev.read("a")) is int
    assert ev.expect("a", 4) == 4
    with pytest.raises(Reject, match="your value 4.5; the check needs it exact"):
        ev.expect("b", 4)
    for name, why in (("c", "number"), ("d", "number"), ("e", "X")):
        with pytest.raises(Reject, match=why):
            ev.read(name)
    with pytest.raises(GradingError, match="not declared"):
        ev.read("undeclared")


def test_the_older_registration_and_accessors_are_gone():
    """Issue 27 removed the migration's scaffolding: values come with their forms, and Evidence
    reads them by those forms only."""
    with pytest.raises(ValueError, match="with its form"):
        items.Lesson("x").item("t", answer="a", points=1, values=("v",))(lambda ev: "")
    assert not {"value", "number", "integer", "text"} & set(dir(Evidence))
    assert not hasattr(items.Item, "migrated")


def test_the_seed_is_per_student_and_item_and_stable():
    a = items.seed_for(FIXTURE, "test_tokens", "ann")
    assert a == items.seed_for(FIXTURE, "test_tokens", "ann")
    assert a != items.seed_for(FIXTURE, "test_tokens", "bob")
    assert a != items.seed_for(FIXTURE, "test_ratio", "ann")


def test_a_check_message_never_holds_the_expected_value():
    """The fixture's ratio check, told 16.04: it quotes 16.04 and not the answer (8)."""
    item = items.items_of(FIXTURE)["test_ratio"]
    verdict = items.verdict(item, Evidence(item, "ann", values={"attention_ratio": 16.04}), [])
    assert verdict.points == 0 and "16.04" in verdict.message and "8" not in verdict.message
    right = items.verdict(item, Evidence(item, "ann", values={"attention_ratio": 8.0}), [])
    assert right.points == right.max_points == 1
    borrowed = items.verdict(item, Evidence(item, "ann", values={"attention_ratio": 8.0}), ["x"])
    assert borrowed.points == 0 and "without course_lib" in borrowed.message


# --- course_lib uses ----------------------------------------------------------------------------

LESSON_IMPORTS = Bindings.of_lesson(["from course_lib.memory import attention_elements as ae"])


@pytest.mark.parametrize(
    ("code", "found", "definite"),
    [
        ("import course_lib.memory as m\nx = m.predict(1)", "course_lib.memory", True),
        ("from course_lib.budget import *", "from course_lib.budget import *", True),
        ("x = ae(2, 4, 1024)", "course_lib.memory.attention_elements", True),
        ("f = ae\nx = f(1, 2, 3)", "course_lib.memory.attention_elements", True),
        ("import importlib\nm = importlib.import_module('course_lib.memory')", "course_lib", True),
        ("import sys\nm = sys.modules['course_lib.budget']", "course_lib.budget", True),
        ("name = 'course_lib.fit'\nm = __import__(name)", "course_lib.fit", True),
        ("m = __import__('course_' + 'lib')", "built at run time", False),
        ("import importlib as il\nm = il.import_module(name)", "built at run time", False),
        ("import os\nf = getattr(os, 'get' + 'cwd')", "built at run time", False),
        ("x = globals()['ae'](2, 4, 1024)", "course_lib.memory.attention_elements", True),
        ("f = vars().get('ae')", "course_lib.memory.attention_elements", True),
        ("f = globals()[name]", "built at run time", False),
    ],
)
def test_every_use_of_course_lib_is_named(code, found, definite):
    got = uses(code, LESSON_IMPORTS)
    assert any(found in u.code and u.definite == definite for u in got), got


#: Issue 42: reaches into the running program that name nothing (each scored in full before).
HIDDEN_REACHES = [
    ("import gc\nf = [o for o in gc.get_objects() if getattr(o, '__name__', '') == 'ae'][0]",
     "gc.get_objects()"),
    ("from gc import get_referrers as refs\nf = refs(1)", "gc.get_referrers()"),
    ("import sys\nf = sys._getframe().f_globals['ae']", "sys._getframe()"),
    ("import inspect\ng = inspect.currentframe().f_back", ".f_back"),
    ("g = (lambda: 0).__globals__", ".__globals__"),
    ("f = next(v for k, v in globals().items() if k.startswith('a'))", "globals() read whole"),
    ("ns = vars()\nf = ns['a' + 'e']", "vars() read whole"),
    ("import sys\nm = [v for v in sys.modules.values()]", "sys.modules read whole"),
    ("import sys\nm = sys.modules[name]", "sys.modules[...] with a name built at run time"),
    ("k = 'a' + 'e'\nf = globals()[k]", "globals() built at run time"),
    ("f = eval('a' + 'e')", "eval(...) with a name built at run time"),
]  # fmt: skip


@pytest.mark.parametrize(("code", "found"), HIDDEN_REACHES)
def test_a_reach_that_names_nothing_is_named_and_hides(code, found):
    got = [u for u in uses(code, LESSON_IMPORTS) if found in u.code]
    assert got and all(not u.definite and u.hides and u.counts for u in got), got


def test_a_getattr_of_a_built_name_is_pointed_at_but_not_followed():
    (got,) = uses("import os\nf = getattr(os, 'get' + 'cwd')", LESSON_IMPORTS)
    assert "built at run time" in got.code and not got.definite and not got.counts


@pytest.mark.parametrize(
    "code",
    [
        "x = 2 * 4 * 1024**2 / (32 * 4 * 64**2)",
        "from course_lib.answers import ensure_answered\nensure_answered(x=x)",
        "import math\nx = math.ceil(3.2)",
        "x = getattr(obj, 'shape')",
        "x = globals().get('n_tokens', 0)",
        "import sys\nv = sys.version_info",
        "import sys\nm = sys.modules['math']",
        "d = vars(config)",
        'def f(n):\n    """My own take on course_lib.fit\'s search."""\n    return n',
        '"""Worked out by hand, not with course_lib.memory."""\nx = 16',
    ],
)
def test_honest_cells_use_nothing(code):
    assert uses(code, LESSON_IMPORTS) == []


# --- graded functions ---------------------------------------------------------------------------


def test_the_staged_package_is_the_closure_of_what_an_item_allows(tmp_path):
    modules = staging.closure(("course_lib.model",))
    assert "course_lib.model" in modules and "course_lib.masks" in modules
    assert "course_lib.budget" not in modules and "course_lib.answers" not in modules
    staging.stage(("course_lib.model",), (), tmp_path)
    staged = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.py")}
    assert "course_lib/model.py" in staged and "course_lib/__init__.py" in staged
    assert (tmp_path / "course_lib" / "__init__.py").read_text() == ""  # not the real one
    with pytest.raises(GradingError, match="forbids"):
        staging.stage(("course_lib.model",), ("course_lib.masks",), tmp_path / "x")


@pytest.fixture(scope="module")
def settings():
    if SANDBOX:
        return functions.FunctionSandbox.default()
    return functions.FunctionSandbox(None)


def _run(settings, source, *calls, allowed=()):
    return functions.run(source, "f", list(calls), allowed=allowed, settings=settings)


def test_a_function_runs_on_fresh_inputs_and_returns_plain_data(settings):
    ran = _run(settings, "def f(a, b):\n    return (a * b, [a], {'b': b})", {"args": [3, 4]})
    assert ran.answer["calls"][0]["returned"] == (12, [3], {"b": 4})


def test_neither_course_lib_nor_course_grading_exists_for_a_function(settings):
    import course_grading
    import course_lib

    paths = [str(Path(m.__file__).parent) for m in (course_grading, course_lib)]
    source = (
        "import os, importlib.util\n"
        "def f(paths):\n"
        "    found = [importlib.util.find_spec(n) is not None\n"
        "             for n in ('course_grading', 'course_lib')]\n"
        "    return found + [os.path.exists(p) for p in paths]\n"
    )
    ran = _run(settings, source, {"args": [{"list": paths}]})
    assert ran.answer["calls"][0]["returned"] == [False, False] + [not SANDBOX] * 2


def test_only_the_allowed_modules_are_there(settings):
    source = (
        "import importlib.util\n"
        "def f():\n"
        "    return [importlib.util.find_spec(n) is not None for n in\n"
        "            ('course_lib.model', 'course_lib.budget', 'course_grading')]\n"
    )
    ran = _run(settings, source, {}, allowed=("course_lib.model",))
    assert ran.answer["calls"][0]["returned"] == [True, False, False]


def test_a_name_from_another_cell_is_named():
    item = items.items_of(FIXTURE)["test_tokens"]
    sandbox = functions.FunctionSandbox.default(sandboxed=SANDBOX)
    cell = "def tokens_per_batch(b, s):\n    return helper(b) * s\n"
    ev = Evidence(item, "ann", answer_source=cell, sandbox=sandbox)
    verdict = items.verdict(item, ev, [])
    assert verdict.points == 0
    assert "uses `helper`, which is defined in another cell" in verdict.message
    assert "imports included" in verdict.message


def test_a_function_that_never_ends_or_floods_costs_only_its_item(settings):
    quick = functions.FunctionSandbox(settings.bwrap, settings.limits, 2, 10, settings.uid)
    ran = _run(quick, "def f():\n    while True:\n        pass\n", {})
    assert ran.answer["calls"][0]["kind"] == "time"  # the process's own CPU-time limit, 2 s
    assert "reached its CPU-time limit (2 s" in ran.answer["calls"][0]["stopped"]
    ran = _run(settings, "import os\ndef f():\n    os._exit(3)\n", {})
    assert "exit status 3" in ran.answer["calls"][0]["stopped"]


@pytest.mark.skipif(not SANDBOX, reason=sandbox_problem() or "-")
def test_an_installed_copy_of_the_grader_is_covered(tmp_path, monkeypatch):
    """A regular (non-editable) install puts course_grading inside the venv: it is covered."""
    import importlib.util
    from importlib.machinery import ModuleSpec

    from course_grading.sandbox import bwrap as sandbox

    bwrap = sandbox.check_available()
    venv = tmp_path / "venv"
    package = venv / "lib" / "site-packages" / "course_grading"
    package.mkdir(parents=True)
    (package / "secret.py").write_text("EXPECTED = 16\n")
    real = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "course_grading":
            spec = ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(package)]
            return spec
        return real(name, *args)

    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    argv = sandbox.command_argv(
        bwrap=bwrap,
        argv=["/bin/ls", "-A", str(package)],
        binds=[],
        limits=sandbox.Limits(),
        cpu_seconds=5,
        uid=None,
        env={"PATH": "/usr/bin:/bin"},
    )
    inside = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert inside.stdout.strip() == "__init__.py"  # only the stub whose import fails
    outside = subprocess.run(["/bin/ls", "-A", str(package)], capture_output=True, text=True)
    assert outside.stdout.strip() == "secret.py"


def test_a_call_result_names_what_went_wrong():
    result = items.Result("f(1)", raised={"type": "ValueError", "message": "no", "name": None})
    with pytest.raises(Reject, match=r"f\(1\) raised ValueError: no"):
        result.value()
    result = items.Result("f(1)", not_plain="not a plain value: Always")
    with pytest.raises(Reject, match="Always"):
        result.value()
    assert call(1, "a")["shown"] == "1, 'a'"


# --- forms, visible tests and the registration (issue 20) ---------------------------------------


def _student(root: Path, lesson: str) -> dict[str, str]:
    nb = nbformat.read(str(root / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    return {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in nb.cells
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    }


@pytest.mark.parametrize(("root", "lesson"), LESSONS, ids=[lesson for _, lesson in LESSONS])
def test_every_visible_test_matches_its_registration(root, lesson):
    """One tolerance per item, in one place: each visible test reads every value with the form
    the trusted check compares it with, a prediction's rule is the trusted check's, and no
    visible test says right."""
    cells = _student(root, lesson)
    found = [
        problem
        for gid, item in items.items_of(lesson).items()
        for problem in visible.problems_in(item, cells[gid])
    ]
    assert not found, found


LESSON_1 = "01_tokens_and_attention_memory"


@pytest.mark.parametrize(
    ("gid", "old", "new", "found"),
    [
        ("test-real-scale", "Sig(3))\n_all", "Sig(2))\n_all", "reads it as Sig(2)"),
        ("test-real-scale", 'plausible("real-scale"', 'plausible("scale"', "0 plausible"),
        ("test-predict-ratio", "Exact(), Between(1)", "Sig(3), Between(1)", "reads it as Sig(3)"),
        ("test-predict-ratio", "Exact(), Between(1)", "Exact(), Between(0)", "trusted check's"),
        ("test-predict-ratio", 'predicted("predicted_ratio"', 'predicted("ratio"', "0 predicted("),
        ("test-q1", "Shape(), Exact())", "Shape(), Integer())", "a form the item does not"),
        ("test-saved-per-token", "_pair = Ordered(Integer(), Integer())",
         "_pair = Ordered(Integer(), Exact())", "reads it as _pair"),
        ("test-q1", '_factor = read_answer("q1_ratio", q1_ratio, Exact())', "_factor = 4",
         "never reads q1_ratio"),
    ],
)  # fmt: skip
def test_a_visible_test_that_disagrees_with_its_registration_is_found(gid, old, new, found):
    source = _student(REPO, LESSON_1)[gid]
    assert old in source, old
    problems = visible.problems_in(items.items_of(LESSON_1)[gid], source.replace(old, new))
    assert any(found in p for p in problems), problems


def test_a_visible_test_that_could_say_right_is_found():
    """Issue 27: a digest check confirmed lesson 1's real-scale figures to a formula search in
    33 s; no visible test may call ``check`` (which said right) again."""
    digest = 'check("real-scale", (scores_gb_per_layer,), "scrypt:sig3:c48f")'
    source = _student(REPO, LESSON_1)["test-real-scale"] + "\n" + digest
    problems = visible.problems_in(items.items_of(LESSON_1)["test-real-scale"], source)
    assert any("would say right" in p for p in problems), problems


@pytest.mark.parametrize(("root", "lesson"), LESSONS, ids=[lesson for _, lesson in LESSONS])
def test_no_expected_value_sits_on_a_rounding_boundary(root, lesson):
    """A right answer typed to the stated precision must read the same as the exact one: the
    expected value keeps its rounding a tenth of the last digit either side."""
    # 40 classes' keys, strong as the grader wants them (the hex digest of a counter)
    secrets = [None] + [hashlib.sha256(b"class %d" % k).hexdigest().encode() for k in range(40)]
    for item in items.items_of(lesson).values():
        for secret in secrets if item.edition is not None else [None]:  # every class's edition
            numbers = item.edition.draw(secret) if item.edition is not None else None
            expected = item.expected_values(numbers)
            for name, form in item.forms.items():
                if isinstance(form, items.Sig) and name in expected:
                    x = float(expected[name])
                    near = [x * (1 - 10 ** -(form.digits + 1)), x * (1 + 10 ** -(form.digits + 1))]
                    assert {form.canonical(v) for v in near} == {form.canonical(x)}, (
                        item.grade_id,
                        name,
                        numbers,
                    )


def test_a_boundary_value_is_caught():
    x, form = 274.877906944, items.Sig(2)  # rounds to 2.7e+02, but 275 typed reads 2.8e+02
    near = [x * (1 - 10 ** -(form.digits + 1)), x * (1 + 10 ** -(form.digits + 1))]
    assert {form.canonical(v) for v in near} != {form.canonical(x)}


@pytest.mark.parametrize(
    "value", [Fraction(16), Fraction(-3, 7), Decimal("8.59"), Decimal("-0.001"), [Fraction(1, 3)]]
)
def test_fractions_and_decimals_come_out_as_they_went_in(value):
    got = _round_trip(value)
    assert got == value and type(got) is type(value)


class Part(Fraction):
    pass


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ('{"fraction": [1, 0]}', "malformed number"),
        ('{"fraction": [1.5, 2]}', "malformed data"),
        ('{"fraction": [' + "9" * 1300 + ", 1]}", "malformed"),
        ('{"decimal": "1e999999999"}', "too large"),
        ('{"decimal": "NaN"}', "not finite"),
        ('{"decimal": "twelve"}', "malformed data"),
    ],
)
def test_a_malformed_fraction_or_decimal_is_refused(data, why):
    with pytest.raises(plain.NotPlain, match=why):
        plain.decode(plain.parse(data))


def test_a_subclassed_fraction_is_not_a_plain_value():
    with pytest.raises(plain.NotPlain, match="not a plain value: .*Part"):
        _round_trip(Part(16))


def _lesson_1(gid: str, **values) -> tuple[items.Item, Evidence]:
    item = items.items_of(LESSON_1)[gid]
    return item, Evidence(item, "ann", values=values)


@pytest.mark.parametrize(
    "value", [4, 4.0, Fraction(4), Decimal("4.0"), 4.000000000000001], ids=repr
)
def test_every_form_of_a_right_value_scores(value):
    item, ev = _lesson_1("test-q1", q1_cheaper="8x2048", q1_ratio=value)
    assert items.verdict(item, ev, []).full


def test_a_failing_check_says_what_it_checked_without_the_answer():
    item, ev = _lesson_1("test-q1", q1_cheaper="8x2048", q1_ratio=4.04)
    got = items.verdict(item, ev, [])
    assert got.points == 0
    assert got.message == "q1_ratio: your value 4.04; the check needs it exact"
    item, ev = _lesson_1("test-q1", q1_cheaper="8x2048", q1_ratio="4")
    assert "write it without quotes" in items.verdict(item, ev, []).message
    item, ev = _lesson_1("test-q1", q1_cheaper="8 × 2048", q1_ratio=Decimal("4"))
    assert items.verdict(item, ev, []).full
    item, ev = _lesson_1("test-q1", q1_cheaper="2 x 8192", q1_ratio=4)
    message = items.verdict(item, ev, []).message
    assert "'2 x 8192'; the check needs it the right shape" in message and "8x2048" not in message


@pytest.mark.parametrize("value", [16, 16.0, Fraction(16), 256, 16.04, 4, 1.5], ids=repr)
def test_a_prediction_earns_its_point_for_any_plausible_value_and_says_nothing_of_right(value):
    """Issue 27: a right prediction earns no more than a wrong plausible one, and the message is
    the same for both (it says the value was recorded, never whether it was right)."""
    item, ev = _lesson_1("test-predict-ratio", predicted_ratio=value)
    got = items.verdict(item, ev, [])
    right = items.verdict(item, _lesson_1("test-predict-ratio", predicted_ratio=16)[1], [])
    assert got.full and got == right
    assert "recorded" in got.message
    assert not re.search(r"\bright\b|\bwrong\b|\bexact\b|16", got.message), got.message


@pytest.mark.parametrize(("value", "why"), [(1, "above 1"), (1 / 16, "above 1"), ("16", "quotes")])
def test_an_implausible_prediction_earns_nothing(value, why):
    item, ev = _lesson_1("test-predict-ratio", predicted_ratio=value)
    got = items.verdict(item, ev, [])
    assert got.points == 0 and why in got.message, got.message


def test_a_prediction_is_registered_with_a_rule_per_value_and_no_expected_value():
    lesson = items.Lesson("x")
    rule = items.Property("p", "above 1", rules={"p": items.Between(1)})
    with pytest.raises(ValueError, match="no expected value"):
        lesson.item("t", answer="a", points=1, values={"p": items.Exact()}, visible=rule,
                    expected={"p": 16})(lambda ev: ev.recorded())  # fmt: skip
    with pytest.raises(ValueError, match="one rule per value"):
        lesson.item("t", answer="a", points=1, values={"p": items.Exact(), "q": items.Exact()},
                    visible=rule)(lambda ev: ev.recorded())  # fmt: skip


def test_evidence_reads_fractions_and_decimals_as_numbers():
    ev = _evidence(items.Exact(), a=Fraction(4), b=Decimal("4.5"), c=Fraction(1, 3))
    assert ev.read("a") == 4 and type(ev.read("a")) is int
    assert ev.read("b") == 4.5 and type(ev.read("b")) is float
    whole = _evidence(c=Fraction(1, 3))
    with pytest.raises(Reject, match="exact and whole"):
        whole.expect("c", 1)


def test_a_function_result_is_read_by_its_form():
    item, ev = _lesson_1("test-saved-per-token")
    for got in [(1028, 256), [1028, 256], (1028.0, 256)]:
        assert ev.returned(items.Result("f(…)", got), (1028, 256)) == (1028, 256)
    with pytest.raises(Reject, match=r"f\(…\) returned \(1028, 512\): no"):
        ev.returned(items.Result("f(…)", (1028, 512)), (1028, 256), "no")
    with pytest.raises(Reject, match="a tuple of 2 values is needed"):
        ev.returned(items.Result("f(…)", 1284), (1028, 256))


# --- values copied from a cell that used course_lib ------------------------------------------

ADDED = "cell 9 (added by the student)"


@pytest.mark.parametrize(
    ("cells", "answer", "found"),
    [
        ([("from course_lib.memory import attention_elements as ae\n_x = ae(2, 4, 1024)")],
         "predicted_ratio = _x", ["`_x`"]),
        ([("_y = ae(2, 4, 1024)"), ("_x = _y / 2")], "r = _x", ["`_x`"]),
        ([("import course_lib.memory as m\nf = m.attention_elements")], "r = f(1, 2, 3)", ["`f`"]),
        ([("_x = ae(2, 4, 1024)"), ("_x = 16")], "r = _x", []),
        ([("_x = 2 * 4 * 1024**2")], "r = _x", []),
        ([("_x = ae(2, 4, 1024)")], "r = 16", []),
    ],
)  # fmt: skip
def test_a_value_copied_from_a_cell_that_used_course_lib_is_named(cells, answer, found):
    from course_grading.review.uses import borrowed

    earlier = [(ADDED, source, frozenset()) for source in cells]
    got = borrowed(answer, earlier, LESSON_IMPORTS)
    assert [g.split(" ")[0] for g in got] == found, got
    assert all(ADDED in g and "course_lib" in g for g in got)


@pytest.mark.parametrize(
    ("added", "answer"),
    [
        ("import gc\n_x = [o for o in gc.get_objects() if o == 8.0][0]", "attention_ratio = _x"),
        ("_k = 'attention' + '_ratio'\n_x = globals()[_k]", "attention_ratio = _x"),
        ("", "import gc\nattention_ratio = [o for o in gc.get_objects() if o == 8.0][0]"),
        ("", "attention_ratio = globals()['_' + 'x']"),
    ],
)  # fmt: skip
def test_an_own_work_value_found_by_a_reach_that_names_nothing_scores_zero(added, answer):
    """Issue 42: a value found through ``gc.get_objects()`` or a ``globals()`` key built at run
    time, in a cell the student added or in the answer cell, scored in full."""
    from course_grading.judge.functions import FunctionSandbox
    from course_grading.judge.lesson import LessonSpec
    from course_grading.judge.verdicts import decide
    from course_grading.review.uses import answer_and_earlier, cells_after
    from course_grading.sandbox.bwrap import Limits

    release = FIXTURE_ROOT / wc.RELEASE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
    spec = LessonSpec.from_notebooks(FIXTURE, FIXTURE_SOURCE, release)
    item = items.items_of(FIXTURE)["test_ratio"]
    sandbox = FunctionSandbox(None, Limits())

    def verdict(added: str, answer: str) -> items.Verdict:
        nb = nbformat.read(str(release), as_version=4)
        index = next(
            i
            for i, c in enumerate(nb.cells)
            if c.metadata.get("nbgrader", {}).get("grade_id") == "answer_ratio"
        )
        nb.cells[index].source = answer
        if added:
            nb.cells.insert(index, nbformat.v4.new_code_cell(added))
        source, earlier = answer_and_earlier(nb, spec, item.answer)
        later = cells_after(nb, spec, item.answer)
        values = {"attention_ratio": 8.0}
        return decide(item, spec, "ann", values, source, sandbox, earlier, later=later)

    assert verdict("_x = (2 * 8192**2) / (16 * 1024**2)", "attention_ratio = _x").full  # honest
    got = verdict(added, answer)
    assert got.points == 0, got
    assert "cannot read" in got.message or "takes `_x`" in got.message, got.message


def test_a_borrowed_or_unreadable_answer_scores_zero_on_an_own_work_item():
    item, ev = _lesson_1("test-predict-ratio", predicted_ratio=16.0)
    got = items.verdict(item, ev, [], borrowed=["`_x` (cell 9 uses course_lib.memory.x)"])
    assert got.points == 0 and "takes `_x`" in got.message
    got = items.verdict(item, ev, [], unread=["exec(...) with a name built at run time"])
    assert got.points == 0 and "cannot read" in got.message
    assert items.verdict(item, ev, []).full


# --- the report ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["=1+1", "\xa0=1+1", "\u200b=1+1", " =1+1", "\ufeff+1", "\uff1d1+1", "\u2060 @SUM(A1)",
     "\uff0d2", "\t=1"],
    ids=repr,
)  # fmt: skip
def test_no_cell_that_could_read_as_a_formula_escapes_the_guard(text):
    """Issue 42: after a no-break or zero-width space became a plain one (`` =1+1``), and for a
    full-width ``＝``, the guard let the cell through."""
    from course_grading.report_text import unguarded

    assert csv_text(text).startswith("'"), csv_text(text)
    assert unguarded(csv_text(text)) == csv_text(text)[1:]
    assert csv_text("alice") == "alice" and unguarded("'alice") == "'alice"


def test_the_report_writes_student_text_as_text(tmp_path):
    hostile = '=HYPERLINK("http://x")\n<script>alert(1)</script> | row'
    rows = [
        Row(student="+cmd", lesson=FIXTURE, status="ok", reasons=(hostile,), file="-x\ty"),
        Row(student="@sum", lesson=FIXTURE, status="flagged", failed_tests=("t (0/1: <b>)",)),
    ]
    write_reports(tmp_path, rows)
    md = (tmp_path / "report.md").read_text()
    assert "<script>" not in md and "\\<script\\>" in md and "<b>" not in md
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert "\\| row" in md and len(table) == 4  # header, rule, two rows: no line of their own
    import csv

    with open(tmp_path / "report.csv", newline="") as fh:
        cells = [c for row in csv.reader(fh) for c in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t") and c != "-"]
    assert "'+cmd" in cells and "'@sum" in cells and "'-x y" in cells
    assert not any("\n" in c for c in cells)
    scores = (tmp_path / "scores.csv").read_text().splitlines()
    assert scores[1].startswith("'+cmd") and scores[2].startswith("'@sum")
    assert csv_text("ok") == "ok" and markdown_text("a\r\nb") == "a  b"


def test_a_grading_error_is_one_line_and_status_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "course_grading", str(tmp_path / "none"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"python -m course_grading: submissions folder {tmp_path / 'none'} does not exist "
        "(give a folder, or the zip Canvas or Moodle downloaded)"
    ]


# --- what a message says --------------------------------------------------------------------


def test_a_near_miss_is_quoted_with_every_digit_that_makes_it_one():
    """``4.0000000001`` is not the exact 4 the check needs: the message must not call it 4."""
    item, ev = _lesson_1("test-q1", q1_cheaper="8x2048", q1_ratio=4.0000000001)
    message = items.verdict(item, ev, []).message
    assert message == "q1_ratio: your value 4.0000000001; the check needs it exact"
    assert plain.describe(16.04) == "16.04" and plain.describe(4.0) == "4"
    assert plain.describe(0.1 + 0.2) == "0.30000000000000004"


def test_a_deleted_test_cell_is_said_to_score_zero_not_the_checks_praise():
    """The answer cell's comment once read "right on 6 micro-batch shapes" beside 0 points."""
    from course_grading.judge.lesson import LessonSpec
    from course_grading.judge.verdicts import grade_submission

    release = FIXTURE_ROOT / "notebooks" / FIXTURE / f"{FIXTURE}.ipynb"
    spec = LessonSpec.from_notebooks(FIXTURE, FIXTURE_SOURCE, release)
    source = nbformat.read(str(FIXTURE_SOURCE), as_version=4)
    submitted = nbformat.read(str(release), as_version=4)
    submitted.cells = [
        c for c in submitted.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_ratio"
    ]
    payload = {"values": {"attention_ratio": 8.0}}
    graded = grade_submission(spec=spec, source=source, submitted=submitted, student="s",
                              payload=payload, sandbox=functions.FunctionSandbox())  # fmt: skip
    got = graded.verdicts["test_ratio"]
    assert got.points == 0 and got.max_points == 1
    assert "was deleted, so this item scores 0" in got.message and "right" not in got.message


def test_a_wrong_noise_target_is_told_which_side_it_is_on_without_the_answer(monkeypatch):
    """Lesson 3's 0.0405 at K = 22 read as "0.040", and the message said only "your value 22;
    the check needs it exact": it now says the student's own K misses the target, or that a
    smaller K meets it, never which K is right."""
    from course_grading.judge.items import lesson_03

    monkeypatch.setattr(lesson_03, "rho_example", lambda: 0.0405 * 2 * 22)  # the answer is 23
    item = items.items_of("03_gradient_accumulation")["test-noise-target"]

    def message(k: int) -> str:
        ev = Evidence(item, "ann", values={"target_accum_steps": k})
        return items.verdict(item, ev, []).message

    assert message(22) == (
        "target_accum_steps: at 22 steps the 1/K law gives a noise-to-signal of 0.0405, above "
        "the target 0.04"
    )
    assert "meet the target 0.04, and so do fewer" in message(24) and "23" not in message(24)
    assert items.verdict(item, Evidence(item, "ann", values={"target_accum_steps": 23}), []).full


#: graded functions by what the grader hands them: tensors (so `torch` must be at hand in the
#: cell the grader runs alone) or plain numbers and proxies
GETS_TENSORS = {"packed_row", "packed_forward", "accumulate_token_weighted", "fixed_train",
                "count_saved_bytes"}  # fmt: skip
GETS_NUMBERS = {"saved_per_token", "saved_values_per_token", "predict_micro_batch",
                "largest_fitting", "tokens_per_batch"}  # fmt: skip


@pytest.mark.parametrize(("root", "lesson"), LESSONS, ids=[lesson for _, lesson in LESSONS])
def test_a_graded_function_handed_tensors_finds_torch_imported_in_its_own_cell(root, lesson):
    """The grader re-creates a graded function from its cell alone: lesson 3's
    ``accumulate_token_weighted`` cell once lacked the ``import torch`` its neighbours have."""
    student = nbformat.read(str(root / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in student.cells}
    for item in items.items_of(lesson).values():
        if not item.function:
            continue
        assert item.function in GETS_TENSORS | GETS_NUMBERS, f"classify {item.function}"
        if item.function in GETS_TENSORS:
            lines = cells[item.answer].source.splitlines()
            assert "import torch" in [ln.split("#")[0].strip() for ln in lines], item.function


def test_an_answer_set_again_below_its_cell_with_course_lib_is_not_own_work():
    """Values leave the kernel after its last cell: a cell added below the answer cell that sets
    it again with ``course_lib`` (directly, or through a name computed with it) overwrites the
    hand-worked answer, and the item must say so; setting it again by hand is fine."""
    from course_grading.review.uses import rebound

    answer = [("the answer cell", "predicted_ratio = 2 * 4 * 1024**2 / (32 * 4 * 64**2)",
               frozenset())]  # fmt: skip
    later = [
        ("cell 20 (added by the student)", "_r = ae(2, 4, 1024) / ae(32, 4, 64)", frozenset()),
        ("cell 21 (added by the student)", "predicted_ratio = _r", frozenset()),
    ]
    found = rebound(["predicted_ratio"], answer, later, LESSON_IMPORTS)
    assert found == ["`predicted_ratio`, set again in cell 21 (added by the student), which "
                     "takes `_r` (cell 20 (added by the student) uses "
                     "course_lib.memory.attention_elements)"]  # fmt: skip
    direct = [("cell 20 (added by the student)", "predicted_ratio = globals()['ae'](2, 4, 8)",
               frozenset())]  # fmt: skip
    assert (
        "which uses course_lib.memory.attention_elements"
        in rebound(["predicted_ratio"], answer, direct, LESSON_IMPORTS)[0]
    )
    by_hand = [("cell 20 (added by the student)", "predicted_ratio = 16", frozenset())]
    assert rebound(["predicted_ratio"], answer, by_hand, LESSON_IMPORTS) == []
    item, ev = _lesson_1("test-predict-ratio", predicted_ratio=16)
    got = items.verdict(item, ev, [], borrowed=found)
    assert got.points == 0 and "set again in cell 21" in got.message


def test_references_built_at_once_in_two_slots_draw_their_own_weights():
    """The ``--jobs`` slots decide submissions in threads of one process, and torch's global
    generator is one per process: lesson 3's reference models, built at once from two seeds,
    drew each other's weights (a right answer was rejected at 1.3 relative error)."""
    from concurrent.futures import ThreadPoolExecutor

    from course_grading.judge.items import lesson_03

    def weights(seed: int) -> torch.Tensor:
        return torch.cat(
            [p.detach().flatten() for p in lesson_03._reference_model(seed).parameters()]
        )

    want = {seed: weights(seed) for seed in (1, 2)}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(60):
            got = list(pool.map(weights, [1, 2] * 4))
            assert all(torch.equal(g, want[s]) for g, s in zip(got, [1, 2] * 4))


def test_a_measurement_in_one_slot_leaves_another_slots_reference_weights_alone():
    """Lesson 1's card measurement seeds torch's one generator (``compare_shapes``): made in one
    slot while another builds lesson 3's reference model, it used to reseed that model's draws.
    It holds the grader's generator lock, as the references do."""
    import threading

    from course_grading.judge.items import lesson_01, lesson_03

    def weights() -> torch.Tensor:
        return torch.cat([p.detach().flatten() for p in lesson_03._reference_model(1).parameters()])

    want, wrong, builds = weights(), [], 0
    measuring = threading.Thread(target=lesson_01._split_peaks.__wrapped__, args=(4096,))
    measuring.start()
    while measuring.is_alive() or not builds:  # with the lock, a build waits for the measurement
        wrong += [] if torch.equal(weights(), want) else [builds]
        builds += 1
    measuring.join()
    assert not wrong, f"builds {wrong} of {builds} drew other weights"
