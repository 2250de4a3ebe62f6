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
        'python -m course_lib plan --model Llama-3.1-8B --gpu "RTX 4090"',
        "--target-tokens",
        "--finetune {full,lora,qlora}",
        "--lora-targets",
        "--optimizer",
        "--attention {eager,sdpa,flash}",
        "--loss {standard,chunked}",
        "--loop {trainer,plain}",
        "--packing",
        "--lengths",
        "--devices",
        "--sharding {none,zero1,zero2,zero3,fsdp}",
        "--checkpointing {off,on}",
        "--checkpoint-every",
        "--micro-batch",
        "--gpu NAME",
        "--json",
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
        (PLAN_ARGS + ["--attention", "fast"], "argument --attention: invalid choice: 'fast'"),
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
    "plan", "--model", "Llama-3.1-8B", "--gpu", "RTX 4090", "--seq-len", "4096",
    "--dtype", "bf16", "--finetune", "lora", "--lora-rank", "16", "--loss", "chunked",
    "--target-tokens", "32000",
]  # fmt: skip
HF_KWARGS = dict(seq_len=4096, gpu="RTX 4090", dtype="bf16", finetune="lora", lora_rank=16,
                 loss="chunked", target_tokens=32000)  # fmt: skip


def test_the_real_fine_tune_example_prints_the_library_plan():
    out = run_cli(*HF_EXAMPLE)
    assert out.returncode == 0, out.stderr
    expected = plan_finetune("Llama-3.1-8B", **HF_KWARGS)
    assert out.stdout.strip() == expected.to_table()
    for row in ("weights", "adapters", "gradients", "optimiser state", "one more row",
                "largest micro-batch", "tokens per step", "allocated peak", "on the device",
                "decides"):  # fmt: skip
        assert f"\n{row} " in out.stdout
    # which defaults were assumed, in words
    assert "assumed LoRA on q_proj, v_proj: PEFT's default for llama" in out.stdout
    assert "assumed loop: the Trainer's" in out.stdout
    assert expected.tokens_per_step == expected.micro_batch * expected.grad_accum_steps * 4096


def test_the_example_plans_in_well_under_a_second_of_cpu():
    # CPU time, not wall time: a busy machine must not fail it. Measured here: about 0.15 s
    # of CPU for the planner (the command line imports no torch).
    start = time.process_time()
    assert main(HF_EXAMPLE) == 0
    assert time.process_time() - start < 1.0


# Every planner path the command line takes for --model, packing included: none may import torch
# (about 1.5 s here) or transformers. The case that fails it: --packing before bins.py imported
# torch through course_lib.packing.
NO_TORCH_PATHS = [
    [],
    ["--json"],
    ["--packing", "--lengths", "wikipedia_512"],
    ["--packing", "padding-free", "--lengths", "squad_1_1_384", "--attention", "flash"],
    ["--finetune", "qlora", "--micro-batch", "2"],
    ["--finetune", "full", "--devices", "8", "--sharding", "fsdp", "--checkpointing", "on"],
]


@pytest.mark.parametrize("extra", NO_TORCH_PATHS, ids=lambda a: " ".join(a) or "the example")
def test_no_planner_path_imports_torch_or_transformers(extra):
    code = ("import sys; from course_lib.cli import main; main(" + repr(HF_EXAMPLE + extra) + ")"
            "; print(sorted({'torch', 'transformers'} & set(sys.modules)))")  # fmt: skip
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": path}, timeout=120)  # fmt: skip
    assert out.stdout.strip().endswith("[]"), (out.stdout[-300:], out.stderr[-2000:])


def hf_args(**changes):
    args = list(HF_EXAMPLE)
    for flag, value in changes.items():
        flag = "--" + flag.replace("_", "-")
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


