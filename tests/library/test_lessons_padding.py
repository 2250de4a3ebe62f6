"""The rows each batching scheme computes on: real rows of the epoch, their padding counted the
way padding_stats counts it, and packing never below the bin-packing lower bound."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.collate import padding_stats
from course_lib.lessons.padding import SCHEMES, batch_layouts
from course_lib.packing import lower_bound_rows

LENGTHS = [5, 9, 30, 2, 17, 8, 12, 3, 25, 1, 14, 6]


def is_sub_multiset(part, whole) -> bool:
    return not Counter(part) - Counter(whole)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 64), min_size=1, max_size=60),
    batch_size=st.integers(1, 8),
    extra=st.integers(0, 64),
    seed=st.integers(0, 3),
)
def test_layouts_are_real_rows_with_honest_waste(lengths, batch_size, extra, seed):
    capacity = max(lengths) + extra
    result = batch_layouts(lengths, batch_size, capacity, seed=seed)
    assert [lay.scheme for lay in result.layouts] == list(SCHEMES)
    assert (result.n_examples, result.mean_length) == (
        len(lengths),
        pytest.approx(np.mean(lengths)),
    )
    random, grouped, packed = result.layouts
    for lay in (random, grouped):
        sizes = [n for (n,) in lay.rows]  # a padded batch: one example per row
        assert 1 <= len(sizes) <= batch_size and is_sub_multiset(sizes, lengths)
        assert lay.width == max(sizes)
        assert lay.waste == pytest.approx(padding_stats([sizes]).waste_fraction)
        assert 0 <= lay.epoch_waste < 1
    docs = [n for row in packed.rows for n in row]
    assert is_sub_multiset(docs, lengths)
    assert packed.width == capacity and all(sum(row) <= capacity for row in packed.rows)
    assert packed.waste == pytest.approx(1 - sum(docs) / (len(packed.rows) * capacity))
    best = 1 - sum(lengths) / (lower_bound_rows(lengths, capacity) * capacity)
    assert packed.epoch_waste >= best - 1e-12


def test_grouping_and_packing_cut_the_epoch_waste():
    lengths = LENGTHS * 10
    random, grouped, packed = batch_layouts(lengths, 4, 32, seed=0).layouts
    assert packed.epoch_waste < grouped.epoch_waste < random.epoch_waste
    # Packed rows hold the random batch's real tokens, within one row.
    real = sum(n for (n,) in random.rows)
    assert len(packed.rows) == -(-real // 32)


@pytest.mark.parametrize(
    "args, match",
    [
        (([], 4, 32), "non-empty"),
        ((LENGTHS, 0, 32), "batch_size"),
        ((LENGTHS, 4, 0), "capacity"),
        ((LENGTHS, 4, 16), "longer than capacity"),
    ],
)
def test_batch_layouts_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        batch_layouts(*args)
