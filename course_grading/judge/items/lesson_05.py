"""Trusted checks of lesson 5: choosing the numbers.

A point is earned by producing something that is right *and* that a lookup cannot produce, so
the two graded functions carry 8 of the 13 autograded points: ``predict_micro_batch`` and
``largest_fitting`` run where ``course_lib`` is absent, on cards drawn for each student (no table
of the visible cases answers them), beside the lesson's own card and the library's memory model.
The values (a target-practice shape, three check-yourself questions, a plan read off a real card)
carry one point each, are the student's own work (``own_work``) and are compared by their
declared forms (``course_lib.forms``), which the visible tests read them with too. Every visible
test is a property check: the answers are short whole numbers, choices and a 3-significant-figure
spare, and anything that confirmed one would be found by trying candidates. ``predict_micro_batch``
is compared with the library's own search of each card: the grader holds no formula of its own
that a student could paste.

What the checks compare with (the memory model's figures, the loss tokens of the logged run, the
plans on real cards) is computed here by trusted code from the lesson's parameters, as the lesson
computes it.
"""

from __future__ import annotations

import math
import warnings
from functools import cache

from course_grading.judge.editions import choices
from course_grading.judge.items import (
    Evidence,
    Integer,
    Lesson,
    Property,
    Sig,
    Truth,
    Unordered,
    Word,
    call,
    describe,
    predicate,
    seeded_torch,
)

#: The check-yourself questions' numbers (``judge/editions.py``): a class is asked with its own.
#: Question 3's per-micro-batch loss tokens stay whole (``q3_logged`` a multiple of 8), so a
#: float division in a student's formula is exact; the 4,000-token threshold and the 25 steps
#: are the recipe's and the course's rules, the same in every edition.
EDITION = {
    "q1_rows": choices(4, (2, 3, 4, 5, 6, 8)),
    "q1_accum": choices(6, (2, 3, 4, 5, 6, 7, 8, 10, 12)),
    "q1_devices": choices(2, (2, 3, 4, 8)),
    "q1_row_tokens": choices(1024, (512, 1024, 2048, 4096)),
    "q2_examples": choices(1500, tuple(range(1200, 4001, 100))),
    "q3_logged": choices(900, tuple(range(560, 1201, 80))),
    "q3_accum": choices(4, (2, 4, 8)),
}
ITEMS = Lesson("05_choosing_the_numbers", edition=EDITION)

#: The lesson's parameters (its first cell), with which the autograder runs it.
MEMORY_BUDGET_MIB, SEQ_LEN, DATASET_SIZE, MIN_TOKENS_PER_STEP = 24, 128, 800, 4000
D_MODEL, N_HEADS, N_LAYERS, TRAIN_STEPS, SEED = 64, 4, 2, 4, 0
MEMORY_BUDGET = MEMORY_BUDGET_MIB * 2**20
GIB = 2**30


def _config():
    from course_lib.model import TinyGPTConfig

    return TinyGPTConfig(
        d_model=D_MODEL, n_heads=N_HEADS, n_layers=N_LAYERS, max_seq_len=max(512, SEQ_LEN)
    )


@cache
def memory_model() -> dict[str, int]:
    """The lesson's memory model: fixed bytes, bytes per row, and its largest micro-batch.

    Returns:
        ``{"fixed": bytes that do not grow with the rows, "row": activation bytes of one row,
        "guess": the largest micro-batch the model says fits the lesson's budget}``.
    """
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
    """The largest micro-batch that fits the pretend card, measured as the lesson measures it.

    Returns:
        Rows: the largest micro-batch whose measured step (on the CPU, counted bytes) fits the
        lesson's memory budget.
    """
    from course_lib.budget import find_max_batch_size
    from course_lib.memory.probe import MemoryProbe

    probe = MemoryProbe(_config(), SEQ_LEN, MEMORY_BUDGET, device="cpu", seed=SEED)
    with seeded_torch(SEED):  # the probe seeds torch's one generator: no other slot draws meanwhile
        return find_max_batch_size(probe).batch_size


