"""Bin packing, the packing collator, document masks and the isolation check (course_lib/packing.py,
course_lib/isolation.py) on TinyGPT."""

import numpy as np
import pytest
import strategies
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from course_lib.data import make_instruction_dataset, sample_lengths
from course_lib.isolation import check_isolation
from course_lib.masks import document_attention_mask
from course_lib.model import TinyGPT, TinyGPTConfig
from course_lib.packing import (
    PackingCollator,
    document_spans,
    lower_bound_rows,
    pack_lengths,
    unpack,
)


def reference_bfd_fills(lengths, capacity):
    """Sequential best-fit decreasing, one item at a time (slow and obviously right)."""
    fills: list[int] = []
    for n in sorted(lengths, reverse=True):
        fitting = [r for r, f in enumerate(fills) if f + n <= capacity]
        if fitting:
            best = min(fitting, key=lambda r: capacity - fills[r])
            fills[best] += n
        else:
            fills.append(n)
    return sorted(fills)


@settings(max_examples=50, deadline=None)
@given(strategies.lengths_and_capacity(), st.sampled_from(["bfd", "greedy"]))
def test_every_index_packed_once_and_no_row_overflows(case, strategy):
    lengths, capacity = case
    rows = pack_lengths(lengths, capacity, strategy)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    fills = [sum(lengths[i] for i in row) for row in rows]
    assert all(0 < f <= capacity for f in fills)
    assert len(rows) >= lower_bound_rows(lengths, capacity) if lengths else rows == []
    if strategy == "bfd":
        # any-fit: two rows at most half full would have been merged
        assert sum(2 * f <= capacity for f in fills) <= 1
        assert sorted(fills) == reference_bfd_fills(lengths, capacity)
    else:
        assert all(a + b > capacity for a, b in zip(fills, fills[1:]))  # next-fit
        assert [i for row in rows for i in row] == list(range(len(lengths)))  # order kept


@pytest.mark.parametrize("seed", range(5))
def test_bfd_uses_no_more_rows_than_greedy_on_random_lengths(seed):
    rng = np.random.default_rng(seed)
    for lengths in (sample_lengths(3000, seed=seed), rng.integers(1, 2049, 3000)):
        bfd, greedy = pack_lengths(lengths, 2048), pack_lengths(lengths, 2048, "greedy")
        assert len(bfd) <= len(greedy)


def test_greedy_can_beat_bfd_on_a_crafted_order():
    # Not a theorem: when the input order is already an optimal packing, next-fit finds it and
    # best-fit decreasing (7, 6, 4, 3, 2, 2 -> 7+4, 6+3+2, 2) does not.
    lengths = [3, 7, 2, 6, 4, 2]
    assert len(pack_lengths(lengths, 12, "greedy")) < len(pack_lengths(lengths, 12, "bfd"))


def test_bfd_is_near_the_lower_bound():
    # Speed is measured by benchmarks/packing.py, side by side with greedy and trl.
    lengths = sample_lengths(200_000, seed=0)
    rows = pack_lengths(lengths, 2048)
    assert len(rows) <= 1.005 * lower_bound_rows(lengths, 2048)


@pytest.mark.parametrize(
    "lengths, capacity, match",
    [
        ([3, 0, 2], 8, "sequence 1 has length 0"),
        ([3, -2], 8, "sequence 1 has length -2"),
        ([3, 9, 2], 8, "sequence 1 has 9 tokens, longer than capacity 8"),
        ([3], 0, "capacity must be a positive int"),
        ([3], -4, "capacity must be a positive int"),
        ([1.5], 8, "1-D sequence of ints"),
    ],
)
def test_bad_lengths_raise(lengths, capacity, match):
    with pytest.raises(ValueError, match=match):
        pack_lengths(lengths, capacity)


def test_split_policy_must_be_explicit_and_keeps_every_token():
    with pytest.raises(ValueError, match="split="):
        pack_lengths([5], 8, split="truncate")
    for strategy in ("bfd", "greedy"):
        rows = pack_lengths([5, 20, 2], 8, strategy, split="chunk")
        assert sum(row.count(1) for row in rows) == 3  # 8 + 8 + 4
        examples = [list(range(1, 6)), list(range(10, 30)), [7, 7]]
        batch = PackingCollator(8, 0, split="chunk", strategy=strategy)(examples)
        back = unpack(batch)
        assert [back[i]["input_ids"] for i in range(3)] == examples


