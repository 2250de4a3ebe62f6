"""Lesson 5's experiments: the planner's memory curve, the measured search, a logged run and the
two rules of the small-dataset trap, each checked against the function it sweeps."""

from dataclasses import replace

import pytest
from helpers import tiny_config

from course_lib.data import make_instruction_dataset
from course_lib.lessons.choosing import logged_run, measured_search, plan_curve, small_dataset_trap
from course_lib.memory import MemoryProbe
from course_lib.model import TinyGPTConfig
from course_lib.plan import plan, training_memory

MiB = 2**20


def test_plan_curve_is_the_plan_and_its_memory_model():
    cfg = tiny_config()
    curve = plan_curve(cfg, "8MiB", 128, 800)
    p = plan(cfg, 8 * MiB, 128, 800)
    assert curve.plan.micro_batch == p.micro_batch and curve.error == ""
    assert curve.micro_batch_sizes == list(range(1, 2 * p.max_micro_batch + 1))
    assert curve.totals == [training_memory(cfg, n, 128).total for n in curve.micro_batch_sizes]
    one = training_memory(cfg, 1, 128)
    assert curve.fixed_bytes == one.total - one.activations
    assert [(n, fitted) for n, fitted, _ in curve.probes] == p.search.history
    assert all((total <= 8 * MiB) == fitted for _, fitted, total in curve.probes)


def test_plan_curve_turns_on_checkpointing_or_says_why_nothing_fits():
    cfg = tiny_config(attn_impl="eager")
    tight = plan_curve(cfg, 18 * MiB, 512, 800)  # one row: 21.3 MiB plain, 15.5 MiB checkpointed
    assert tight.plan is not None and tight.checkpointing == "blocks"
    assert tight.totals[0] == training_memory(replace(cfg, checkpointing="blocks"), 1, 512).total
    nothing = plan_curve(tiny_config(d_model=256, n_layers=4), "1MiB", 512, 800)
    assert nothing.plan is None
    assert "micro-batch 1 at seq_len=512" in nothing.error
    assert nothing.micro_batch_sizes == [1, 2] and nothing.probes == []
    with pytest.raises(ValueError, match="memory_budget"):
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


def test_the_measured_search_is_exact_on_its_own_measurements():
    cfg = TinyGPTConfig(vocab_size=64, d_model=32, n_heads=2, n_layers=2, max_seq_len=32)
    reference = MemoryProbe(cfg, 32)
    reference(3)
    budget = reference.needed[3]  # exactly what a micro-batch of 3 needs
    found = measured_search(cfg, 32, budget, device="cpu")
    assert found.search.batch_size == 3
    assert {n for n, _ in found.search.history} == set(found.predicted) == set(found.probe.needed)
    for n, fitted in found.search.history:
        assert fitted == (found.probe.needed[n] <= budget)
        assert found.predicted[n] == training_memory(cfg, n, 32).total
    assert found.table().count("\n") == found.search.tries


def test_a_logged_run_logs_every_micro_batch():
    cfg = TinyGPTConfig(d_model=32, n_heads=2, n_layers=1, max_seq_len=128)
    examples = make_instruction_dataset(40, seed=2, max_len=128)
    with pytest.warns(UserWarning, match="loss tokens per optimiser step"):
        logger = logged_run(cfg, examples, micro_batch=2, grad_accum_steps=3, steps=2,
                            threshold=4000, device="cpu")  # fmt: skip
    assert [s.micro_batches for s in logger.history] == [3, 3]
    assert all(s.examples == 6 and s.low for s in logger.history)
    assert logger.table().count("\n") == 2
