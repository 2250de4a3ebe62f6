"""Tests for course_lib.budget: the three numbers, the largest-batch search, the measured probe and
the planner."""

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import budget, memory
from course_lib._checks import checkpointing_mode
from course_lib.budget import (
    NoBatchFitsError,
    effective_batch_size,
    find_max_batch_size,
    memory_probe,
    shrink_search,
    steps_per_epoch,
    tokens_per_step,
)
from course_lib.memory import meter
from course_lib.model import TinyGPTConfig
from course_lib.plan import plan, training_memory

FAST = settings(max_examples=100, derandomize=True, deadline=None)
GIB = 2**30


# --- the three numbers ------------------------------------------------------------------------


def test_seed_examples():
    assert effective_batch_size(2, 8) == 16  # per_device 2, accumulation 8, one GPU
    assert effective_batch_size(2, 8, n_devices=4) == 64
    assert tokens_per_step(2, 1024, grad_accum_steps=8) == 16 * 1024
    assert tokens_per_step(16, 1024) == tokens_per_step(2, 8192) == 16_384  # the worked example
    assert steps_per_epoch(800, 64, drop_last=True) == 12  # "one epoch is twelve optimiser steps"
    assert steps_per_epoch(800, 64) == 13  # plus a half-sized step over the last 32 examples
    assert steps_per_epoch(800, 16) == steps_per_epoch(800, 16, drop_last=True) == 50


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "8", None])
def test_bad_sizes_name_the_value(bad):
    with pytest.raises(ValueError, match=r"grad_accum_steps must be a positive int, got"):
        effective_batch_size(2, bad)
    with pytest.raises(ValueError, match=r"seq_len must be a positive int"):
        tokens_per_step(2, bad)
    with pytest.raises(ValueError, match=r"effective_batch must be a positive int"):
        steps_per_epoch(800, bad)


# --- the search -------------------------------------------------------------------------------


def threshold(limit):
    return lambda n: n <= limit


@FAST
@given(st.integers(1, 100_000))
def test_search_is_exact_and_logarithmic(limit):
    result = find_max_batch_size(threshold(limit))
    assert result.batch_size == limit
    assert result.tries == len(result.history) <= 2 * math.ceil(math.log2(limit)) + 2
    sizes = [n for n, _ in result.history]
    assert len(sizes) == len(set(sizes)), "a size was probed twice"
    assert all(fitted == (n <= limit) for n, fitted in result.history)
    assert not result.capped


@FAST
@given(st.integers(1, 5000), st.integers(1, 300), st.one_of(st.none(), st.integers(1, 6000)))
def test_search_with_start_and_cap(limit, start, cap):
    if cap is not None and cap < start:
        with pytest.raises(ValueError, match="limit"):
            find_max_batch_size(threshold(limit), start=start, limit=cap)
        return
    result = find_max_batch_size(threshold(limit), start=start, limit=cap)
    expected = limit if cap is None else min(limit, cap)
    assert result.batch_size == expected
    assert result.capped == (cap is not None and limit >= cap)
    sizes = [n for n, _ in result.history]
    assert len(sizes) == len(set(sizes))
    assert cap is None or max(sizes) <= cap


def test_limit_37_ours_against_shrink_by_0_9():
    ours = find_max_batch_size(threshold(37))
    assert ours.batch_size == 37 and ours.tries == 12
    assert [n for n, _ in ours.history] == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    from_128 = find_max_batch_size(threshold(37), start=128)
    assert from_128.batch_size == 37 and from_128.tries == 8
    # accelerate's find_executable_batch_size: start 128, n = int(0.9 n) after each OOM.
    theirs = shrink_search(threshold(37), start=128, factor=0.9)
    assert [n for n, _ in theirs.history] == [128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36]
    assert theirs.batch_size == 36 and theirs.tries == 12


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        MemoryError(),
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 99 bytes"),
    ],
)
def test_out_of_memory_counts_as_does_not_fit(monkeypatch, error):
    freed = []
    monkeypatch.setattr(budget, "free_memory", lambda: freed.append(1))

    def fits(n):
        if n > 21:
            raise error
        return True

    result = find_max_batch_size(fits)
    assert result.batch_size == 21
    assert len(freed) == sum(not fitted for _, fitted in result.history) > 0


def test_other_errors_propagate():
    def fits(n):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="shapes"):
        find_max_batch_size(fits)


