"""Hypothesis strategies shared by the library tests (one definition each)."""

from __future__ import annotations

from hypothesis import strategies as st

from course_lib.data import VOCAB_SIZE


def examples(max_len: int = 40) -> st.SearchStrategy[dict]:
    """One example dict: token ids and a prompt length anywhere from 0 to the whole example."""
    return st.lists(st.integers(0, VOCAB_SIZE - 1), min_size=1, max_size=max_len).flatmap(
        lambda ids: st.fixed_dictionaries(
            {"input_ids": st.just(ids), "prompt_len": st.integers(0, len(ids))}
        )
    )


def lengths_and_capacity(max_capacity: int = 64, max_items: int = 120):
    """``(lengths, capacity)`` with every length in ``1..capacity``."""
    return st.integers(1, max_capacity).flatmap(
        lambda c: st.tuples(st.lists(st.integers(1, c), min_size=0, max_size=max_items), st.just(c))
    )


def exact_multiples(max_capacity: int = 32, max_items: int = 12):
    """``(lengths, capacity)`` where every length is a whole number of rows (1-4 x capacity)."""
    return st.integers(1, max_capacity).flatmap(
        lambda c: st.tuples(
            st.lists(st.integers(1, 4).map(lambda k: k * c), min_size=1, max_size=max_items),
            st.just(c),
        )
    )


def micro_batch_rows(max_rows: int = 3, max_prompt: int = 20, max_completion: int = 40):
    """Rows of ``(prompt_len, completion_len)`` for :func:`conftest.micro_batch`."""
    row = st.tuples(st.integers(1, max_prompt), st.integers(0, max_completion))
    return st.lists(row, min_size=1, max_size=max_rows)
