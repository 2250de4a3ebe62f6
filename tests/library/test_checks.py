"""The argument checks every public function shares, and the one checkpointing normalisation."""

import dataclasses

import pytest
import torch

from course_lib._checks import checkpointing_mode, positive_int
from course_lib.masks import block_causal_mask, document_attention_mask
from course_lib.model import TinyGPT, TinyGPTConfig


@pytest.mark.parametrize(
    "given, stored",
    [(False, "none"), (None, "none"), ("none", "none"), (True, "blocks"), ("blocks", "blocks")]
    + [("attention", "attention")],
)
def test_checkpointing_is_normalised_once_in_the_config(given, stored):
    assert checkpointing_mode(given) == stored
    assert TinyGPTConfig(checkpointing=given).checkpointing == stored


@pytest.mark.parametrize("bad", ["always", 1, "Blocks"])
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