@pytest.mark.parametrize("start", [1, 8])
def test_nothing_fits_is_a_clear_error(monkeypatch, start):
    monkeypatch.setattr(budget, "free_memory", lambda: None)  # gc.collect is slow here

    def fits(n):
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(NoBatchFitsError, match="checkpointing.*seq_len"):
        find_max_batch_size(fits, start=start)


def test_search_rejects_bad_arguments():
    with pytest.raises(ValueError, match="start"):
        find_max_batch_size(threshold(5), start=0)
    with pytest.raises(ValueError, match="limit=2 is below start=4"):
        find_max_batch_size(threshold(5), start=4, limit=2)


# --- the measured probe -----------------------------------------------------------------------

TINY = TinyGPTConfig(vocab_size=64, d_model=32, n_heads=2, n_layers=2, max_seq_len=32)


def test_memory_probe_finds_the_measured_limit():
    reference = memory_probe(TINY, 32)
    budget_bytes = reference(3) and reference.needed[3]  # exactly what batch 3 needs
    probe = memory_probe(TINY, 32, budget_bytes)
    result = find_max_batch_size(probe)
    assert result.batch_size == 3
    assert probe.needed[3] == budget_bytes and probe.needed[4] > budget_bytes
    n_params = sum(p.numel() for p in probe.model.parameters())
    assert probe.fixed_bytes == n_params * (4 + 8)  # fp32 weights + AdamW's two moments


def test_memory_probe_out_of_memory_inside_the_step(monkeypatch):
    """On a GPU an attempt that does not fit raises inside the step; the gradients of the failed
    attempt must not survive into the next probe."""
    reference = memory_probe(TINY, 32)
    reference(1)
    real_measure = meter.measure

    def measure(fn, device=None):
        report = real_measure(fn, device=device)
        if report.peak_bytes > reference.needed[1] - reference.fixed_bytes:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
        return report

    monkeypatch.setattr(meter, "measure", measure)  # what measure_step calls
    probe = memory_probe(TINY, 32)  # no budget: only the (simulated) card decides
    result = find_max_batch_size(probe)
    assert result.batch_size == 1 and result.history == [(1, True), (2, False)]
    assert all(p.grad is None for p in probe.model.parameters())


# --- the planner ------------------------------------------------------------------------------


