"""The one decoder of student bytes (``plain``), against bombs: refused before they are built.

Each bomb is a ``NotPlain`` with a short reason; the fast ones also run in a fresh subprocess
whose peak resident memory must stay under a generous bound (the grader's target is 300 MiB
for the worker and the main process: the bound here leaves room for the input itself).
``benchmarks/bombs.py`` prints each bomb's memory and time beside the decoder it replaced.
"""

from __future__ import annotations

import ast
import base64
import json
import math
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from course_grading.judge import evidence, plain
from course_grading.sandbox.probe import probe_reply

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20
PEAK = 300 * MIB

#: name -> Python that builds ``data`` (the bytes a student process wrote)
BOMBS = {
    "tensor (2**62, 1, 0)": 'data = b\'{"tensor": {"dtype": "float32", '
    '"shape": [4611686018427387904, 1, 0], "data": []}}\'',
    "set holding a tuple holding a list": 'data = b\'{"set": [{"tuple": [{"list": []}]}]}\'',
    "dict key tuple holding a list": 'data = b\'{"dict": [[{"tuple": [{"list": []}]}, 1]]}\'',
    "1,329-bit Fraction": "data = b'{\"fraction\": [%d, 3]}' % (2**1329 - 1)",
    "nested 100,000 deep": "data = b'{\"list\": [' * 100_000 + b']}' * 100_000",
    "16 MiB of [": "data = b'[' * (16 * 2**20 - 8)",
    "16 MiB of [0,0,...]": "data = b'{\"list\": [' + b'0,' * (8 * 2**20 - 16) + b'0]}'",
    "integer 10**100000": "data = b'1' + b'0' * 100_000",
    "string of 16 MiB": "data = b'\"' + b'a' * (16 * 2**20 - 8) + b'\"'",
    "dict with 10**6 keys": "data = b'{\"dict\": [' + b','.join(b'[%d, 0]' % i "
    "for i in range(10**6)) + b']}'",
    "2 million empty lists": "data = b'{\"list\": [' + b','.join([b'{\"list\": []}'] * 2_000_000)"
    " + b']}'",
}


def _data(name: str) -> bytes:
    scope: dict = {}
    exec(BOMBS[name], scope)  # noqa: S102 (the test's own bomb builders above)
    return scope["data"]


@pytest.mark.parametrize("name", BOMBS)
def test_every_bomb_is_not_plain_with_a_short_reason(name):
    with pytest.raises(plain.NotPlain) as caught:
        value = plain.load(_data(name), tensors=True)
        value.nested()  # the tensor's lists are counted before any is built
    assert 0 < len(str(caught.value)) < 100


_CHILD = """
import json, resource, sys

def peak():  # VmHWM: ru_maxrss keeps the forking parent's peak through exec
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) * 1024

sys.path.insert(0, {root!r})
from course_grading.judge import plain
{build}
try:
    value = plain.load(data, tensors=True)
    value.nested()
    outcome = "accepted"
except plain.NotPlain as err:
    outcome = "NotPlain"
print(json.dumps([outcome, peak()]))
"""


@pytest.mark.parametrize("name", BOMBS)
def test_a_bomb_costs_little_memory(name):
    code = _CHILD.format(root=str(ROOT), build=BOMBS[name])
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    outcome, peak = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == "NotPlain"
    assert peak < PEAK, f"{name}: {peak / MIB:.0f} MiB"


def test_the_tensor_shape_check_runs_before_nested_builds():
    huge = plain.Tensor("float32", (2**62, 1, 0), ())
    with pytest.raises(plain.NotPlain, match="too large"):
        huge.nested()
    wrong = plain.Tensor("float32", (2, 3), (1.0,) * 5)
    with pytest.raises(plain.NotPlain, match="size"):
        wrong.nested()
    assert plain.Tensor("int64", (2, 0), ()).nested() == [[], []]
    assert plain.Tensor("int64", (0, 5), ()).nested() == []


@pytest.mark.parametrize(
    "data",
    [
        b'{"set": [{"tuple": [{"list": []}]}]}',  # TypeError escaped before
        b'{"frozenset": [{"tuple": [{"dict": []}]}]}',
        b'{"dict": [[{"tuple": [1, {"set": []}]}, 1]]}',
    ],
)
def test_an_unhashable_member_deep_in_a_tuple_is_not_plain(data):
    with pytest.raises(plain.NotPlain, match="unhashable"):
        plain.load(data)


def test_a_hashable_tuple_in_a_set_still_decodes():
    got = plain.load(b'{"set": [{"tuple": [1, {"tuple": ["a"]}]}]}')
    assert got == {(1, ("a",))}


def test_a_fraction_too_large_for_a_float_is_not_plain():
    big = Fraction(2**1329 - 1, 3)  # float() of it overflowed in the checks before
    with pytest.raises(plain.NotPlain, match="malformed number"):
        plain.load(json.dumps(plain.encode(big)))
    kept = plain.load(json.dumps(plain.encode(Fraction(2**900, 3))))
    assert math.isfinite(float(kept))


