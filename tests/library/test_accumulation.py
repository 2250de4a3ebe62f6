"""Token-weighted accumulation reproduces the full batch; the mean of means does not."""

import functools
import warnings

import pytest
import torch
from helpers import micro_batch, tiny_model
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from course_lib.accumulation import (
    accumulate_gradients,
    concatenate_micro_batches,
    count_loss_tokens,
    flat_grad,
    gradient_error,
    relative_error,
)
from course_lib.data import VOCAB_SIZE
from course_lib.model import TinyGPT, TinyGPTConfig
from course_lib.token_log import LOW_TOKENS_PER_STEP, TokensPerStepLogger, batch_token_counts

pytestmark = pytest.mark.usefixtures("one_thread")


def skewed_window(seed: int = 0) -> list[dict]:
    """5 loss tokens in one micro-batch, 500 in the other."""
    gen = torch.Generator().manual_seed(seed)
    return [micro_batch(gen, [(30, 5)]), micro_batch(gen, [(20, 250), (40, 250)])]


# --- counting ------------------------------------------------------------------------------


def test_count_loss_tokens_skips_the_first_label_of_every_row():
    labels = torch.arange(2 * 7).view(2, 7)  # full-sequence labels: nothing is -100
    assert count_loss_tokens(labels) == 2 * 6
    assert int((labels != -100).sum()) - count_loss_tokens(labels) == 2  # one phantom per row


@functools.cache
def _shared_model() -> TinyGPT:  # read-only use: no backward
    return tiny_model()


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(1, 4), st.integers(2, 12), st.integers(0, 2**31 - 1))
def test_count_loss_tokens_matches_the_model(batch_size, seq_len, seed):
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, VOCAB_SIZE, (batch_size, seq_len), generator=gen)
    keep = torch.rand(batch_size, seq_len, generator=gen) < 0.6
    keep[0, 1] = True  # at least one shifted label, or the model's mean is undefined
    labels = torch.where(keep, input_ids, torch.full_like(input_ids, -100))
    n = count_loss_tokens(labels)
    first = int((labels[:, 0] != -100).sum())
    assert n == int((labels != -100).sum()) - first
    with torch.no_grad():
        assert n == _shared_model()(input_ids, labels=labels).n_loss_tokens


def test_batch_token_counts():
    gen = torch.Generator().manual_seed(1)
    counts = batch_token_counts(micro_batch(gen, [(3, 4), (10, 20)]))
    assert (counts.all_tokens, counts.non_pad_tokens, counts.loss_tokens, counts.examples) == (
        2 * 30,
        7 + 30,
        24,
        2,
    )


# --- the gradient equivalence ----------------------------------------------------------------


@pytest.mark.parametrize("attn_impl", ["eager", "sdpa"])
def test_token_weighted_matches_full_batch_fp32(attn_impl):
    model = tiny_model(attn_impl=attn_impl)
    assert gradient_error(model, skewed_window(), "token_weighted") <= 1e-6


def test_token_weighted_matches_full_batch_fp64():
    model = tiny_model(torch.float64)
    assert gradient_error(model, skewed_window(), "token_weighted") <= 1e-12


def test_mean_of_means_is_wrong_when_token_counts_differ():
    assert gradient_error(tiny_model(), skewed_window(), "mean") > 0.1


def test_mean_of_means_is_right_when_token_counts_are_equal():
    gen = torch.Generator().manual_seed(2)
    window = [micro_batch(gen, [(4, 30)]), micro_batch(gen, [(9, 10), (2, 20)])]  # 30 and 30
    assert gradient_error(tiny_model(), window, "mean") <= 1e-6


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)  # no shrinking: each example trains
@given(
    st.lists(
        st.lists(st.tuples(st.integers(1, 20), st.integers(0, 40)), min_size=1, max_size=3),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 2**31 - 1),
)
def test_token_weighted_matches_full_batch_on_random_windows(shapes, seed):
    if sum(c for rows in shapes for _, c in rows) == 0:
        shapes[0][0] = (shapes[0][0][0], 1)
    gen = torch.Generator().manual_seed(seed)
    window = [micro_batch(gen, rows) for rows in shapes]
    assert gradient_error(tiny_model(), window, "token_weighted") <= 1e-6