def fake_activations(monkeypatch, bytes_per_row):
    """An activation model of exactly ``bytes_per_row * batch_size`` (divided by 3 with
    checkpointing), so a test can place the budget where it wants."""

    class Breakdown:
        def __init__(self, total):
            self.total = total

    def act(config, batch_size, seq_len, dtype=torch.float32, checkpointing=None):
        mode = checkpointing_mode(config.checkpointing if checkpointing is None else checkpointing)
        return Breakdown(batch_size * bytes_per_row // (3 if mode != "none" else 1))

    monkeypatch.setattr(memory, "activation_bytes", act)


def test_plan_seed_example_two_by_eight(monkeypatch):
    fake_activations(monkeypatch, 10**9)
    config = TinyGPTConfig(max_seq_len=1024)
    fixed = training_memory(config, 1, 1024).total - 10**9
    p = plan(config, fixed + 2 * 10**9 + 10**8, 1024, dataset_size=10_000)
    assert (p.micro_batch_size, p.grad_accum_steps, p.n_devices) == (2, 8, 1)
    assert p.effective_batch_size == 16 and p.tokens_per_step == 16_384 and p.warnings == []
    assert "16 = 2 x 8 x 1" in str(p)


def test_plan_800_examples_at_64_warns_twelve_steps():
    p = plan(TinyGPTConfig(max_seq_len=256), 4 * GIB, 256, 800, target_effective=(64, 64))
    assert p.effective_batch_size == 64 and p.steps_per_epoch == 12
    assert any("only 12 full optimiser steps" in w for w in p.warnings), p.warnings


def test_plan_short_rows_warn_about_tokens_not_learning_rate():
    p = plan(TinyGPTConfig(max_seq_len=32), GIB, 32, 100_000)
    assert p.effective_batch_size == 64 and p.tokens_per_step == 2048
    (warning,) = p.warnings
    assert "tokens per step is 2,048" in warning and "not the learning rate" in warning


def test_plan_turns_on_checkpointing_when_one_row_does_not_fit(monkeypatch):
    fake_activations(monkeypatch, 3 * 10**9)
    config = TinyGPTConfig(max_seq_len=1024)
    fixed = training_memory(config, 1, 1024).total - 3 * 10**9
    p = plan(config, fixed + 2 * 10**9, 1024, 10_000)
    assert p.config.checkpointing == "blocks" and config.checkpointing == "none"
    assert p.micro_batch_size == 2 and p.grad_accum_steps == 8
    assert any("checkpointing" in w for w in p.warnings)
    assert "checkpointing      blocks" in str(p)
    with pytest.raises(NoBatchFitsError, match="even|with it"):
        plan(config, fixed + 10**8, 1024, 10_000)


def test_plan_errors_name_the_value():
    config = TinyGPTConfig(max_seq_len=128)
    with pytest.raises(ValueError, match="seq_len=256 exceeds config.max_seq_len=128"):
        plan(config, GIB, 256, 800)
    with pytest.raises(ValueError, match="min 64 exceeds max 16"):
        plan(config, GIB, 128, 800, target_effective=(64, 16))
    with pytest.raises(ValueError, match="memory_bytes must be a positive int, got 0"):
        plan(config, 0, 128, 800)
    with pytest.raises(NoBatchFitsError, match="weights, gradients and AdamW"):
        plan(config, 1000, 128, 800)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    d_model=st.sampled_from([32, 64, 128]),
    n_layers=st.integers(1, 4),
    attn=st.sampled_from(["eager", "sdpa"]),
    seq_len=st.sampled_from([16, 64, 256, 1024]),
    memory_mib=st.integers(1, 2048),
    dataset_size=st.integers(1, 5000),
    tmin=st.integers(1, 64),
    span=st.integers(0, 128),
    n_devices=st.integers(1, 8),
    min_tokens=st.sampled_from([1, 4000, 50_000]),
)
def test_plan_invariants(
    d_model, n_layers, attn, seq_len, memory_mib, dataset_size, tmin, span, n_devices, min_tokens
):
    config = TinyGPTConfig(
        d_model=d_model, n_heads=4, n_layers=n_layers, max_seq_len=seq_len, attn_impl=attn
    )
    budget_bytes, tmax = memory_mib * 2**20, tmin + span
    try:
        p = plan(config, budget_bytes, seq_len, dataset_size, (tmin, tmax), min_tokens, n_devices)
    except NoBatchFitsError:
        with_checkpointing = replace(config, checkpointing="blocks")
        assert training_memory(with_checkpointing, 1, seq_len).total > budget_bytes
        return
    m = p.micro_batch_size
    # The chosen shape fits the budget under the memory model; one more row would not.
    assert p.memory.total == training_memory(p.config, m, seq_len).total <= budget_bytes
    lo, hi = min(tmin, dataset_size), min(tmax, dataset_size)
    assert m <= p.max_micro_batch_size <= hi
    if not p.search.capped:
        assert training_memory(p.config, p.max_micro_batch_size + 1, seq_len).total > budget_bytes
    # Targets met, or a warning says why not.
    assert lo <= p.effective_batch_size <= hi
    assert (dataset_size < tmin) == any("fewer than the smallest target" in w for w in p.warnings)
    assert p.n_devices <= n_devices
    if p.tokens_per_step < min_tokens:
        assert hi * seq_len < min_tokens, "a larger accumulation was possible"
        assert any("not the learning rate" in w for w in p.warnings)
    if p.steps_per_epoch < 25:
        assert any("full optimiser step" in w for w in p.warnings)
    assert (p.config.checkpointing != config.checkpointing) == any(
        "checkpointing" in w for w in p.warnings
    )
    assert (p.n_devices < n_devices) == any("devices are used" in w for w in p.warnings)
    assert str(p).count("\n") >= 9


def test_planned_shape_fits_when_measured():
    config = TinyGPTConfig(vocab_size=64, d_model=32, n_heads=2, n_layers=2, max_seq_len=32)
    budget_bytes = training_memory(config, 6, 32).total + 1000
    p = plan(config, budget_bytes, 32, dataset_size=10_000, min_tokens_per_step=1)
    probe = memory_probe(p.config, 32, budget_bytes)
    assert p.micro_batch_size == 6 and probe(p.micro_batch_size)
    assert probe.needed[6] <= p.memory.total  # the model errs on the safe side here