# every --model flag, and the plan_finetune keyword it sets
FLAGS = [
    (["--finetune", "full", "--seq-len", "512"], dict(finetune="full", seq_len=512)),
    (["--finetune", "qlora"], dict(finetune="qlora")),
    (["--lora-rank", "8"], dict(lora_rank=8)),
    (["--lora-targets", "q_proj,k_proj,v_proj,o_proj"],
     dict(lora_targets="q_proj,k_proj,v_proj,o_proj")),
    (["--lora-targets", "all-linear"], dict(lora_targets="all-linear")),
    (["--optimizer", "adamw-8bit"], dict(optimizer="adamw-8bit")),
    (["--attention", "flash"], dict(attn_impl="flash")),
    (["--attention", "eager", "--seq-len", "1024"], dict(attn_impl="eager", seq_len=1024)),
    (["--loss", "standard", "--seq-len", "1024"], dict(loss="standard", seq_len=1024)),
    (["--loop", "plain"], dict(loop="plain")),
    (["--packing", "--lengths", "wikipedia_512", "--seq-len", "1024"],
     dict(packing="rows", lengths="wikipedia_512", seq_len=1024)),
    (["--devices", "2", "--sharding", "zero2"], dict(devices=2, sharding="zero2")),
    (["--sharding", "fsdp", "--devices", "4"], dict(devices=4, sharding="fsdp")),
    (["--checkpointing", "on", "--checkpoint-every", "2"],
     dict(checkpointing="blocks", checkpoint_every=2)),
    (["--checkpointing", "off", "--seq-len", "512"], dict(checkpointing="off", seq_len=512)),
    (["--dtype", "fp16"], dict(dtype="fp16")),
    (["--micro-batch", "1"], dict(micro_batch=1)),
    (["--gpu", "H100 80GB"], dict(gpu="H100 80GB")),
]  # fmt: skip


