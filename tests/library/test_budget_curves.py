"""The sweeps behind lessons 4 and 5: the budget-fit verdict, the planner's memory curve, and the
two rules of the small-dataset trap, each checked against the function it sweeps."""

from dataclasses import replace

import pytest
from helpers import tiny_config

from course_lib.budget_curves import budget_fit, plan_curve, small_dataset_trap
from course_lib.memory import activation_bytes
from course_lib.plan import plan, training_memory

MiB = 2**20


def test_budget_fit_sweeps_the_memory_model_plain_and_checkpointed():
    cfg = tiny_config(attn_impl="sdpa")
    fit = budget_fit(cfg, seq_len=512, n_layers=4, budget_mib=8, batch_size=2)
    assert fit.seq_lens == [64, 128, 256, 512, 1024, 2048]
    deep = replace(cfg, n_layers=4, max_seq_len=2048)
    for mode in ("none", "blocks"):
        want = [activation_bytes(deep, 2, t, checkpointing=mode).total for t in fit.seq_lens]
        assert fit.peaks[mode] == want
        assert fit.at_seq_len[mode] == activation_bytes(deep, 2, 512, checkpointing=mode).total
    assert all(c < p for c, p in zip(fit.peaks["blocks"][2:], fit.peaks["none"][2:]))


def test_budget_fit_verdict_follows_the_budget():
    cfg = tiny_config(attn_impl="eager")
    peaks = budget_fit(cfg, seq_len=256, n_layers=4, budget_mib=1).at_seq_len
    between = (peaks["blocks"] + peaks["none"]) / 2 / MiB
    verdicts = {
        mib: budget_fit(cfg, seq_len=256, n_layers=4, budget_mib=mib).verdict
        for mib in (peaks["none"] / MiB * 1.01, between, peaks["blocks"] / MiB * 0.99)
    }
    assert list(verdicts.values()) == [
        "fits without checkpointing",
        "fits only with checkpointing",
        "does not fit, even with checkpointing",
    ]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(budget_mib=0), "budget_mib"),
        (dict(seq_len=0), "seq_len"),
        (dict(seq_lens=[]), "at least"),
    ],
)
def test_budget_fit_rejects_bad_input(kwargs, match):
    args = dict(seq_len=128, n_layers=2, budget_mib=8)
    with pytest.raises(ValueError, match=match):
        budget_fit(tiny_config(), **{**args, **kwargs})


def test_plan_curve_is_the_plan_and_its_memory_model():
    cfg = tiny_config()
    curve = plan_curve(cfg, 8, 128, 800)
    p = plan(cfg, 8 * MiB, 128, 800)
    assert curve.plan.micro_batch_size == p.micro_batch_size and curve.error == ""
    assert curve.micro_batch_sizes == list(range(1, 2 * p.max_micro_batch_size + 1))
    assert curve.totals == [training_memory(cfg, n, 128).total for n in curve.micro_batch_sizes]
    one = training_memory(cfg, 1, 128)
    assert curve.fixed_bytes == one.total - one.activations
    assert [(n, fitted) for n, fitted, _ in curve.probes] == p.search.history
    assert all((total <= 8 * MiB) == fitted for _, fitted, total in curve.probes)


def test_plan_curve_turns_on_checkpointing_or_says_why_nothing_fits():
    cfg = tiny_config(attn_impl="eager")
    tight = plan_curve(cfg, 18, 512, 800)  # one row: 21.3 MiB plain, 15.5 MiB checkpointed
    assert tight.plan is not None and tight.checkpointing == "blocks"
    assert tight.totals[0] == training_memory(replace(cfg, checkpointing="blocks"), 1, 512).total
    nothing = plan_curve(tiny_config(d_model=256, n_layers=4), 1, 512, 800)
    assert nothing.plan is None
    assert "micro-batch 1 at seq_len=512" in nothing.error
    assert nothing.micro_batch_sizes == [1, 2] and nothing.probes == []
    with pytest.raises(ValueError, match="memory_mib"):
        plan_curve(cfg, -1, 128, 800)


def test_small_dataset_trap_counts_full_steps_and_loss_tokens():
    trap = small_dataset_trap(800, 30.0, [64, 16, 256], min_tokens=4000, min_steps=25)
    assert trap.effective_batches == [16, 64, 256]
    assert trap.steps == [50, 12, 3]  # 800 // E: full steps only
    assert trap.tokens == [480.0, 1920.0, 7680.0]
    assert trap.max_effective_for_steps == 32  # 800 / 25
    assert trap.min_effective_for_tokens == pytest.approx(4000 / 30)
    # The trap: no effective batch satisfies both rules on this dataset.
    assert trap.max_effective_for_steps < trap.min_effective_for_tokens


@pytest.mark.parametrize(
    "args, match",
    [
        ((800, 30.0, []), "at least one effective batch"),
        ((800, 30.0, [0, 16]), "effective batch"),
        ((0, 30.0, [16]), "dataset_size"),
        ((800, 0.0, [16]), "loss_tokens_per_example"),
    ],
)
def test_small_dataset_trap_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        small_dataset_trap(*args)
