"""Every public name promised to users (tests outside the repository call them) works from the
module that owns it, with the signature it was promised: each is imported from there by name and
asked for one thing it must get right."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_budget_contract():
    from course_lib.budget import effective_batch_size, find_max_batch_size, tokens_per_step

    assert tokens_per_step(16, 1024) == tokens_per_step(2, 8192) == 16_384
    assert effective_batch_size(2, 8) == 16 and effective_batch_size(2, 8, 4) == 64
    result = find_max_batch_size(lambda n: n <= 37, start=128)
    assert result.batch_size == 37 and result.tries == 8
    assert list(inspect.signature(find_max_batch_size).parameters) == ["fits", "start", "limit"]
    assert list(inspect.signature(tokens_per_step).parameters)[:2] == [
        "micro_batch_size",
        "seq_len",
    ]


def test_accumulation_contract():
    from course_lib.accumulation import accumulate_gradients, count_loss_tokens, gradient_error
    from course_lib.model import TinyGPT, TinyGPTConfig

    labels = torch.tensor([[-100, 5, 6, -100], [7, 8, 9, 10]])
    assert count_loss_tokens(labels) == 2 + 3
    torch.manual_seed(0)
    model = TinyGPT(TinyGPTConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=8))
    window = [{"input_ids": labels.clamp(min=0), "labels": labels}]
    assert gradient_error(model, window, "token_weighted") < 1e-6
    stats = accumulate_gradients(model, window)
    assert stats.window_loss_tokens == 5 and model.lm_head.weight.grad is not None


def test_memory_contract():
    from course_lib.hf_configs import load_config
    from course_lib.memory import (
        activation_bytes,
        attention_elements,
        measure,
        measure_step,
        predict_hf_step,
    )
    from course_lib.model import TinyGPT, TinyGPTConfig

    assert attention_elements(2, 32, 8192) == 4_294_967_296
    config = TinyGPTConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=64)
    torch.manual_seed(0)
    model = TinyGPT(config)
    ids = torch.randint(0, 260, (2, 64))
    report = measure_step(model, {"input_ids": ids, "labels": ids}, device="cpu")
    assert report.peak_bytes == activation_bytes(config, 2, 64).total + 8  # the loss scalar
    assert measure(lambda: torch.ones(1024), device="cpu").peak_bytes == 4096
    step = predict_hf_step(load_config("gpt2"), 1, 512, checkpointing="blocks")
    assert step.checkpointing == "blocks" and step.total > 0
    params = inspect.signature(predict_hf_step).parameters
    assert list(params)[:7] == ["config", "batch_size", "seq_len", "attn_impl", "dtype",
                                "lora_rank", "checkpointing"]  # fmt: skip
    # issue 21's settings come after, keyword-only with defaults: every older call still works
    added = list(params.values())[7:]
    assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in added), added


def test_packing_contract():
    from course_lib.packing import PackingCollator, pack_lengths

    rows = pack_lengths([5, 3, 8, 2], 8)
    assert sorted(i for row in rows for i in row) == [0, 1, 2, 3] and len(rows) == 3
    batch = PackingCollator(8, pad_token_id=0, completion_only=False)([[1, 2, 3], [4, 5]])
    assert batch["position_ids"][0].tolist() == [0, 1, 2, 0, 1, 0, 1, 2]


def test_isolation_and_model_contract():
    from course_lib.isolation import check_isolation
    from course_lib.model import TinyGPT, TinyGPTConfig

    torch.manual_seed(0)
    model = TinyGPT(TinyGPTConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=32))
    assert check_isolation(model, [[1, 2, 3], [4, 5, 6, 7]], 16).isolated
    careless = check_isolation(
        model, [[1, 2, 3], [4, 5, 6, 7]], 16, call=lambda m, b: m(input_ids=b["input_ids"])
    )
    assert not careless.isolated


def test_finetune_contract():
    from course_lib.finetune import plan_finetune
    from course_lib.plan import plan_finetune as also_here

    assert also_here is plan_finetune
    params = list(inspect.signature(plan_finetune).parameters)
    # issue 21: the budget is memory_budget (gpu_memory stays, deprecated, keyword only)
    assert params[:3] == ["model", "memory_budget", "seq_len"]
    assert {"dtype", "finetune", "lora_rank", "attn_impl", "target_tokens", "gpu",
            "gpu_memory"} <= set(params)  # fmt: skip
    p = plan_finetune("Llama-3.1-8B", "24GiB", 4096, dtype="bf16", target_tokens=32000)
    assert p.micro_batch == 0  # the old README plan (1 x 8) does not fit on the device
    p = plan_finetune("Llama-3.1-8B", seq_len=4096, gpu="RTX 4090", dtype="bf16",
                      loss="chunked", target_tokens=32000)  # fmt: skip
    assert (p.micro_batch, p.grad_accum_steps, p.checkpointing) == (2, 4, "blocks")


@pytest.mark.parametrize("args", [["plan", "--help"], ["plan", "--model", "gpt2",
                         "--gpu-memory", "8GiB", "--seq-len", "512"]])  # fmt: skip
def test_python_m_course_lib_plan(args):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-m", "course_lib", *args], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "--gpu-memory" in out.stdout or "tokens per step" in out.stdout