@cache
def loss_tokens_per_example() -> float:
    """Loss tokens per example of the lesson's logged run (section 4): counted, not trained.

    Returns:
        The mean loss tokens per step over the mean effective batch (tokens per example).
    """
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


def _rows_that_fit(budget: int, fixed: int, row: int) -> int:
    """The largest micro-batch whose step fits the card, as the library's search finds it (0 when
    none does): the grader holds no formula of its own that a student could paste (issue 27)."""
    from course_lib.fit import largest_or_zero

    return largest_or_zero(lambda n: fixed + n * row <= budget, limit=budget + 1)


DRAWN = 10  # cards drawn for each student, beyond the fixed ones
# A card whose exact quotient is just below a whole number of rows that a float rounds up to
# (int((b - f) / r) and round() say one row more), while the answer itself is a float's exact
# integer: 2**40 + 12345 rows of 2**20 + 1 bytes, one byte short of one more.
_ROW, _ROWS = 2**20 + 1, 2**40 + 12345
_BEYOND_FLOATS = (777 + (_ROWS + 1) * _ROW - 1, 777, _ROW)


@ITEMS.item(
    "test-predict-micro-batch",
    answer="predict-micro-batch",
    points=2,
    function="predict_micro_batch",
    returns=Integer(),
    visible=Property(
        "predict_micro_batch",
        "the largest n on three small cards of the test cell's own (not the lesson's)",
    ),
)
def predict_micro_batch(ev: Evidence) -> str:
    """The memory model's largest micro-batch by plain integer arithmetic, right on cards drawn for
    each student (byte counts up to 2**50), on the edges (nothing fits, an exact fit, a quotient a
    float rounds up) and on the lesson's card as the library's model finds it.

    Args:
        ev: the submission's evidence: ``predict_micro_batch(budget, fixed, row)`` (bytes) is
            called on each card.

    Returns:
        The full-marks message, with how many cards were drawn.

    Raises:
        Reject: a call fails or returns another number of rows than fit, or disagrees with the
            library's model on the lesson's card.
    """
    model = memory_model()
    cases = [(MEMORY_BUDGET, model["fixed"], model["row"])]  # the lesson's card
    cases += [(100, 101, 1), (100, 100, 7), (106, 99, 7), (105, 99, 7), _BEYOND_FLOATS]
    for _ in range(DRAWN):
        budget, fixed = ev.rng.randint(1, 2**50), ev.rng.randint(0, 2**46)
        cases.append((budget, fixed, ev.rng.randint(1, 2**34)))
    results = ev.call([call(*c) for c in cases])
    for case, result in zip(cases, results):
        ev.returned(result, _rows_that_fit(*case), "not the largest micro-batch that fits")
    ev.require(
        results[0].value() == model["guess"],
        f"{results[0].shown} does not match the library's memory model of this lesson's card",
    )
    return f"predict_micro_batch: right on {len(cases)} cards, {DRAWN} of them drawn for you"


#: (limit, guess) of the search's cards: the visible cases, then the hidden ones.
CARDS = [(37, 37), (37, 36), (37, 38), (37, 5), (37, 200), (1000, 3)]
CARDS += [(1, 1), (1, 9), (2, 1), (3, 3), (5, 4), (8, 8), (8, 9), (64, 1), (100, 7)]
CARDS += [(4097, 4096), (4097, 5000), (99_999, 2), (7, 0), (12, 11)]


def _probes_allowed(limit: int, guess: int) -> int:
    return 2 + 2 * math.ceil(math.log2(abs(limit - guess) + 1))


