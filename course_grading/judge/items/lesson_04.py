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
student, which no table of the visible cases answers. Each value is compared by its declared
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
