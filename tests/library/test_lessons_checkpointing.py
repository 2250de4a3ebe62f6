"""Lesson 4's experiments: the budget-fit verdict and what fits a budget, each checked against the
memory model it sweeps."""

from dataclasses import replace

import pytest
from helpers import tiny_config

from course_lib.lessons.checkpointing import (
    RecomputeTrade,
    budget_fit,
    recompute_trade,
    stride_rows,
    trade_table,
)
from course_lib.memory import activation_bytes

MiB = 2**20


def test_budget_fit_sweeps_the_memory_model_plain_and_checkpointed():
    cfg = tiny_config(attn_impl="sdpa")
    fit = budget_fit(cfg, seq_len=512, n_layers=4, memory_budget=8 * MiB, batch_size=2)
    assert fit.seq_lens == [64, 128, 256, 512, 1024, 2048]
    deep = replace(cfg, n_layers=4, max_seq_len=2048)
    for mode in ("off", "blocks"):
        want = [activation_bytes(deep, 2, t, checkpointing=mode).total for t in fit.seq_lens]
        assert fit.peaks[mode] == want
        assert fit.at_seq_len[mode] == activation_bytes(deep, 2, 512, checkpointing=mode).total
    assert all(c < p for c, p in zip(fit.peaks["blocks"][2:], fit.peaks["off"][2:]))


def test_budget_fit_verdict_follows_the_budget():
    cfg = tiny_config(attn_impl="eager")
    peaks = budget_fit(cfg, seq_len=256, n_layers=4, memory_budget=MiB).at_seq_len
    between = (peaks["blocks"] + peaks["off"]) // 2
    verdicts = {
        b: budget_fit(cfg, seq_len=256, n_layers=4, memory_budget=b).verdict
        for b in (int(peaks["off"] * 1.01), between, int(peaks["blocks"] * 0.99))
    }
    assert list(verdicts.values()) == [
        "fits without checkpointing",
        "fits only with checkpointing",
        "does not fit, even with checkpointing",
    ]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(memory_budget=0), "memory_budget"),
        (dict(memory_budget="8"), "has no unit"),
        (dict(seq_len=0), "seq_len"),
        (dict(seq_lens=[]), "at least"),
    ],
)
def test_budget_fit_rejects_bad_input(kwargs, match):
    args = dict(seq_len=128, n_layers=2, memory_budget=8 * MiB)
    with pytest.raises(ValueError, match=match):
        budget_fit(tiny_config(), **{**args, **kwargs})


def test_the_recompute_trade_measures_both_sides():
    cfg = tiny_config(attn_impl="eager", n_layers=2, max_seq_len=128)
    trade = recompute_trade(cfg, 1, 128, repeats=1, device="cpu")
    assert trade.peaks["blocks"] < trade.peaks["attention"] < trade.peaks["off"]
    assert 0 < trade.attention_share < 1
    assert set(trade.time_ratios) == set(trade.time_ranges) == {"blocks", "attention"}
    for mode, (low, high) in trade.time_ranges.items():
        assert 0 < low <= trade.time_ratios[mode] <= high
    text = trade_table([trade])
    assert "eager 1 × 128" in text and "the attention half alone saves" in text
    low, high = trade.time_ranges["blocks"]
    assert f"×{trade.time_ratios['blocks']:.2f} ({low:.2f}-{high:.2f})" in text


def test_the_trade_table_can_wait_for_the_time_side():
    peaks = {"off": 40 * MiB, "blocks": 10 * MiB, "attention": 25 * MiB}
    trade = RecomputeTrade("sdpa 2 × 1024", peaks, {"blocks": 1.31, "attention": 1.07},
                           {"blocks": (1.2, 1.52), "attention": (0.9, 1.1)})  # fmt: skip
    shown = trade_table([trade])
    assert "×1.31 (1.20-1.52) / ×1.07 (0.90-1.10)" in shown and "time" in shown
    memory_only = trade_table([trade], times=False)
    assert "time" not in memory_only and "1.31" not in memory_only and "1.52" not in memory_only
    assert "40 MiB" in memory_only and "saves 50% of what" in memory_only


def test_stride_rows_measure_and_predict_each_stride():
    cfg = tiny_config(attn_impl="sdpa", n_layers=4, max_seq_len=64)
    rows = stride_rows(cfg, 2, 64, {}, strides=(1, 2, 3), device="cpu")
    assert [(r.checkpoint_every, r.recomputed) for r in rows] == [(1, 4), (2, 2), (3, 2)]
    for r in rows:
        each = replace(cfg, checkpointing="blocks", checkpoint_every=r.checkpoint_every)
        assert r.predicted == activation_bytes(each, 2, 64).total
        assert r.measured == r.predicted + 8  # counted bytes: exact, plus the loss scalar
    off = stride_rows(cfg, 2, 64, {0: 123}, strides=())
    assert off[0].recomputed == 0 and off[0].measured == 123
    assert off[0].predicted == activation_bytes(cfg, 2, 64).total
