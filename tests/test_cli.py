"""Tests for ``python -m course_lib``: help, a plan printed as a table, one-line errors."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.__main__ import main
from course_lib.budget import plan
from course_lib.model import TinyGPTConfig

ROOT = Path(__file__).resolve().parents[1]
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
    "--memory-gb",
    "24",
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
        "--memory-gb",
        "GiB",
        "--target-min",
        "example:",
        "python -m course_lib plan --d-model",
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
        (with_value("--memory-gb", "0"), "--memory-gb must be a positive finite number, got 0.0"),
        (with_value("--memory-gb", "nan"), "--memory-gb must be a positive finite number, got nan"),
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
    assert main(with_value("--memory-gb", "0.5")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing fits" in err and "512 MiB" in err
