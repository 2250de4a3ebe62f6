"""Tests for ``python -m course_lib``: help, a plan printed as a table, one-line errors; the
TinyGPT plan and the real fine-tune plan (``--model``)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_lib.cli import main
from course_lib.finetune import plan_finetune
from course_lib.model import TinyGPTConfig
from course_lib.plan import plan

ROOT = Path(__file__).resolve().parents[2]
PLAN_ARGS = [
    "plan",
    "--d-model",
    "768",
    "--n-layers",
    "12",
    "--n-heads",
    "12",
    "--vocab-size",
    "32000",
    "--seq-len",
    "2048",
    "--gpu-memory",
    "24GiB",
    "--dataset-size",
    "800",
]


def run_cli(*args):
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, "-m", "course_lib", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_help_is_clear():
    top = run_cli("--help")
    assert top.returncode == 0 and "plan" in top.stdout
    sub = run_cli("plan", "--help")
    assert sub.returncode == 0, sub.stderr
    for text in (
        "--seq-len",
        "--gpu-memory",
        "24GiB (binary",
        "80GB (decimal)",
        "--checkpointing",
        "--target-min",
        "examples:",
        "python -m course_lib plan --d-model",
        "python -m course_lib plan --model Llama-3.1-8B --gpu-memory 24GiB",
        "--target-tokens",
    ):
        assert text in sub.stdout


def test_plan_prints_the_library_plan_as_a_table():
    out = run_cli(*PLAN_ARGS)
    assert out.returncode == 0, out.stderr
    config = TinyGPTConfig(vocab_size=32000, d_model=768, n_heads=12, n_layers=12, max_seq_len=2048)
    expected = plan(config, 24 * 2**30, 2048, 800)
    assert out.stdout.strip() == expected.to_table()
    assert f"effective batch    {expected.effective_batch_size} =" in out.stdout
    assert "tokens per step" in out.stdout and "steps per epoch" in out.stdout


def test_bad_value_is_one_line_and_exit_2():
    args = list(PLAN_ARGS)
    args[args.index("--seq-len") + 1] = "-3"
    out = run_cli(*args)
    assert out.returncode == 2
    assert out.stderr == "python -m course_lib plan: error: --seq-len must be positive, got -3\n"
    assert out.stdout == ""


def with_value(flag, value):
    args = list(PLAN_ARGS)
    args[args.index(flag) + 1] = value
    return args


@pytest.mark.parametrize(
    "argv, message",
    [
        (with_value("--n-heads", "abc"), "argument --n-heads: invalid int value: 'abc'"),
        (with_value("--gpu-memory", "24"), "'24' has no unit: add one, e.g. '24GiB'"),
        (with_value("--gpu-memory", "0GiB"), "'0GiB' is not a positive amount of memory"),
        (with_value("--gpu-memory", "24GiBs"), "unknown unit 'GiBs'"),
        (PLAN_ARGS + ["--checkpointing", "sometimes"], "argument --checkpointing: invalid choice"),
        (with_value("--dataset-size", "0"), "--dataset-size must be positive, got 0"),
        (with_value("--d-model", "770"), "d_model=770 is not divisible by n_heads=12"),
        (PLAN_ARGS + ["--target-min", "65"], "--target-min 65 is above --target-max 64"),
        (PLAN_ARGS + ["--attn-impl", "flash"], "argument --attn-impl: invalid choice: 'flash'"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_errors_are_one_line_with_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_nothing_fits_is_one_line_and_exit_1(capsys):
    assert main(with_value("--gpu-memory", "512MiB")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing fits" in err and "512 MiB" in err


HF_EXAMPLE = [
    "plan", "--model", "Llama-3.1-8B", "--gpu-memory", "24GiB", "--seq-len", "4096",
    "--dtype", "bf16", "--finetune", "lora", "--lora-rank", "16", "--attention", "sdpa",
    "--target-tokens", "32000",
]  # fmt: skip


def test_the_real_fine_tune_example_prints_the_library_plan():
    out = run_cli(*HF_EXAMPLE)
    assert out.returncode == 0, out.stderr
    expected = plan_finetune(
        "Llama-3.1-8B", "24GiB", 4096, dtype="bf16", finetune="lora", lora_rank=16,
        attn_impl="sdpa", target_tokens=32000,
    )  # fmt: skip
    assert out.stdout.strip() == expected.to_table()
    for row in ("weights", "adapters", "gradients", "optimiser state", "activations per row",
                "logits per row", "largest micro-batch", "tokens per step"):  # fmt: skip
        assert f"\n{row} " in out.stdout
    assert expected.micro_batch * expected.grad_accum_steps * 4096 >= 32000
    assert expected.tokens_per_step == expected.micro_batch * expected.grad_accum_steps * 4096


def test_the_example_plans_in_well_under_a_second_of_cpu():
    # CPU time, not wall time: a busy machine must not fail it. (Importing torch, which the
    # command line pays first, is not the planner's.)
    start = time.process_time()
    assert main(HF_EXAMPLE) == 0
    assert time.process_time() - start < 1.0


def hf_args(**changes):
    args = list(HF_EXAMPLE)
    for flag, value in changes.items():
        flag = "--" + flag.replace("_", "-")
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


@pytest.mark.parametrize(
    "argv, message",
    [
        (hf_args(gpu_memory="lots"), "'lots' is not an amount like '24GiB', '80GB'"),
        (hf_args(gpu_memory="24"), "'24' has no unit"),
        (hf_args(checkpointing="attention"), "checkpointing='attention' is TinyGPT's"),
        (hf_args(model="Llama-9"), "unknown model 'Llama-9': pass the path of its config.json"),
        (hf_args(lora_rank="0"), "--lora-rank must be positive, got 0"),
        (hf_args(target_tokens="-5"), "--target-tokens must be positive, got -5"),
        (hf_args(dtype="int8"), "argument --dtype: invalid choice: 'int8'"),
        (hf_args(d_model="768"), "--d-model belongs to the TinyGPT shape plan"),
        (PLAN_ARGS + ["--lora-rank", "8"], "--lora-rank belongs to the --model plan"),
        (hf_args(model="gpt2", seq_len="2048"), "exceeds GPT-2's n_positions=1024"),
        (["plan", "--model", "gpt2", "--seq-len", "512"], "required: --gpu-memory"),
    ],
)
def test_real_fine_tune_errors_are_one_line_with_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_your_own_config_json_and_its_unsupported_kind(capsys, tmp_path):
    mine = tmp_path / "config.json"
    mine.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 256, "num_attention_heads": 4,
                                "num_key_value_heads": 2, "intermediate_size": 512,
                                "num_hidden_layers": 4, "vocab_size": 1000}))  # fmt: skip
    assert main(hf_args(model=str(mine), gpu_memory="1GiB", seq_len="512")) == 0
    assert "\nplan " in capsys.readouterr().out
    other = tmp_path / "gemma.json"
    other.write_text(json.dumps({"model_type": "gemma"}))
    with pytest.raises(SystemExit):
        main(hf_args(model=str(other)))
    assert (
        "model_type 'gemma' is not supported; supported: llama, mistral" in capsys.readouterr().err
    )


def test_nothing_fits_warns_in_plain_words_and_exits_1(capsys):
    assert main(hf_args(finetune="full", gpu_memory="40GiB")) == 1
    out = capsys.readouterr().out
    assert "warning: nothing fits: the weights, adapters and optimiser state alone need" in out
    assert "fine-tune with LoRA instead" in out


def test_memory_gb_still_works_for_one_release_and_says_so(capsys):
    """--memory-gb meant GiB: the same plan as --gpu-memory 24GiB, and a warning on stderr."""
    old = [a if a != "--gpu-memory" else "--memory-gb" for a in PLAN_ARGS]
    old[old.index("--memory-gb") + 1] = "24"
    assert main(old) == 0
    captured = capsys.readouterr()
    assert "--memory-gb is deprecated" in captured.err and "--gpu-memory 24GiB" in captured.err
    assert main(PLAN_ARGS) == 0
    assert capsys.readouterr().out == captured.out
    with pytest.raises(SystemExit):
        main(old + ["--gpu-memory", "24GiB"])  # both: one line saying so
    assert "give --gpu-memory only" in capsys.readouterr().err


@pytest.mark.parametrize("flag, mode", [("on", "blocks"), ("blocks", "blocks"), ("off", "off")])
def test_checkpointing_flag_fixes_the_mode_on_both_plans(capsys, flag, mode):
    assert main(PLAN_ARGS + ["--checkpointing", flag]) == 0
    assert f"checkpointing      {mode}" in capsys.readouterr().out
    assert main(hf_args(checkpointing=flag)) in (0, 1)
    expected = plan_finetune(
        "Llama-3.1-8B", "24GiB", 4096, dtype="bf16", lora_rank=16, target_tokens=32000,
        checkpointing=mode,
    )  # fmt: skip
    assert capsys.readouterr().out.strip() == expected.to_table()
    assert expected.checkpointing == mode


def test_decimal_and_binary_gigabytes_plan_differently(capsys):
    assert main(with_value("--gpu-memory", "24GB")) in (0, 1)
    decimal = capsys.readouterr().out
    assert main(PLAN_ARGS) == 0
    assert "of 22.4 GiB" in decimal and "of 24 GiB" in capsys.readouterr().out