@settings(max_examples=50, deadline=None)
@given(
    st.lists(strategies.examples(30), min_size=1, max_size=10), st.integers(30, 70), st.booleans()
)
def test_packed_batch_invariants(examples, capacity, completion_only):
    batch = PackingCollator(capacity, pad_token_id=0, completion_only=completion_only)(examples)
    ids, labels = batch["input_ids"], batch["labels"]
    pos, docs = batch["position_ids"], batch["document_ids"]
    R, T = ids.shape
    assert T == capacity
    # positions restart at every segment start and count up inside it
    starts = torch.zeros(R * T, dtype=torch.bool)
    starts[batch["cu_seq_lens"][:-1].long()] = True
    starts = starts.view(R, T)
    assert (pos[starts] == 0).all()
    assert (pos[:, 1:][~starts[:, 1:]] == pos[:, :-1][~starts[:, 1:]] + 1).all()
    assert starts[:, 0].all()  # every row starts a segment
    # cu_seq_lens cuts exactly where the document id changes
    change = torch.ones(R, T, dtype=torch.bool)
    change[:, 1:] = docs[:, 1:] != docs[:, :-1]
    assert torch.equal(change, starts)
    assert batch["cu_seq_lens"].dtype == torch.int32
    assert batch["max_length"] == int(batch["cu_seq_lens"].diff().max())
    assert "cu_seq_lens_q" not in batch  # Hugging Face's aliases only behind hf_flash_kwargs
    # no label crosses a boundary: position t-1 predicts labels[t] only inside one document
    has_label = labels != -100
    assert not has_label[:, 0].any()
    assert (docs[:, 1:][has_label[:, 1:]] == docs[:, :-1][has_label[:, 1:]]).all()
    assert (docs[has_label] >= 0).all()
    # round trip: every example comes back whole, with the labels the padding collator would give
    back = unpack(batch)
    assert sorted(back) == list(range(len(examples)))
    for i, ex in enumerate(examples):
        assert back[i]["input_ids"] == ex["input_ids"]
        masked = max(1, ex["prompt_len"] if completion_only else 0)
        assert back[i]["labels"] == [-100] * masked + ex["input_ids"][masked:]
    assert int((docs >= 0).sum()) == sum(len(ex["input_ids"]) for ex in examples)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=8))
def test_document_mask_never_crosses_a_boundary(lengths):
    batch = PackingCollator(16, 0)([[1] * n for n in lengths])
    allowed = document_attention_mask(batch["document_ids"])  # (R, T, T)
    docs = batch["document_ids"]
    same = docs[:, :, None] == docs[:, None, :]
    causal = torch.ones(16, 16, dtype=torch.bool).tril()
    assert torch.equal(allowed, same & causal)
    additive = document_attention_mask(docs, torch.float32)
    assert additive.shape == (len(batch["input_ids"]), 1, 16, 16)
    assert torch.equal(additive[:, 0] == 0, allowed)


def test_packing_collator_errors():
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        PackingCollator(0, 0)
    with pytest.raises(ValueError, match="sequence 1 has 9 tokens, longer than capacity 8"):
        PackingCollator(8, 0)([[1, 2], list(range(9))])
    with pytest.raises(ValueError, match="example 0 has 0 tokens"):
        PackingCollator(8, 0)([[]])
    with pytest.raises(ValueError, match="example 1 has 3 labels for 2 tokens"):
        PackingCollator(8, 0)([[1], {"input_ids": [1, 2], "labels": [1, 2, 3]}])


@pytest.fixture(scope="module")
def docs():
    return make_instruction_dataset(10, seed=5, max_len=120)


