"""One normalisation for both sides: a right answer in any reasonable form reads the same, a
visible test never says right (a prediction's rule says plausible and recorded), and nothing
gives the answer away."""

import json
import re
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch

import course_lib.answers as answers
from course_lib.answers import (
    Between,
    ensure_answered,
    plausible,
    predicted,
    read_answer,
)
from course_lib.forms import (
    Exact,
    Integer,
    Ordered,
    Shape,
    Sig,
    Truth,
    Unordered,
    Unreadable,
    Word,
    plain,
)

# --- reading: every reasonable form of a right answer ------------------------------------------

SIXTEEN = [
    16,
    16.0,
    Fraction(16),
    Fraction(32, 2),
    Decimal("16"),
    Decimal("16.000"),
    np.int64(16),
    np.int32(16),
    np.float64(16),
    np.float32(16),
    np.float16(16),
    np.longdouble(16),  # issue 42: .item() keeps it as itself; it was read as "nested too deep"
    np.array(16),
    np.array(16, dtype=np.longdouble),
    torch.tensor(16),
    torch.tensor(16.0),
    torch.tensor(16, dtype=torch.int32),
]


@pytest.mark.parametrize("value", SIXTEEN, ids=lambda v: f"{type(v).__name__}")
@pytest.mark.parametrize("form", [Exact(), Integer(), Sig(3)], ids=lambda f: type(f).__name__)
def test_sixteen_reads_as_sixteen_in_every_form(value, form):
    assert form.canonical(plain(value)) == form.canonical(16)
    assert form.same(plain(value), 16)
    assert form.value(plain(value)) == 16 and type(form.value(plain(value))) is int


@pytest.mark.parametrize(
    ("form", "right", "also_right", "wrong"),
    [
        (Exact(), 16, [16.000000000000004, Fraction(48, 3)], [16.04, 15.9999, 4, 256]),
        (Integer(), 640, [640.0, np.int64(640).item()], [640.5, 639, 64]),
        (Sig(3), 8.589934592, [8.59, 8.5899, np.float32(8.589934592).item()], [8.6, 8.58, 8.5]),
        (Sig(3), 274.877906944, [275, 274.9, 275.0], [270, 280, 274]),
        (Word("A", "B"), "B", [" b ", "b"], ["A", "a"]),
        (Shape(), "8x2048", ["8 x 2048", "8×2048", "8X2048", " 8 x 2,048 ", (8, 2048), [8, 2048]],
         ["2x8192", "8x2049", (2048, 8)]),
        (Truth(), True, [np.bool_(True).item()], [False]),
        (Ordered(Integer(), Integer()), (1028, 256), [[1028, 256], (1028.0, 256)],
         [(1024, 256), (256, 1028), (1028, 512)]),
        (Unordered(Word()), {"b", "c"}, [["c", "b"], ("B", "c", "b"), frozenset({"b", "c"})],
         [{"b"}, {"b", "c", "d"}]),
    ],
)  # fmt: skip
def test_each_form_accepts_right_forms_and_rejects_wrong_values(form, right, also_right, wrong):
    for value in also_right:
        assert form.same(plain(value), right), (form, value)
    for value in wrong:
        assert not form.same(plain(value), right), (form, value)


@pytest.mark.parametrize(
    ("form", "value", "why"),
    [
        (Exact(), "16", "a number is needed, got the text '16': write it without quotes"),
        (Exact(), True, "a number is needed, got bool True"),
        (Exact(), float("nan"), "a finite number is needed"),
        (Exact(), Decimal("Infinity"), "finite number"),
        (Exact(), Decimal("1e999999999"), "sensible size"),
        (Exact(), [16], "a number is needed, got list"),
        (Word("A", "B"), "C", "one of 'A', 'B' is needed, got 'C'"),
        (Word(), 3, "a text (a str) is needed"),
        (Shape(), "8 by 2048", 'a shape such as "8x2048" is needed'),
        (Shape("8x2048", "2x8192"), "4x4096", "one of 8x2048, 2x8192 is needed"),
        (Truth(), 1, "True or False is needed"),
        (Ordered(Integer(), Integer()), (1, 2, 3), "a tuple of 2 values is needed"),
        (Unordered(Word()), "bc", "a set (or list) of answers is needed"),
    ],
)
def test_what_cannot_be_read_says_why_without_the_answer(form, value, why):
    with pytest.raises(Unreadable, match=re.escape(why)):
        form.canonical(value)


def test_a_whole_numpy_integer_is_a_whole_number():
    """Issue 20: ``np.int64(640)`` was told "is not a whole number of tokens"."""
    assert Integer().value(plain(np.int64(640))) == 640
    with pytest.raises(AssertionError, match="a number is needed, got the text"):
        read_answer("tokens", "640", Integer())


