"""Lesson 3's windows hold exactly the loss tokens asked for, and measuring one leaves the model
as it was: the token-weighted window matches the full batch, the mean of means does not."""

import pytest
import torch
from helpers import tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course_lib.batch import count_loss_tokens
from course_lib.data import make_instruction_dataset
from course_lib.lessons.accumulation import (
    accumulation_window,
    spread_completion_lens,
    window_from_completion_lens,
)

pytestmark = pytest.mark.usefixtures("one_thread")

EXAMPLES = make_instruction_dataset(120, seed=0, max_len=256)


def test_spread_completion_lens_is_geometric_from_shortest_to_spread_times_it():
    lens = spread_completion_lens(4, 8, micro_batch_size=3, shortest=2)
    assert lens == [[2] * 3, [4] * 3, [8] * 3, [16] * 3]
    assert spread_completion_lens(3, 1, shortest=5) == [[5, 5]] * 3
    assert spread_completion_lens(1, 32, shortest=5) == [[5, 5]]  # one micro-batch: no spread


@pytest.mark.parametrize(
    "args, match",
    [
        ((0, 2), "grad_accum_steps"),
        ((4, 0.5), "spread must be >= 1"),
        ((4, 2, 0), "micro_batch_size"),
        ((4, 2, 2, -1), "shortest"),
    ],
)
def test_spread_completion_lens_rejects_bad_values(args, match):
    with pytest.raises(ValueError, match=match):
        spread_completion_lens(*args)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lens=st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=3), min_size=1, max_size=4),
    start=st.integers(0, 500),
)
def test_every_row_holds_exactly_the_loss_tokens_asked_for(lens, start):
    window = window_from_completion_lens(EXAMPLES, lens, start=start)
    assert len(window) == len(lens)
    for mb, rows in zip(window, lens):
        assert mb["labels"].shape[0] == len(rows)
        assert [count_loss_tokens(mb["labels"][r : r + 1]) for r in range(len(rows))] == rows


def test_no_example_is_used_twice_and_impossible_lengths_are_refused():
    window = window_from_completion_lens(EXAMPLES[:4], [[1, 1], [1, 1]])
    rows = {
        tuple(ids[mask.bool()].tolist())
        for mb in window
        for ids, mask in zip(mb["input_ids"], mb["attention_mask"])
    }
    assert rows == {tuple(ex["input_ids"][: ex["prompt_len"] + 1]) for ex in EXAMPLES[:4]}
    with pytest.raises(ValueError, match="no unused example"):
        window_from_completion_lens(EXAMPLES[:4], [[1, 1], [1, 1], [1]])
    with pytest.raises(ValueError, match="no examples"):
        window_from_completion_lens([], [[1]])


def test_accumulation_window_measures_both_modes_and_restores_the_grads():
    model = tiny_model()
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    result = accumulation_window(model, EXAMPLES, grad_accum_steps=3, spread=8, shortest=3)
    assert result.loss_tokens == [2 * 3, 2 * 8, 2 * 24]  # 3 * 8**(i/2), two rows each
    assert result.spread == 8
    assert result.errors["token_weighted"] < 1e-5
    assert result.errors["mean"] > 0.05
    assert all(bool((p.grad == 0.5).all()) for p in model.parameters())


def test_equal_micro_batches_make_both_modes_exact():
    result = accumulation_window(tiny_model(), EXAMPLES, grad_accum_steps=2, spread=1)
    assert result.spread == 1
    assert max(result.errors.values()) < 1e-5
