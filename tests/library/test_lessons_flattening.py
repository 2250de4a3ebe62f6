"""Lesson 2's Hugging Face path: DataCollatorWithFlattening's batches in a tiny random Llama are
isolated when called with attention_mask=None and use_cache=False, and leak in a plain forward;
without transformers the result says so."""

import sys

import pytest
import torch

from course_lib.data import make_instruction_dataset
from course_lib.lessons.flattening import (
    MISSING,
    PACKED_CALL,
    PLAIN_CALL,
    flattened,
    flattening_isolation,
)
from course_lib.packing import PackingCollator


def concatenating(features):
    """A stand-in for DataCollatorWithFlattening: one row, positions restarting per example."""
    ids = [t for f in features for t in f["input_ids"]]
    pos = [p for f in features for p in range(len(f["input_ids"]))]
    return {"input_ids": torch.tensor([ids]), "position_ids": torch.tensor([pos])}


def test_flattened_rows_come_back_where_they_were():
    batch = PackingCollator(8, 0, completion_only=False)([[5, 6, 7], [1, 2], [9, 9, 9, 9, 9]])
    seen = []

    def forward(model, flat):
        seen.append(flat)
        return flat["input_ids"].float()[..., None] * 10  # "logits" that name their token

    logits = flattened(concatenating, forward)(None, batch)
    assert logits.shape == (*batch["input_ids"].shape, 1)
    assert torch.equal(logits[..., 0], batch["input_ids"].float() * 10)
    (flat,) = seen  # one flattened row of every row's segments, positions restarting
    assert flat["input_ids"].shape == (1, batch["input_ids"].numel())
    assert torch.equal(flat["position_ids"].reshape(-1), batch["position_ids"].reshape(-1))


def test_without_transformers_the_check_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now fails
    result = flattening_isolation([[1, 2, 3]], 8)
    assert result.version is None and result.why == MISSING and not result.reports


def test_the_collator_feeds_an_isolated_packed_call_and_a_leaking_plain_one():
    pytest.importorskip("transformers", reason="the hf extra is not installed")
    docs = make_instruction_dataset(6, seed=4, max_len=80)
    result = flattening_isolation(docs, 96, attn_impl="sdpa")
    assert result.version and set(result.reports) == {PACKED_CALL, PLAIN_CALL}
    packed, plain = result.reports[PACKED_CALL], result.reports[PLAIN_CALL]
    assert packed.isolated and packed.n_rows > 1, str(packed)
    assert not plain.isolated and plain.built_cache and "KV cache" in plain.likely_cause
    first = len(docs[0]["input_ids"])
    positions = result.example["position_ids"][0]
    assert positions[:first] == list(range(first)) and positions[first] == 0  # reset per document
    assert result.example["labels"][0][first] == -100  # nothing predicts across the boundary
