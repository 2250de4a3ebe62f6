"""The isolation check on a Hugging Face causal LM (optional ``hf`` extra: transformers).

A tiny randomly initialised Llama, built locally (no download). What these tests pin down about
transformers (seen with 5.24 on eager and SDPA attention): packed documents stay isolated when the
forward gets position ids that restart per document, ``attention_mask=None`` and no cache (the
mask is then derived from the position ids), or a prepared 4-D block mask. A plain forward
(``use_cache`` defaults to True), a forward without position ids, or one with a 2-D all-ones
mask attends across documents.
"""

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (optional extra: pip install -e '.[hf]')"
)

from course_lib.data import make_instruction_dataset  # noqa: E402
from course_lib.isolation import check_isolation, hf_packed_call  # noqa: E402
from course_lib.masks import document_attention_mask  # noqa: E402

CAPACITY = 96


def tiny_llama(attn_implementation):
    config = transformers.LlamaConfig(
        vocab_size=260,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        attn_implementation=attn_implementation,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    assert model.config._attn_implementation == attn_implementation
    return model


@pytest.fixture(scope="module", params=["eager", "sdpa"])
def llama(request):
    return tiny_llama(request.param)


@pytest.fixture(scope="module")
def sdpa_llama():
    return tiny_llama("sdpa")


@pytest.fixture(scope="module")
def docs():
    return make_instruction_dataset(6, seed=1, max_len=80)


def test_correct_packed_call_is_isolated(llama, docs):
    report = check_isolation(llama, docs, capacity=CAPACITY, call=hf_packed_call)
    assert report.isolated, str(report)
    assert report.max_abs_diff <= 1e-5 and report.n_rows < len(docs)


def test_default_cache_leaks_and_is_named(llama, docs):
    report = check_isolation(llama, docs, capacity=CAPACITY)  # default call: use_cache left on
    assert not report.isolated and report.max_abs_diff > 1e-3
    assert report.built_cache
    assert report.likely_cause.startswith("KV cache")
    assert any(c.startswith("mask ignored") for c in report.causes)


@pytest.mark.parametrize("careless", ["no position ids", "2-D all-ones mask"])
def test_careless_calls_leak(sdpa_llama, docs, careless):
    def call(model, batch):
        if careless == "no position ids":
            return model(input_ids=batch["input_ids"], use_cache=False)
        return model(
            input_ids=batch["input_ids"],
            position_ids=batch["position_ids"],
            attention_mask=torch.ones_like(batch["input_ids"]),
            use_cache=False,
        )

    report = check_isolation(sdpa_llama, docs, capacity=CAPACITY, call=call)
    assert not report.isolated
    assert report.likely_cause.startswith("mask ignored")
    assert not report.built_cache


def test_prepared_4d_block_mask_is_isolated(sdpa_llama, docs):
    def call(model, batch):
        mask = document_attention_mask(batch["document_ids"], torch.float32)  # (R, 1, T, T)
        return model(
            input_ids=batch["input_ids"],
            position_ids=batch["position_ids"],
            attention_mask=mask,
            use_cache=False,
        )

    assert check_isolation(sdpa_llama, docs, capacity=CAPACITY, call=call).isolated
