"""One normalisation for both sides: a right answer in any reasonable form reads the same, the
visible test's digests tell right from wrong at the item's form, and nothing gives the answer
away."""

import json
import re
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch

from course_lib.answers import (
    check,
    digest,
    ensure_answered,
    forms_of_digest,
    normalise,
    plausible,
    read_answer,
    secret_digest,
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
    form_of,
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
    np.array(16),
    torch.tensor(16),
    torch.tensor(16.0),
    torch.tensor(16, dtype=torch.int32),
]


@pytest.mark.parametrize("value", SIXTEEN, ids=lambda v: f"{type(v).__name__}")
@pytest.mark.parametrize("form", [Exact(), Integer(), Sig(3)], ids=lambda f: f.spec)
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


@pytest.mark.parametrize(
    ("low", "high", "form", "count"),
    [
        (1e-3, 1e6, Sig(3), 8101),  # 9 decades of 900, and 1e6 itself
        (1e-3, 1e6, Sig(2), 811),
        (1, 10, Sig(3), 901),
        (1, 100, Integer(), 100),
    ],
)
def test_candidate_spaces_are_counted(low, high, form, count):
    assert form.candidates(low, high) == count


def test_forms_round_trip_through_their_spec():
    nested = Ordered(Ordered(Exact(), Word()), Integer())
    for form in [Exact(), Integer(), Sig(2), Word(), Shape(), Truth(), Unordered(Word()), nested]:
        assert form_of(form.spec) == form
    with pytest.raises(ValueError, match="not a form"):
        form_of("sig")


# --- the visible test ---------------------------------------------------------------------------

FORMS = [Sig(3), Sig(3), Sig(3)]
RIGHT = (8.589934592, 274.877906944, 2.097152)


@pytest.fixture(scope="module")
def made():
    return secret_digest("real-scale", RIGHT, FORMS)


def test_a_secret_digest_names_its_forms_and_hides_the_value(made):
    assert made.startswith("scrypt:sig3;sig3;sig3:") and forms_of_digest(made) == FORMS
    assert "8.59" not in made and "275" not in made
    assert secret_digest("other-label", RIGHT, FORMS) != made  # the label salts it


def test_check_says_right_to_every_right_form_and_wrong_to_a_wrong_value(made, capsys):
    check("real-scale", (np.float64(8.59), 275, Fraction(2097152, 10**6)), made)
    out = capsys.readouterr().out
    assert (
        "checking real-scale" in out and "real-scale: right (right to 3 significant figures)" in out
    )
    for wrong in [(8.6, 275, 2.1), (8.59, 275, 1.05), (17.2, 550, 2.1)]:
        with pytest.raises(AssertionError, match=r"real-scale is not right yet \(right to 3"):
            check("real-scale", wrong, made)
    with pytest.raises(AssertionError, match="3 values are compared, got 2"):
        check("real-scale", (8.59, 275), made)
    with pytest.raises(AssertionError, match="not a plain value"):
        check("real-scale", (Always(), 275, 2.1), made)
    with pytest.raises(NotImplementedError):
        check("real-scale", (..., 275, 2.1), made)


def test_plausible_never_says_right(capsys):
    plausible("predicted_ratio", "a number above 1", Exact())
    out = capsys.readouterr().out
    assert "plausible (a number above 1)" in out and "(exact)" in out and "right" not in out


def test_read_answer_reads_as_the_grader_reads():
    assert read_answer("q", torch.tensor(4.0), Exact()) == 4
    assert read_answer("q", " 8 × 2048", Shape()) == "8x2048"
    with pytest.raises(NotImplementedError, match="set q"):
        read_answer("q", ..., Exact())


# --- older digests (lessons not yet moved to forms) -------------------------------------------


@pytest.mark.parametrize(
    "value, sig, text",
    [
        (16, None, "16"),
        (16.0, 3, "16"),
        (0.63492, 3, "0.635"),
        (np.float64(0.63492), 3, "0.635"),
        (torch.tensor(12), None, "12"),
        (True, None, "true"),
        ("  Raise   Accumulation ", None, "raise accumulation"),
        ({"b", "A"}, None, "{a,b}"),
        ((1, 1, 8, 8, 0.125), 3, "[1,1,8,8,0.125]"),
    ],
)
def test_normalise(value, sig, text):
    assert normalise(value, sig) == text


def test_older_digests_still_tell_right_from_wrong(capsys):
    expected = digest("q2_steps", 12)
    check("q2_steps", 12, expected)
    assert "q2_steps: right" in capsys.readouterr().out
    for wrong in (13, 12.5, "12 steps", 11):
        with pytest.raises(AssertionError, match="q2_steps is not right yet"):
            check("q2_steps", wrong, expected)
    with pytest.raises(AssertionError, match="3 significant figures"):
        check("predicted_waste", 0.64, digest("predicted_waste", 0.6349, sig=3), sig=3)
    with pytest.raises(AssertionError, match="must be a number, a bool, a string"):
        check("f", print, digest("f", 1))


def test_blank_answers_name_what_to_set():
    with pytest.raises(NotImplementedError, match=r"set predicted_ratio: replace the \.\.\."):
        ensure_answered(predicted_ratio=...)
    with pytest.raises(NotImplementedError, match="set q1_effective, q1_tokens"):
        ensure_answered(q1_effective=..., q1_tokens=None)
    ensure_answered(x=0, y="")  # falsy answers are still answers


def test_answers_is_the_student_side_only():
    """No instructor command ships in the student's package (``python -m course_grading digest``
    makes digests); running the module prints nothing and makes no digest."""
    import course_lib.answers as answers

    assert not hasattr(answers, "main")
    out = subprocess.run(
        [sys.executable, "-m", "course_lib.answers", "q3_fix", "raise accumulation"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "" and digest("q3_fix", "raise accumulation") not in out.stderr
