"""The recipe knobs issue 41 added to the step, each against the CPU meter's counted bytes on tiny
random models (transformers, peft and bitsandbytes as installed): LoRA on the output layer,
PEFT's ``modules_to_save``, reentrant checkpointing (``use_reentrant=True``, every transformers
4 release's default), and bitsandbytes before 0.43.2, whose ``MatMul4Bit`` kept every 4-bit
projection's input on its ctx.

bitsandbytes 0.43.2 changed one line of ``MatMul4Bit.forward`` (``ctx.tensors = (A, B)`` became
``(None, B)``: commit 9e75374, pull request 1270). The old behaviour is run here by putting that
line back on the installed class for the length of one measurement, so the old version's term is
measured, not only read. Every check also runs the prediction without the knob, which must
miss the counted bytes (the case that fails it).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

pytest.importorskip("transformers", reason="the hf extra is not installed")
pytest.importorskip("peft", reason="the hf extra is not installed")

from course_lib.hf.predict import predict_hf_step  # noqa: E402
from course_lib.hf.settings import nf4_keeps_input  # noqa: E402
from course_lib.memory.hf_check import compare_hf, tiny_hf_config  # noqa: E402

SHAPES = [(2, 24), (1, 40)]


@contextlib.contextmanager
def bitsandbytes_before_0_43_2():
    """Put back the line bitsandbytes 0.43.2 removed: ``ctx.tensors = (A, B)``."""
    functions = pytest.importorskip("bitsandbytes.autograd._functions")
    current = functions.MatMul4Bit.forward

    def forward(ctx, A, B, out=None, bias=None, quant_state=None):
        output = current(ctx, A, B, out, bias, quant_state)
        if any(ctx.needs_input_grad[:2]):
            ctx.tensors = (A, ctx.tensors[1])
        return output

    functions.MatMul4Bit.forward = staticmethod(forward)
    try:
        yield
    finally:
        functions.MatMul4Bit.forward = staticmethod(current)


def without(settings: dict, key: str, config, shape) -> int:
    """The prediction with one knob taken out (the case that must miss)."""
    rest = {k: v for k, v in settings.items() if k != key}
    b, t = shape
    return predict_hf_step(config, b, t, dtype=torch.bfloat16, attn_impl="sdpa", **rest).total


@pytest.mark.parametrize(
    "settings, knob",
    [
        (dict(lora_rank=4, lora_targets=["q_proj", "v_proj", "lm_head"]), "lora_targets"),
        (dict(lora_rank=4, modules_to_save=["embed_tokens"]), "modules_to_save"),
        (dict(lora_rank=4, modules_to_save=["lm_head"], checkpointing="blocks"),
         "modules_to_save"),
        (dict(lora_rank=4, lora_targets="all-linear", checkpointing="blocks", reentrant=True),
         "reentrant"),
        (dict(checkpointing="blocks", reentrant=True), "reentrant"),
    ],
    ids=["lora-on-lm_head", "saved-embedding", "saved-head-ckpt", "lora-reentrant",
         "full-reentrant"],
)  # fmt: skip
def test_recipe_knobs_match_the_counted_bytes(settings, knob):
    config = tiny_hf_config("llama")
    rows = compare_hf(config, SHAPES, dtype=torch.bfloat16, attn_impl="sdpa", **settings)
    assert [r.predicted for r in rows] == [r.measured for r in rows], settings
    if knob == "lora_targets":  # the same adapters without the head's
        settings = dict(settings, lora_targets=["q_proj", "v_proj"])
        misses = [without(settings, "", config, s) for s in SHAPES]
    else:
        misses = [without(settings, knob, config, s) for s in SHAPES]
    assert all(m != r.measured for m, r in zip(misses, rows)), (knob, misses)


@pytest.mark.parametrize("ckpt", ["off", "blocks", "reentrant"])
def test_bitsandbytes_before_0_43_2_keeps_each_4bit_input(ckpt):
    pytest.importorskip("bitsandbytes")
    config = tiny_hf_config("llama")
    settings = dict(lora_rank=4, weights="nf4", lora_targets="all-linear",
                    checkpointing="off" if ckpt == "off" else "blocks",
                    reentrant=ckpt == "reentrant")  # fmt: skip
    with bitsandbytes_before_0_43_2():
        rows = compare_hf(config, SHAPES, dtype=torch.bfloat16, attn_impl="sdpa",
                          bnb_version="0.41.1", **settings)  # fmt: skip
    assert [r.predicted for r in rows] == [r.measured for r in rows]
    # today's recipe (nothing kept) under-counts the old library's step
    today = [without(settings, "bnb_version", config, s) for s in SHAPES]
    assert all(t < r.measured for t, r in zip(today, rows))


def test_the_bitsandbytes_version_is_read_as_dotted_numbers():
    assert nf4_keeps_input("0.41.1") and nf4_keeps_input("0.43.1") and nf4_keeps_input("0.39")
    assert not nf4_keeps_input("0.43.2") and not nf4_keeps_input("0.50.2")
    assert not nf4_keeps_input(None)
    with pytest.raises(ValueError, match="bitsandbytes' version"):
        nf4_keeps_input("latest")


def test_bad_recipe_values_are_clear_errors():
    config = tiny_hf_config("llama").to_dict()
    with pytest.raises(ValueError, match="modules_to_save .*'wte'"):
        predict_hf_step(config, 1, 8, lora_rank=4, modules_to_save=["wte"])
    with pytest.raises(ValueError, match="full fine-tune trains every module"):
        predict_hf_step(config, 1, 8, modules_to_save=["lm_head"])
    with pytest.raises(ValueError, match="LoRA on lm_head with the chunked loss"):
        predict_hf_step(config, 1, 8, lora_rank=4, lora_targets=["lm_head"], loss="chunked")
    with pytest.raises(ValueError, match="lm_head \\(the output layer\\)"):
        predict_hf_step(config, 1, 8, lora_rank=4, lora_targets=["head"])
