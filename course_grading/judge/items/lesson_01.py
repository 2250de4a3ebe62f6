"""Trusted checks of lesson 1: tokens per step, and why attention memory is different.

A point is earned by producing something that is right *and* that a lookup cannot produce, so
the values (three real-scale figures, a split, a check-yourself question) carry one point each
and the derivation carries five: ``saved_per_token`` is called on block shapes drawn for each
student, which no constant or table of the visible cases can answer, and on the shape the
library's memory model is compared with. The prediction earns one point for any plausible value
(a number above 1: ``Evidence.recorded``), never one for being right; its comparison with the
measurement is written and graded by hand. Each value is compared by its declared form
(``course_lib.forms``), which the visible test reads it with too; value items are the student's
own work (``own_work``: no ``course_lib`` in the answer cell, nor copied from a cell that used
it). Every visible test is a property that says *plausible*: none says *right*, so none can be
searched for the answer.
"""

from __future__ import annotations

import random
from dataclasses import replace
from functools import cache

from course_grading.judge.editions import choices
from course_grading.judge.items import (
    Between,
    Evidence,
    Exact,
    Integer,
    Lesson,
    Ordered,
    Property,
    Reject,
    Shape,
    Sig,
    call,
    seeded_torch,
)

#: Target practice's cards (MiB), by token budget: one for each split from 128 to 1,024 tokens a
#: row, each 15 % or more from every split's measured peak at its budget (:func:`_split_peaks`).
CARDS = {2048: (37, 58, 110, 170), 4096: (74, 100, 200, 360), 8192: (148, 230, 420, 720)}

#: Section 6's configuration, target practice's budget and card, and question 1's short rows
#: (``judge/editions.py``): a class is asked with its own (heads of 128 values each, so the hidden
#: size is 128 times the heads; the card by its place in its budget's row of ``CARDS``).
ITEMS = Lesson(
    "01_tokens_and_attention_memory",
    edition={
        "rs_layers": choices(32, (24, 28, 32, 36, 40, 48, 60)),
        "rs_heads": choices(32, (16, 24, 32, 40, 48, 64)),
        "q1_short": choices(2048, (64, 128, 256, 512, 1024, 2048, 4096)),
        "tp_tokens": choices(4096, tuple(CARDS)),
        "tp_card": choices(1, (0, 1, 2, 3)),
    },
    derived={
        "tp_mib": lambda n: CARDS[n["tp_tokens"]][n["tp_card"]],
        "tp_seq": lambda n: _target(n)["target_seq_len"],  # measured at release
    },
)


@ITEMS.item(
    "test-predict-ratio",
    answer="predict-ratio",
    points=1,
    values={"predicted_ratio": Exact()},
    visible=Property(
        "predicted_ratio", "every number above 1", rules={"predicted_ratio": Between(1)}
    ),
    own_work=True,
)
def predict_ratio(ev: Evidence) -> str:
    """A plausible prediction of how many times more score elements 2 × 1024 keeps than 32 × 64
    (a number above 1), recorded; a right one earns no more (its comparison with the measurement
    is written, graded by hand).

    Args:
        ev: the submission's evidence: ``predicted_ratio``, read exactly.

    Returns:
        The message that the prediction was recorded.

    Raises:
        Reject: the value is missing, unreadable, or not above 1.
    """
    return ev.recorded()


