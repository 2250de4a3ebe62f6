"""Trusted checks of lesson 4: activation checkpointing.

Ported from the lesson's hidden tests with the same strictness; what they computed from the
kernel's configuration is computed here from the lesson's parameters.
"""

from __future__ import annotations

from functools import cache

from course_grading.items import Evidence, Lesson, call, describe

ITEMS = Lesson("04_activation_checkpointing")

#: The lesson's parameters (its first cell), with which the autograder runs it.
D_MODEL, N_HEADS, ATTN_IMPL, BUDGET_MIB = 64, 4, "sdpa", 16


@ITEMS.item(
    "test-predict-time-ratio",
    answer="predict-time-ratio",
    points=1,
    values=("predicted_time_ratio",),
)
def predict_time_ratio(ev: Evidence) -> str:
    got = ev.number("predicted_time_ratio")
    ev.require(
        abs(got - 4 / 3) < 0.006,
        f"predicted_time_ratio: your value {describe(got)}; the check needs it to 3 significant "
        "figures",
    )
    return "predicted_time_ratio: right"


@ITEMS.item(
    "test-predict-peak-ratio",
    answer="predict-peak-ratio",
    points=2,
    values=("predicted_peak_ratio",),
)
def predict_peak_ratio(ev: Evidence) -> str:
    got = ev.number("predicted_peak_ratio")
    ev.require(
        abs(got - 4640 / 1416) < 0.006,
        f"predicted_peak_ratio: your value {describe(got)}; the check needs it to 3 significant "
        "figures",
    )
    return "predicted_peak_ratio: right"


def _reference(n_layers: int, d_model: int, d_mlp: int, n_heads: int, every: int) -> int:
    full = 10 * d_model + 2 * d_mlp + n_heads + 4
    if every == 0:
        return n_layers * full
    kept = [d_model if i % every == 0 else full for i in range(n_layers)]
    rebuilt = [sum(kept[: j + 1]) + full for j in range(n_layers) if j % every == 0]
    return max([sum(kept), *rebuilt])


@ITEMS.item(
    "test-saved-values-per-token",
    answer="saved-values-per-token",
    points=3,
    function="saved_values_per_token",
)
def saved_values_per_token(ev: Evidence) -> str:
    shapes = [(4, 64, 256, 4), (3, 8, 32, 2)]
    shapes += [(1, 16, 64, 1), (2, 32, 128, 2), (5, 48, 96, 3), (8, 64, 256, 4), (12, 128, 512, 8)]
    shapes += [
        (ev.rng.randint(1, 16), ev.rng.choice([8, 16, 32, 48]), ev.rng.randint(1, 600), 2)
        for _ in range(3)
    ]
    cases = [(*shape, k) for shape in shapes for k in range(0, shape[0] + 2)]
    for case, result in zip(cases, ev.call([call(*c) for c in cases])):
        got = result.value()
        ev.require(
            type(got) in (int, float) and got == _reference(*case),
            f"{result.shown} returned {describe(got)}: not the simple model's worst moment",
        )
    return f"saved_values_per_token: right on {len(cases)} models and strides"


@cache
def _fits(every: int, seq_len: int, deep_max: int) -> bool:
    from course_lib.memory import activation_bytes
    from course_lib.model import TinyGPTConfig

    config = TinyGPTConfig(
        d_model=D_MODEL,
        n_heads=N_HEADS,
        n_layers=8,
        max_seq_len=deep_max,
        attn_impl=ATTN_IMPL,
        checkpointing="blocks",
        checkpoint_every=every,
    )
    return activation_bytes(config, 1, seq_len).total <= BUDGET_MIB * 2**20


def _recomputes(every: int) -> int:
    return -(-8 // every)  # blocks 0, k, 2k, ... of the 8


@cache
def _longest(deep_max: int) -> int:
    return max(
        t
        for t in range(128, 8193, 128)
        for k in range(1, 9)
        if _recomputes(k) <= 4 and _fits(k, t, deep_max)
    )


@ITEMS.item(
    "test-target-practice",
    answer="target-practice",
    points=2,
    values=("target_seq_len", "target_every"),
)
def target_practice(ev: Evidence) -> str:
    seq_len, every = ev.integer("target_seq_len"), ev.integer("target_every")
    ev.require(
        seq_len > 0 and seq_len % 128 == 0,
        f"target_seq_len: {seq_len} is not a positive multiple of 128",
    )
    ev.require(every >= 1, f"target_every: {every} is not a stride k >= 1")
    ev.require(
        _recomputes(every) <= 4,
        f"checkpoint_every={every} recomputes {_recomputes(every)} of the 8 blocks: at most 4",
    )
    deep_max = max(8192, seq_len)
    ev.require(
        _fits(every, seq_len, deep_max),
        f"1 × {seq_len} with checkpoint_every={every} does not fit in {BUDGET_MIB} MiB",
    )
    ev.require(
        seq_len == _longest(deep_max),
        f"target_seq_len: {seq_len} fits, but it is not the longest row that can",
    )
    return "target_seq_len, target_every: right"


@ITEMS.item(
    "test-q1-only-checkpointing",
    answer="q1-only-checkpointing",
    points=1,
    values=("q1_answer",),
)
def q1_only_checkpointing(ev: Evidence) -> str:
    answer = ev.text("q1_answer")
    ev.require(answer.strip().upper() == "B", f"q1_answer: {describe(answer)} is not right")
    return "q1_answer: right"
