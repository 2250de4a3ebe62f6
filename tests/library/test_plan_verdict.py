"""How sure a fine-tune plan is (``verdict``: fits, may not fit, does not fit; the band's two
ends; the changes that make it fit) and DeepSpeed ZeRO-3's step, one sub-group at a time
(issue 41). No torch, no GPU: arithmetic against the plan's own predictions."""

from __future__ import annotations

import pytest

from course_lib.cli import main
from course_lib.finetune import plan_finetune
from course_lib.hf.memory import predict_hf_memory
from course_lib.hf.states import DEEPSPEED_SUB_GROUP, largest_sub_group, zero3_step_bytes
from course_lib.hf_configs import load_config

GIB = 2**30
RTX = dict(gpu="RTX 4090", dtype="bf16", lora_targets="all-linear")


def test_the_three_verdicts_follow_the_band():
    fits = plan_finetune("Llama-3.1-8B", seq_len=4096, loss="chunked", **RTX)
    maybe = plan_finetune("Llama-3.1-8B", seq_len=4096, **RTX)
    no = plan_finetune("Llama-3.1-8B", seq_len=16384, **RTX)
    assert (fits.verdict, maybe.verdict, no.verdict) == ("fits", "may not fit", "does not fit")
    # may not fit: one row fits the card at the band's low end and not at its top
    one = maybe.predictor("blocks", 1)
    assert one.device_bytes_low <= maybe.memory_budget < one.device_bytes
    assert maybe.max_micro_batch == 0 and maybe.max_micro_batch_low == 1
    # the largest micro-batch at the low end is never below the one at the top
    for p in (fits, maybe, no):
        for mode, top in p.max_micro_batch_by_mode.items():
            assert p.max_micro_batch_low_by_mode[mode] >= top
    low = fits.max_micro_batch_low
    assert fits.predictor("blocks", low).device_bytes_low <= fits.memory_budget
    assert fits.predictor("blocks", low + 1).device_bytes_low > fits.memory_budget


def test_the_advice_is_each_change_that_makes_it_fit_planned_again():
    maybe = plan_finetune("Llama-3.1-8B", seq_len=4096, **RTX)
    flags = {a["flag"]: a["micro_batch"] for a in maybe.advice}
    assert flags == {"--allocator expandable": 1, "--loss chunked": 2}
    for flag, rows in flags.items():
        key, value = flag.removeprefix("--").split()
        again = plan_finetune("Llama-3.1-8B", seq_len=4096, **RTX, **{key: value})
        assert again.verdict == "fits" and again.micro_batch == rows
    # a plan that fits gets none; one that nothing saves gets none either
    assert plan_finetune("Llama-3.1-8B", seq_len=4096, loss="chunked", **RTX).advice == []
    assert plan_finetune("Llama-3.1-8B", seq_len=16384, **RTX).advice == []
    # checkpointing is advice only where the plan fixed it off
    off = plan_finetune("Qwen2.5-7B", seq_len=2048, gpu="A100 80GB", checkpointing="off",
                        micro_batch=8)  # fmt: skip
    assert off.verdict != "fits"
    assert "--checkpointing on" in {a["flag"] for a in off.advice}


def test_a_given_micro_batch_gets_its_verdict_from_both_ends():
    base = dict(seq_len=4096, checkpointing="blocks", **RTX)
    for rows in (1, 2, 3):
        p = plan_finetune("Llama-3.1-8B", micro_batch=rows, **base)
        m = p.memory
        expected = ("fits" if m.device_bytes <= p.memory_budget else "may not fit"
                    if m.device_bytes_low <= p.memory_budget else "does not fit")  # fmt: skip
        assert p.verdict == expected
        assert p.to_dict()["verdict"] == expected


