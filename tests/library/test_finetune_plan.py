"""The real fine-tune planner: the figures people quote, the shipped configs, the largest
micro-batch against full replays, and accumulation's steady state against the meter."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

import pytest
import torch

import course_lib.plan
from course_lib.finetune import plan_finetune
from course_lib.hf.arch import arch_parameter_count, architecture, lora_parameter_count
from course_lib.hf.models import record_step
from course_lib.hf.predict import step_spec
from course_lib.hf.replay import replay
from course_lib.hf.scaling import peak_line
from course_lib.hf_configs import available, load_config
from course_lib.units import ADAMW_STATE_BYTES

HAS_HF = importlib.util.find_spec("transformers") is not None

# The published parameter counts (model cards, PEFT's print_trainable_parameters).
PUBLISHED = {
    "Llama-3.1-8B": 8_030_261_248,
    "Llama-3.2-1B": 1_235_814_400,
    "Qwen2.5-7B": 7_615_616_512,
    "Qwen2.5-0.5B": 494_032_768,
    "Mistral-7B-v0.3": 7_248_023_552,
    "gpt2": 124_439_808,
}


def test_shipped_configs_are_the_published_models():
    assert set(available()) == set(PUBLISHED)
    for name, count in PUBLISHED.items():
        assert arch_parameter_count(architecture(load_config(name))) == count, name
    # LoRA r=16 on all seven projections of Llama-3-8B: PEFT prints 41,943,040 trainable.
    assert lora_parameter_count(architecture(load_config("Llama-3.1-8B")), 16) == 41_943_040
    assert load_config("meta-llama/llama-3.1-8b") == load_config("Llama-3.1-8B")


def test_full_fine_tune_is_16_bytes_per_parameter_in_fp32():
    # The figure people quote: fp32 weights (4) + gradients (4) + AdamW's two moments (8).
    for name in ("gpt2", "Qwen2.5-0.5B"):
        p = plan_finetune(name, "80GiB", 512, dtype="float32", finetune="full")
        assert p.weights + p.gradients + p.optimizer_state == 16 * p.n_params
        # bf16 weights and gradients, moments kept in fp32 (this planner's assumption): 12
        p = plan_finetune(name, "80GiB", 512, dtype="bf16", finetune="full")
        assert p.weights + p.gradients + p.optimizer_state == 12 * p.n_params
    lora = plan_finetune("Llama-3.1-8B", "80GiB", 512, finetune="lora", lora_rank=16)
    assert lora.adapters + lora.gradients + lora.optimizer_state == 16 * 41_943_040
    assert lora.optimizer_state == ADAMW_STATE_BYTES * lora.n_trainable


@pytest.mark.parametrize("name", ["Llama-3.2-1B", "Qwen2.5-7B", "gpt2"])
@pytest.mark.parametrize("lora, ckpt", [(None, "off"), (8, "blocks"), (8, "off")])
def test_the_peak_line_is_the_full_replay(name, lora, ckpt):
    # Read off 6- and 7-layer models at 2 and 3 rows, carried to the real depth: exact.
    arch, spec, *_ = step_spec(load_config(name), 2, 256, "sdpa", None, lora, ckpt)
    line = peak_line(arch, spec)
    for rows in (1, 2, 5):
        exact = replay(record_step(arch, replace(spec, batch_size=rows))).peak
        predicted = line.peak(rows, None)[0]
        slack = 8 * (256 + 1) if rows == 1 else 0  # one row: no copy of the shifted labels
        assert abs(predicted - exact) <= slack, (rows, predicted, exact)


def test_the_largest_micro_batch_is_the_last_that_fits():
    p = plan_finetune("Qwen2.5-0.5B", "24GiB", 1024, finetune="full", attn_impl="eager")
    arch, spec, *_ = step_spec(load_config("Qwen2.5-0.5B"), 2, 1024, "eager", None, None, "off")
    line = peak_line(arch, spec)
    m = p.max_micro_batch_by_mode["off"]
    assert m > 1 and p.max_micro_batch == m
    assert p.fixed + line.peak(m, p.gradients)[0] <= p.memory_budget
    assert p.fixed + line.peak(m + 1, p.gradients)[0] > p.memory_budget
    assert p.checkpointing == "off" and p.total <= p.memory_budget


def test_accumulation_reaches_the_target_with_the_fewest_tokens():
    p = plan_finetune("Llama-3.2-1B", "24GiB", 2048, target_tokens=100_000)
    assert p.tokens_per_step >= 100_000
    assert p.tokens_per_step - 2048 < 100_000  # one row fewer would miss the target
    assert p.micro_batch <= p.max_micro_batch_by_mode["off"]
    assert p.total <= p.memory_budget
    no_target = plan_finetune("Llama-3.2-1B", "24GiB", 2048)
    assert no_target.grad_accum_steps == 1
    assert (
        no_target.micro_batch
        == no_target.max_micro_batch
        == no_target.max_micro_batch_by_mode["off"]
    )


def test_checkpointing_only_when_one_row_does_not_fit_without_it():
    p = plan_finetune(
        "Llama-3.1-8B", "24GiB", 4096, dtype="bf16", lora_rank=16, target_tokens=32000
    )
    assert p.max_micro_batch_by_mode["off"] == 0 < p.max_micro_batch_by_mode["blocks"]
    assert p.checkpointing == "blocks" and any("checkpointing" in w for w in p.warnings)
    assert p.total <= p.memory_budget
    roomy = plan_finetune("Llama-3.1-8B", "80GiB", 1024, dtype="bf16", lora_rank=16)
    assert roomy.checkpointing == "off"
    assert roomy.max_micro_batch_by_mode["blocks"] > roomy.micro_batch
    assert course_lib.plan.plan_finetune is plan_finetune  # the same through course_lib.plan


def test_nothing_fits_says_why():
    weights = plan_finetune("Llama-3.1-8B", "24GiB", 1024, finetune="full")
    assert weights.micro_batch == 0 and weights.total == 0
    assert "the weights, adapters and optimiser state alone need" in weights.warnings[0]
    rows = plan_finetune("gpt2", "2GiB", 1024, dtype="float32", finetune="full", attn_impl="eager")
    assert rows.micro_batch == 0
    assert "one row of 1,024 tokens needs" in rows.warnings[0] and "use sdpa" in rows.warnings[0]
    assert "nothing fits" in str(rows)


def test_gpt2_dropout_is_noted():
    p = plan_finetune("gpt2", "24GiB", 1024)
    assert any("dropout is taken as off" in n for n in p.notes)


@pytest.mark.parametrize(
    "text, expected",
    [("24GiB", 24 * 2**30), ("80GB", 80 * 10**9), ("512 MiB", 2**29), (1234, 1234),
     ("1.5gib", 3 * 2**29)],
)  # fmt: skip
def test_the_card_memory_reads_units(text, expected):
    assert plan_finetune("gpt2", text, 512).memory_budget == expected


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"gpu_memory": "-3GiB"}, "gpu_memory='-3GiB' is not an amount like '24GiB'"),
        ({"gpu_memory": "24 apples"}, "unknown unit 'apples'"),
        ({"gpu_memory": "24"}, "gpu_memory='24' has no unit: add one, e.g. '24GiB'"),
        ({"checkpointing": "attention"}, "checkpointing='attention' is TinyGPT's"),
        ({"finetune": "qlora"}, "finetune='qlora' is not one of ('lora', 'full')"),
        ({"lora_rank": 0}, "lora_rank must be a positive int"),
        ({"target_tokens": 0}, "target_tokens must be a positive int"),
        ({"seq_len": 0}, "seq_len must be a positive int"),
        ({"model": "GPT-5"}, "unknown model 'GPT-5'"),
        ({"model": "missing/config.json"}, "no config file at 'missing/config.json'"),
    ],
)
def test_bad_values_are_clear_value_errors(kwargs, message):
    args = {"model": "gpt2", "gpu_memory": "24GiB", "seq_len": 512, **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_finetune(args.pop("model"), args.pop("gpu_memory"), args.pop("seq_len"), **args)


@pytest.mark.skipif(not HAS_HF, reason="transformers is not installed (optional hf extra)")
@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(
    "model_type, dtype, ckpt",
    [("llama", torch.bfloat16, "off"), ("gpt2", torch.float32, "blocks")],
)
def test_accumulation_steady_state_matches_the_meter(model_type, dtype, ckpt):
    # The planner's step peak has every gradient already there (the second micro-batch of an
    # accumulation window): measured as the peak of that second step above its start.
    from course_lib.memory.hf_check import build_model, tiny_hf_config
    from course_lib.memory.meter import measure, training_step

    config = tiny_hf_config(model_type)
    model = build_model(config, dtype=dtype, attn_impl="sdpa", checkpointing=ckpt)
    arch, spec, *_ = step_spec(config, 2, 32, "sdpa", dtype, None, ckpt)
    line = peak_line(arch, spec)
    grads = arch_parameter_count(arch) * spec.b
    for rows in (2, 3):
        ids = torch.randint(config.vocab_size, (rows, 32))
        batch = {"input_ids": ids, "labels": ids, "use_cache": False}
        model.zero_grad(set_to_none=True)
        training_step(model, batch)  # the window's first micro-batch makes the gradients
        second = measure(lambda b=batch: training_step(model, b), device="cpu")
        assert line.peak(rows, grads)[0] - grads == second.peak_bytes


def test_a_fixed_checkpointing_is_kept_even_when_a_row_would_not_fit():
    p = plan_finetune("Llama-3.1-8B", "24GiB", 4096, dtype="bf16", checkpointing="off")
    assert p.checkpointing == "off" and p.micro_batch == 0 and "nothing fits" in p.warnings[0]
    q = plan_finetune("Llama-3.1-8B", "80GiB", 1024, dtype="bf16", checkpointing=True)
    assert q.checkpointing == "blocks" and not q.warnings
    assert q.max_micro_batch == q.max_micro_batch_by_mode["blocks"] == q.micro_batch


def test_the_two_plans_share_their_field_names():
    """What both plans say about a run has one name (the vocabulary decided for the course)."""
    from course_lib.model import TinyGPTConfig
    from course_lib.plan import plan

    shared = ("seq_len", "memory_budget", "micro_batch", "grad_accum_steps", "checkpointing",
              "max_micro_batch", "tokens_per_step", "effective_batch_size", "notes",
              "warnings")  # fmt: skip
    tiny = plan(TinyGPTConfig(max_seq_len=128), "1GiB", 128, 800)
    real = plan_finetune("gpt2", "24GiB", 512)
    for name in shared:
        assert type(getattr(tiny, name)) is type(getattr(real, name)), name