@pytest.mark.parametrize("flags, kwargs", FLAGS, ids=[" ".join(f) for f, _ in FLAGS])
def test_every_flag_sets_its_keyword(capsys, flags, kwargs):
    args = list(HF_EXAMPLE)
    for i in range(0, len(flags)):
        if flags[i] in args and flags[i].startswith("--") and i + 1 < len(flags):
            j = args.index(flags[i])
            del args[j : j + 2]
    main(args + flags + ["--json"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == plan_finetune("Llama-3.1-8B", **{**HF_KWARGS, **kwargs}).to_dict()
    for key, value in kwargs.items():
        if key in printed and key not in ("seq_len", "lora_targets", "dtype", "gpu"):
            assert printed[key] == value, key


def test_the_json_is_one_object_with_the_contracts_keys():
    out = run_cli(*HF_EXAMPLE, "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)  # one object, nothing else on stdout
    for key in (
        "peak_bytes",
        "device_bytes",
        "components",
        "max_micro_batch",
        "micro_batch",
        "grad_accum_steps",
        "tokens_per_step",
        "checkpointing",
    ):
        assert key in d, key  # fmt: skip
    assert all(isinstance(v, int) for v in d["components"].values())
    assert d["device_bytes"] <= d["memory_budget"] and d["gpu"] == "RTX 4090"


def test_gpu_is_not_read_as_an_abbreviation_of_gpu_memory(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--model", "gpt2", "--gpu-mem", "8GiB", "--seq-len", "512"])
    assert "unrecognized arguments: --gpu-mem" in capsys.readouterr().err
    assert main(["plan", "--model", "gpt2", "--gpu", "T4", "--seq-len", "512", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_budget"] == 15_835_398_144


def test_a_micro_batch_that_does_not_fit_exits_1(capsys):
    assert main(hf_args(micro_batch="64")) == 1
    assert "does not fit" in capsys.readouterr().out


def test_attn_impl_still_works_and_says_it_is_deprecated(capsys):
    assert main(hf_args(attn_impl="eager", seq_len="512")) == 0
    old = capsys.readouterr()
    assert "--attn-impl is deprecated: use --attention eager" in old.err
    assert main(hf_args(attention="eager", seq_len="512")) == 0
    assert capsys.readouterr().out == old.out


@pytest.mark.parametrize(
    "argv, message",
    [
        (hf_args(gpu_memory="lots"), "'lots' is not an amount like '24GiB', '80GB'"),
        (hf_args(checkpointing="attention"), "checkpointing='attention' is TinyGPT's"),
        (hf_args(model="Llama-9"), "unknown model 'Llama-9' (not shipped and not in the Hugging "),
        (hf_args(lora_rank="0"), "--lora-rank must be positive, got 0"),
        (hf_args(target_tokens="-5"), "--target-tokens must be positive, got -5"),
        (hf_args(micro_batch="0"), "--micro-batch must be positive, got 0"),
        (hf_args(checkpoint_every="0"), "--checkpoint-every must be positive, got 0"),
        (hf_args(dtype="int8"), "argument --dtype: invalid choice: 'int8'"),
        (hf_args(finetune="dora"), "argument --finetune: invalid choice: 'dora'"),
        (hf_args(optimizer="adam"), "argument --optimizer: invalid choice: 'adam'"),
        (hf_args(sharding="zero4"), "argument --sharding: invalid choice: 'zero4'"),
        (hf_args(loop="custom"), "argument --loop: invalid choice: 'custom'"),
        (hf_args(loss="focal"), "argument --loss: invalid choice: 'focal'"),
        (hf_args(gpu="V100"), "unknown card 'V100'"),
        (hf_args(gpu_memory="24GiB"), "give --gpu or --gpu-memory, not both"),
        (hf_args(lengths="wikipedia_512"), "--packing and --lengths go together"),
        (hf_args(lora_targets="q,v"), "are not projections of llama"),
        (hf_args(d_model="768"), "--d-model belongs to the TinyGPT shape plan"),
        (PLAN_ARGS + ["--lora-rank", "8"], "--lora-rank belongs to the --model plan"),
        (PLAN_ARGS + ["--json"], "--json belongs to the --model plan"),
        (PLAN_ARGS + ["--attention", "flash"], "--attention flash is for --model"),
        (hf_args(model="gpt2", seq_len="2048"), "exceeds GPT-2's n_positions=1024"),
        (["plan", "--model", "gpt2", "--seq-len", "512"], "required: --gpu-memory (or --gpu)"),
    ],
)
def test_real_fine_tune_errors_are_one_line_with_exit_2(capsys, argv, message):
    if "--gpu-memory" in argv and "--gpu" in argv and "not both" not in message:
        i = argv.index("--gpu")
        del argv[i : i + 2]
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
    assert main(["plan", "--model", str(mine), "--gpu-memory", "1GiB", "--seq-len", "512"]) == 0
    assert "\nplan " in capsys.readouterr().out
    other = tmp_path / "gemma.json"
    other.write_text(json.dumps({"model_type": "gemma"}))
    with pytest.raises(SystemExit):
        main(hf_args(model=str(other)))
    assert (
        "model_type 'gemma' is not supported; supported: llama, mistral" in capsys.readouterr().err
    )


def test_nothing_fits_warns_in_plain_words_and_exits_1(capsys):
    assert main(hf_args(finetune="full", gpu="A100 40GB")) == 1
    out = capsys.readouterr().out
    assert "warning: nothing fits: the weights, adapters and optimiser state alone need" in out
    assert "fine-tune with LoRA or QLoRA instead" in out


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
    expected = plan_finetune("Llama-3.1-8B", **HF_KWARGS, checkpointing=mode)
    assert capsys.readouterr().out.strip() == expected.to_table()
    assert expected.checkpointing == mode


def test_the_tinygpt_plan_takes_a_card_and_devices(capsys):
    args = [a for a in PLAN_ARGS]
    i = args.index("--gpu-memory")
    del args[i : i + 2]
    assert main(args + ["--gpu", "L4", "--devices", "2"]) == 0
    out = capsys.readouterr().out
    assert "of 22 GiB" in out and "devices            " in out


def test_decimal_and_binary_gigabytes_plan_differently(capsys):
    assert main(with_value("--gpu-memory", "24GB")) in (0, 1)
    decimal = capsys.readouterr().out
    assert main(PLAN_ARGS) == 0
    assert "of 22.4 GiB" in decimal and "of 24 GiB" in capsys.readouterr().out
