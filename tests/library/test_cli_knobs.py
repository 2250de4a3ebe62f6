"""Every recipe knob of the fine-tune planner is a flag, and the flag and the keyword give the
same plan (issue 41): ``python -m course_lib plan --model ... --json`` against
``plan_finetune(...).to_dict()``, knob for knob, each case also shown to change the plan (so a
flag that set nothing, or the wrong keyword, fails). README.md's knob table names every flag."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest

from course_lib.cli import main
from course_lib.cli_model import KNOBS, SHARED
from course_lib.finetune import plan_finetune
from course_lib.finetune.options import Settings

ROOT = Path(__file__).resolve().parents[2]
MODEL = "Qwen2.5-0.5B"
BASE = dict(seq_len=1024, gpu="L4", dtype="bf16")
BASE_FLAGS = ["--seq-len", "1024", "--gpu", "L4", "--dtype", "bf16"]
QLORA = (["--finetune", "qlora"], dict(finetune="qlora"))
ZERO3 = (["--finetune", "full", "--devices", "4", "--sharding", "zero3", "--optimizer",
          "adamw-mixed"], dict(finetune="full", devices=4, sharding="zero3",
                               optimizer="adamw-mixed"))  # fmt: skip
FSDP = (["--finetune", "full", "--devices", "2", "--sharding", "fsdp"],
        dict(finetune="full", devices=2, sharding="fsdp"))  # fmt: skip
NONE: tuple[list, dict] = ([], {})

# flag -> (the context it needs, its own flags, the keywords they set)
CASES: dict[str, tuple[tuple[list, dict], list[str], dict]] = {
    "--finetune": (NONE, ["--finetune", "full"], dict(finetune="full")),
    "--lora-rank": (NONE, ["--lora-rank", "64"], dict(lora_rank=64)),
    "--lora-targets": (NONE, ["--lora-targets", "all-linear,lm_head"],
                       dict(lora_targets="all-linear,lm_head")),
    "--lora-dropout": (NONE, ["--lora-dropout", "0.05"], dict(lora_dropout=0.05)),
    "--adapter-dtype": (NONE, ["--adapter-dtype", "bf16"], dict(adapter_dtype="bf16")),
    "--modules-to-save": (NONE, ["--modules-to-save", "embed_tokens,lm_head"],
                          dict(modules_to_save="embed_tokens,lm_head")),
    "--weights": (NONE, ["--weights", "int8"], dict(weights="int8")),
    "--double-quant": (QLORA, ["--double-quant", "off"], dict(double_quant=False)),
    "--kbit-prepare": (QLORA, ["--kbit-prepare", "off"], dict(kbit_prepare=False)),
    "--no-kbit-upcast": (QLORA, ["--no-kbit-upcast"], dict(kbit_prepare=False)),
    "--bnb-version": (QLORA, ["--bnb-version", "0.41.1", "--checkpointing", "on"],
                      dict(bnb_version="0.41.1", checkpointing="blocks")),
    "--optimizer": (NONE, ["--optimizer", "adamw-8bit"], dict(optimizer="adamw-8bit")),
    "--optimizer-step": (NONE, ["--optimizer-step", "foreach"], dict(fused=False, foreach=True)),
    "--offload": (NONE, ["--offload"], dict(offload=True)),
    "--loss": (NONE, ["--loss", "chunked"], dict(loss="chunked")),
    "--loop": (NONE, ["--loop", "plain"], dict(loop="plain")),
    "--reentrant": (NONE, ["--reentrant", "--checkpointing", "on", "--micro-batch", "4"],
                    dict(reentrant=True, checkpointing="blocks", micro_batch=4)),
    "--packing": (NONE, ["--packing", "--lengths", "wikipedia_512"],
                  dict(packing="rows", lengths="wikipedia_512")),
    "--lengths": (NONE, ["--packing", "padding-free", "--lengths", "squad_1_1_384"],
                  dict(packing="padding-free", lengths="squad_1_1_384")),
    "--sharding": (NONE, ["--devices", "2", "--sharding", "zero1"],
                   dict(devices=2, sharding="zero1")),
    "--sub-group-size": (ZERO3, ["--sub-group-size", "10000000"], dict(sub_group_size=10**7)),
    "--master-weights": (FSDP, ["--master-weights", "fp32"], dict(master_weights="fp32")),
    "--reduce-dtype": (FSDP, ["--master-weights", "fp32", "--reduce-dtype", "fp32"],
                       dict(master_weights="fp32", reduce_dtype="fp32")),
    "--checkpoint-every": (NONE, ["--checkpointing", "on", "--checkpoint-every", "2"],
                           dict(checkpointing="blocks", checkpoint_every=2)),
    "--micro-batch": (NONE, ["--micro-batch", "3"], dict(micro_batch=3)),
    "--target-tokens": (NONE, ["--target-tokens", "64000"], dict(target_tokens=64000)),
    "--allocator": (NONE, ["--allocator", "expandable"], dict(allocator="expandable")),
    "--experts": (NONE, ["--experts", "grouped_mm", "--micro-batch", "1"],
                  dict(experts="grouped_mm", micro_batch=1)),
    "--utilisation": (NONE, ["--utilisation", "0.5"], dict(utilisation=0.5)),
    "--device": (NONE, ["--device", "cpu"], dict(device="cpu")),
}  # fmt: skip
# --experts has one modelled value (grouped_mm, the default): it cannot change a plan
UNCHANGING = {"--experts"}
# keywords of plan_finetune / Settings set otherwise: the model and its budget, the flags
# cli.py shares with the TinyGPT plan, the deprecated budget name, and what the plan derives
NOT_KNOBS = {"model", "gpu_memory", "memory_kwargs", "card", "workload", *SHARED}


def cli_json(flags: list[str], capsys) -> dict:
    main(["plan", "--model", MODEL, *BASE_FLAGS, *flags, "--json"])
    return json.loads(capsys.readouterr().out)


def test_every_knob_has_a_case_and_every_keyword_a_knob():
    assert set(CASES) == {k.flag for k in KNOBS}
    keywords = set(inspect.signature(plan_finetune).parameters)
    keywords |= {f.name for f in dataclasses.fields(Settings)}
    flagged = {k.keyword for k in KNOBS} | {"foreach"}  # --optimizer-step sets fused and foreach
    assert keywords - NOT_KNOBS - flagged == set(), "API keywords without a flag"


@pytest.mark.parametrize("flag", list(CASES))
def test_the_cli_and_the_api_give_the_same_plan(flag, capsys):
    (ctx_flags, ctx_kw), flags, kwargs = CASES[flag]
    printed = cli_json(ctx_flags + flags, capsys)
    api = plan_finetune(MODEL, **BASE, **ctx_kw, **kwargs).to_dict()
    assert printed == api
    if flag not in UNCHANGING:  # the knob reaches the plan: without it the plan differs
        assert cli_json(ctx_flags, capsys) != printed


def test_a_knob_that_sets_the_wrong_keyword_is_caught(capsys):
    """The case that fails the comparison: --lora-dropout wired to nothing."""
    knob = next(k for k in KNOBS if k.flag == "--lora-dropout")
    _, flags, kwargs = CASES["--lora-dropout"]
    object.__setattr__(knob, "to_api", lambda value: {})
    try:
        printed = cli_json(flags, capsys)
    finally:
        object.__setattr__(knob, "to_api", None)
    assert printed != plan_finetune(MODEL, **BASE, **kwargs).to_dict()


def test_the_readme_knob_table_names_every_flag():
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| knob |") :].split("\n\n")[0]
    named = set(re.findall(r"`(--[a-z0-9-]+)", table))
    assert {k.flag for k in KNOBS} <= named, sorted({k.flag for k in KNOBS} - named)
    for flag in named:  # every row says what it mirrors
        row = next(ln for ln in table.splitlines() if f"`{flag}" in ln)
        assert row.count("|") >= 4 and row.split("|")[3].strip(), row


def test_qlora_with_other_weights_is_refused(capsys):
    with pytest.raises(SystemExit) as info:
        main(["plan", "--model", MODEL, *BASE_FLAGS, "--finetune", "qlora", "--weights", "int8"])
    assert info.value.code == 2
    assert "finetune='qlora' is NF4 weights" in capsys.readouterr().err
