"""Tests for course_lib.plan: the four-step recipe on the memory model."""

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import memory
from course_lib._checks import checkpointing_mode
from course_lib.fit import NoBatchFitsError
from course_lib.memory import MemoryProbe
from course_lib.model import TinyGPTConfig
from course_lib.plan import plan, training_memory

GIB = 2**30


def fake_activations(monkeypatch, bytes_per_row):
    """An activation model of exactly ``bytes_per_row * batch_size`` (divided by 3 with
    checkpointing), so a test can place the budget where it wants."""

    class Breakdown:
        def __init__(self, total):
            self.total = total

    def act(config, batch_size, seq_len, dtype=torch.float32, checkpointing=None):
        mode = checkpointing_mode(config.checkpointing if checkpointing is None else checkpointing)
        return Breakdown(batch_size * bytes_per_row // (3 if mode != "off" else 1))

    monkeypatch.setattr(memory, "activation_bytes", act)


def test_plan_two_by_eight(monkeypatch):
    fake_activations(monkeypatch, 10**9)
    config = TinyGPTConfig(max_seq_len=1024)
    fixed = training_memory(config, 1, 1024).total - 10**9
    p = plan(config, fixed + 2 * 10**9 + 10**8, 1024, dataset_size=10_000)
    assert (p.micro_batch, p.grad_accum_steps, p.n_devices) == (2, 8, 1)
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
    assert p.config.checkpointing == "blocks" and config.checkpointing == "off"
    assert p.micro_batch == 2 and p.grad_accum_steps == 8
    assert any("checkpointing" in w for w in p.warnings)
    assert "checkpointing      blocks" in str(p)
    with pytest.raises(NoBatchFitsError, match="even|with it"):
        plan(config, fixed + 10**8, 1024, 10_000)


def test_plan_errors_name_the_value():
    config = TinyGPTConfig(max_seq_len=128)
    with pytest.raises(ValueError, match="seq_len=256 is longer than max_seq_len=128"):
        plan(config, GIB, 256, 800)
    with pytest.raises(ValueError, match="min 64 exceeds max 16"):
        plan(config, GIB, 128, 800, target_effective=(64, 16))
    with pytest.raises(ValueError, match="memory_budget must be a positive number of bytes, got 0"):
        plan(config, 0, 128, 800)
    with pytest.raises(ValueError, match="has no unit: add one, e.g. '1GiB'"):
        plan(config, "1", 128, 800)
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
    memory_budget, tmax = memory_mib * 2**20, tmin + span
    try:
        p = plan(config, memory_budget, seq_len, dataset_size, (tmin, tmax), min_tokens, n_devices)
    except NoBatchFitsError:
        with_checkpointing = replace(config, checkpointing="blocks")
        assert training_memory(with_checkpointing, 1, seq_len).total > memory_budget
        return
    m = p.micro_batch
    # The chosen shape fits the budget under the memory model; one more row would not.
    assert p.memory.total == training_memory(p.config, m, seq_len).total <= memory_budget
    lo, hi = min(tmin, dataset_size), min(tmax, dataset_size)
    assert m <= p.max_micro_batch <= hi
    if not p.search.capped:
        assert training_memory(p.config, p.max_micro_batch + 1, seq_len).total > memory_budget
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
    memory_budget = training_memory(config, 6, 32).total + 1000
    p = plan(config, memory_budget, 32, dataset_size=10_000, min_tokens_per_step=1)
    probe = MemoryProbe(p.config, 32, memory_budget)
    assert p.micro_batch == 6 and probe(p.micro_batch)
    assert probe.needed[6] <= p.memory.total  # the model errs on the safe side here


def test_plan_takes_a_budget_with_units_and_a_fixed_checkpointing():
    config = TinyGPTConfig(max_seq_len=256)
    assert plan(config, "4GiB", 256, 800).memory_budget == 4 * GIB
    assert plan(config, "4GB", 256, 800).memory_budget == 4 * 10**9
    fixed = plan(config, "4GiB", 256, 800, checkpointing="blocks")
    assert fixed.checkpointing == "blocks" and not fixed.warnings
    assert fixed.max_micro_batch >= plan(config, "4GiB", 256, 800).max_micro_batch
    with pytest.raises(NoBatchFitsError):  # fixed "off": the recipe may not switch it on
        plan(TinyGPTConfig(d_model=256, max_seq_len=1024), "64MiB", 1024, 800, checkpointing="off")


def test_plan_probe_holds_the_bytes_of_every_probe():
    p = plan(TinyGPTConfig(max_seq_len=128), "64MiB", 128, 800)
    for n, fitted in p.search.history:
        assert p.probe.needed[n] == training_memory(p.config, n, 128).total
        assert fitted == (p.probe.needed[n] <= p.memory_budget)
