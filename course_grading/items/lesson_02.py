"""Trusted checks of lesson 2: padding and packing.

Ported from the lesson's hidden tests with the same strictness. What those tests read from the
student's kernel (the lesson's example lengths, the careless model) is rebuilt here by trusted
code from the lesson's parameters, never taken from the kernel.
"""

from __future__ import annotations

import random
from functools import cache

from course_grading.items import Evidence, Lesson, Reject, call, describe, new, tensor
from course_grading.plain import Tensor

ITEMS = Lesson("02_padding_and_packing")

#: The lesson's parameters (its first cell), with which the autograder runs it.
N_EXAMPLES, MAX_LEN, SEED = 2000, 1024, 0


@ITEMS.item(
    "test-predict-waste",
    answer="predict-waste",
    points=1,
    values=("predicted_waste",),
    own_work=True,
)
def predict_waste(ev: Evidence) -> str:
    waste = ev.number("predicted_waste")
    ev.require(
        abs(waste - 0.635) < 1e-3,
        f"predicted_waste: your value {describe(waste)}; the check needs the padding share "
        "to 3 decimal places",
    )
    return "predicted_waste: right"


@cache
def epoch_waste() -> dict[int, float]:
    """Padding share of one epoch of random batches, for every batch size 1..64."""
    from course_lib.collate import padding_stats, random_batches
    from course_lib.data import example_lengths, make_instruction_dataset

    lengths = example_lengths(make_instruction_dataset(N_EXAMPLES, seed=SEED, max_len=MAX_LEN))
    return {
        b: padding_stats(
            [lengths[i].tolist() for i in random_batches(len(lengths), b, seed=SEED)]
        ).waste_fraction
        for b in range(1, 65)
    }


@ITEMS.item(
    "test-target-batch",
    answer="target-batch",
    points=1,
    values=("target_batch_size",),
    own_work=True,
)
def target_batch(ev: Evidence) -> str:
    b = ev.integer("target_batch_size")
    ev.require(1 <= b <= 64, f"target_batch_size: {b} is not a batch size from 1 to 64")
    waste = epoch_waste()
    ev.require(waste[b] < 0.5, f"target_batch_size: at {b} the epoch wastes 50 % or more")
    ev.require(
        all(waste[k] >= 0.5 for k in range(b + 1, 65)),
        f"target_batch_size: {b} is not the largest batch size that wastes less than 50 %",
    )
    return "target_batch_size: right"


def _row_cases(rng: random.Random, count: int) -> list[tuple[list[int], int]]:
    """(lengths, capacity) of packed rows: documents filling part or all of the row."""
    cases = []
    for _ in range(count):
        cap = rng.randint(1, 120)
        lens, left = [], cap
        while left and rng.random() < 0.85:
            n = rng.randint(1, left)
            lens.append(n)
            left -= n
        if lens:
            cases.append((lens, cap))
    return cases


def _reference_row(lens: list[int], cap: int) -> tuple[list[int], list[bool]]:
    from course_lib.masks import document_attention_mask
    from course_lib.packing import PackingCollator

    batch = PackingCollator(cap, 0, completion_only=False, strategy="greedy")(
        [[1] * n for n in lens]
    )
    allowed = document_attention_mask(batch["document_ids"])[0]
    return batch["position_ids"][0].tolist(), allowed.reshape(-1).tolist()


@ITEMS.item("test-position-ids", answer="position-ids", points=3, function="packed_row")
def position_ids(ev: Evidence) -> str:
    """Positions and mask of packed rows against the library's collator, and bad rows raise."""
    cases = _row_cases(random.Random(1234), 40) + _row_cases(ev.rng, 20)
    bad = [([5, 4], 8), ([3, -1], 8), ([9], 8), ([3, 0], 8)]
    results = ev.call([call(lens, cap) for lens, cap in cases + bad])
    for (lens, cap), result in zip(cases, results):
        got = result.value()
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Reject(f"{result.shown} returned {describe(got)}; return (positions, allowed)")
        positions, allowed = got
        want_positions, want_allowed = _reference_row(lens, cap)
        if isinstance(positions, Tensor):
            positions = list(positions.data)
        ev.require(
            isinstance(positions, (list, tuple))
            and [int(p) if type(p) in (int, float, bool) else p for p in positions]
            == want_positions,
            f"{result.shown}: the position ids are not those of a packed row",
        )
        ev.require(
            isinstance(allowed, Tensor) and allowed.shape == (cap, cap),
            f"{result.shown}: allowed is not a ({cap}, {cap}) tensor",
        )
        ev.require(
            [bool(x) for x in allowed.data] == want_allowed,
            f"{result.shown}: the mask lets a token see a key it must not (or hides one it "
            "may see)",
        )
    for result in results[len(cases) :]:
        ev.require(
            result.raised is not None and result.raised["type"] == "ValueError",
            f"{result.shown} should raise a ValueError",
        )
    return f"packed_row: right on {len(cases)} rows, and rows that cannot be packed raise"


