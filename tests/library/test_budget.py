"""Tests for course_lib.budget (the three numbers, find_max_batch_size), the search it delegates
to (course_lib.fit) and the measured probe (course_lib.memory.MemoryProbe)."""

import math
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import fit
from course_lib.budget import (
    NoBatchFitsError,
    effective_batch_size,
    find_max_batch_size,
    steps_per_epoch,
    tokens_per_step,
)
from course_lib.fit import PredictedProbe, find_largest, largest_or_zero, shrink_search
from course_lib.memory import MemoryProbe, meter
from course_lib.model import TinyGPTConfig

FAST = settings(max_examples=100, derandomize=True, deadline=None)
GIB = 2**30


# --- the three numbers ------------------------------------------------------------------------


def test_the_worked_examples():
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
    monkeypatch.setattr(fit, "free_memory", lambda: freed.append(1))

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
    monkeypatch.setattr(fit, "free_memory", lambda: None)  # gc.collect is slow here

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
    reference = MemoryProbe(TINY, 32)
    memory_budget = reference(3) and reference.needed[3]  # exactly what batch 3 needs
    probe = MemoryProbe(TINY, 32, memory_budget)
    result = find_max_batch_size(probe)
    assert result.batch_size == 3
    assert probe.needed[3] == memory_budget and probe.needed[4] > memory_budget
    n_params = sum(p.numel() for p in probe.model.parameters())
    assert probe.fixed_bytes == n_params * (4 + 8)  # fp32 weights + AdamW's two moments


def test_memory_probe_out_of_memory_inside_the_step(monkeypatch):
    """On a GPU an attempt that does not fit raises inside the step; the gradients of the failed
    attempt must not survive into the next probe."""
    reference = MemoryProbe(TINY, 32)
    reference(1)
    real_measure = meter.measure

    def measure(fn, device=None):
        report = real_measure(fn, device=device)
        if report.peak_bytes > reference.needed[1] - reference.fixed_bytes:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
        return report

    monkeypatch.setattr(meter, "measure", measure)  # what measure_step calls
    probe = MemoryProbe(TINY, 32)  # no budget: only the (simulated) card decides
    result = find_max_batch_size(probe)
    assert result.batch_size == 1 and result.history == [(1, True), (2, False)]
    assert all(p.grad is None for p in probe.model.parameters())


def test_budget_imports_no_torch():
    code = (
        "import sys; from course_lib.budget import tokens_per_step; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_torch_check_can_fail():
    # The same probe, on a module that does import torch, must say so.
    code = "import sys; import course_lib.model; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_find_max_batch_size_is_the_one_search():
    probes_a, probes_b = [], []
    a = find_max_batch_size(lambda n: probes_a.append(n) or n <= 37, start=5, limit=200)
    b = find_largest(lambda n: probes_b.append(n) or n <= 37, start=5, limit=200)
    assert a == b and probes_a == probes_b


def test_effective_batch_size_old_keyword_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match="micro_batch_size"):
        assert effective_batch_size(per_device_batch_size=2, grad_accum_steps=8) == 16
    with pytest.raises(ValueError, match="not both"), pytest.warns(DeprecationWarning):
        effective_batch_size(2, 8, per_device_batch_size=2)


def test_predicted_probe_keeps_every_prediction():
    probe = PredictedProbe(lambda n: 1000 * n, "10KB")
    result = find_largest(probe)
    assert result.batch_size == 10 and probe.memory_budget == 10_000
    assert probe.needed == {n: 1000 * n for n, _ in result.history}
    assert largest_or_zero(PredictedProbe(lambda n: 10**9, 10), 100) == 0
