"""Trusted checks of lesson 1: tokens per step, and why attention memory is different.

Ported from the lesson's hidden tests with the same strictness; ``own_work`` value items score 0
when their answer cell uses ``course_lib`` (the old hidden tests' check that the work was the
student's own).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from course_grading.items import Evidence, Lesson, Reject, call, describe

ITEMS = Lesson("01_tokens_and_attention_memory")


@ITEMS.item(
    "test-predict-ratio",
    answer="predict-ratio",
    points=1,
    values=("predicted_ratio",),
    own_work=True,
)
def predict_ratio(ev: Evidence) -> str:
    ratio = ev.number("predicted_ratio")
    ev.require(
        abs(ratio - 16) < 1e-6,
        f"predicted_ratio: your value {describe(ratio)}; the check needs the exact factor "
        "(within 1e-6)",
    )
    return "predicted_ratio: right"


@cache
def _library_block(d_model: int, n_heads: int, mlp_ratio: int, batch: int, seq_len: int) -> int:
    """Bytes of saved activations of one eager block, from the library's memory model."""
    from course_lib.memory import activation_bytes
    from course_lib.model import TinyGPTConfig

    one = TinyGPTConfig(
        d_model=d_model, n_heads=n_heads, n_layers=1, max_seq_len=512, mlp_ratio=mlp_ratio
    )
    two = replace(one, n_layers=2)
    return (
        activation_bytes(two, batch, seq_len).saved_total
        - activation_bytes(one, batch, seq_len).saved_total
    )


def _pair(result) -> tuple:
    got = result.value()
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Reject(f"{result.shown} returned {describe(got)}; return a pair (other, scores)")
    return tuple(got)


@ITEMS.item(
    "test-saved-per-token",
    answer="saved-per-token",
    points=3,
    function="saved_per_token",
)
def saved_per_token(ev: Evidence) -> str:
    """The derived count on the hidden cases, fresh ones, and the library's model of a block."""
    cases = [(64, 256, 4, 64), (32, 128, 2, 1000), (128, 512, 8, 4096), (16, 16, 1, 7)]
    for _ in range(4):
        cases.append(
            (
                ev.rng.choice([8, 16, 24, 48, 96, 200]),
                ev.rng.randint(1, 1024),
                ev.rng.randint(1, 16),
                ev.rng.randint(1, 8192),
            )
        )
    model_case = (48, 96, 3, 300)  # the library's model of one block: 2 rows of 300 tokens
    results = ev.call([call(*c) for c in [*cases, model_case]])
    for (c, m, h, t), result in zip(cases, results):
        other, scores = _pair(result)
        ev.require(
            (other, scores) == (8 * c + 2 * m + 4, h * t),
            f"{result.shown} returned ({describe(other)}, {describe(scores)}): not what one "
            "eager block keeps per token",
        )
    other, scores = _pair(results[-1])
    ev.require(
        4 * 600 * (other + scores) == _library_block(48, 3, 2, 2, 300),
        f"{results[-1].shown} does not match the library's memory model of that block",
    )
    return f"saved_per_token: right on {len(cases) + 1} block shapes"


REAL_SCALE = {
    "scores_gb_per_layer": 2 * 32 * 8192**2 * 2 / 1e9,
    "scores_gb_all_layers": 32 * 2 * 32 * 8192**2 * 2 / 1e9,
    "fused_mb_per_layer": 2 * 32 * 8192 * 4 / 1e6,
}


@ITEMS.item(
    "test-real-scale",
    answer="real-scale",
    points=2,
    values=tuple(REAL_SCALE),
    own_work=True,
)
def real_scale(ev: Evidence) -> str:
    for name, exact in REAL_SCALE.items():
        got = ev.number(name)
        ev.require(
            abs(got - exact) <= 0.03 * exact,
            f"{name}: your value {describe(got)}; the check needs it within 3 % of the exact "
            "figure",
        )
    return "scores_gb_per_layer, scores_gb_all_layers, fused_mb_per_layer: right"


@ITEMS.item(
    "test-target-practice",
    answer="target-practice",
    points=2,
    values=("target_batch_size", "target_seq_len"),
    own_work=True,
)
def target_practice(ev: Evidence) -> str:
    batch, seq = ev.integer("target_batch_size"), ev.integer("target_seq_len")
    ev.require(
        batch * seq == 4096, f"{batch} × {seq} does not hold the step's 4,096 tokens exactly"
    )
    ev.require(
        (batch, seq) == (16, 256),
        f"{batch} × {seq} is not the split with the longest rows that fit in 100 MiB",
    )
    return "target_batch_size, target_seq_len: right"


@ITEMS.item("test-q1", answer="q1", points=2, values=("q1_cheaper", "q1_ratio"), own_work=True)
def q1(ev: Evidence) -> str:
    cheaper, ratio = ev.text("q1_cheaper"), ev.number("q1_ratio")
    ev.require(cheaper == "8x2048", f"q1_cheaper: {describe(cheaper)} is not the cheaper shape")
    ev.require(
        abs(ratio - 4) < 1e-6,
        f"q1_ratio: your value {describe(ratio)}; the check needs the exact factor (within 1e-6)",
    )
    return "q1_cheaper, q1_ratio: right"
