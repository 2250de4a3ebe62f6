"""Splits of a token budget: the same linear values for every split, scores growing with seq_len,
and one split predicted (and measured) for each attention path."""

from dataclasses import replace

import pytest
from helpers import tiny_config

from course_lib.lessons.attention import budget_split, split_seq_lens, values_per_layer
from course_lib.memory import activation_bytes, attention_elements


def test_split_seq_lens_are_the_power_of_two_divisors_in_range():
    assert split_seq_lens(2048, 1024) == [16, 32, 64, 128, 256, 512, 1024]
    assert split_seq_lens(96, 4096) == [16, 32]  # 64 does not divide 96
    assert split_seq_lens(64, 4096, shortest=8) == [8, 16, 32, 64]
    with pytest.raises(ValueError, match="no power of two"):
        split_seq_lens(24, 4096)


def test_linear_values_stay_put_while_scores_grow_with_seq_len():
    v = values_per_layer(n_heads=4, d_model=64, d_mlp=256, token_budget=2048, seq_lens=[64, 1024])
    assert v.linear == [2048 * (8 * 64 + 2 * 256 + 4)] * 2
    assert v.scores == [32 * 4 * 64**2, 2 * 4 * 1024**2]
    assert v.scores[1] / v.scores[0] == 1024 / 64  # N H T: linear in seq_len at a fixed budget


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(seq_lens=[48]), "does not divide"),
        (dict(seq_lens=[]), "at least one seq_len"),
        (dict(n_heads=0), "n_heads"),
    ],
)
def test_values_per_layer_rejects_bad_input(kwargs, match):
    args = dict(n_heads=4, d_model=64, d_mlp=256, token_budget=2048, seq_lens=[64])
    with pytest.raises(ValueError, match=match):
        values_per_layer(**{**args, **kwargs})


def test_budget_split_predicts_each_path_without_measuring():
    cfg = tiny_config()
    split = budget_split(cfg, 512, 128, measure=False)
    assert (split.batch_size, split.seq_len) == (4, 128)
    assert [b.attn_impl for b in split.breakdowns] == ["eager", "sdpa"]
    assert (
        split.breakdowns[1].total == activation_bytes(replace(cfg, attn_impl="sdpa"), 4, 128).total
    )
    assert split.score_elements == attention_elements(4, cfg.n_heads, 128)
    assert split.measured == [] and split.method == "predicted only"


def test_budget_split_measures_every_path_beside_the_prediction(one_thread):
    split = budget_split(tiny_config(d_model=32, n_heads=2), 128, 32, attn_impls=["eager"])
    (row,) = split.measured
    assert (row.attn_impl, row.batch_size, row.seq_len) == ("eager", 4, 32)
    assert row.predicted_bytes == split.breakdowns[0].total
    assert abs(row.ratio - 1) < 0.05
    assert split.method == row.method


def test_budget_split_rejects_a_seq_len_that_does_not_divide_the_budget():
    with pytest.raises(ValueError, match="does not divide token_budget=512"):
        budget_split(tiny_config(), 512, 96, measure=False)
    with pytest.raises(ValueError, match="at least one attention path"):
        budget_split(tiny_config(), 512, 128, attn_impls=[], measure=False)
