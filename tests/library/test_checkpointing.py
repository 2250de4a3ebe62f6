"""Activation checkpointing: the peak is predicted, gradients do not change, the trade is timed."""

import math
from dataclasses import replace

import pytest
import torch

from course_lib.checkpointing import StepTimes, time_checkpointing
from course_lib.lessons.checkpointing import max_batch_under_budget, max_seq_len_under_budget
from course_lib.memory import activation_bytes, compare_checkpointing, measure_step, mode_label
from course_lib.model import TinyGPT, TinyGPTConfig

# Eight shapes from one row of 8 tokens to 4 × 64: the peak moves between the loss, the top
# block, a lower block and the embedding's gradient across them (asserted below).
SHAPES = [(1, 8), (4, 16), (2, 64), (1, 64), (3, 40), (8, 8), (2, 24), (4, 64)]
MODES = [  # (attn_impl, checkpointing, checkpoint_every)
    ("eager", True, 1),
    ("sdpa", "blocks", 1),
    ("eager", "attention", 1),
    ("sdpa", "attention", 2),
    ("eager", True, 2),
]


def config(attn_impl="eager", checkpointing=False, every=1, **kw):
    base = dict(d_model=32, n_heads=4, n_layers=3, max_seq_len=64)
    base.update(kw)
    return TinyGPTConfig(
        attn_impl=attn_impl, checkpointing=checkpointing, checkpoint_every=every, **base
    )


@pytest.mark.parametrize("attn_impl, mode, every", MODES)
def test_checkpointed_peak_matches_measurement_within_5_percent(attn_impl, mode, every):
    rows = compare_checkpointing(config(attn_impl, every=every), SHAPES, modes=(mode,))
    assert len(rows) == len(SHAPES) >= 8
    for row in rows:
        assert row.method == "CPU: counted bytes"
        assert abs(row.ratio - 1) <= 0.05, row
        # On the CPU the count is exact: the model is off by the loss's two scalars at most.
        assert 0 <= row.measured_bytes - row.predicted_bytes <= 16, row
        assert 0 <= row.saved_bytes - row.predicted_saved_bytes <= 16, row


def test_the_peak_moves_with_the_shape():
    """Tiny steps peak where the weights' gradients pile up, long ones at the attention."""
    where = {(b, t): activation_bytes(config("eager", True), b, t).peak_at for b, t in SHAPES}
    assert where[(1, 8)] == "embedding"  # every weight's gradient alive, almost no activation
    assert where[(4, 16)] == "block 0 MLP"  # the bottom block holds the most gradients
    assert where[(4, 64)] == "block 0 softmax"
    # Block 1 is not checkpointed with checkpoint_every=2: its saved set outweighs the rest.
    assert activation_bytes(config("eager", True, 2), 4, 64).peak_at == "top block softmax"
    assert activation_bytes(config("sdpa", True), 4, 64).peak_at == "loss"


def test_checkpointing_cuts_the_peak_and_keeps_only_block_inputs():
    cfg = config("eager", n_layers=4)
    plain, ckpt = compare_checkpointing(cfg, [(2, 64)], modes=(False, True))
    assert plain.measured_bytes / ckpt.measured_bytes > 2
    # A checkpointed block keeps exactly its (B, T, C) input: 2 * 64 * 32 fp32 values.
    per_block = 2 * 64 * 32 * 4
    with_three = activation_bytes(config("eager", True, n_layers=3), 2, 64).saved_total
    with_four = activation_bytes(config("eager", True, n_layers=4), 2, 64).saved_total
    assert with_four - with_three == per_block


def test_plain_predictions_are_unchanged_by_the_checkpointing_model():
    # Lesson 1's model (2 layers, d_model 64, 4 heads): the plain figures must not move.
    cfg = TinyGPTConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=1024)
    pinned = {"eager": [28758016, 147326976], "sdpa": [26722304, 26722304]}
    for impl, totals in pinned.items():
        impl_cfg = replace(cfg, attn_impl=impl)
        got = [activation_bytes(impl_cfg, b, t).total for b, t in [(32, 64), (2, 1024)]]
        assert got == totals


@pytest.mark.parametrize("attn_impl", ["eager", "sdpa"])
@pytest.mark.parametrize("batch_size, seq_len", [(1, 8), (2, 8), (1, 16)])
def test_plain_model_is_exact_at_tiny_token_counts(attn_impl, batch_size, seq_len):
    # With a handful of tokens the weights' gradients dominate: the peak moves to a lower
    # block or the embedding's gradient, and the model must follow it there.
    cfg = TinyGPTConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=64, attn_impl=attn_impl)
    torch.manual_seed(0)
    model = TinyGPT(cfg)
    ids = torch.randint(0, 256, (batch_size, seq_len))
    measured = measure_step(model, {"input_ids": ids, "labels": ids}, device="cpu").peak_bytes
    predicted = activation_bytes(cfg, batch_size, seq_len).total
    assert abs(predicted - measured) <= 16, (predicted, measured)


