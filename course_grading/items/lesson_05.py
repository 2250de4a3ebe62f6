"""Trusted checks of lesson 5: choosing the numbers.

Ported from the lesson's hidden tests with the same strictness. What they read from the kernel
(the memory model's figures, the measured card's limit, the logged loss tokens, the 7B plan's
breakdown) is computed here by trusted code from the lesson's parameters, as the lesson does.
"""

from __future__ import annotations

import math
import warnings
from functools import cache

from course_grading.items import Evidence, Lesson, call, describe, predicate

ITEMS = Lesson("05_choosing_the_numbers")

#: The lesson's parameters (its first cell), with which the autograder runs it.
MEMORY_BUDGET_MIB, SEQ_LEN, DATASET_SIZE, MIN_TOKENS_PER_STEP = 24, 128, 800, 4000
D_MODEL, N_HEADS, N_LAYERS, TRAIN_STEPS, SEED = 64, 4, 2, 4, 0
MEMORY_BUDGET = MEMORY_BUDGET_MIB * 2**20


def _config():
    from course_lib.model import TinyGPTConfig

    return TinyGPTConfig(
        d_model=D_MODEL, n_heads=N_HEADS, n_layers=N_LAYERS, max_seq_len=max(512, SEQ_LEN)
    )


@cache
def memory_model() -> dict[str, int]:
    """The lesson's memory model: fixed bytes, bytes per row, and its largest micro-batch."""
    from course_lib.budget import find_max_batch_size
    from course_lib.plan import training_memory

    config = _config()
    one = training_memory(config, 1, SEQ_LEN)
    guess = find_max_batch_size(
        lambda n: training_memory(config, n, SEQ_LEN).total <= MEMORY_BUDGET
    ).batch_size
    return {"fixed": one.total - one.activations, "row": one.activations, "guess": guess}


@cache
def measured_limit() -> int:
    """The largest micro-batch that fits the pretend card, measured as the lesson measures it."""
    from course_lib.budget import find_max_batch_size
    from course_lib.memory.probe import MemoryProbe

    probe = MemoryProbe(_config(), SEQ_LEN, MEMORY_BUDGET, device="cpu", seed=SEED)
    return find_max_batch_size(probe).batch_size


@cache
def loss_tokens_per_example() -> float:
    """Loss tokens per example of the lesson's logged run (section 4): counted, not trained."""
    from course_lib.collate import PaddingCollator, random_batches
    from course_lib.data import PAD_ID, make_instruction_dataset
    from course_lib.plan import plan
    from course_lib.token_log import TokensPerStepLogger

    p = plan(
        _config(), MEMORY_BUDGET, SEQ_LEN, DATASET_SIZE, min_tokens_per_step=MIN_TOKENS_PER_STEP
    )
    examples = make_instruction_dataset(DATASET_SIZE, seed=SEED, max_len=SEQ_LEN)
    collate = PaddingCollator(pad_token_id=PAD_ID)
    order = random_batches(DATASET_SIZE, p.micro_batch, seed=SEED, drop_last=True)
    logger = TokensPerStepLogger(threshold=MIN_TOKENS_PER_STEP)
    steps = p.grad_accum_steps
    with warnings.catch_warnings():  # the logger warns the lesson's run, not the grader
        warnings.simplefilter("ignore", UserWarning)
        for step in range(TRAIN_STEPS):
            for k in range(steps):
                logger.log_micro_batch(
                    collate([examples[i] for i in order[(step * steps + k) % len(order)]])
                )
            logger.end_step()
    summary = logger.summary()
    return summary.mean_loss_tokens / summary.mean_effective_batch


@cache
def real_plan() -> dict[str, int]:
    """The 7B LoRA plan's breakdown of section 7, in bytes."""
    from course_lib.finetune import plan_finetune

    plan = plan_finetune(
        "Mistral-7B-v0.3",
        "24GiB",
        2048,
        dtype="bfloat16",
        finetune="lora",
        lora_rank=16,
        attn_impl="sdpa",
        target_tokens=32_000,
    )
    return {
        "room": 80 * 2**30 - plan.fixed - plan.gradients,
        "plain": plan.activations_per_row["off"],
        "ckpt": plan.activations_per_row["blocks"],
    }


@ITEMS.item(
    "test-predict-micro-batch",
    answer="predict-micro-batch",
    points=2,
    values=("predicted_micro_batch",),
    own_work=True,
)
def predict_micro_batch(ev: Evidence) -> str:
    got = ev.integer("predicted_micro_batch")
    model = memory_model()
    ev.require(
        got == (MEMORY_BUDGET - model["fixed"]) // model["row"],
        f"predicted_micro_batch: {got} is not the largest n with fixed_bytes + n * row_bytes "
        "<= memory_budget",
    )
    return "predicted_micro_batch: right"


#: (limit, guess) of the search's cards: the visible cases, then the hidden ones.
CARDS = [(37, 37), (37, 36), (37, 38), (37, 5), (37, 200), (1000, 3)]
CARDS += [(1, 1), (1, 9), (2, 1), (3, 3), (5, 4), (8, 8), (8, 9), (64, 1), (100, 7)]
CARDS += [(4097, 4096), (4097, 5000), (99_999, 2), (7, 0), (12, 11)]


def _probes_allowed(limit: int, guess: int) -> int:
    return 2 + 2 * math.ceil(math.log2(abs(limit - guess) + 1))


