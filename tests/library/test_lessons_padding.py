"""The rows each batching scheme computes on: real rows of the epoch, their padding counted the
way padding_stats counts it, and packing never below the bin-packing lower bound."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.collate import padding_stats
from course_lib.data import make_instruction_dataset
from course_lib.isolation import check_isolation
from course_lib.lessons.padding import (
    CARELESS_RUN,
    CORRECT_RUN,
    SCHEMES,
    batch_layouts,
    careless_runs,
    crossing_share,
    row_length_padding,
    scheme_batches,
    train_schemes,
    window_batches,
)
from course_lib.model import TinyGPTConfig
from course_lib.packing import PackingCollator, lower_bound_rows

LENGTHS = [5, 9, 30, 2, 17, 8, 12, 3, 25, 1, 14, 6]


def is_sub_multiset(part, whole) -> bool:
    return not Counter(part) - Counter(whole)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 64), min_size=1, max_size=60),
    batch_size=st.integers(1, 8),
    extra=st.integers(0, 64),
    seed=st.integers(0, 3),
)
def test_layouts_are_real_rows_with_honest_waste(lengths, batch_size, extra, seed):
    capacity = max(lengths) + extra
    result = batch_layouts(lengths, batch_size, capacity, seed=seed)
    assert [lay.scheme for lay in result.layouts] == list(SCHEMES)
    assert (result.n_examples, result.mean_length) == (
        len(lengths),
        pytest.approx(np.mean(lengths)),
    )
    random, grouped, packed = result.layouts
    for lay in (random, grouped):
        sizes = [n for (n,) in lay.rows]  # a padded batch: one example per row
        assert 1 <= len(sizes) <= batch_size and is_sub_multiset(sizes, lengths)
        assert lay.width == max(sizes)
        assert lay.waste == pytest.approx(padding_stats([sizes]).waste_fraction)
        assert 0 <= lay.epoch_waste < 1
    docs = [n for row in packed.rows for n in row]
    assert is_sub_multiset(docs, lengths)
    assert packed.width == capacity and all(sum(row) <= capacity for row in packed.rows)
    assert packed.waste == pytest.approx(1 - sum(docs) / (len(packed.rows) * capacity))
    best = 1 - sum(lengths) / (lower_bound_rows(lengths, capacity) * capacity)
    assert packed.epoch_waste >= best - 1e-12


def test_grouping_and_packing_cut_the_epoch_waste():
    lengths = LENGTHS * 10
    random, grouped, packed = batch_layouts(lengths, 4, 32, seed=0).layouts
    assert packed.epoch_waste < grouped.epoch_waste < random.epoch_waste
    # Packed rows hold the random batch's real tokens, within one row.
    real = sum(n for (n,) in random.rows)
    assert len(packed.rows) == -(-real // 32)


@pytest.mark.parametrize(
    "args, match",
    [
        (([], 4, 32), "non-empty"),
        ((LENGTHS, 0, 32), "batch_size"),
        ((LENGTHS, 4, 0), "capacity"),
        ((LENGTHS, 4, 16), "longer than capacity"),
    ],
)
def test_batch_layouts_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        batch_layouts(*args)


# --- lesson 2's training experiments -----------------------------------------------------------

EXAMPLES = make_instruction_dataset(24, seed=3, max_len=128)
TINY = TinyGPTConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=128)


def test_every_scheme_holds_every_real_token_once():
    schemes = scheme_batches(EXAMPLES, batch_size=4, capacity=128, rows_per_step=2, seed=1)
    total = sum(len(ex["input_ids"]) for ex in EXAMPLES)
    assert set(schemes) == set(SCHEMES)
    for name, batches in schemes.items():
        assert padding_stats(batches).real_tokens == total, name
    assert all(b["input_ids"].shape[0] <= 2 for b in schemes["packed"])


def test_schemes_train_on_the_same_targets_and_report_their_tokens():
    schemes = scheme_batches(EXAMPLES, batch_size=4, capacity=128, rows_per_step=2, seed=1)
    impls = {"random": "sdpa", "length-grouped": "sdpa", "packed": "varlen"}
    result = train_schemes(TINY, schemes, impls, lr=1e-3, seed=0, device="cpu", rounds=2)
    assert [r.name for r in result.runs] == list(SCHEMES)
    assert result.method == "CPU: wall clock"
    assert len({r.loss_tokens for r in result.runs}) == 1  # the same loss tokens, every scheme
    for r in result.runs:
        stats = padding_stats(schemes[r.name])
        assert (r.steps, r.real_tokens, r.total_slots) == (
            len(schemes[r.name]), stats.real_tokens, stats.total_slots)  # fmt: skip
        assert len(r.round_seconds) == 2 and r.seconds > 0 and 0 <= r.waste < 1
    table = result.table(baseline="random")
    assert table.count("\n") == 3 and "1× (1–1×)" in table.splitlines()[1]
    mid, low, high = result.speed_ratio("packed", "random")
    assert low <= mid <= high and len(result.speed_ratios("packed", "random")) == 2


def test_speed_ratios_pair_the_rounds_and_their_range_is_printed():
    from course_lib.lessons.padding import SchemeRun, Throughput

    slow = SchemeRun("slow", 2, 100, 200, 90, [2.0, 4.0, 2.0])
    fast = SchemeRun("fast", 2, 100, 100, 90, [1.0, 1.0, 4.0])
    result = Throughput([slow, fast], "cpu")
    assert result.speed_ratios("fast", "slow") == [2.0, 4.0, 0.5]  # pairs, not totals
    assert result.speed_ratio("fast", "slow") == (2.0, 0.5, 4.0)
    assert fast.seconds == 1.0 and "2× (0.5–4×)" in result.table("slow")
    with pytest.raises(KeyError, match="no scheme 'other'"):
        result.run("other")
    with pytest.raises(ValueError, match="rounds"):
        train_schemes(TINY, {}, {}, lr=1e-3, rounds=0)


def next_fit_rows(lengths, seq_len) -> int:
    """Rows of next-fit packing, long documents cut into row-sized pieces (written out here)."""
    rows, room = 0, 0
    for n in lengths:
        while n:
            piece = min(n, seq_len)
            if piece > room:
                rows, room = rows + 1, seq_len
            room, n = room - piece, n - piece
    return rows


def test_long_rows_leave_less_padding_at_a_fixed_budget():
    lengths = make_instruction_dataset(400, seed=2, max_len=512)
    lengths = [len(ex["input_ids"]) for ex in lengths]
    result = row_length_padding(lengths, 4096, [128, 512, 4096])
    assert [(s.batch_size, s.seq_len) for s in result.splits] == [(32, 128), (8, 512), (1, 4096)]
    assert result.real_tokens == sum(lengths)
    for s in result.splits:
        assert s.rows["greedy"] == next_fit_rows(lengths, s.seq_len)
        for packer, rows in s.rows.items():
            assert rows >= lower_bound_rows(lengths, s.seq_len)  # no packer beats the bound
            assert s.waste[packer] == pytest.approx(1 - sum(lengths) / (rows * s.seq_len))
        assert s.waste["bfd"] <= s.waste["greedy"]
    greedy = [s.waste["greedy"] for s in result.splits]
    assert greedy[-1] < greedy[0] / 2  # next-fit: the long rows waste far less


@pytest.mark.parametrize(
    "args, match",
    [
        (([], 64, [8]), "non-empty"),
        (([3, 4], 0, [8]), "token_budget"),
        (([3, 4], 64, [0]), "seq_len"),
        (([3, 4], 64, [24]), "does not divide"),
    ],
)
def test_row_length_padding_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        row_length_padding(*args)


def test_window_batches_hold_the_same_documents_three_ways():
    docs = [[5] * n for n in (30, 200, 64, 17, 90, 120, 8, 40, 33)]
    claim = window_batches(docs, window=256, batch_size=4, seed=0)
    assert list(claim) == ["padded to the window", "padded to the longest", "packed"]
    reals = {name: padding_stats(b).real_tokens for name, b in claim.items()}
    assert set(reals.values()) == {sum(map(len, docs))}
    assert all(b["input_ids"].shape[1] == 256 for b in claim["padded to the window"])


def test_crossing_share_counts_pairs_across_documents():
    batch = PackingCollator(4, 0, completion_only=False, strategy="greedy")([[1, 2], [3]])
    # real tokens 0,0,1 (then one padding slot): causal pairs 1 + 2 + 3 = 6, crossing 2
    assert crossing_share([batch]) == pytest.approx(2 / 6)
    empty = PackingCollator(4, 0, completion_only=False)([[1]])
    empty["document_ids"][:] = -1  # nothing but padding
    with pytest.raises(ValueError, match="at least one real token"):
        crossing_share([empty])


def test_the_careless_run_leaks_and_the_correct_one_does_not():
    packer = PackingCollator(128, 0)
    batches = [packer(EXAMPLES[k : k + 4]) for k in range(0, 12, 4)]
    runs = careless_runs(TINY, batches, lr=1e-3, seed=0, device="cpu")
    assert set(runs.curves) == {CORRECT_RUN, CARELESS_RUN}
    assert all(len(c) == 3 for c in runs.curves.values())
    docs = [ex["input_ids"][:40] for ex in EXAMPLES[12:16]]
    careless = lambda m, b: m(input_ids=b["input_ids"], position_ids=b["position_ids"])  # noqa: E731
    assert check_isolation(runs.models[CORRECT_RUN], docs, 128).isolated
    assert not check_isolation(runs.models[CARELESS_RUN], docs, 128, call=careless).isolated
