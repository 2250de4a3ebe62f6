"""Padding collator, length-grouped sampler and padding statistics (course_lib/collate.py)."""

import numpy as np
import pytest
import strategies
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.collate import (
    LengthGroupedSampler,
    PaddingCollator,
    padding_stats,
    random_batches,
)
from course_lib.data import EOS_ID, example_lengths, make_instruction_dataset


@settings(max_examples=50, deadline=None)
@given(
    st.lists(strategies.examples(), min_size=1, max_size=6),
    st.sampled_from([None, 1, 8]),
    st.booleans(),
)
def test_padding_round_trips_to_the_examples(examples, multiple, completion_only):
    batch = PaddingCollator(
        pad_token_id=0, pad_to_multiple_of=multiple, completion_only=completion_only
    )(examples)
    B, T = batch["input_ids"].shape
    assert B == len(examples)
    longest = max(len(ex["input_ids"]) for ex in examples)
    m = multiple or 1
    assert T == -(-longest // m) * m  # longest rounded up to a multiple of m
    for b, ex in enumerate(examples):
        ids, n, p = ex["input_ids"], len(ex["input_ids"]), ex["prompt_len"]
        assert batch["attention_mask"][b].tolist() == [1] * n + [0] * (T - n)
        assert batch["input_ids"][b, :n].tolist() == ids
        assert batch["input_ids"][b, n:].eq(0).all()
        masked = p if completion_only else 0
        assert batch["labels"][b].tolist() == [-100] * masked + ids[masked:] + [-100] * (T - n)
    for key in ("input_ids", "attention_mask", "labels"):
        assert batch[key].dtype == torch.int64


def test_eos_keeps_its_label_when_pad_equals_eos():
    a = {"input_ids": [257, 65, 259, 66, EOS_ID], "prompt_len": 3}
    b = {"input_ids": [257, 65, 259, 66, 67, 68, EOS_ID], "prompt_len": 3}
    batch = PaddingCollator(pad_token_id=EOS_ID)([a, b])
    assert batch["labels"][0].tolist() == [-100, -100, -100, 66, EOS_ID, -100, -100]
    assert batch["input_ids"][0, 4:].tolist() == [EOS_ID] * 3  # same id, different role
    assert batch["attention_mask"][0].tolist() == [1] * 5 + [0, 0]


def test_explicit_labels_are_used_as_given():
    ex = {"input_ids": [1, 2, 3], "labels": [-100, 2, -100]}
    batch = PaddingCollator(0)([ex, {"input_ids": [4, 5, 6, 7]}])
    assert batch["labels"][0].tolist() == [-100, 2, -100, -100]


@pytest.mark.parametrize(
    "examples, match",
    [
        ([{"input_ids": []}], "example 0 has 0 tokens"),
        (
            [{"input_ids": [1, 2]}, {"input_ids": [1, 2], "labels": [1]}],
            "example 1 has 1 labels for 2",
        ),
        ([{"input_ids": [1, 2], "prompt_len": 5}], "prompt_len=5"),
        ([{"input_ids": [1.5, 2.0]}], "non-integer"),
        ([{"input_ids": [1, -3]}], "negative token id -3"),
        ([{"tokens": [1]}], "no 'input_ids'"),
        ([], "empty list"),
    ],
)
def test_bad_examples_raise(examples, match):
    with pytest.raises(ValueError, match=match):
        PaddingCollator(0)(examples)


@pytest.mark.parametrize(
    "kwargs", [{"pad_token_id": -1}, {"pad_token_id": 0, "pad_to_multiple_of": 0}]
)
def test_bad_collator_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        PaddingCollator(**kwargs)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(1, 500), min_size=1, max_size=300),
    st.integers(1, 17),
    st.integers(0, 3),
    st.integers(1, 4),
)
def test_length_grouped_sampler_yields_every_index_once(lengths, batch_size, epoch, mult):
    sampler = LengthGroupedSampler(lengths, batch_size, seed=0, megabatch_mult=mult)
    sampler.set_epoch(epoch)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(1 <= len(b) <= batch_size for b in batches)
    assert max(lengths[i] for i in batches[0]) == max(lengths)  # out-of-memory shows at step 0


def test_length_grouping_cuts_padding_and_reshuffles_per_epoch():
    lengths = example_lengths(make_instruction_dataset(2000, seed=0))
    sampler = LengthGroupedSampler(lengths, batch_size=16, seed=0)
    grouped = padding_stats([[int(lengths[i]) for i in b] for b in sampler])
    plain = padding_stats([[int(lengths[i]) for i in b] for b in random_batches(2000, 16, seed=0)])
    assert grouped.real_tokens == plain.real_tokens == int(lengths.sum())
    assert grouped.waste_fraction < 0.5 * plain.waste_fraction
    first = sampler.batches()
    assert first == sampler.batches()  # same epoch, same order
    sampler.set_epoch(1)
    assert sampler.batches() != first


def test_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        LengthGroupedSampler([3, 4], 0)
    with pytest.raises(ValueError, match="non-empty"):
        LengthGroupedSampler([], 2)


def test_random_batches_cover_everything():
    batches = random_batches(10, 4, seed=1)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(sum(batches, [])) == list(range(10))
    assert [len(b) for b in random_batches(10, 4, drop_last=True)] == [4, 4]


def test_padding_stats_by_hand():
    batch = PaddingCollator(0)([{"input_ids": [1, 2, 3]}, {"input_ids": [4]}])
    stats = padding_stats([batch, [2, 6]])
    # batch 1: 4 real of 2*3 slots; batch 2: 8 real of 2*6 slots
    assert (stats.n_batches, stats.real_tokens, stats.total_slots, stats.padded_slots) == (
        2,
        12,
        18,
        6,
    )
    assert stats.waste_fraction == pytest.approx(6 / 18)
    packed = {"document_ids": torch.tensor([[0, 0, 1, -1], [2, 2, 2, 2]])}
    assert padding_stats([packed]).padded_slots == 1
    with pytest.raises(ValueError, match="neither"):
        padding_stats([{"input_ids": torch.zeros(2, 2)}])
    with pytest.raises(ValueError, match="positive lengths"):
        padding_stats([[3, 0]])


def test_padded_batch_trains_tinygpt_without_nan():
    from course_lib.model import TinyGPT, TinyGPTConfig

    torch.manual_seed(0)
    examples = make_instruction_dataset(6, seed=2, max_len=120)
    batch = PaddingCollator(0)(examples)
    model = TinyGPT(TinyGPTConfig(attn_impl="eager", max_seq_len=128))
    loss = model(**batch).loss
    assert torch.isfinite(loss)
    # padding must not change a real token's logits: compare the shortest example alone
    b = int(np.argmin([len(e["input_ids"]) for e in examples]))
    n = len(examples[b]["input_ids"])
    alone = model(input_ids=batch["input_ids"][b : b + 1, :n]).logits
    torch.testing.assert_close(model(**batch).logits[b, :n], alone[0], atol=1e-5, rtol=0)