def _drawn_cards(ev: Evidence) -> list[tuple[int, int]]:
    """Cards drawn for each student: anywhere, and with a guess close to the limit (where the
    gallop's budget is tightest)."""
    cards = [(ev.rng.randint(1, 100_000), ev.rng.randint(0, 120_000)) for _ in range(DRAWN)]
    for _ in range(DRAWN // 2):
        limit = ev.rng.randint(4, 50_000)
        cards.append((limit, limit + ev.rng.randint(-3, 3)))
    return cards


@ITEMS.item(
    "test-largest-fitting",
    answer="largest-fitting",
    points=6,
    function="largest_fitting",
    returns=Integer(),
    visible=Property(
        "largest_fitting",
        "exact on six fixed cards, each size probed once, within the probe budget",
    ),
)
def largest_fitting(ev: Evidence) -> str:
    """The exact limit of every card (15 drawn for each student), each size probed once, the answer
    and the next size probed, within the gallop's budget; a card where nothing fits raises
    ValueError; the measured card from the model's guess in <= 4 probes.

    Args:
        ev: the submission's evidence: ``largest_fitting(fits, guess)`` is called on each card,
            ``fits`` answered and its probes recorded by the judge.

    Returns:
        The full-marks message, with how many cards were drawn.

    Raises:
        Reject: a call fails or returns another limit, probes a size twice, returns without
            probing the limit and the size after it, probes more than the budget, or does not
            raise ``ValueError`` where nothing fits.
    """
    cards = [*CARDS, *_drawn_cards(ev), (measured_limit(), memory_model()["guess"])]
    calls = [call(predicate(limit), guess, after=({"probes": 0},)) for limit, guess in cards]
    calls += [call(predicate(0), guess) for guess in (1, 5)]
    for c, (limit, guess) in zip(calls, cards):
        c["shown"] = f"a card whose limit is {limit}, {guess}"
    results = ev.call(calls)
    for (limit, guess), result in zip(cards, results):
        ev.returned(result, limit, "not the card's limit")
        probes = result.after[0]
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
    return f"largest_fitting: right on {len(cards)} cards, {len(cards) - len(CARDS) - 1} drawn"


@ITEMS.item(
    "test-target-practice",
    answer="target-practice",
    points=1,
    values={"tp_dataset_size": Integer(), "tp_micro_batch": Integer(), "tp_grad_accum": Integer()},
    visible=Property(
        "target-practice", "any dataset size on the slider where the shape meets both targets"
    ),
    own_work=True,
)
def target_practice(ev: Evidence) -> str:
    """The smallest dataset (a multiple of 250) where both rules can hold, and a shape on this card
    whose effective batch meets both there.

    Args:
        ev: the submission's evidence: ``tp_dataset_size`` (examples), ``tp_micro_batch``
            (rows) and ``tp_grad_accum`` (micro-batches per step), whole numbers.

    Returns:
        The full-marks message.

    Raises:
        Reject: a micro-batch over the card's measured limit, too few loss tokens per step,
            fewer than 25 full steps, or not the smallest dataset where both rules hold.
    """
    size = ev.read("tp_dataset_size")
    micro, accum = ev.read("tp_micro_batch"), ev.read("tp_grad_accum")
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


@ITEMS.item(
    "test-q1",
    answer="q1",
    points=1,
    values={"q1_effective": Integer(), "q1_tokens": Integer()},
    expected=lambda n: {
        "q1_effective": n["q1_rows"] * n["q1_accum"] * n["q1_devices"],
        "q1_tokens": n["q1_rows"] * n["q1_accum"] * n["q1_devices"] * n["q1_row_tokens"],
    },
    visible=Property("q1", "whole windows of rows x micro-batches, and whole rows of tokens"),
    own_work=True,
    edition=True,
)
def q1(ev: Evidence) -> str:
    """The effective batch of the class's rows × micro-batches × GPUs, and its tokens per step.

    Args:
        ev: the submission's evidence: ``q1_effective`` (examples per step) and ``q1_tokens``
            (tokens per step), whole numbers.

    Returns:
        The full-marks message.

    Raises:
        Reject: either value is missing, unreadable or wrong.
    """
    return ev.expect_all()


@ITEMS.item(
    "test-q2",
    answer="q2",
    points=1,
    values={"q2_max_effective": Integer(), "q2_steps_at_64": Integer()},
    expected=lambda n: {
        "q2_max_effective": n["q2_examples"] // 25,
        "q2_steps_at_64": n["q2_examples"] // 64,
    },
    visible=Property("q2", "an effective batch and a step count that fit in the dataset"),
    own_work=True,
    edition=True,
)
def q2(ev: Evidence) -> str:
    """The largest effective batch with 25 full steps of the class's dataset, and the full steps
    at an effective batch of 64.

    Args:
        ev: the submission's evidence: ``q2_max_effective`` (examples) and ``q2_steps_at_64``
            (full steps), whole numbers.

    Returns:
        The full-marks message.

    Raises:
        Reject: either value is missing, unreadable or wrong.
    """
    return ev.expect_all()


LETTERS = Unordered(Word(*"abcdef"))


@ITEMS.item(
    "test-q3",
    answer="q3",
    points=1,
    values={"q3_accum": Integer(), "q3_changes": LETTERS},
    expected=lambda n: {
        "q3_accum": -(-4000 * n["q3_accum"] // n["q3_logged"]),  # ceil, in whole numbers
        "q3_changes": {"b", "c", "d", "f"},
    },
    visible=Property("q3", "an accumulation reaching 4,000 loss tokens, and letters a to f"),
    own_work=True,
    edition=True,
)
def q3(ev: Evidence) -> str:
    """The smallest accumulation for 4,000 loss tokens, and exactly the statements that hold.

    Args:
        ev: the submission's evidence: ``q3_accum`` (a whole number) and ``q3_changes`` (the
            letters of the statements that hold, in any order).

    Returns:
        The full-marks message.

    Raises:
        Reject: either value is missing, unreadable or wrong.
    """
    return ev.expect_all()


@cache
def card_plans() -> dict[str, object]:
    """Section 9's two plans as the lesson makes them, and what question 5 reads off them.

    Returns:
        ``{"q5_rows_qlora": the QLoRA plan's largest micro-batch on the RTX 4090 (rows),
        "q5_spare_gib_qlora": GiB of that card left at it, "q5_full_fits": whether one row of the
        full fine-tune fits the A100 80GB}``.
    """
    from course_lib.lessons.choosing import card_plan

    qlora = card_plan("Llama-3.1-8B", "RTX 4090", "qlora", seq_len=2048)
    full = card_plan("Llama-3.1-8B", "A100 80GB", "full", seq_len=2048)
    rows = qlora.max_micro_batch
    return {
        "q5_rows_qlora": rows,
        "q5_spare_gib_qlora": (qlora.card_bytes - qlora.device[rows]) / GIB,
        "q5_full_fits": full.max_micro_batch >= 1,
    }


@ITEMS.item(
    "test-q5",
    answer="q5",
    points=1,
    values={"q5_rows_qlora": Integer(), "q5_spare_gib_qlora": Sig(3), "q5_full_fits": Truth()},
    expected=card_plans,
    visible=Property("q5", "at least one row, and a spare between 0 and the card's 24 GiB"),
    own_work=True,
)
def q5(ev: Evidence) -> str:
    """The QLoRA plan's largest micro-batch on the RTX 4090 by what the card shows (the allocator's
    reserve and the CUDA context on top of the tensors), the GiB left there, and whether one row
    of the full fine-tune fits the A100.

    Args:
        ev: the submission's evidence: ``q5_rows_qlora`` (rows), ``q5_spare_gib_qlora`` (GiB,
            3 significant figures) and ``q5_full_fits`` (True or False).

    Returns:
        The full-marks message.

    Raises:
        Reject: a value is missing, unreadable or wrong.
    """
    return ev.expect_all()