class Always:
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class Yes(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class Part(Fraction):
    pass


class Dec(Decimal):
    pass


@pytest.mark.parametrize(
    "value", [Always(), Yes(16), Part(16), Dec(16), np.ones(2), torch.ones(2), {"a": 1}, 1 + 2j]
)
def test_anything_else_is_not_a_plain_value(value):
    with pytest.raises(Unreadable, match="not a plain value"):
        plain(value)
    with pytest.raises(AssertionError, match="not a plain value"):
        read_answer("x", value, Exact())


def test_the_visible_reader_and_the_graders_encoder_agree():
    """What the visible test reads is what the grader takes out of the kernel, and no more."""
    from course_grading.judge import plain as grader_plain
    from course_grading.sandbox.inside.encode import encode

    for value in [*SIXTEEN, "8 x 2048", (1028, 256), [1, 2.5], {"b"}, True, Always(), Yes(1),
                  Part(1), Dec(1), np.ones(2)]:  # fmt: skip
        try:
            seen = plain(value)
        except Unreadable:
            seen = None
        try:
            taken = grader_plain.decode(grader_plain.parse(json.dumps(encode(value))))
        except grader_plain.NotPlain:
            taken = None
        assert (seen is None) == (taken is None), value
        if seen is not None:
            assert seen == taken and type(seen) is type(taken), value


# --- the visible test ---------------------------------------------------------------------------


def test_plausible_never_says_right(capsys):
    plausible("predicted_ratio", "a number above 1", Exact())
    out = capsys.readouterr().out
    assert "plausible (a number above 1)" in out and "(exact)" in out and "right" not in out


def test_read_answer_reads_as_the_grader_reads():
    assert read_answer("q", torch.tensor(4.0), Exact()) == 4
    assert read_answer("q", " 8 × 2048", Shape()) == "8x2048"
    with pytest.raises(NotImplementedError, match="set q"):
        read_answer("q", ..., Exact())


@pytest.mark.parametrize("value", [16, 16.04, 256, 4, np.float64(1.5), Fraction(9, 8)], ids=repr)
def test_a_plausible_prediction_is_recorded_and_never_called_right(value, capsys):
    # Nothing is returned: a value would be the test cell's result, which nbgrader's Validate
    # reads as a partial-credit score (tests/notebooks/test_student_path.py runs it).
    assert predicted("predicted_ratio", value, Exact(), Between(1)) is None
    out = capsys.readouterr().out
    assert "plausible (a number above 1): recorded" in out and "right" not in out


@pytest.mark.parametrize(
    ("value", "rule", "why"),
    [
        (1, Between(1), "is not a number above 1"),
        (1 / 16, Between(1), "is not a number above 1"),
        (1.0, Between(0, 1, low_in=True), "is not a number at least 0 and below 1"),
        (0, Between(0, 1, high_in=True), "is not a number above 0 and at most 1"),
        (2, Between(1, 2), "is not a number above 1 and below 2"),
        (float("nan"), Between(), "a finite number is needed"),
    ],
)
def test_an_implausible_prediction_fails_its_visible_test(value, rule, why):
    with pytest.raises(AssertionError, match=why):
        predicted("x", value, Exact(), rule, "a hint")
    with pytest.raises(NotImplementedError, match="set x"):
        predicted("x", ..., Exact(), rule)


def test_a_rule_holds_for_numbers_only_and_its_edges_as_declared():
    assert Between(0, 1, low_in=True).holds(0) and not Between(0, 1).holds(0)
    assert Between(0, 1, high_in=True).holds(1) and not Between(0, 1).holds(1)
    assert not Between(1).holds(True) and not Between(1).holds("16")
    assert not Between().holds(float("inf")) and Between().holds(-3)


def test_blank_answers_name_what_to_set():
    with pytest.raises(NotImplementedError, match=r"set predicted_ratio: replace the \.\.\."):
        ensure_answered(predicted_ratio=...)
    with pytest.raises(NotImplementedError, match="set q1_effective, q1_tokens"):
        ensure_answered(q1_effective=..., q1_tokens=None)
    ensure_answered(x=0, y="")  # falsy answers are still answers


def test_answers_is_the_student_side_only():
    """No instructor command ships in the student's package, and no digest of an answer is made
    anywhere (issue 27: a digest is an oracle): running the module prints nothing."""
    assert not hasattr(answers, "main")
    assert not {"check", "digest", "secret_digest", "normalise"} & set(dir(answers))
    out = subprocess.run(
        [sys.executable, "-m", "course_lib.answers", "q3_fix", "raise accumulation"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "" and out.stderr == ""
