"""Digests tell right from wrong at a stated precision, and never contain the answer."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from course_lib.answers import check, digest, ensure_answered, normalise


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


def test_right_values_pass_and_wrong_values_fail(capsys):
    expected = digest("q2_steps", 12)
    check("q2_steps", 12, expected)
    assert "q2_steps: right" in capsys.readouterr().out
    for wrong in (13, 12.5, "12 steps", 11):
        with pytest.raises(AssertionError, match="q2_steps is not right yet"):
            check("q2_steps", wrong, expected)


def test_precision_is_what_the_test_states():
    expected = digest("predicted_waste", 0.6349, sig=3)
    check("predicted_waste", 0.635, expected, sig=3)
    with pytest.raises(AssertionError, match="3 significant figures"):
        check("predicted_waste", 0.64, expected, sig=3)


def test_the_salt_is_the_name_and_the_digest_hides_the_value():
    assert digest("a", 16) != digest("b", 16)
    assert "16" not in digest("a", 16)  # hex of a hash: nothing of the value shows


def test_blank_answers_name_what_to_set():
    with pytest.raises(NotImplementedError, match=r"set predicted_ratio: replace the \.\.\."):
        ensure_answered(predicted_ratio=...)
    with pytest.raises(NotImplementedError, match="set q1_effective, q1_tokens"):
        check_both = dict(q1_effective=..., q1_tokens=None)
        ensure_answered(**check_both)
    ensure_answered(x=0, y="")  # falsy answers are still answers


def test_an_unsupported_type_is_a_wrong_answer_with_a_reason():
    with pytest.raises(AssertionError, match="must be a number, a bool, a string"):
        check("f", print, digest("f", 1))


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
