"""Lesson 3's windows hold exactly the loss tokens asked for, and measuring one leaves the model
as it was: the token-weighted window matches the full batch, the mean of means does not; a loop
is measured against the full batch step by step; a summed loss is K times the gradient and SGD's
K-times learning rate; an accumulated step's peak stays flat in K while one batch's grows."""

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
    StepRecorder,
    accumulation_runs,
    accumulation_window,
    full_sequence_labels,
    heldout_loss,
    rank_recipes,
    spread_completion_lens,
    step_errors,
    unshifted_count_loop,
    window_from_completion_lens,
    window_loop_error,
    window_weights,
)
from course_lib.lessons.accumulation_cost import SUMMED_RUNS, accumulation_cost, summed_loss_runs
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


# --- loops checked against the full batch -----------------------------------------------------


def _token_weighted(model, window):
    total = sum(count_loss_tokens(mb["labels"]) for mb in window)
    for mb in window:
        model(**mb, num_items_in_batch=total).loss.backward()
    return total


def _mean_of_means(model, window):
    for mb in window:
        (model(**mb).loss / len(window)).backward()
    return 0


def test_full_sequence_labels_label_every_real_token_and_copy():
    window = window_from_completion_lens(EXAMPLES, [[4, 9]], start=3)
    before = window[0]["labels"].clone()
    (full,) = full_sequence_labels(window)
    real = window[0]["attention_mask"].bool()
    assert torch.equal(full["labels"][real], window[0]["input_ids"][real])
    assert bool((full["labels"][~real] == -100).all())
    assert torch.equal(window[0]["labels"], before)  # the window itself is unchanged


def test_a_loop_is_measured_against_the_full_batch():
    model = tiny_model()
    window = full_sequence_labels(window_from_completion_lens(EXAMPLES, [[4, 9], [60]], start=5))
    right = window_loop_error(_token_weighted, model, window)
    assert right.returned == sum(count_loss_tokens(mb["labels"]) for mb in window)
    assert right.error < 1e-5
    assert window_loop_error(_mean_of_means, model, window).error > 0.05
    unshifted = window_loop_error(unshifted_count_loop, model, window)
    assert unshifted.returned == right.returned + 3  # one phantom token per row
    assert 1e-5 < unshifted.error < 0.05  # off, but by far less than the mean of means
    assert all(p.grad is None for p in model.parameters())


def _fixed(model, optimizer, loader, accum):
    steps = 0
    for s in range(0, len(loader) - accum + 1, accum):
        _token_weighted(model, loader[s : s + accum])
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
    return steps


def _every_micro_batch(model, optimizer, loader, accum):
    for mb in loader:
        model(**mb).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def test_step_errors_compare_every_step_with_its_clipped_full_batch():
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    loader = [mb for w in [window_from_completion_lens(EXAMPLES, [[3], [40]], start=9 * s)
                           for s in range(3)] for mb in w]  # fmt: skip
    fixed = step_errors(_fixed, model, loader, 2)
    assert (fixed.steps_taken, fixed.steps_expected, fixed.returned) == (3, 3, 3)
    assert max(fixed.errors) < 1e-5
    wrong = step_errors(_every_micro_batch, model, loader, 2)
    assert (wrong.steps_taken, wrong.steps_expected, len(wrong.errors)) == (6, 3, 3)
    assert min(wrong.errors) > 1e-3
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # no weight moved
    with pytest.raises(ValueError, match="accum"):
        step_errors(_fixed, model, loader, 0)


def test_the_step_recorder_records_and_clears():
    model = tiny_model()
    recorder = StepRecorder(model.parameters())
    recorder.step()  # no gradient yet: zeros
    model(**window_from_completion_lens(EXAMPLES, [[5]])[0]).loss.backward()
    recorder.step()
    recorder.zero_grad()
    assert float(recorder.steps[0].abs().sum()) == 0 and float(recorder.steps[1].norm()) > 0
    assert all(p.grad is None for p in model.parameters())


# --- the summed loss, memory and time ----------------------------------------------------------


def _windows(k: int, steps: int):
    return [window_from_completion_lens(EXAMPLES, [[5 + 7 * i] for i in range(k)], start=10 * s)
            for s in range(steps)]  # fmt: skip


def test_a_summed_loss_is_k_times_the_gradient_and_k_times_sgds_rate():
    config = TinyGPTConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=256, attn_impl="sdpa")
    summed = summed_loss_runs(config, _windows(4, 3), lr=0.05, device="cpu")
    assert summed.grad_accum_steps == 4 and list(summed.losses) == list(SUMMED_RUNS)
    assert summed.scale == pytest.approx({1: 1, 2: 2, 3: 3, 4: 4}, rel=1e-5)
    assert summed.same_as_k_lr < 1e-5  # the summed run is the averaged one at 4 × lr
    losses = summed.losses
    assert losses["summed, lr"] == pytest.approx(losses["averaged, K × lr"], rel=1e-5)
    assert losses["summed, lr"][1:] != pytest.approx(losses["averaged, lr"][1:], rel=1e-3)
    assert summed.adamw_distance < 1e-3  # Adam's step hardly depends on the gradient's scale
    with pytest.raises(ValueError, match="same number of micro-batches"):
        summed_loss_runs(config, [_windows(2, 1)[0], _windows(3, 1)[0]], lr=0.05)


def test_an_accumulated_steps_peak_is_flat_in_k_and_its_time_grows():
    config = TinyGPTConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=64, attn_impl="sdpa")
    cost = accumulation_cost(config, micro_batch_size=2, seq_len=32, ks=(4, 1, 2), rounds=2,
                             device="cpu")  # fmt: skip
    assert cost.ks == [1, 2, 4] and cost.method == "CPU: counted bytes"
    assert (
        cost.peak_bytes[2] == cost.peak_bytes[4] >= cost.peak_bytes[1] == cost.batch_peak_bytes[1]
    )
    assert cost.batch_peak_bytes[4] > 3 * cost.batch_peak_bytes[1]  # one batch grows with its rows
    assert all(len(cost.seconds[k]) == len(cost.batch_seconds[k]) == 2 for k in cost.ks)
    assert cost.spread(4)[0] > cost.spread(1)[0]  # four passes take longer than one
    lo, hi = cost.spread(4)
    assert lo <= cost.median(4) <= hi and len(cost.pair_ratios(4)) == 2
    with pytest.raises(ValueError, match="at least one"):
        accumulation_cost(config, ks=())
