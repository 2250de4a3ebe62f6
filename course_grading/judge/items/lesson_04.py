"""Trusted checks of lesson 4: activation checkpointing, memory against recompute.

A point is earned by producing something that is right *and* that a lookup cannot produce. The
two short answers carry one point each: each is a value a student could work out elsewhere and
type in, so its visible test only says *plausible* (a property the right answer shares with
wrong ones), and it is the student's own work (``own_work``: no ``course_lib`` in the answer
cell, nor copied from a cell that used it). The two predictions carry one point each for any
plausible value (``Evidence.recorded``): a right one earns no more, and their written comparisons
with the measurements carry the points. The
derivation carries five: ``saved_values_per_token`` is re-created from its cell where
``course_lib`` is absent and called on depths, widths, head counts and strides drawn for each
student, which no table of the visible cases answers. The saved-tensor counter carries three:
``count_saved_bytes`` is re-created where only ``course_lib.model`` is staged (the models it
counts are built there), called on TinyGPT models and batches drawn for each student, and
compared with the course's own meter (``course_lib.memory.measure``) run here on the same
model and batch. Each value is compared by its declared
form (``course_lib.forms``), which the visible test reads it with too. Expected values are
computed from the lesson's parameters (its first cell), with which the autograder runs it.
"""

from __future__ import annotations

from functools import cache

from course_grading.judge.items import (
    Between,
    Evidence,
    Integer,
    Lesson,
    Property,
    Sig,
    call,
    describe,
    new,
    seeded_torch,
    tensor,
)

ITEMS = Lesson("04_activation_checkpointing")

#: The lesson's parameters (its first cell), with which the autograder runs it.
D_MODEL, N_HEADS, N_LAYERS, MLP_RATIO, ATTN_IMPL, BUDGET_MIB = 64, 4, 4, 4, "sdpa", 16
DEEP, MAX_RECOMPUTED, ROW = 8, 4, 128  # Question 2: blocks, blocks recomputed at most, row step
LONGEST_ASKED = 1 << 20  # a row longer than this fits no budget here: no need to model it


def _reference(n_layers: int, d_model: int, d_mlp: int, n_heads: int, every: int) -> int:
    """The simple model's saved values per token at the worst moment (section 4's rules)."""
    full = 10 * d_model + 2 * d_mlp + n_heads + 4  # S: what a plain sdpa block keeps
    if every == 0:
        return n_layers * full
    kept = [d_model if i % every == 0 else full for i in range(n_layers)]
    rebuilt = [sum(kept[: j + 1]) + full for j in range(n_layers) if j % every == 0]
    return max([sum(kept), *rebuilt])


@ITEMS.item(
    "test-predict-time-ratio",
    answer="predict-time-ratio",
    points=1,
    values={"predicted_time_ratio": Sig(3)},
    visible=Property(
        "predicted_time_ratio",
        "every ratio between 1 and 2",
        rules={"predicted_time_ratio": Between(1, 2)},
    ),
    own_work=True,
)
def predict_time_ratio(ev: Evidence) -> str:
    """A plausible prediction of checkpointed over plain step time for the lesson's 4 blocks with
    ``checkpoint_every = 3`` (above 1, below 2), recorded; a right one earns no more.

    Args:
        ev: the submission's evidence: ``predicted_time_ratio``, checkpointed step time over the
            plain step's.

    Returns:
        The message that the prediction was recorded.

    Raises:
        Reject: the value is missing, unreadable, or not between 1 and 2.
    """
    return ev.recorded()


@ITEMS.item(
    "test-predict-peak-ratio",
    answer="predict-peak-ratio",
    points=1,
    values={"predicted_peak_ratio": Sig(3)},
    visible=Property(
        "predicted_peak_ratio",
        f"every cut between 1 and the {N_LAYERS} blocks",
        rules={"predicted_peak_ratio": Between(1, N_LAYERS)},
    ),
    own_work=True,
)
def predict_peak_ratio(ev: Evidence) -> str:
    """A plausible prediction of the cut in saved activations with every one of the lesson's 4
    blocks checkpointed (above 1, below 4), recorded; a right one earns no more.

    Args:
        ev: the submission's evidence: ``predicted_peak_ratio``, the peak without checkpointing
            over the peak with every block checkpointed.

    Returns:
        The message that the prediction was recorded.

    Raises:
        Reject: the value is missing, unreadable, or not between 1 and 4.
    """
    return ev.recorded()


DRAWN = 12  # models and strides drawn for each student, beyond the fixed ones