@pytest.mark.parametrize("attn_impl", ["eager", "sdpa", "varlen"])
def test_packed_tinygpt_equals_each_document_alone(attn_impl, docs):
    torch.manual_seed(0)
    model = TinyGPT(TinyGPTConfig(attn_impl=attn_impl, max_seq_len=128)).eval()
    batch = PackingCollator(128, 0)(docs)
    with torch.no_grad():
        out = model(**batch)
        loss_sum, n_tokens = 0.0, 0
        for doc_id, r, a, b in document_spans(batch):
            ids = torch.tensor(docs[doc_id]["input_ids"])[None]
            labels = ids.clone()
            labels[:, : docs[doc_id]["prompt_len"]] = -100
            alone = model(input_ids=ids, labels=labels)
            assert (out.logits[r, a:b] - alone.logits[0]).abs().max() <= 1e-5
            loss_sum += alone.loss.item() * alone.n_loss_tokens
            n_tokens += alone.n_loss_tokens
    # same tokens, same labels: the packed mean loss per token is the documents' mean
    assert out.loss.item() == pytest.approx(loss_sum / n_tokens, abs=1e-5)
    report = check_isolation(model, docs, 128)
    assert report.isolated and report.max_abs_diff <= 1e-5 and report.likely_cause is None


def test_check_isolation_catches_careless_packing(docs):
    torch.manual_seed(0)
    model = TinyGPT(TinyGPTConfig(attn_impl="sdpa", max_seq_len=128)).train()
    report = check_isolation(
        model,
        docs,
        128,
        call=lambda m, b: m(input_ids=b["input_ids"], position_ids=b["position_ids"]),
    )
    assert not report.isolated and report.max_abs_diff > 1e-3
    assert report.likely_cause.startswith("mask ignored")
    assert report.cross_document_diff > 1e-3
    assert model.training  # the check restores the mode it found
    firsts = {d for d, _, a, _ in document_spans(PackingCollator(128, 0)(docs)) if a == 0}
    assert all(report.per_document[d] <= 1e-5 for d in firsts)  # row starts see nothing before


class AbsolutePositionLM(nn.Module):
    """No attention at all, learned absolute positions: only positions can go wrong."""

    def __init__(self, vocab_size=260, max_len=128, d=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab_size, d), nn.Embedding(max_len, d)
        self.head = nn.Linear(d, vocab_size)

    def forward(self, input_ids, position_ids=None, **_):
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        return self.head(self.tok(input_ids) + self.pos(position_ids))


def test_check_isolation_diagnoses_positions_not_reset(docs):
    torch.manual_seed(0)
    model = AbsolutePositionLM()
    assert check_isolation(model, docs, 128).isolated
    report = check_isolation(model, docs, 128, call=lambda m, b: m(b["input_ids"]))
    assert not report.isolated
    assert report.likely_cause.startswith("positions not reset")


def test_check_isolation_flags_nondeterminism(docs):
    torch.manual_seed(0)
    model = AbsolutePositionLM()
    noisy = lambda m, b: m(b["input_ids"], b["position_ids"]) + 1e-3 * torch.randn(1)
    report = check_isolation(model, docs, 128, call=noisy)
    assert not report.isolated and report.likely_cause.startswith("nondeterministic")


@settings(max_examples=50, deadline=None)
@given(strategies.exact_multiples(), st.sampled_from(["bfd", "greedy"]))
def test_chunking_exact_multiples_of_capacity_fills_whole_rows(case, strategy):
    # Every sequence is k * capacity tokens: chunking leaves no remainder to pack (this crashed
    # best-fit decreasing with an IndexError before).
    lengths, capacity = case
    rows = pack_lengths(lengths, capacity, strategy, split="chunk")
    assert len(rows) == sum(n // capacity for n in lengths) == lower_bound_rows(lengths, capacity)
    assert all(len(row) == 1 for row in rows)
    assert sorted(i for row in rows for i in row) == sorted(
        i for i, n in enumerate(lengths) for _ in range(n // capacity)
    )


def test_collator_chunks_an_example_of_exactly_two_rows():
    batch = PackingCollator(4, 0, split="chunk")([list(range(1, 9))])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert unpack(batch)[0]["input_ids"] == list(range(1, 9))


def test_hugging_face_flash_names_only_behind_the_flag():
    examples = [[1, 2, 3], [4, 5]]
    plain = PackingCollator(8, 0)(examples)
    hf = PackingCollator(8, 0, hf_flash_kwargs=True)(examples)
    assert set(hf) - set(plain) == {
        "cu_seq_lens_q",
        "cu_seq_lens_k",
        "max_length_q",
        "max_length_k",
    }
    assert torch.equal(hf["cu_seq_lens_q"], plain["cu_seq_lens"])
    assert hf["max_length_k"] == plain["max_length"] == 3