#: The model the packed forward is checked on: small, so its logits come back as plain data.
MODEL = {"vocab_size": 64, "d_model": 32, "n_heads": 2, "n_layers": 2, "max_seq_len": 128}
CAPACITY = 64


def _documents(rng: random.Random) -> list[list[int]]:
    """A dozen documents of 3 to 40 tokens: more than one packed row of ``CAPACITY``."""
    return [
        [rng.randrange(MODEL["vocab_size"]) for _ in range(rng.randint(3, 40))] for _ in range(12)
    ]


def _forward_call(impl: str, seed: int, batch: dict) -> dict:
    config = new("course_lib.model:TinyGPTConfig", attn_impl=impl, **MODEL)
    model = new("course_lib.model:TinyGPT", config, seed=seed, shown="model")
    inputs = {
        "input_ids": tensor(batch["input_ids"].tolist()),
        "position_ids": tensor(batch["position_ids"].tolist()),
    }
    return call(model, inputs, take="logits")


def _logits(result) -> list:
    got = result.value()
    if not isinstance(got, Tensor) or len(got.shape) != 3:
        raise Reject(
            f"{result.shown} did not return the model's output (logits of shape (R, T, V))"
        )
    return got.nested()


@ITEMS.item(
    "test-bug-packed-forward",
    answer="bug-packed-forward",
    points=2,
    function="packed_forward",
    allowed=("course_lib.model",),
    forbidden=("course_lib.packing", "course_lib.isolation", "course_lib.collate"),
)
def packed_forward(ev: Evidence) -> str:
    """Every document's logits in packed rows equal its logits alone, on three attention paths.

    The isolation check (``course_lib.isolation.check_isolation``), with the model's forward
    made in the sandbox and the comparison here.
    """
    from course_lib.packing import PackingCollator, document_spans

    docs = _documents(ev.rng)
    packed = PackingCollator(CAPACITY, 0, completion_only=False)(docs)
    spans = document_spans(packed)
    alone = [PackingCollator(len(d), 0, completion_only=False)([d]) for d in docs]
    impls = ("varlen", "sdpa", "eager")
    calls = []
    for impl in impls:
        calls += [_forward_call(impl, ev.seed, b) for b in [packed, *alone]]
    results = ev.call(calls)
    per_impl = len(alone) + 1
    for k, impl in enumerate(impls):
        mine = results[k * per_impl : (k + 1) * per_impl]
        rows = _logits(mine[0])
        ev.require(len(rows) > 1, "the packed batch has more than one row: return every row")
        for doc, row, a, b in spans:
            one = _logits(mine[1 + doc])[0]
            diff = max(
                abs(x - y)
                for got_t, want_t in zip(rows[row][a:b], one)
                for x, y in zip(got_t, want_t)
            )
            ev.require(
                diff <= 1e-5,
                f"with {impl} attention, a packed document's logits differ from its logits "
                f"alone by {diff:.2g}: documents still see each other",
            )
    return "packed_forward: right (documents isolated on varlen, sdpa and eager attention)"


@ITEMS.item(
    "test-q3", answer="q3", points=2, values=("q3_cross_pairs", "q3_symptom"), own_work=True
)
def q3(ev: Evidence) -> str:
    pairs, symptom = ev.integer("q3_cross_pairs"), ev.text("q3_symptom")
    ev.require(pairs == 1_316_800, f"q3_cross_pairs: your value {pairs} is not the count")
    ev.require(symptom == "B", f"q3_symptom: {describe(symptom)} is not the symptom")
    return "q3_cross_pairs, q3_symptom: right"