@ITEMS.item(
    "test-saved-values-per-token",
    answer="saved-values-per-token",
    points=5,
    function="saved_values_per_token",
    returns=Integer(),
    visible=Property(
        "saved_values_per_token",
        "whole numbers; without checkpointing twice the blocks keep twice the values, "
        "checkpointing every one of six blocks keeps less, one block alone gains nothing",
    ),
)
def saved_values_per_token(ev: Evidence) -> str:
    """The simple model's worst moment, right on every stride of 7 fixed models and on 12 models and
    strides drawn for each student (1-48 blocks, ``d_model`` 1-4,096, ``d_mlp`` 1-16,384, 1-64
    heads, any stride from 0 to 2 past the depth): no table holds them.

    Args:
        ev: the submission's evidence: ``saved_values_per_token(n_layers, d_model, d_mlp,
            n_heads, checkpoint_every)`` is called on each case.

    Returns:
        The full-marks message, with how many cases were drawn.

    Raises:
        Reject: a call fails or returns another number of values kept per token at the
            backward's worst moment.
    """
    shapes = [(4, 64, 256, 4), (3, 8, 32, 2), (1, 16, 64, 1), (2, 32, 128, 2), (5, 48, 96, 3)]
    shapes += [(8, 64, 256, 4), (12, 128, 512, 8)]
    cases = [(*shape, k) for shape in shapes for k in range(0, shape[0] + 2)]
    for _ in range(DRAWN):
        depth = ev.rng.randint(1, 48)
        cases.append(
            (
                depth,
                ev.rng.randint(1, 4096),
                ev.rng.randint(1, 16384),
                ev.rng.randint(1, 64),
                ev.rng.randint(0, depth + 2),
            )
        )
    for case, result in zip(cases, ev.call([call(*c) for c in cases])):
        ev.returned(result, _reference(*case), "not the simple model's worst moment")
    return (
        f"saved_values_per_token: right on {len(cases)} models and strides, {DRAWN} of them "
        "drawn for you"
    )


def _recomputes(every: int) -> int:
    return len(range(0, DEEP, every))  # blocks 0, k, 2k, ... of the 8


@cache
def _fits(every: int, seq_len: int) -> bool:
    from course_lib.memory import activation_bytes
    from course_lib.model import TinyGPTConfig

    config = TinyGPTConfig(
        d_model=D_MODEL,
        n_heads=N_HEADS,
        n_layers=DEEP,
        max_seq_len=max(8192, seq_len),
        attn_impl=ATTN_IMPL,
        checkpointing="blocks",
        checkpoint_every=every,
    )
    return activation_bytes(config, 1, seq_len).total <= BUDGET_MIB * 2**20


@cache
def _longest() -> int:
    allowed = [k for k in range(1, DEEP + 1) if _recomputes(k) <= MAX_RECOMPUTED]
    return max(t for t in range(ROW, 8193, ROW) for k in allowed if _fits(k, t))


@ITEMS.item(
    "test-target-practice",
    answer="target-practice",
    points=1,
    values={"target_seq_len": Integer(), "target_every": Integer()},
    visible=Property(
        "target-practice",
        "every multiple of 128 that fits 16 MiB with a stride recomputing at most 4 of 8 blocks",
    ),
    own_work=True,
)
def target_practice(ev: Evidence) -> str:
    """The longest row (a multiple of 128 tokens) that fits 16 MiB on 8 blocks with at most 4
    recomputed, and a stride that makes it fit.

    Args:
        ev: the submission's evidence: ``target_seq_len`` (tokens) and ``target_every`` (the
            checkpointing stride), whole numbers.

    Returns:
        The full-marks message.

    Raises:
        Reject: not a positive multiple of 128, a stride recomputing more than 4 blocks, a row
            that does not fit with that stride, or not the longest row that fits.
    """
    seq_len, every = ev.read("target_seq_len"), ev.read("target_every")
    ev.require(
        type(seq_len) is int and 0 < seq_len and seq_len % ROW == 0,
        f"target_seq_len: your value {describe(seq_len)}; the check needs a positive multiple "
        f"of {ROW}",
    )
    ev.require(
        type(every) is int and every >= 1 and _recomputes(every) <= MAX_RECOMPUTED,
        f"target_every: your value {describe(every)}; the check needs a stride k >= 1 that "
        f"recomputes at most {MAX_RECOMPUTED} of the {DEEP} blocks",
    )
    assert isinstance(seq_len, int) and isinstance(every, int)  # for mypy: required above
    ev.require(
        seq_len <= LONGEST_ASKED and _fits(every, seq_len),
        f"target_seq_len, target_every: your values {seq_len} and {every}; the check needs a "
        f"row that fits in {BUDGET_MIB} MiB with that stride",
    )
    ev.require(
        seq_len == _longest(),
        f"target_seq_len: your value {seq_len}; the check needs the longest multiple of {ROW} "
        "that fits with an allowed stride",
    )
    return "target_seq_len, target_every: right"


