"""Lesson 3's windows hold exactly the loss tokens asked for, and measuring one leaves the model
as it was: the token-weighted window matches the full batch, the mean of means does not."""

import pytest
import torch
from helpers import tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course_lib.batch import count_loss_tokens
from course_lib.collate import PaddingCollator
from course_lib.data import PAD_ID, make_instruction_dataset
from course_lib.lessons.accumulation import (
    RANK_RECIPES,
    accumulation_runs,
    accumulation_window,
    heldout_loss,
    rank_recipes,
    spread_completion_lens,
    window_from_completion_lens,
    window_weights,
)
from course_lib.model import TinyGPTConfig

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


def test_window_weights_are_one_over_k_and_the_token_shares():
    model = tiny_model()
    window = window_from_completion_lens(EXAMPLES, [[10], [90]], start=11)
    w = window_weights(model, window)
    assert w.loss_tokens == [10, 90]
    assert w.weights["mean"] == pytest.approx([0.5, 0.5], abs=1e-4)
    assert w.weights["token_weighted"] == pytest.approx([0.1, 0.9], abs=1e-4)
    assert w.token_ratio == pytest.approx(9, rel=1e-3)
    assert all(p.grad is None for p in model.parameters())


def test_two_runs_start_alike_and_drift_apart():
    windows = [window_from_completion_lens(EXAMPLES, [[4, 4], [60, 60]], start=8 * s)
               for s in range(3)]  # fmt: skip
    config = TinyGPTConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=256, attn_impl="sdpa")
    runs = accumulation_runs(config, windows, EXAMPLES[-8:], lr=3e-3, seed=0, device="cpu")
    assert list(runs.losses) == ["token_weighted", "mean"] and len(runs.distance) == 3
    # the first step's loss is computed before any update: the same weights, the same number
    assert runs.losses["mean"][0] == pytest.approx(runs.losses["token_weighted"][0], rel=1e-6)
    assert runs.distance[-1] > 0
    groups = list(runs.heldout["mean"])
    assert groups[0].startswith("short (≤") and groups[1:] == ["long", "all tokens"]


def test_heldout_loss_over_all_rows_is_the_models_loss():
    model = tiny_model()
    examples = EXAMPLES[:6]
    groups = heldout_loss(model, examples, "cpu")
    batch = PaddingCollator(PAD_ID)(examples)
    with torch.no_grad():
        assert groups["all tokens"] == pytest.approx(float(model(**batch).loss), rel=1e-6)
    assert min(groups["long"], groups[next(iter(groups))]) > 0


def test_only_the_all_ranks_recipe_matches_the_full_batch():
    model = tiny_model()
    ranks = [window_from_completion_lens(EXAMPLES, rows, start=50 * r)
             for r, rows in enumerate([[[3], [12, 0]], [[100, 100], [75]]])]  # fmt: skip
    errors = rank_recipes(model, ranks)
    assert list(errors) == list(RANK_RECIPES)
    assert errors["N_all and × W"] < 1e-5
    assert errors["each rank's own N"] > 1e-2 and errors["loss / accum"] > 1e-2