@pytest.mark.parametrize(
    "attn_impl, mode, every",
    [
        ("eager", True, 1),
        ("sdpa", True, 1),
        ("eager", "attention", 1),
        ("sdpa", "attention", 2),
        ("eager", "blocks", 2),
    ],
)
def test_gradients_are_identical_to_the_plain_model(attn_impl, mode, every):
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
    grads = []
    for ckpt in (False, mode):
        torch.manual_seed(0)
        model = TinyGPT(config(attn_impl, ckpt, every))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert grads[0].abs().sum() > 0
    assert torch.equal(grads[0], grads[1])


def test_timing_helper_returns_sane_numbers():
    times = time_checkpointing(config("sdpa", n_layers=2), 2, 32, repeats=3, warmup=1)
    assert times.repeats == 3 and times.device == "cpu"
    assert all(0 < s < 30 for s in times.off_seconds + times.checkpointed_seconds)
    assert math.isfinite(times.ratio) and 0.2 < times.ratio < 10
    assert times.off_median == sorted(times.off_seconds)[1]
    assert times.ratio == sorted(times.pair_ratios)[1]
    assert "ratio ×" in times.summary() and "median of 3 pairs" in times.summary()
    assert " off " in times.summary() and "plain" not in times.summary()


def test_the_plain_names_still_read_but_warn():
    times = StepTimes("blocks", 1, "sdpa", 2, 2, 32, "cpu", [1.0, 3.0, 2.0], [2.0, 4.0, 3.0])
    with pytest.warns(DeprecationWarning, match="StepTimes.off_seconds"):
        assert times.plain_seconds == [1.0, 3.0, 2.0]
    with pytest.warns(DeprecationWarning, match="StepTimes.off_median"):
        assert times.plain_median == 2.0
    with pytest.raises(AttributeError):  # read-only: the data lives in off_seconds
        times.plain_seconds = [5.0]  # type: ignore[misc]


@pytest.mark.parametrize("mode", [False, True, "attention"])
def test_max_batch_is_the_largest_that_fits(mode):
    cfg = config("eager", n_layers=4, max_seq_len=256)
    budget = 8 * 2**20
    best = max_batch_under_budget(cfg, 256, budget, checkpointing=mode)
    assert best >= 1
    assert activation_bytes(cfg, best, 256, checkpointing=mode).total <= budget
    assert activation_bytes(cfg, best + 1, 256, checkpointing=mode).total > budget


def test_checkpointing_fits_a_larger_batch_and_a_longer_sequence():
    cfg = config("eager", n_layers=4, max_seq_len=256)
    budget = 8 * 2**20
    plain = max_batch_under_budget(cfg, 256, budget, checkpointing=False)
    ckpt = max_batch_under_budget(cfg, 256, budget, checkpointing=True)
    assert ckpt >= 2 * plain
    long_plain = max_seq_len_under_budget(cfg, 1, budget, checkpointing=False)
    long_ckpt = max_seq_len_under_budget(cfg, 1, budget, checkpointing=True)
    assert long_ckpt > long_plain > 0
    longer = TinyGPTConfig(**{**cfg.__dict__, "max_seq_len": long_ckpt + 1})
    assert activation_bytes(longer, 1, long_ckpt + 1, checkpointing=True).total > budget
    assert activation_bytes(longer, 1, long_ckpt, checkpointing=True).total <= budget
    assert max_batch_under_budget(cfg, 256, 1000) == 0  # not even one row fits in 1,000 bytes


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: compare_checkpointing(config(), []), "at least one"),
        (lambda: compare_checkpointing(config(), [(1, 8)], modes=("always",)), "checkpointing="),
        (lambda: compare_checkpointing(config(), [(1, 65)]), "seq_len=65"),
        (lambda: compare_checkpointing(config(), [(0, 8)]), "batch_size must be"),
        (lambda: time_checkpointing(config(), 1, 8, checkpointing=False), "nothing to compare"),
        (lambda: time_checkpointing(config(), 1, 8, repeats=0), "repeats must be"),
        (lambda: time_checkpointing(config(), 1, 8, warmup=-1), "warmup must be"),
        (
            lambda: max_batch_under_budget(config(), 8, -5),
            "memory_budget must be a positive number of bytes, got -5",
        ),
        (
            lambda: max_batch_under_budget(config(), 8, "1 apple"),
            "memory_budget='1 apple': unknown unit 'apple'",
        ),
        (lambda: max_batch_under_budget(config(), 8, 10**6, "yes"), "checkpointing='yes'"),
        (lambda: max_seq_len_under_budget(config(), 0, 10**6), "batch_size must be"),
        (lambda: activation_bytes(config(), 1, 8, checkpointing="often"), "checkpointing='often'"),
        (lambda: mode_label("sometimes"), "checkpointing='sometimes'"),
    ],
)
def test_bad_input_names_the_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_mode_labels():
    assert mode_label(False) == "off" and mode_label("off", 2) == "off"
    assert mode_label(True) == "blocks"
    assert mode_label("attention", 2) == "attention/2"