#: Models the saved-tensor counter is called on beyond the drawn ones: (d_model, n_heads,
#: n_layers, attn_impl, rows, seq_len); fused and eager attention, one block and several.
COUNTED = [(48, 4, 3, "sdpa", 2, 40), (16, 2, 1, "eager", 3, 17), (96, 6, 2, "sdpa", 1, 96)]
COUNTED_DRAWN = 6  # models and batches drawn for each student


def _counted_case(rng) -> tuple:
    heads = rng.choice([1, 2, 4])
    d_model = 2 * heads * rng.randint(2, 12)  # an even head dimension, for RoPE
    return (d_model, heads, rng.randint(1, 4), rng.choice(["sdpa", "eager"]),
            rng.randint(1, 3), rng.randint(8, 96))  # fmt: skip


def _ids(rng, rows: int, seq_len: int) -> list[list[int]]:
    return [[rng.randrange(260) for _ in range(seq_len)] for _ in range(rows)]


def _course_count(case: tuple, ids: list[list[int]], seed: int) -> int:
    """What the course's meter counts as saved for backward in ``model(**batch).loss``."""
    import torch

    from course_lib.memory import measure
    from course_lib.model import TinyGPT, TinyGPTConfig

    d_model, heads, layers, impl, _, seq_len = case
    config = TinyGPTConfig(d_model=d_model, n_heads=heads, n_layers=layers, attn_impl=impl,
                           max_seq_len=max(128, seq_len))  # fmt: skip
    with seeded_torch(seed):
        model = TinyGPT(config)
    batch = {"input_ids": torch.tensor(ids), "labels": torch.tensor(ids)}
    return measure(lambda: model(**batch).loss, device="cpu").saved_bytes


def _counted_call(case: tuple, ids: list[list[int]], seed: int) -> dict:
    d_model, heads, layers, impl, rows, seq_len = case
    config = new("course_lib.model:TinyGPTConfig", d_model=d_model, n_heads=heads,
                 n_layers=layers, attn_impl=impl, max_seq_len=max(128, seq_len))  # fmt: skip
    model = new("course_lib.model:TinyGPT", config, seed=seed, shown="model")
    request = call(model, {"input_ids": tensor(ids), "labels": tensor(ids)})
    request["shown"] = (
        f"TinyGPT({impl}, {layers} blocks, d_model {d_model}, {heads} heads), "
        f"{rows} × {seq_len} token ids"
    )
    return request


@ITEMS.item(
    "test-count-saved-bytes",
    answer="count-saved-bytes",
    points=3,
    function="count_saved_bytes",
    returns=Integer(),
    visible=Property(
        "count_saved_bytes",
        "a positive whole number of bytes, the same for other token ids, about twice for twice "
        "the rows, and whole fp32 values per token for more blocks",
    ),
    allowed=("course_lib.model",),
    forbidden=("course_lib.memory",),
)
def count_saved_bytes(ev: Evidence) -> str:
    """What autograd saves for backward in one forward pass with a loss, right to the byte on
    3 fixed TinyGPT models and 6 drawn for each student (1-4 blocks, widths to 96, 1-4 heads,
    eager or sdpa, 1-3 rows of 8-96 tokens), as the course's meter counts it.

    Args:
        ev: the submission's evidence: ``count_saved_bytes(model, batch)`` is called on each
            model, built in the sandbox, and a batch of token ids (``input_ids``, ``labels``).

    Returns:
        The full-marks message, with how many models were drawn.

    Raises:
        Reject: a call fails or returns another number of bytes than the meter counts.
    """
    cases = COUNTED + [_counted_case(ev.rng) for _ in range(COUNTED_DRAWN)]
    batches = [_ids(ev.rng, c[4], c[5]) for c in cases]
    results = ev.call([_counted_call(c, ids, ev.seed) for c, ids in zip(cases, batches)])
    for case, ids, result in zip(cases, batches, results):
        ev.returned(result, _course_count(case, ids, ev.seed), "not the bytes saved for backward")
    return (
        f"count_saved_bytes: right on {len(cases)} models and batches, {COUNTED_DRAWN} of them "
        "drawn for you"
    )
