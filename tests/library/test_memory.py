"""The memory meter counts exactly, and the analytical model matches it."""

from dataclasses import replace

import pytest
import torch

from course_lib.memory import (
    LiveBytesTracker,
    activation_bytes,
    attention_elements,
    compare_shapes,
    measure,
    measure_step,
    parameter_count,
)
from course_lib.model import TinyGPT, TinyGPTConfig


def test_worked_example_at_16384_tokens_and_32_heads():
    short = attention_elements(16, 32, 1024)
    long = attention_elements(2, 32, 8192)
    assert short == 536_870_912 and round(short / 1e8, 1) == 5.4
    assert long == 4_294_967_296 and round(long / 1e9, 1) == 4.3
    assert long // short == 8


def test_check_yourself_one():
    # 8 x 2048 vs 2 x 8192 at 16,384 tokens: the shorter rows use 4 times less.
    assert attention_elements(2, 32, 8192) / attention_elements(8, 32, 2048) == 4


@pytest.mark.parametrize("args", [(0, 4, 8), (2, -1, 8), (2, 4, 1.5), (True, 4, 8)])
def test_attention_elements_rejects_bad_sizes(args):
    with pytest.raises(ValueError, match="must be a positive int"):
        attention_elements(*args)


def test_tracker_counts_allocations_and_frees():
    x = torch.randn(1000, 1000)
    with LiveBytesTracker() as tracker:
        a = x * 2  # 4,000,000 bytes
        b = a.view(-1)  # a view allocates nothing
        a.add_(1)  # in place: nothing
        del a
        assert tracker.live_bytes == 4_000_000  # b still holds the storage
        c = b.exp()
        del b
        assert tracker.live_bytes == 4_000_000
        del c
    assert tracker.peak_bytes == 8_000_000 and tracker.live_bytes == 0


def test_measure_reports_cpu_counting_and_saved_bytes():
    w = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(64, 256)

    def step():
        (x @ w).relu().sum().backward()

    report = measure(step, device="cpu")
    assert report.method == "CPU: counted bytes"
    # matmul output 64 KiB, relu output 64 KiB (saved), grad of w 256 KiB at the end.
    assert report.saved_bytes == 64 * 256 * 4
    assert report.retained_bytes == 256 * 256 * 4
    assert report.peak_bytes >= report.retained_bytes


def test_measure_rejects_non_callables():
    with pytest.raises(TypeError, match="callable"):
        measure(42)


@pytest.mark.parametrize("d_model,n_heads,n_layers", [(32, 4, 1), (48, 3, 3), (64, 2, 2)])
def test_parameter_count_matches_the_model(d_model, n_heads, n_layers):
    cfg = TinyGPTConfig(d_model=d_model, n_heads=n_heads, n_layers=n_layers)
    assert parameter_count(cfg) == TinyGPT(cfg).num_parameters()


SHAPES = [(1, 128), (2, 96), (4, 32), (8, 16), (3, 50), (2, 128)]


@pytest.mark.parametrize("d_model,n_heads,n_layers", [(32, 4, 2), (48, 2, 3)])
def test_model_matches_measurement_to_the_loss_scalar(d_model, n_heads, n_layers):
    # The README's claim: every prediction within 8 bytes of the CPU's count (the loss's scalar,
    # which the model leaves out).
    cfg = TinyGPTConfig(d_model=d_model, n_heads=n_heads, n_layers=n_layers, max_seq_len=128)
    rows = compare_shapes(cfg, SHAPES, attn_impls=("eager", "sdpa"), device="cpu")
    assert len(rows) == 12
    for row in rows:
        assert 0 <= row.measured_bytes - row.predicted_bytes <= 8, row


def test_saved_bytes_prediction_is_exact():
    cfg = TinyGPTConfig(d_model=32, n_heads=4, n_layers=2, max_seq_len=128)
    model = TinyGPT(cfg)
    ids = torch.randint(0, 256, (2, 40))
    report = measure_step(model, {"input_ids": ids, "labels": ids}, device="cpu")
    predicted = activation_bytes(cfg, 2, 40)
    # The meter's saved bytes include the loss's few scalar buffers: a handful of bytes.
    assert abs(report.saved_bytes - predicted.saved_total) <= 16


def test_quadratic_term_only_for_eager():
    cfg = TinyGPTConfig(d_model=32, n_heads=4, n_layers=2, max_seq_len=512)
    eager = activation_bytes(cfg, 1, 512)
    sdpa = activation_bytes(replace(cfg, attn_impl="sdpa"), 1, 512)
    assert eager.attention_scores == 2 * 4 * 512 * 512 * 4
    assert sdpa.attention_scores == 0
    assert eager.total > 2 * sdpa.total


def test_activation_bytes_bad_input():
    cfg = TinyGPTConfig(max_seq_len=64)
    with pytest.raises(ValueError, match="seq_len=65 is longer than max_seq_len=64"):
        activation_bytes(cfg, 1, 65)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        activation_bytes(cfg, 0, 8)
    with pytest.raises(ValueError, match="dtype"):
        activation_bytes(cfg, 1, 8, dtype=torch.int64)