@cache
def _library_pair(d_model: int, d_mlp: int, n_heads: int, seq_len: int) -> tuple[int, int]:
    """(other, scores) per token of one eager block, from the library's memory model: what a
    2-block model saves beyond a 1-block one, over one row of ``seq_len`` fp32 tokens. The grader
    holds no formula of its own that a student could paste (issue 27); this needs ``course_lib``,
    which a graded function's sandbox does not have."""
    from course_lib.memory import activation_bytes
    from course_lib.model import TinyGPTConfig

    one = TinyGPTConfig(d_model=d_model, n_heads=n_heads, n_layers=1, max_seq_len=seq_len,
                        mlp_ratio=d_mlp // d_model, attn_impl="eager")  # fmt: skip
    one_block, two_blocks = (
        activation_bytes(c, 1, seq_len) for c in (one, replace(one, n_layers=2))
    )
    scores = (two_blocks.attention_scores - one_block.attention_scores) // (4 * seq_len)
    return (two_blocks.saved_total - one_block.saved_total) // (4 * seq_len) - scores, scores


def _drawn_shape(rng: random.Random) -> tuple[int, int, int, int]:
    """A block shape the library's model describes: ``d_model`` up to 4,096 in 1–64 heads of an
    even size, ``d_mlp`` a multiple of it up to 16,384, ``seq_len`` up to 32,768."""
    n_heads = rng.randint(1, 64)
    d_model = n_heads * 2 * rng.randint(1, max(1, 4096 // (2 * n_heads)))
    d_mlp = d_model * rng.randint(1, max(1, 16384 // d_model))
    return d_model, d_mlp, n_heads, rng.randint(1, 32768)


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


PAIR = Ordered(Integer(), Integer())
DRAWN = 10  # block shapes drawn for each student, beyond the fixed ones


@ITEMS.item(
    "test-saved-per-token",
    answer="saved-per-token",
    points=5,
    function="saved_per_token",
    returns=PAIR,
    visible=Property(
        "saved_per_token",
        "pairs of whole numbers whose scores double with n_heads or seq_len while the rest "
        "does not change with them, and whose rest grows with d_model",
    ),
)
def saved_per_token(ev: Evidence) -> str:
    """The derived count, right on block shapes drawn for each student (no table holds them),
    compared with what the library's memory model keeps per token for each.

    Args:
        ev: the submission's evidence: ``saved_per_token(d_model, d_mlp, n_heads, seq_len)``
            is called on 2 fixed shapes, 10 drawn ones and the library's.

    Returns:
        The full-marks message, with how many shapes were drawn.

    Raises:
        Reject: a call fails or returns another pair than ``(values kept per token besides the
            scores, score values per token)``, or the pair disagrees with the library's model.
    """
    cases = [(64, 256, 4, 64), (16, 16, 1, 7)]
    cases += [_drawn_shape(ev.rng) for _ in range(DRAWN)]
    model_case = (48, 96, 3, 300)  # the library's model of one block: 2 rows of 300 tokens
    results = ev.call([call(*c) for c in [*cases, model_case]])
    for case, result in zip(cases, results):
        ev.returned(result, _library_pair(*case), "not what one eager block keeps per token")
    other, scores = ev.returned(results[-1], _library_pair(*model_case))  # type: ignore[misc]
    if 4 * 600 * (other + scores) != _library_block(48, 3, 2, 2, 300):
        raise Reject(f"{results[-1].shown} does not match the library's memory model")
    return f"saved_per_token: right on {len(cases) + 1} block shapes, {DRAWN} of them drawn for you"


def _real_scale(n: dict) -> dict[str, float]:
    """The figures of section 6: 2 × 8192 tokens, the edition's layers and heads, bf16."""
    per_layer = 2 * n["rs_heads"] * 8192**2 * 2 / 1e9  # B·H·T² probabilities of 2 bytes, in GB
    return {
        "scores_gb_per_layer": per_layer,
        "scores_gb_all_layers": n["rs_layers"] * per_layer,
        "fused_mb_per_layer": 2 * n["rs_heads"] * 8192 * 4 / 1e6,  # B·H·T fp32 log-sum-exp, MB
    }


REAL_SCALE = ("scores_gb_per_layer", "scores_gb_all_layers", "fused_mb_per_layer")


@ITEMS.item(
    "test-real-scale",
    answer="real-scale",
    points=1,
    values={name: Sig(3) for name in REAL_SCALE},
    expected=_real_scale,
    visible=Property(
        "real-scale",
        "every positive per-layer and fused figure, with all layers the layers times one layer",
    ),
    own_work=True,
    edition=True,
)
def real_scale(ev: Evidence) -> str:
    """The three real-scale figures, each right to 3 significant figures.

    Args:
        ev: the submission's evidence: ``scores_gb_per_layer``, ``scores_gb_all_layers`` (GB)
            and ``fused_mb_per_layer`` (MB).

    Returns:
        The full-marks message.

    Raises:
        Reject: a figure is missing, unreadable, or wrong at 3 significant figures.
    """
    return ev.expect_all()


ROWS = (16, 32, 64, 128, 256, 512, 1024)  # the row lengths section 7 offers


def _splits(tokens: int) -> list[tuple[int, int]]:
    """The splits ``batch × seq_len`` of ``tokens`` that section 7 offers."""
    return [(tokens // t, t) for t in ROWS]


@cache
def _split_peaks(tokens: int) -> dict[int, int]:
    """Each split's measured peak (bytes) as section 7's explorer measures it on the CPU (counted
    bytes): at 4,096 tokens 48.8, 50.8, 54.8, 62.9, 86.9, 151.0 and 279.8 MiB from 16 to 1,024
    tokens a row; about half that at 2,048, twice at 8,192. Each budget's cards (``CARDS``) are
    15 % or more from every peak, so a GPU's allocator peaks, a little above the counted bytes,
    choose the same split."""
    from course_lib.memory import compare_shapes
    from course_lib.model import TinyGPTConfig

    config = TinyGPTConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=1024)
    with seeded_torch(0):  # it seeds torch's one generator: no other slot may draw meanwhile
        rows = compare_shapes(config, _splits(tokens), attn_impls=("eager",), device="cpu", seed=0)
    return {r.seq_len: r.measured_bytes for r in rows}


def _target(n: dict) -> dict[str, int]:
    """The split with the longest rows whose measured peak fits the edition's card."""
    tokens, card = n["tp_tokens"], CARDS[n["tp_tokens"]][n["tp_card"]]
    peaks = _split_peaks(tokens)
    seq = max(t for t, peak in peaks.items() if peak <= card * 2**20)
    return {"target_batch_size": tokens // seq, "target_seq_len": seq}


@ITEMS.item(
    "test-target-practice",
    answer="target-practice",
    points=1,
    values={"target_batch_size": Integer(), "target_seq_len": Integer()},
    expected=_target,
    visible=Property(
        "target-practice",
        f"every split of the budget with a power-of-two row from 16 to 1,024 ({len(ROWS)})",
    ),
    own_work=True,
    edition=True,
)
def target_practice(ev: Evidence) -> str:
    """The split with the longest rows whose measured peak fits in the card (100 MiB at 4,096
    tokens in the self-study edition).

    Args:
        ev: the submission's evidence: ``target_batch_size`` (rows) and ``target_seq_len``
            (tokens per row), whole numbers.

    Returns:
        The full-marks message.

    Raises:
        Reject: not one of the offered splits of the budget, or not the one asked for.
    """
    batch, seq = ev.read("target_batch_size"), ev.read("target_seq_len")
    numbers = ev.numbers or ITEMS.edition.public()  # type: ignore[union-attr]
    tokens, card = numbers["tp_tokens"], CARDS[numbers["tp_tokens"]][numbers["tp_card"]]
    ev.require(
        (batch, seq) in _splits(tokens),
        f"{batch} × {seq} is not one of the splits of {tokens:,} tokens the question offers",
    )
    right = ev.item.expected_values(ev.numbers or None)
    ev.require(
        (batch, seq) == (right["target_batch_size"], right["target_seq_len"]),
        f"{batch} × {seq} is not the split with the longest rows that fit in {card} MiB"
        + ev.self_study_note("target_batch_size", "target_seq_len"),
    )
    return "target_batch_size, target_seq_len: right"


@ITEMS.item(
    "test-q1",
    answer="q1",
    points=1,
    values={"q1_cheaper": Shape(), "q1_ratio": Exact()},
    expected=lambda n: {
        "q1_cheaper": f"{16384 // n['q1_short']}x{n['q1_short']}",
        "q1_ratio": (2 * 8192**2) / (16384 // n["q1_short"] * n["q1_short"] ** 2),
    },
    visible=Property("q1", "any shape, with any factor above 1"),
    own_work=True,
    edition=True,
)
def q1(ev: Evidence) -> str:
    """The cheaper shape and the exact factor between the two shapes' score memory.

    Args:
        ev: the submission's evidence: ``q1_cheaper`` (one of the question's two shapes) and
            ``q1_ratio``, read exactly.

    Returns:
        The full-marks message.

    Raises:
        Reject: either value is missing, unreadable or wrong.
    """
    return ev.expect_all()