def test_integers_the_grader_can_compare_with_floats_still_decode():
    assert plain.load(b"123456789012345678901234567890") == 123456789012345678901234567890
    assert plain.load(str(10**299).encode()) == 10**299
    with pytest.raises(plain.NotPlain, match="digits"):
        plain.load(str(10**300).encode())


def test_text_inside_strings_does_not_count_as_structure():
    text = "[[[[{{{{,,,,]]" * 1000 + '"\\"'
    assert plain.load(json.dumps(plain.encode([text, {"k": text}]))) == [text, {"k": text}]


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b'{"list": [1, 2}', "brackets"),
        (b'{"list": ["open]}', "open"),
        (b'{"list": [1, 2]', "brackets"),
    ],
)
def test_malformed_brackets_are_named(data, why):
    with pytest.raises(plain.NotPlain, match=why):
        plain.load(data)


def test_deep_but_allowed_nesting_still_decodes():
    value: object = 1
    for _ in range(plain.MAX_DEPTH):
        value = [value]
    assert plain.load(json.dumps(plain.encode(value))) == value


# --- the kernel's reply: quoted base64, never evaluated -----------------------------------------


def _reply(payload: dict) -> str:
    return repr(base64.b64encode(json.dumps(payload).encode()).decode())


def test_the_values_reply_is_read_without_evaluating_it():
    text = _reply({"values": {"x": {"list": [1, 2]}}})
    assert json.loads(evidence.reply_json(text)) == {"values": {"x": {"list": [1, 2]}}}


@pytest.mark.parametrize(
    "text",
    [
        "[" * (4 * MIB),  # a formatter that replies with a literal (ast.literal_eval built it)
        "[" + "0," * MIB + "0]",
        "'" + "A" * 10 + "' + '",
        '"QUJD"',  # another quote
        "'QUJD'\n",
        "__import__('os')",
        "x" * (plain.MAX_BYTES * 2),
        _reply({"values": {"x": {"list": [0] * (plain.MAX_ITEMS + 1)}}}),
        _reply({"nothing": 1}),
        repr(base64.b64encode(b"[" * 10_000).decode()),
    ],
)
def test_any_other_values_reply_is_refused(text):
    with pytest.raises(plain.NotPlain):
        evidence.reply_json(text)


def test_the_probe_reply_is_read_the_same_way():
    assert probe_reply(_reply({"uid": 1})) == {"uid": 1}
    assert "error" in probe_reply(repr(json.dumps({"uid": 1})))  # the old, evaluated form
    assert "error" in probe_reply("[" * 1000)


# --- nothing a student wrote is evaluated -------------------------------------------------------

#: Files allowed an ``eval``, and why: neither reads student text.
EVAL_ALLOWED = {
    "course_grading/judge/visible.py": "the lesson's own visible test cells, from its source",
}


def _evaluations(path: Path) -> list[int]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            bare = isinstance(node.func, ast.Name)
            if name == "literal_eval" or (name == "eval" and bare):
                found.append(node.lineno)
    return found


def test_nothing_in_the_grader_evaluates_text():
    found = {}
    for path in sorted((ROOT / "course_grading").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        lines = _evaluations(path)
        if lines and where not in EVAL_ALLOWED:
            found[where] = lines
    assert not found, f"eval or literal_eval of text in {found}"
    for source in ("judge/evidence.py", "sandbox/probe.py", "judge/plain.py"):
        text = (ROOT / "course_grading" / source).read_text()
        assert not re.search(r"literal_eval|\beval\(", text)


def test_the_evaluation_scan_can_fail(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import ast\nx = ast.literal_eval(t)\ny = eval(t)\nm.eval()\n")
    assert _evaluations(sample) == [2, 3]


# --- NaN never equals ---------------------------------------------------------------------------


@pytest.mark.parametrize("where", [0, 1, 5])
def test_logits_with_a_nan_anywhere_are_not_the_model_s(where):
    from course_grading.judge.items.lesson_02 import Logits

    flat = [0.5] * 6
    student = list(flat)
    student[where] = float("nan")  # before: a NaN after the first value was passed over
    form = Logits()
    want = plain.Tensor("float32", (1, 2, 3), tuple(flat))
    assert form.same(want, want)
    assert not form.same(plain.Tensor("float32", (1, 2, 3), tuple(student)), want)


def test_no_form_calls_nan_equal():
    from course_lib import forms

    nan = float("nan")
    for form in (forms.Exact(), forms.Integer(), forms.Sig(3), forms.Truth()):
        try:
            assert not form.same(nan, nan)
        except forms.Unreadable:
            pass


def test_a_form_refuses_a_fraction_a_float_cannot_hold():
    from course_lib import forms

    with pytest.raises(forms.Unreadable, match="large"):
        forms.Sig(3).value(Fraction(2**1329 - 1, 3))  # OverflowError escaped before