def test_zero_token_micro_batch_counts_zero_in_token_weighted_mode():
    gen = torch.Generator().manual_seed(3)
    window = [micro_batch(gen, [(6, 0)]), micro_batch(gen, [(5, 40)]), micro_batch(gen, [(2, 3)])]
    assert gradient_error(tiny_model(), window, "token_weighted") <= 1e-6


def test_zero_token_micro_batch_raises_in_mean_mode_before_any_backward():
    gen = torch.Generator().manual_seed(3)
    model = tiny_model()
    window = [micro_batch(gen, [(5, 40)]), micro_batch(gen, [(6, 0)])]
    with pytest.raises(ValueError, match=r"micro-batches \[1\] hold no loss token"):
        accumulate_gradients(model, window, "mean")
    assert all(p.grad is None for p in model.parameters())


def test_window_without_loss_tokens_raises_instead_of_nan():
    gen = torch.Generator().manual_seed(4)
    model = tiny_model()
    window = [micro_batch(gen, [(6, 0), (3, 0)]), micro_batch(gen, [(8, 0)])]
    with pytest.raises(ValueError, match="holds no loss token"):
        accumulate_gradients(model, window, "token_weighted")
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(
    ("window", "mode", "message"),
    [
        ([], "token_weighted", "window is empty"),
        (None, "sum", "mode='sum' is not one of"),
        ("no-labels", "token_weighted", "must be a dict with 'input_ids' and 'labels'"),
    ],
)
def test_bad_windows_are_refused(window, mode, message):
    if window is None:
        window = skewed_window()
    elif window == "no-labels":
        window = [{"input_ids": torch.zeros(1, 4, dtype=torch.long)}]
    with pytest.raises(ValueError, match=message):
        accumulate_gradients(tiny_model(), window, mode)


# --- what accumulate_gradients and gradient_error leave behind -------------------------------


def test_accumulation_adds_into_existing_grads_and_reports_the_window():
    model, window = tiny_model(), skewed_window()
    stats = accumulate_gradients(model, window, "token_weighted")
    once = [p.grad.clone() for p in model.parameters()]
    accumulate_gradients(model, window, "token_weighted")
    for p, g in zip(model.parameters(), once):
        torch.testing.assert_close(p.grad, 2 * g)
    assert [c.loss_tokens for c in stats.micro_batches] == [5, 500]
    assert stats.total_loss_tokens == stats.window_loss_tokens == 505
    assert stats.total_all_tokens == 35 + 2 * 290
    assert stats.total_non_pad_tokens == 35 + 270 + 290
    assert stats.world_size == 1


@pytest.mark.parametrize("mode", ["token_weighted", "mean"])
def test_loss_per_token_is_the_full_batch_loss_in_both_modes(mode):
    model, window = tiny_model(), skewed_window()
    stats = accumulate_gradients(model, window, mode)
    with torch.no_grad():
        full = model(**concatenate_micro_batches(window)).loss
    assert stats.mode == mode
    assert stats.loss_per_token == pytest.approx(float(full), rel=1e-5)


def test_gradient_error_leaves_grads_and_training_flags_alone():
    model = tiny_model()
    model.train()
    model.blocks[1].eval()
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    model.lm_head.weight.grad = None
    gradient_error(model, skewed_window(), "mean")
    assert model.training and not model.blocks[1].training and model.blocks[0].training
    assert model.lm_head.weight.grad is None
    assert all(bool((p.grad == 0.5).all()) for p in model.parameters() if p.grad is not None)


