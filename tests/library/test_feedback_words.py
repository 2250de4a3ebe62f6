"""What a visible test says reads as plain English: the words a form gives (``Form.needs``) go
into the feedback inside parentheses ("the grade checks it outside your notebook (...)") and
after "the check needs it", so they carry no parentheses of their own; issue 39 found
"(right in every place (exact (a whole number)))" under lesson 1's derivation."""

import re

import pytest

from course_lib.answers import plausible
from course_lib.forms import Exact, Integer, Ordered, Shape, Sig, Truth, Unordered, Word

# every form (and combination) the five lessons' visible tests use
USED = [
    (Exact(),),
    (Integer(),),
    (Sig(3),),
    (Shape(), Exact()),
    (Word("A", "B", "C"),),
    (Integer(), Word("A", "B", "C")),
    (Ordered(Integer(), Integer()),),
    (Ordered(Exact(), Exact(), Exact(), Exact(), Exact()), Truth()),
    (Integer(), Unordered(Word(*"abcdef"))),
    (Integer(), Sig(3), Truth()),
]


def nesting(text: str) -> int:
    """The deepest parenthesis nesting in ``text``."""
    depth = deepest = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        deepest = max(deepest, depth)
    return deepest


def feedback(forms, capsys) -> str:
    plausible("item", "what the check tried", *forms)
    return capsys.readouterr().out


@pytest.mark.parametrize("forms", USED, ids=lambda f: "+".join(type(x).__name__ for x in f))
def test_the_feedback_has_one_level_of_parentheses(forms, capsys):
    said = feedback(forms, capsys)
    assert nesting(said) == 1, said
    for form in forms:
        assert "(" not in form.needs and ")" not in form.needs, form.needs
        assert re.fullmatch(r"[a-z][\w ,;:]*", form.needs), form.needs


def test_the_derivations_feedback_reads_as_a_sentence(capsys):
    said = feedback((Ordered(Integer(), Integer()),), capsys)
    assert "(right in every place, each exact and whole)" in said, said


def test_the_nesting_check_sees_the_old_words():
    old = "item: plausible (x); checked (right in every place (exact (a whole number)))"
    assert nesting(old) == 3
