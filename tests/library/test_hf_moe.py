"""Mixture of experts (Mixtral, transformers' grouped_mm experts) against the counted bytes, with
the routing observed on the router, forced to the worst case and left to a random router."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="the hf extra is not installed")

from course_lib.hf.moe import routing  # noqa: E402
from course_lib.hf.predict import predict_hf_step  # noqa: E402
from course_lib.memory.hf_check import build_model, tiny_hf_config  # noqa: E402
from course_lib.memory.meter import measure  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def observed_step(config, forced: bool, **build):
    """One training step of a tiny Mixtral: the counted peak and the tokens each expert got
    in each layer (read off the router's indices). ``forced``: the router's weights are zero,
    so every token goes to the same two experts (topk's tie order): the worst case."""
    model = build_model(config, dtype=torch.bfloat16, attn_impl="sdpa", **build)
    counts: list[list[int]] = []
    for layer in model.get_decoder().layers:
        gate = layer.mlp.gate

        def observe(module, args, out):
            counts.append(torch.bincount(out[2].flatten(), minlength=4).tolist())

        gate.register_forward_hook(observe)
        if forced:
            with torch.no_grad():
                gate.weight.zero_()
    ids = torch.randint(config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    model.zero_grad(set_to_none=True)
    report = measure(lambda: model(input_ids=ids, labels=ids, use_cache=False).loss.backward())
    return report.peak_bytes, counts[: config.num_hidden_layers]  # (checkpointing runs it again)


@pytest.mark.parametrize("lora", [None, 4], ids=["full", "lora"])
def test_routing_moves_no_byte_with_grouped_mm(lora):
    config = tiny_hf_config("mixtral")
    build = {"lora_rank": lora, "checkpointing": "blocks" if lora else "off"}
    if lora:
        build["lora_targets"] = "all-linear"  # (PEFT's all-linear: the attention projections)
    worst, worst_counts = observed_step(config, True, **build)
    spread, spread_counts = observed_step(config, False, **build)
    # the forced router sends all 48 tokens to two experts; the random one spreads them
    assert max(worst_counts[0]) == 48 and sorted(worst_counts[0])[:2] == [0, 0]
    assert max(spread_counts[0]) < 48
    kw = dict(dtype="bf16", lora_rank=lora, checkpointing=build["checkpointing"])
    kw.update({"lora_targets": build["lora_targets"]} if lora else {})
    for observed, counts in ((worst, worst_counts), (spread, spread_counts)):
        p = predict_hf_step(config, 2, 24, expert_tokens=counts, **kw)
        assert p.total == observed
    assert worst == spread  # sorted and gathered by expert: every tensor is sized by tokens x k
    uniform = predict_hf_step(config, 2, 24, expert_tokens="uniform", **kw).total
    assert uniform == predict_hf_step(config, 2, 24, expert_tokens="worst", **kw).total


def test_routing_cases_and_bad_counts():
    assert routing(48, 4, 2, "worst") == (48, 48, 0, 0)
    assert routing(48, 4, 2, "uniform") == (24, 24, 24, 24)
    assert sum(routing(7, 3, 2, "uniform")) == 14
    config = tiny_hf_config("mixtral")
    with pytest.raises(ValueError, match="must give 4 counts adding up to tokens x top_k = 96"):
        predict_hf_step(config, 2, 24, expert_tokens=[48, 48, 0, 1])
    with pytest.raises(ValueError, match="has 3 layers; the model has 2"):
        predict_hf_step(config, 2, 24, expert_tokens=[[24] * 4] * 3)
    with pytest.raises(ValueError, match="experts='eager'"):
        predict_hf_step(config, 2, 24, experts="eager")
    with pytest.raises(ValueError, match="llama has no experts"):
        predict_hf_step(tiny_hf_config("llama"), 2, 24, expert_tokens=[1, 2])


def test_a_wrong_index_size_fails(monkeypatch):
    # the case the exact test catches: the router's and the sort's indices taken as int32
    import course_lib.hf.moe as moe
    import course_lib.hf.scaling as scaling

    config = tiny_hf_config("mixtral")
    observed, counts = observed_step(config, False)
    assert predict_hf_step(config, 2, 24, dtype="bf16", expert_tokens=counts).total == observed
    monkeypatch.setattr(moe, "INT64", 4)
    scaling.step_line.cache_clear()  # the step read off short models is cached per spec
    try:
        wrong = predict_hf_step(config, 2, 24, dtype="bf16", expert_tokens=counts).total
    finally:
        scaling.step_line.cache_clear()
    assert wrong != observed
