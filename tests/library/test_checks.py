"""The argument checks every public function shares, and the one checkpointing normalisation."""

import dataclasses

import pytest
import torch

from course_lib._checks import checkpointing_mode, memory_budget, positive_int, seq_len_within
from course_lib.masks import block_causal_mask, document_attention_mask
from course_lib.model import TinyGPT, TinyGPTConfig


@pytest.mark.parametrize(
    "given, stored",
    [(False, "off"), (None, "off"), ("off", "off"), (True, "blocks"), ("blocks", "blocks")]
    + [("attention", "attention")],
)
def test_checkpointing_is_normalised_once_in_the_config(given, stored):
    assert checkpointing_mode(given) == stored
    assert TinyGPTConfig(checkpointing=given).checkpointing == stored


def test_the_old_spelling_none_still_reads_as_off_with_a_warning():
    with pytest.warns(DeprecationWarning, match="now spelled 'off'"):
        assert TinyGPTConfig(checkpointing="none").checkpointing == "off"


@pytest.mark.parametrize("bad", ["always", 1, "Blocks", "plain", "on"])
def test_an_unknown_checkpointing_mode_is_named(bad):
    with pytest.raises(ValueError, match=f"checkpointing={bad!r} is not one of"):
        TinyGPTConfig(checkpointing=bad)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3", None])
def test_positive_int_names_the_argument_and_the_value(bad):
    with pytest.raises(ValueError, match=rf"seq_len must be a positive int, got {bad!r}"):
        positive_int("seq_len", bad)


def test_the_config_is_frozen_and_set_attn_impl_leaves_the_callers_config_alone():
    config = TinyGPTConfig(attn_impl="eager", max_seq_len=16)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.attn_impl = "sdpa"  # type: ignore[misc]
    model = TinyGPT(config)
    model.set_attn_impl("sdpa")
    assert config.attn_impl == "eager"
    assert model.config.attn_impl == "sdpa"
    assert all(block.attn.config.attn_impl == "sdpa" for block in model.blocks)


def test_the_two_document_masks_agree():
    docs = torch.tensor([[0, 0, 1, 1, 1, -1]])
    additive = block_causal_mask(docs)  # (1, 1, 6, 6), 0 or -inf
    allowed = document_attention_mask(docs)  # (1, 6, 6) bool
    assert torch.equal(additive[:, 0] == 0, allowed)
    assert allowed[0, 4].tolist() == [False, False, True, True, True, False]


@pytest.mark.parametrize(
    "given, expected",
    [(24 * 2**30, 24 * 2**30), ("24GiB", 24 * 2**30), ("80GB", 80 * 10**9), ("500MiB", 500 * 2**20),
     ("1.5 gib", 3 * 2**29), ("  2 TB ", 2 * 10**12), ("4096B", 4096), ("2kB", 2000)],
)  # fmt: skip
def test_a_memory_budget_reads_binary_and_decimal_units(given, expected):
    assert memory_budget(given) == expected


@pytest.mark.parametrize(
    "given, message",
    [("24", "has no unit: add one, e.g. '24GiB'"), (24.0, "give bytes as an int"),
     ("24 apples", "unknown unit 'apples'"), ("lots", "is not an amount"),
     ("24GiBs", "unknown unit 'GiBs'"), (0, "positive"),
     ("0GiB", "not a positive amount"), (True, "give bytes as an int"), (None, "as an int")],
)  # fmt: skip
def test_a_memory_budget_without_units_or_amount_is_refused(given, message):
    with pytest.raises(ValueError, match=message):
        memory_budget(given)


def test_the_seq_len_check_is_one_sentence_everywhere():
    assert seq_len_within(16, 16) == 16
    with pytest.raises(ValueError, match="seq_len=17 is longer than max_seq_len=16; build the"):
        seq_len_within(17, 16)
    model = TinyGPT(TinyGPTConfig(max_seq_len=16))
    with pytest.raises(ValueError, match="seq_len=17 is longer than max_seq_len=16; build the"):
        model(torch.zeros(1, 17, dtype=torch.long))