@ITEMS.item(
    "test-largest-fitting",
    answer="largest-fitting",
    points=3,
    function="largest_fitting",
)
def largest_fitting(ev: Evidence) -> str:
    """The exact limit of every card, each size probed once, within the gallop's budget; a card
    where nothing fits raises ValueError; the measured card from the model's guess in <= 4."""
    cards = list(CARDS)
    cards += [(ev.rng.randint(1, 5000), ev.rng.randint(0, 6000)) for _ in range(6)]
    cards.append((measured_limit(), memory_model()["guess"]))
    calls = [call(predicate(limit), guess, after=({"probes": 0},)) for limit, guess in cards]
    calls += [call(predicate(0), guess) for guess in (1, 5)]
    for c, (limit, guess) in zip(calls, cards):
        c["shown"] = f"a card whose limit is {limit}, {guess}"
    results = ev.call(calls)
    for (limit, guess), result in zip(cards, results):
        got, probes = result.value(), result.after[0]
        ev.require(
            type(got) in (int, float) and got == limit,
            f"largest_fitting on a card whose limit is {limit}, from guess {guess}, returned "
            f"{describe(got)}",
        )
        ev.require(
            isinstance(probes, list) and len(probes) == len(set(probes)),
            f"limit {limit}, guess {guess}: a size was probed twice: {describe(probes)}",
        )
        ev.require(
            limit in probes and limit + 1 in probes,
            f"limit {limit}, guess {guess}: the search returned without probing the sizes "
            "that prove its answer",
        )
        budget = 4 if (limit, guess) == cards[-1] else _probes_allowed(limit, guess)
        ev.require(
            len(probes) <= budget,
            f"limit {limit}, guess {guess}: {len(probes)} probes, at most {budget}",
        )
    for result in results[len(cards) :]:
        ev.require(
            result.raised is not None and result.raised["type"] == "ValueError",
            "when fits(1) is False, largest_fitting should raise a ValueError",
        )
    return f"largest_fitting: right on {len(cards)} cards"


@ITEMS.item(
    "test-target-practice",
    answer="target-practice",
    points=2,
    values=("tp_dataset_size", "tp_micro_batch", "tp_grad_accum"),
    own_work=True,
)
def target_practice(ev: Evidence) -> str:
    size = ev.integer("tp_dataset_size")
    micro, accum = ev.integer("tp_micro_batch"), ev.integer("tp_grad_accum")
    effective = micro * accum
    per_example = loss_tokens_per_example()
    ev.require(
        1 <= micro <= measured_limit() and accum >= 1,
        f"tp_micro_batch = {micro}, tp_grad_accum = {accum}: the micro-batch must fit this card "
        "(its measured limit) and the accumulation be at least 1",
    )
    ev.require(
        effective * per_example >= MIN_TOKENS_PER_STEP,
        f"effective batch {effective}: too few loss tokens per step",
    )
    ev.require(size // effective >= 25, f"effective batch {effective}: fewer than 25 full steps")
    e_min = math.ceil(MIN_TOKENS_PER_STEP / per_example)
    smallest = 250
    while smallest // e_min < 25:
        smallest += 250
    ev.require(
        size == smallest,
        f"tp_dataset_size: {size} is not the smallest dataset (a multiple of 250) where both "
        "targets can hold",
    )
    return "tp_dataset_size, tp_micro_batch, tp_grad_accum: right"


@ITEMS.item("test-q1", answer="q1", points=2, values=("q1_effective", "q1_tokens"), own_work=True)
def q1(ev: Evidence) -> str:
    effective, tokens = ev.integer("q1_effective"), ev.integer("q1_tokens")
    ev.require(effective == 48, f"q1_effective: {effective} is not right")
    ev.require(tokens == 49_152, f"q1_tokens: {tokens} is not right")
    return "q1_effective, q1_tokens: right"


@ITEMS.item(
    "test-q2", answer="q2", points=2, values=("q2_max_effective", "q2_steps_at_64"), own_work=True
)
def q2(ev: Evidence) -> str:
    largest, steps = ev.integer("q2_max_effective"), ev.integer("q2_steps_at_64")
    ev.require(
        largest == 60 and 1500 // largest >= 25 and 1500 // (largest + 1) < 25,
        f"q2_max_effective: {largest} is not the largest effective batch with 25 full steps",
    )
    ev.require(steps == 23, f"q2_steps_at_64: {steps} is not right")
    return "q2_max_effective, q2_steps_at_64: right"


@ITEMS.item("test-q3", answer="q3", points=2, values=("q3_accum", "q3_changes"), own_work=True)
def q3(ev: Evidence) -> str:
    accum, changes = ev.integer("q3_accum"), ev.value("q3_changes")
    ev.require(accum == 18, f"q3_accum: {accum} is not right")
    ev.require(
        isinstance(changes, (set, frozenset)) and all(type(c) is str for c in changes),
        f"q3_changes: {describe(changes)} is not a set of letters",
    )
    ev.require(
        {c.lower() for c in changes} == {"b", "c", "d", "f"},
        f"q3_changes: {describe(changes)} is not the set of changes",
    )
    return "q3_accum, q3_changes: right"


@ITEMS.item(
    "test-q5", answer="q5", points=2, values=("q5_rows_plain", "q5_rows_ckpt"), own_work=True
)
def q5(ev: Evidence) -> str:
    plain_rows, ckpt_rows = ev.integer("q5_rows_plain"), ev.integer("q5_rows_ckpt")
    breakdown = real_plan()
    ev.require(
        plain_rows == breakdown["room"] // breakdown["plain"],
        f"q5_rows_plain: {plain_rows} is not the largest micro-batch without checkpointing",
    )
    ev.require(
        ckpt_rows == breakdown["room"] // breakdown["ckpt"],
        f"q5_rows_ckpt: {ckpt_rows} is not the largest micro-batch with checkpointing",
    )
    return "q5_rows_plain, q5_rows_ckpt: right"
