"""Trusted checks of lesson 2: padding and packing.

A point is earned by producing something that is right *and* that a lookup cannot produce, so
the two value items (a number read off the sliders, a check-yourself question) carry one point
each, the prediction one for any plausible value (``Evidence.recorded``: a right one earns no
more; its written comparison with the measurement carries the points), and the two functions
carry seven: ``packed_row`` is called on rows drawn
for each student and compared with the library's collator and mask, ``packed_forward`` runs on
documents and model weights drawn for each student, and every document's logits, packed and
alone, are compared with a model the grader builds itself (``model(input_ids=doc)``), so an
output that only agrees with itself (all zeros) fails. Every visible test is a property check:
a search over formulas of the question's few numbers would find any of these answers, so
nothing may confirm one (``docs/instructors.md``, lesson 2's items).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache

from course_grading.judge.editions import choices
from course_grading.judge.items import (
    Between,
    Evidence,
    Exact,
    Integer,
    Lesson,
    Property,
    Reject,
    Word,
    call,
    describe,
    new,
    seeded_torch,
    tensor,
)
from course_grading.judge.plain import Tensor
from course_lib.forms import Form, Unreadable
from course_lib.isolation import ATOL

#: Question 3's careless row (``judge/editions.py``): a class is asked with its own first two
#: documents; the third fills the row's 2,048 tokens.
ITEMS = Lesson(
    "02_padding_and_packing",
    edition={
        "q3_first": choices(1000, tuple(range(800, 1201, 50))),
        "q3_second": choices(600, tuple(range(400, 801, 50))),
    },
)

#: The lesson's parameters (its first cell), with which the autograder runs it.
N_EXAMPLES, MAX_LEN, SEED = 2000, 1024, 0
SHARE = Between(0, 1, low_in=True)  # a share of a batch's slots, from 0 up to (not) 1


@ITEMS.item(
    "test-predict-waste",
    answer="predict-waste",
    points=1,
    values={"predicted_waste": Exact()},
    visible=Property(
        "predicted_waste", "every share from 0 up to 1", rules={"predicted_waste": SHARE}
    ),
    own_work=True,
)
def predict_waste(ev: Evidence) -> str:
    """A plausible prediction of the padding share of the batch of 120, 250, 90 and 1,000 tokens
    (at least 0, below 1), recorded; a right one earns no more.

    Args:
        ev: the submission's evidence: ``predicted_waste``, a fraction of the batch's slots.

    Returns:
        The message that the prediction was recorded.

    Raises:
        Reject: the value is missing, unreadable, or not a share from 0 up to 1.
    """
    return ev.recorded()


@cache
def epoch_waste() -> dict[int, float]:
    """Padding share of one epoch of random batches, for every batch size 1..64.

    Returns:
        Batch size -> the share of the epoch's slots that are padding (0 to 1), on the lesson's
        dataset and seed, as the lesson measures it.
    """
    from course_lib.collate import padding_stats, random_batches
    from course_lib.data import example_lengths, make_instruction_dataset

    lengths = example_lengths(make_instruction_dataset(N_EXAMPLES, seed=SEED, max_len=MAX_LEN))
    return {
        b: padding_stats(
            [lengths[i].tolist() for i in random_batches(len(lengths), b, seed=SEED)]
        ).waste_fraction
        for b in range(1, 65)
    }


def _largest_under_half() -> dict[str, int]:
    return {"target_batch_size": max(b for b, w in epoch_waste().items() if w < 0.5)}


@ITEMS.item(
    "test-target-batch",
    answer="target-batch",
    points=1,
    values={"target_batch_size": Integer()},
    expected=_largest_under_half,
    visible=Property("target_batch_size", "every whole number from 1 to 64"),
    own_work=True,
)
def target_batch(ev: Evidence) -> str:
    """The largest random batch size whose epoch wastes less than half its slots (measured).

    Args:
        ev: the submission's evidence: ``target_batch_size``, a whole number from 1 to 64.

    Returns:
        The full-marks message.

    Raises:
        Reject: not a batch size from 1 to 64, one whose epoch wastes half or more, or not the
            largest that wastes less.
    """
    b = ev.read("target_batch_size")
    ev.require(
        type(b) is int and 1 <= b <= 64,
        f"target_batch_size: {describe(b)} is not a batch size from 1 to 64",
    )
    assert isinstance(b, int)
    waste = epoch_waste()
    ev.require(waste[b] < 0.5, f"target_batch_size: at {b} the epoch wastes 50 % or more")
    ev.require(
        all(waste[k] >= 0.5 for k in range(b + 1, 65)),
        f"target_batch_size: {b} is not the largest batch size that wastes less than 50 %",
    )
    return "target_batch_size: right"


# --- packed_row ---------------------------------------------------------------------------------


def _whole_numbers(values: object, what: str) -> tuple[int, ...]:
    """A list, tuple or 1-D integer tensor of whole numbers, as ints."""
    if isinstance(values, Tensor):
        if len(values.shape) != 1 or values.dtype.startswith(("float", "bfloat", "bool")):
            raise Unreadable(
                f"{what}: a list of whole numbers is needed, got a {values.dtype} tensor of "
                f"shape {values.shape}"
            )
        values = values.data
    if not isinstance(values, (list, tuple)) or type(values) not in (list, tuple):
        raise Unreadable(f"{what}: a list of whole numbers is needed, got {describe(values)}")
    read = [Integer().value(v) for v in values]
    if any(type(x) is not int for x in read):
        raise Unreadable(f"{what}: whole numbers are needed, got {describe(values)}")
    return tuple(x for x in read if isinstance(x, int))


def _bool_square(allowed: object) -> tuple[int, tuple[bool, ...]]:
    """(side, flat values) of a square bool mask: a bool tensor or array, or nested lists."""
    if isinstance(allowed, Tensor):
        if allowed.dtype != "bool" or len(allowed.shape) != 2:
            raise Unreadable(
                "allowed: a torch.bool tensor of shape (capacity, capacity) is needed, got a "
                f"{allowed.dtype} tensor of shape {allowed.shape}"
            )
        (rows, cols), flat = allowed.shape, tuple(allowed.data)
    elif isinstance(allowed, (list, tuple)) and all(isinstance(r, (list, tuple)) for r in allowed):
        rows, cols = len(allowed), len(allowed[0]) if allowed else 0
        flat = tuple(x for r in allowed for x in r)
        if len(flat) != rows * cols or any(type(x) is not bool for x in flat):
            raise Unreadable("allowed: a square mask of True and False is needed")
    else:
        raise Unreadable(f"allowed: a torch.bool tensor is needed, got {describe(allowed)}")
    if rows != cols:
        raise Unreadable(
            f"allowed: a square (capacity, capacity) mask is needed, got {rows} × {cols}"
        )
    return rows, flat


@dataclass(frozen=True)
class PackedRow(Form):
    """``(positions, allowed)`` of one packed row, as the function sandbox returns it:
    ``positions`` a list, tuple or 1-D integer tensor of whole numbers (``3.0`` and
    ``np.int64(3)`` are 3), ``allowed`` a bool tensor or array of shape ``(capacity,
    capacity)`` (or nested lists of bools); a list is as good as the tuple. Compared exactly."""

    _needs = "exact (every position and every mask entry)"

    def value(self, value: object) -> tuple[tuple[int, ...], tuple[bool, ...]]:
        """``(positions, flat mask)`` of one packed row.

        Args:
            value: what the function returned: ``(positions, allowed)``.

        Returns:
            The positions as ``int``s and the mask's values row by row, as ``bool``s.

        Raises:
            Unreadable: not such a pair, or a mask that does not match the positions' length.
        """
        if not isinstance(value, (tuple, list)) or type(value) not in (tuple, list):
            raise Unreadable(f"a pair (positions, allowed) is needed, got {describe(value)}")
        if len(value) != 2:
            raise Unreadable(f"a pair (positions, allowed) is needed, got {len(value)} values")
        positions, allowed = value
        slots = _whole_numbers(positions, "positions")
        side, flat = _bool_square(allowed)
        if side != len(slots):
            raise Unreadable(f"{len(slots)} positions but a {side} × {side} mask: one per slot")
        return slots, flat

    def canonical(self, value: object) -> str:
        """See :meth:`Form.canonical`.

        Args:
            value: what the function returned: ``(positions, allowed)``.

        Returns:
            ``"0,1,0,1|1011..."``: the positions, then the mask as 0s and 1s row by row.

        Raises:
            Unreadable: as :meth:`value`.
        """
        slots, flat = self.value(value)
        return ",".join(map(str, slots)) + "|" + "".join("1" if x else "0" for x in flat)


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


def _bad_rows(rng: random.Random) -> list[tuple[list[int], int]]:
    """Rows that cannot be packed: too long, an empty or a negative document."""
    cap = rng.randint(4, 60)
    return [
        ([5, 4], 8), ([3, -1], 8), ([9], 8), ([3, 0], 8),
        ([cap - 1, 2], cap), ([rng.randint(1, cap - 1), 0], cap), ([cap + 1], cap),
    ]  # fmt: skip


def _reference_row(lens: list[int], cap: int) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    from course_lib.masks import document_attention_mask
    from course_lib.packing import PackingCollator

    batch = PackingCollator(cap, 0, completion_only=False, strategy="greedy")(
        [[1] * n for n in lens]
    )
    allowed = document_attention_mask(batch["document_ids"])[0]
    return tuple(batch["position_ids"][0].tolist()), tuple(allowed.reshape(-1).tolist())


ROWS_DRAWN = 20  # rows drawn for each student, beside 40 fixed ones no student sees


@ITEMS.item(
    "test-position-ids",
    answer="position-ids",
    points=4,
    function="packed_row",
    returns=PackedRow(),
    visible=Property(
        "packed_row",
        "positions that start at 0 and restart or count up by one, and a causal bool mask "
        "in which every slot sees itself; rows that cannot be packed raise",
    ),
)
def position_ids(ev: Evidence) -> str:
    """Positions and mask of packed rows drawn for each student, equal to the library's collator and
    block-diagonal mask, and rows that cannot be packed raise ``ValueError``.

    Args:
        ev: the submission's evidence: ``packed_row(lengths, capacity)`` is called on 40 fixed
            rows, 20 drawn ones and 7 that cannot be packed.

    Returns:
        The full-marks message, with how many rows were drawn.

    Raises:
        Reject: a call fails, returns an unreadable pair, positions or a mask other than the
            library's, or does not raise ``ValueError`` on a row that cannot be packed.
    """
    drawn = _row_cases(ev.rng, ROWS_DRAWN)
    cases = _row_cases(random.Random(1234), 40) + drawn
    bad = _bad_rows(ev.rng)
    results = ev.call([call(lens, cap) for lens, cap in cases + bad])
    form = PackedRow()
    for (lens, cap), result in zip(cases, results):
        got = result.value()
        try:
            positions, allowed = form.value(got)
        except Unreadable as why:
            raise Reject(f"{result.shown} returned {describe(got)}: {why}") from None
        want_positions, want_allowed = _reference_row(lens, cap)
        ev.require(
            positions == want_positions,
            f"{result.shown} returned positions {describe(list(positions))}: not those of "
            "the packed row (each segment counts from 0)",
        )
        ev.require(
            allowed == want_allowed,
            f"{result.shown} returned a mask that lets a token see a key it must not (or "
            "hides one it may see)",
        )
    for result in results[len(cases) :]:
        ev.require(
            result.raised is not None and result.raised["type"] == "ValueError",
            f"{result.shown} should raise a ValueError",
        )
    return (
        f"packed_row: right on {len(cases)} rows ({len(drawn)} drawn for you), and rows that "
        "cannot be packed raise"
    )


# --- packed_forward -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Logits(Form):
    """A float tensor of logits ``(rows, tokens, vocab)``, compared with the grader's own to
    within ``atol`` (the largest |Δ| over every value): the tolerance of
    :func:`course_lib.isolation.check_isolation`, which the visible test uses."""

    atol: float = ATOL

    @property
    def needs(self) -> str:
        return f"within {self.atol:g} of the model's own logits"

    def value(self, value: object) -> list:
        """The logits as nested lists ``[row][token][vocab]``.

        Args:
            value: what the function returned.

        Returns:
            The nested lists.

        Raises:
            Unreadable: not a 3-D float tensor.
        """
        if not isinstance(value, Tensor) or len(value.shape) != 3 or "float" not in value.dtype:
            raise Unreadable("not the model's output (logits of shape (rows, tokens, vocab))")
        return value.nested()

    def canonical(self, value: object) -> str:
        """Only the shape: logits compare by :meth:`same` (within ``atol``), not by text.

        Args:
            value: what the function returned.

        Returns:
            ``"logits of shape (rows, tokens, vocab)"``.

        Raises:
            Unreadable: as :meth:`value`.
        """
        self.value(value)
        assert isinstance(value, Tensor)
        return f"logits of shape {value.shape}"

    def same(self, value: object, expected: object) -> bool:
        """Whether two logits tensors have one shape and differ by at most ``atol`` anywhere.

        Args:
            value: the student's logits.
            expected: the grader's own logits.

        Returns:
            True when every row's :meth:`gap` is at most ``atol``.

        Raises:
            Unreadable: ``value`` is not a logits tensor.
        """
        got, want = self.value(value), self.value(expected)
        if len(got) != len(want):
            return False
        return all(self.gap(a, b) <= self.atol for a, b in zip(got, want))

    def gap(self, got: list, want: list) -> float:
        """The largest |Δ| between two ``[token][vocab]`` lists.

        Args:
            got: one row of the student's logits.
            want: the same row of the grader's.

        Returns:
            The largest absolute difference; ``inf`` if their shapes differ, or if any value is NaN
            (``max`` would pass over a NaN that is not first).
        """
        if len(got) != len(want) or any(len(a) != len(b) for a, b in zip(got, want)):
            return float("inf")
        gaps = [abs(x - y) for a, b in zip(got, want) for x, y in zip(a, b)]
        return float("inf") if any(g != g for g in gaps) else max(gaps, default=0.0)


#: The model the packed forward is checked on: small, so its logits come back as plain data.
MODEL = {"vocab_size": 64, "d_model": 32, "n_heads": 2, "n_layers": 2, "max_seq_len": 128}
CAPACITY = 64
IMPLS = ("varlen", "sdpa", "eager")


def _documents(rng: random.Random) -> tuple[list[list[int]], list[list[int]]]:
    """A dozen documents of 3 to 40 tokens (more than one packed row of ``CAPACITY``), and six
    short ones for one row in this order: a single-token document before each of the others
    (a boundary where the position does not go down)."""

    def doc(n: int) -> list[int]:
        return [rng.randrange(MODEL["vocab_size"]) for _ in range(n)]

    many = [doc(rng.randint(3, 40)) for _ in range(12)]
    short = [d for _ in range(3) for d in (doc(1), doc(rng.randint(2, 6)))]
    return many, short


def _forward_call(impl: str, seed: int, batch: dict, take: str | None) -> dict:
    config = new("course_lib.model:TinyGPTConfig", attn_impl=impl, **MODEL)
    model = new("course_lib.model:TinyGPT", config, seed=seed, shown="model")
    inputs = {
        "input_ids": tensor(batch["input_ids"].tolist()),
        "position_ids": tensor(batch["position_ids"].tolist()),
    }
    return call(model, inputs, take=take)


def _trusted_logits(impl: str, seed: int, docs: list[list[int]]) -> list[list]:
    """Each document's logits from the model the sandbox builds, built here: ``model(input_ids=
    doc)``, one document alone, nothing packed."""
    import torch

    from course_lib.model import TinyGPT, TinyGPTConfig

    with seeded_torch(seed):
        model = TinyGPT(TinyGPTConfig(attn_impl=impl, **MODEL)).eval()
    with torch.no_grad():
        return [model(input_ids=torch.tensor([d])).logits[0].tolist() for d in docs]


def _no_logits(result) -> bool:
    raised = result.raised or {}
    return raised.get("type") == "AttributeError" and "'logits'" in raised.get("message", "")


def _results(ev: Evidence, batches: dict[str, dict]) -> list:
    """One sandboxed run of every call (each batch on each of :data:`IMPLS`); again without
    taking ``.logits`` when some call returned something without them (the logits tensor
    itself is as good as the output). Each result is shown as ``packed_forward(model, <what>)``."""
    calls = [(i, what, b) for i in IMPLS for what, b in batches.items()]
    results = ev.call([_forward_call(i, ev.seed, b, "logits") for i, _, b in calls])
    if any(_no_logits(r) for r in results):
        results = ev.call([_forward_call(i, ev.seed, b, None) for i, _, b in calls])
    for result, (impl, what, _) in zip(results, calls):
        result.shown = f"packed_forward({impl} model, {what})"
    return results


def _logits_of(result, form: Logits) -> list:
    got = result.value()
    try:
        return form.value(got)
    except Unreadable as why:
        kind = re.sub(r"^.*\.", "", getattr(got, "dtype", "") or type(got).__name__)
        raise Reject(f"{result.shown} returned {kind or describe(got)}: {why}") from None


@ITEMS.item(
    "test-bug-packed-forward",
    answer="bug-packed-forward",
    points=3,
    function="packed_forward",
    returns=Logits(),
    visible=Property(
        "packed_forward",
        "packed documents isolated on the lesson's model, and a document alone given the "
        "model's own logits",
    ),
    allowed=("course_lib.model",),
    forbidden=("course_lib.packing", "course_lib.isolation", "course_lib.collate"),
)
def packed_forward(ev: Evidence) -> str:
    """Every document's logits, in packed rows and alone, equal to the logits the grader's own copy
    of the model gives it alone (``model(input_ids=doc)``), on documents and weights drawn for
    each student (single-token documents among them) and on three attention paths.

    Args:
        ev: the submission's evidence: ``packed_forward(model, batch)`` is called on varlen,
            sdpa and eager models (weights seeded from the student's seed), each on two packed
            batches and on every document alone.

    Returns:
        The full-marks message.

    Raises:
        Reject: a call fails or returns no logits, one row for many, or logits further than
            ``Logits.atol`` from the model's own for a document, packed or alone.
    """
    from course_lib.packing import PackingCollator, document_spans

    many, short = _documents(ev.rng)
    packed = [
        PackingCollator(CAPACITY, 0, completion_only=False)(many),
        PackingCollator(CAPACITY, 0, completion_only=False, strategy="greedy")(short),
    ]
    docs = many + short
    spans = [(0, d, r, a, b) for d, r, a, b in document_spans(packed[0])]
    spans += [(1, len(many) + d, r, a, b) for d, r, a, b in document_spans(packed[1])]
    batches = {
        f"{len(many)} documents in {packed[0]['input_ids'].shape[0]} rows": packed[0],
        f"{len(short)} short documents in one row": packed[1],
    }
    for k, d in enumerate(docs):
        batches[f"document {k + 1} alone"] = PackingCollator(len(d), 0, completion_only=False)([d])
    results, form, per_impl = _results(ev, batches), Logits(), len(batches)
    for k, impl in enumerate(IMPLS):
        mine = results[k * per_impl : (k + 1) * per_impl]
        rows = [_logits_of(r, form) for r in mine[: len(packed)]]
        want = _trusted_logits(impl, ev.seed, docs)
        ev.require(len(rows[0]) > 1, f"{mine[0].shown} returned one row: return every row")
        for batch, doc, row, a, b in spans:
            gap = form.gap(rows[batch][row][a:b], want[doc])
            ev.require(
                gap <= form.atol,
                f"{mine[batch].shown} returned logits that differ from the model's logits of a "
                f"document alone by {gap:.2g} (the check allows "
                f"{form.atol:g}): documents still see each other, or this is not the model's "
                "output",
            )
            one = mine[len(packed) + doc]
            gap = form.gap(_logits_of(one, form)[0], want[doc])
            ev.require(
                gap <= form.atol,
                f"{one.shown} returned logits {gap:.2g} away from the model's own (the check "
                f"allows {form.atol:g})",
            )
    return (
        "packed_forward: right (every document's logits, packed and alone, are the model's own, "
        "on varlen, sdpa and eager attention, on documents drawn for you)"
    )


def _cross_pairs(first: int, second: int) -> int:
    """Pairs across a boundary of a careless row of three documents filling 2,048 tokens."""
    third = 2048 - first - second
    return first * second + (first + second) * third


@ITEMS.item(
    "test-q3",
    answer="q3",
    points=1,
    values={"q3_cross_pairs": Integer(), "q3_symptom": Word("A", "B", "C")},
    expected=lambda n: {
        "q3_cross_pairs": _cross_pairs(n["q3_first"], n["q3_second"]),
        "q3_symptom": "B",
    },
    visible=Property("q3", "any count from 1 to the row's causal pairs, with any symptom"),
    own_work=True,
    edition=True,
)
def q3(ev: Evidence) -> str:
    """The (query, key) pairs that cross a boundary in the class's careless row, and the
    symptom careless packing shows.

    Args:
        ev: the submission's evidence: ``q3_cross_pairs`` (a count of pairs) and
            ``q3_symptom`` (A, B or C).

    Returns:
        The full-marks message.

    Raises:
        Reject: either value is missing, unreadable or wrong.
    """
    return ev.expect_all()
