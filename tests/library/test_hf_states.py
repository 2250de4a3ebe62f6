"""The fixed bytes of a fine-tune (course_lib.hf.states, course_lib.hf.memory, course_lib.hf.cards)
against what the libraries allocate on the CPU, and the settings' step predictions against
the counted bytes."""

from __future__ import annotations

import pytest
import torch

from course_lib.hf.cards import card_memory, device_bytes
from course_lib.hf.memory import predict_hf_memory
from course_lib.hf.states import Sharding, greedy_partition, nf4_bytes, optimizer_state_bytes

pytest.importorskip("transformers", reason="the hf extra is not installed")

from course_lib.memory.hf_check import compare_hf, tiny_hf_config  # noqa: E402


def torch_state_bytes(params, opt) -> int:
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    return sum(v.untyped_storage().nbytes() for s in opt.state.values() for v in s.values()
               if torch.is_tensor(v) and v.dim() > 0)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adamw_states_are_two_moments_in_the_parameters_dtype(dtype):
    shapes = [(64, 32), (300,), (5000,)]
    params = [torch.nn.Parameter(torch.zeros(s, dtype=dtype)) for s in shapes]
    measured = torch_state_bytes(params, torch.optim.AdamW(params, foreach=False))
    sizes = [p.numel() for p in params]
    assert optimizer_state_bytes(sizes, "adamw", params[0].element_size()) == measured
    # the case that must fail: fp32 moments for bf16 parameters
    if dtype == torch.bfloat16:
        assert optimizer_state_bytes(sizes, "adamw", 4) != measured


def test_nf4_storage_matches_bitsandbytes():
    bnb = pytest.importorskip("bitsandbytes")
    w = torch.randn(96, 64, dtype=torch.bfloat16)
    for double in (True, False):
        p = bnb.nn.Params4bit(w, requires_grad=False, quant_type="nf4", compress_statistics=double)
        p = p.to("cpu")  # quantises
        qs = p.quant_state
        stored = p.untyped_storage().nbytes() + qs.absmax.untyped_storage().nbytes()
        if double:
            stored += qs.state2.absmax.untyped_storage().nbytes()
            stored += (
                qs.state2.code.untyped_storage().nbytes() + qs.offset.untyped_storage().nbytes()
            )
        assert nf4_bytes(w.numel(), double) == stored


def test_sharding_divides_what_each_stage_shards():
    dims = [(300, 64), (64, 1), (96, 64), (7, 1)]  # 7 rows: FSDP pads to 4 per rank
    fsdp, zero2 = Sharding(2, "fsdp"), Sharding(2, "zero2")
    assert fsdp.local(dims) == [150 * 64, 32, 48 * 64, 4]
    assert fsdp.gradients(dims, 2) == 2 * (150 * 64 + 32 + 48 * 64 + 4)
    assert zero2.gradients(dims, 2) == -(-(300 * 64 + 64 + 96 * 64 + 7) * 2 // 2)
    assert zero2.local(dims) == [300 * 64, 64, 96 * 64, 7]  # weights stay whole
    # ZeroRedundancyOptimizer: whole tensors, largest first, to the emptiest rank
    assert greedy_partition([10, 7, 5, 3, 2], 2) == [[10, 3], [7, 5, 2]]
    assert Sharding(2, "zero1").state_shapes(dims) == [300 * 64]  # the most loaded rank
    assert Sharding(2, "none").ddp_buckets(100) == 100 == Sharding(2, "zero1").ddp_buckets(100)
    assert Sharding(2, "fsdp").ddp_buckets(100) == 0 == Sharding(1, "none").ddp_buckets(100)
    assert fsdp.gathered(10, 4, 4) == 10 + 2 * 4 + 2 * 4 and zero2.gathered(10, 4, 4) == 0


def test_cards_and_device_bytes():
    assert card_memory("rtx 4090") == 24 * 2**30
    assert device_bytes(2**30, "eager") > device_bytes(2**30, "sdpa") > 2**30
    with pytest.raises(ValueError, match="unknown card 'V100'"):
        card_memory("V100")


def test_memory_adds_states_and_refuses_bad_sharding():
    config = tiny_hf_config("llama").to_dict()
    lora = predict_hf_memory(config, 2, 32, lora_rank=4, dtype="bf16")
    full = predict_hf_memory(config, 2, 32, dtype="bf16")
    sharded = predict_hf_memory(config, 2, 32, dtype="bf16", devices=2, sharding="zero2")
    assert lora.peak_bytes < full.peak_bytes and sharded.peak_bytes < full.peak_bytes
    assert full.components["optimizer_state"] == 2 * full.components["weights"]
    with pytest.raises(ValueError, match="sharding='zero9' is not one of"):
        predict_hf_memory(config, 2, 32, sharding="zero9")


@pytest.mark.parametrize(
    "settings",
    [
        dict(lora_rank=4, lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"], loop="plain"),
        dict(lora_rank=4, lora_targets="all-linear", checkpointing="blocks", checkpoint_every=2),
        dict(lora_rank=4, lora_dropout=0.1),
        dict(loop="plain"),
    ],
    ids=["qkvo-plain-loop", "every-2nd-layer", "dropout", "full-plain-loop"],
)
def test_settings_match_the_counted_bytes(settings):
    pytest.importorskip("peft")
    config = tiny_hf_config("llama", num_hidden_layers=4)
    rows = compare_hf(config, [(2, 24), (1, 48)], dtype=torch.float32, attn_impl="sdpa", **settings)
    for r in rows:
        assert r.error == 0, (settings, r.measured, r.predicted)


def test_nf4_step_matches_the_counted_bytes():
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("peft")
    config = tiny_hf_config("llama")
    rows = compare_hf(config, [(2, 24)], dtype=torch.bfloat16, attn_impl="sdpa", lora_rank=4,
                      weights="nf4", lora_targets="all-linear")  # fmt: skip
    assert all(abs(r.error) <= 0.03 for r in rows), [(r.measured, r.predicted) for r in rows]