@pytest.mark.parametrize(
    "argv, status, words",
    [
        (["--loss", "chunked"], 0, "fits: micro-batch 2 needs"),
        ([], 1, "may not fit (fits at the band's low end)"),
        (["--seq-len", "16384"], 1, "does not fit"),
    ],
)
def test_the_command_line_prints_the_verdict_and_exits_0_only_when_it_fits(
    capsys, argv, status, words
):
    args = ["plan", "--model", "Llama-3.1-8B", "--gpu", "RTX 4090", "--seq-len", "4096",
            "--dtype", "bf16", "--lora-targets", "all-linear"]  # fmt: skip
    for a in argv:  # later flags win
        if a in args and a.startswith("--"):
            del args[args.index(a) : args.index(a) + 2]
    assert main(args + argv) == status
    out = capsys.readouterr().out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict"))
    assert words in verdict and "on the device (the band's low end and top)" in verdict


# --- DeepSpeed ZeRO-3: the optimiser steps one sub-group at a time ---------------------------


def test_sub_groups_close_at_the_first_tensor_that_reaches_the_size():
    assert largest_sub_group([5, 5, 5, 5], 10) == 10
    assert largest_sub_group([6, 6, 6], 10) == 12  # a group can pass the size by one tensor
    assert largest_sub_group([3, 3, 3], 100) == 9  # smaller than the size: one group
    assert zero3_step_bytes([10**9, 10**9], 2) == 10**9 * 6  # a bf16 copy and an fp32 one


def test_zero3_steps_one_sub_group_where_zero2_casts_the_whole_partition():
    """DeepSpeed's ZeRO-3 casts one sub-group's gradients to fp32 at a time (1e9 elements by
    default); a whole-shard fp32 copy (what the planner charged before) refused full fine-tunes
    that fit."""
    config = load_config("Llama-3.1-8B")
    kw = dict(dtype="bf16", optimizer="adamw-mixed", devices=2, checkpointing="blocks",
              attn_impl="flash", card="H100 80GB")  # fmt: skip
    z3 = predict_hf_memory(config, 1, 4096, sharding="zero3", **kw)
    fsdp = predict_hf_memory(config, 1, 4096, sharding="fsdp", **kw)
    shard = z3.components["weights"] // 2  # elements this rank holds (bf16)
    assert shard > DEEPSPEED_SUB_GROUP
    assert z3.components["optimizer_step"] < 6 * (DEEPSPEED_SUB_GROUP + 600_000_000)
    assert fsdp.components["optimizer_step"] == 8 * shard  # an fp32 copy and foreach's
    small = predict_hf_memory(config, 1, 4096, sharding="zero3", sub_group_size=10**8, **kw)
    assert small.components["optimizer_step"] < z3.components["optimizer_step"]
    assert small.peak_bytes < z3.peak_bytes < fsdp.peak_bytes


def test_zero3_gathers_one_module_at_a_time_not_the_whole_root():
    config = load_config("Llama-3.1-8B")
    kw = dict(dtype="bf16", devices=8, checkpointing="blocks", attn_impl="flash")
    z3 = predict_hf_memory(config, 1, 4096, sharding="zero3", **kw).components["gathered"]
    fsdp = predict_hf_memory(config, 1, 4096, sharding="fsdp", **kw).components["gathered"]
    embed = 128_256 * 4096 * 2
    assert fsdp - z3 >= embed  # FSDP2 holds the embedding and the head; ZeRO-3 the larger one


def test_a_zero3_full_fine_tune_the_whole_shard_copy_refused_now_fits():
    kw = dict(seq_len=4096, gpu="A100 80GB", dtype="bf16", finetune="full", devices=2,
              optimizer="adamw-mixed", checkpointing="blocks", attn_impl="flash")  # fmt: skip
    z3 = plan_finetune("Llama-3.1-8B", sharding="zero3", **kw)
    fsdp = plan_finetune("Llama-3.1-8B", sharding="fsdp", **kw)
    assert z3.verdict == "fits" and fsdp.verdict != "fits"
