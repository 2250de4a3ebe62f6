"""Lesson 5's experiments: the planner's memory curve, the measured search, a logged run and the
two rules of the small-dataset trap, each checked against the function it sweeps."""

from dataclasses import replace

import pytest
from helpers import tiny_config

from course_lib.data import make_instruction_dataset
from course_lib.finetune import plan_finetune
from course_lib.hf.cards import CARDS, CONTEXT, reserve_ratio
from course_lib.hf.memory import predict_hf_memory
from course_lib.hf_configs import load_config
from course_lib.lessons.choosing import (
    PARTS,
    card_plan,
    logged_run,
    measured_search,
    plan_curve,
    small_dataset_trap,
)
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


# --- section 9: card_plan ---------------------------------------------------------------------

GiB = 2**30


def _predicted(model: str, n: int, **settings):
    return predict_hf_memory(load_config(model), n, 2048, **settings)


QLORA = dict(lora_rank=16, weights="nf4", dtype="bfloat16", checkpointing="blocks",
             attn_impl="sdpa", card="RTX 4090")  # fmt: skip


def test_card_plan_is_the_largest_micro_batch_the_card_shows_within_its_memory():
    p = card_plan("Llama-3.1-8B", "rtx4090", "qlora")  # the card's name, case and spaces aside
    assert p.card == "RTX 4090" and p.card_bytes == CARDS["RTX 4090"]
    n = p.max_micro_batch
    assert n >= 1
    fits, over = _predicted("Llama-3.1-8B", n, **QLORA), _predicted("Llama-3.1-8B", n + 1, **QLORA)
    assert fits.device_bytes <= p.card_bytes < over.device_bytes
    assert p.device[n] == fits.device_bytes and p.allocated[n] == fits.peak_bytes
    for m in p.device:  # the band's top: the reserve over what fragments, then the context
        fragments = p.allocated[m] - p.fixed_bytes
        assert p.device[m] == p.fixed_bytes + int(p.reserve * fragments) + p.context_bytes
    assert p.reserve == reserve_ratio("sdpa")[1] and p.context_bytes == CONTEXT["RTX 4090"][1]
    assert p.fixed_bytes == fits.band.persistent  # weights, adapters, optimiser state
    # the tensors of one more row would still fit: the device's reserve decides the last row
    assert p.allocated[n + 1] <= p.card_bytes < p.device[n + 1]


def test_card_plan_is_the_fine_tune_planners_plan():
    # One search: the lesson's plan is plan_finetune's, with the same step and checkpointing.
    for finetune, card, fused in [("qlora", "RTX 4090", False), ("full", "A100 80GB", True)]:
        p = card_plan("Llama-3.1-8B", card, finetune, fused=fused)
        q = plan_finetune("Llama-3.1-8B", seq_len=2048, gpu=card, finetune=finetune,
                          checkpointing="blocks", fused=fused, foreach=not fused)  # fmt: skip
        assert p.max_micro_batch == q.max_micro_batch_by_mode["blocks"] >= 1
    # The lever the lesson offers: the fused AdamW step drops the multi-tensor step's copy of
    # the second moment, and the full fine-tune that fitted no row now fits some.
    plain = card_plan("Llama-3.1-8B", "A100 80GB", "full")
    fused = card_plan("Llama-3.1-8B", "A100 80GB", "full", fused=True)
    assert plain.max_micro_batch == 0 < fused.max_micro_batch
    assert plain.allocated[1] > fused.allocated[1]


def test_card_plan_splits_the_peak_into_parts_that_add_up():
    for args in [("Llama-3.1-8B", "RTX 4090", "qlora"), ("Llama-3.1-8B", "A100 80GB", "full"),
                 ("Qwen2.5-0.5B", "T4", "lora"), ("Llama-3.2-1B", "RTX 4090", "full")]:  # fmt: skip
        p = card_plan(*args)
        for n, parts in p.parts.items():
            assert set(parts) == set(PARTS) and min(parts.values()) >= 0, (args, n, parts)
            assert sum(parts.values()) == p.allocated[n], (args, n)
        assert {1, 2} <= set(p.parts)
    qlora = card_plan("Llama-3.1-8B", "RTX 4090", "qlora")
    assert qlora.decides == "logits" and qlora.moment[1] == "backward"
    one = _predicted("Llama-3.1-8B", 1, **QLORA)  # the Trainer's loop holds no logits after
    c = one.components
    assert qlora.parts[1]["logits"] == c["logits_and_loss"] + c["transient"]
    assert qlora.parts[1]["gradients"] == one.step.gradients == 0  # none made yet at the loss
    grown = {k: qlora.parts[2][k] - qlora.parts[1][k] for k in PARTS}
    assert grown["logits"] > 2 * grown["activations"] > 0 and grown["weights"] == 0
    full = card_plan("Llama-3.1-8B", "A100 80GB", "full")
    assert full.max_micro_batch == 0 and full.decides == "optimizer state"
    assert full.moment[1] == "optimizer.step"
    assert full.allocated[1] <= full.card_bytes < full.device[1]  # tensors fit, the card does not
    eight_bit = card_plan("Llama-3.1-8B", "A100 80GB", "full", optimizer="adamw-8bit")
    assert eight_bit.max_micro_batch >= 1
    assert eight_bit.parts[1]["optimizer state"] < full.parts[1]["optimizer state"] / 2


def test_card_plan_says_what_it_decided():
    qlora = card_plan("Llama-3.1-8B", "RTX 4090", "qlora")
    n = qlora.max_micro_batch
    spare = (qlora.card_bytes - qlora.device[n]) / GiB
    assert (
        f"largest micro-batch {n}," in qlora.verdict()
        and f"{spare:.2f} GiB spare" in qlora.verdict()
    )
    # the weights are the largest part, but the logits grow: they decide the last row
    assert max(qlora.parts[n], key=qlora.parts[n].get) == "weights"
    assert "what grows most with one more row: logits" in qlora.verdict()
    full = card_plan("Llama-3.1-8B", "A100 80GB", "full").verdict()
    assert "not even one row fits" in full and "the largest part of one row" in full
    table = qlora.table(rows=(1, 2, n))
    assert all(part in table for part in PARTS) and f"{n} rows" in table
    assert f"{qlora.allocated[2] / GiB:.4f}" in table


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("Llama-3.1-8B", "RTX 4090", "dora"), "finetune"),
        (("Llama-3.1-8B", "RTX 9090", "qlora"), "unknown card"),
        (("Llama-9", "RTX 4090", "qlora"), "unknown model"),
    ],
)
def test_card_plan_rejects_what_it_cannot_plan(args, match):
    with pytest.raises(ValueError, match=match):
        card_plan(*args)