def test_concatenate_pads_rows_right_with_ignored_labels():
    gen = torch.Generator().manual_seed(5)
    a, b = micro_batch(gen, [(2, 3)]), micro_batch(gen, [(4, 6), (1, 1)])
    del a["attention_mask"]
    full = concatenate_micro_batches([a, b])
    assert full["input_ids"].shape == (3, 10)
    assert full["attention_mask"].sum(dim=1).tolist() == [5, 10, 2]
    assert (full["labels"][0, 5:] == -100).all() and count_loss_tokens(full["labels"]) == 10
    with pytest.raises(ValueError, match="cu_seq_lens"):
        concatenate_micro_batches([{**b, "cu_seq_lens": torch.tensor([0, 10, 20])}])


def test_simulated_ranks_scale_the_loss_like_ddp():
    """Two replicas, each accumulating its own rows with the count over both ranks and times the
    world size: their average gradient is the full batch's (what DDP's average would give)."""
    gen = torch.Generator().manual_seed(8)
    model = TinyGPT(TinyGPTConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=32))
    ranks = [[micro_batch(gen, [(3, 5)])], [micro_batch(gen, [(2, 20), (4, 9)])]]
    n_all = sum(count_loss_tokens(mb["labels"]) for w in ranks for mb in w)
    grads = []
    for window in ranks:
        model.zero_grad(set_to_none=True)
        stats = accumulate_gradients(model, window, simulate_ranks=(n_all, 2))
        assert stats.window_loss_tokens == n_all and stats.world_size == 2
        grads.append(flat_grad(model))
    model.zero_grad(set_to_none=True)
    model(**concatenate_micro_batches([mb for w in ranks for mb in w])).loss.backward()
    assert relative_error(torch.stack(grads).mean(0), flat_grad(model)) < 1e-5
    # each rank normalising by its own count is a mean of means again: far off
    own = []
    for window in ranks:
        model.zero_grad(set_to_none=True)
        accumulate_gradients(model, window, distributed=False)
        own.append(flat_grad(model))
    model.zero_grad(set_to_none=True)
    model(**concatenate_micro_batches([mb for w in ranks for mb in w])).loss.backward()
    assert relative_error(torch.stack(own).mean(0), flat_grad(model)) > 1e-2


def test_relative_error_refuses_a_zero_reference():
    with pytest.raises(ValueError, match="exactly 0"):
        relative_error(torch.ones(3), torch.zeros(3))


# --- logging tokens per step ---------------------------------------------------------------------


def test_tokens_per_step_logger_counts_and_warns_once():
    gen = torch.Generator().manual_seed(6)
    logger = TokensPerStepLogger()
    with pytest.raises(ValueError, match="no micro-batch logged"):
        logger.end_step()
    logger.log_micro_batch(micro_batch(gen, [(3, 4), (10, 20)]))
    logger.log_micro_batch(micro_batch(gen, [(1, 5)]))
    with pytest.warns(UserWarning, match="raise gradient_accumulation_steps"):
        step = logger.end_step()
    assert (step.step, step.micro_batches, step.examples) == (0, 2, 3)
    assert (step.all_tokens, step.non_pad_tokens, step.loss_tokens) == (60 + 6, 37 + 6, 29)
    assert step.low and step.n_devices == 1

    big = micro_batch(gen, [(10, LOW_TOKENS_PER_STEP // 2)] * 2)
    logger.log_micro_batch(big)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning fires once, not on every step
        logger.log_micro_batch(micro_batch(gen, [(1, 1)]))
        assert not logger.end_step().low
        logger.log_micro_batch(micro_batch(gen, [(1, 1)]))
        assert logger.end_step().low
    summary = logger.summary()
    assert [s.loss_tokens for s in logger.history] == [29, LOW_TOKENS_PER_STEP + 1, 1]
    assert (summary.steps, summary.low_steps, summary.min_loss_tokens) == (3, 2, 1)
    assert summary.mean_effective_batch == pytest.approx((3 + 3 + 1) / 3)
    all_tokens = 66 + 2 * (10 + LOW_TOKENS_PER_STEP // 2) + 2 + 2
    non_pad = 43 + 2 * (10 + LOW_TOKENS_PER_STEP // 2) + 2 + 2
    assert summary.padding_fraction == pytest.approx(1 - non_pad / all_tokens)
