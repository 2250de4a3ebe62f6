"""Trusted checks of lesson 3: gradient accumulation.

A point is earned by producing something that is right *and* that a lookup cannot produce, so
the values (the noise target, a check-yourself question) carry one point each, the prediction
one for any plausible value (``Evidence.recorded``: right ones earn no more; its written
comparison with the measurement carries the points), and the two loops four each. The loops run
in the function sandbox on a small TinyGPT (``course_lib.model`` staged, nothing else of the
library) and on windows drawn for each student: micro-batches of very different loss tokens,
one with full-sequence labels (where the unshifted count is off by one a row), one without any
loss token, and for the training loop
windows whose full-batch gradient is below the clipping norm (where a summed loss shows) and
above it (where forgetting the clip shows). Their gradients come back as plain data and are
compared here with one full batch of the same window, on the same model; what they return is
read by its form. Each value is compared by its declared form (``course_lib.forms``), which the
visible test reads it with too, and is the student's own work (``own_work``).

What the noise target needs from the kernel's measurement, the noise-to-signal ratio of a
one-example step, is measured again here by trusted code, as the lesson measures it, from the
lesson's parameters; the lesson's target is chosen so that rounding the ratio, or cutting it
down, lands on another whole number than the smallest accumulation that reaches the target.
"""

from __future__ import annotations

import copy
import math
import random
from contextlib import contextmanager
from fractions import Fraction
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
    Result,
    Truth,
    call,
    new,
    recorder,
    seeded_torch,
    tensor,
)
from course_grading.judge.plain import Tensor

#: Question 2's accumulation (``judge/editions.py``): a class is asked with its own.
ITEMS = Lesson(
    "03_gradient_accumulation",
    edition={"q2_accum": choices(8, (4, 5, 6, 8, 10, 12, 16))},
)

#: The lesson's parameters (its first cell), with which the autograder runs it.
MICRO_BATCH_SIZE, GRAD_ACCUM_STEPS, TRAIN_STEPS = 2, 4, 12
D_MODEL, N_HEADS, N_LAYERS, LEARNING_RATE, SEED = 64, 4, 2, 3e-3, 0
NOISE_TARGET = 0.04  # the lesson's target (section 10): rho / (2 × 0.04) = 22.27 here
TOLERANCE = 1e-5  # a loop's relative gradient error: float32 rounding lands near 1e-7


SHARE = Between(0, 1, high_in=True)  # a share of the optimiser step


@ITEMS.item(
    "test-predict-weights",
    answer="predict-weights",
    points=1,
    values={"weight_A_accum": Exact(), "weight_A_full": Exact(), "token_ratio": Exact()},
    visible=Property(
        "predict-weights",
        "two shares above 0 and at most 1, and a ratio above 0",
        rules={"weight_A_accum": SHARE, "weight_A_full": SHARE, "token_ratio": Between(0)},
    ),
    own_work=True,
)
def predict_weights(ev: Evidence) -> str:
    """A plausible prediction of A's share of the step under ``loss / accum`` and in one big
    batch, and of how many times one of A's tokens counts against one of B's, recorded; right
    ones earn no more.

    Args:
        ev: the submission's evidence: ``weight_A_accum`` and ``weight_A_full`` (shares above 0,
            at most 1) and ``token_ratio`` (above 0), each read exactly.

    Returns:
        The message that the prediction was recorded.

    Raises:
        Reject: a value is missing, unreadable, or outside its rule.
    """
    return ev.recorded()


# --- the graded loops ---------------------------------------------------------------------------

#: The model the loops are checked on: small, so its gradients come back as plain data.
MODEL = {"vocab_size": 48, "d_model": 16, "n_heads": 2, "n_layers": 2, "max_seq_len": 64}
IGNORE = -100  # course_lib.batch.IGNORE_INDEX, written out: the windows are plain lists


def _micro_batch(
    rng: random.Random, rows: list[tuple[int, int]], *, all_labels: bool = False, token: int = -1
) -> dict:
    """A right-padded micro-batch of rows ``(prompt_len, completion_len)``, as plain lists.

    Labels are ``IGNORE`` on the prompt and the padding (``all_labels``: on the padding only).
    ``token >= 0`` fills every row with that one token: a gradient far above norm 1.
    """
    width = max(p + c for p, c in rows)
    batch: dict[str, list] = {"input_ids": [], "attention_mask": [], "labels": []}
    for p, c in rows:
        ids = [token if token >= 0 else rng.randrange(MODEL["vocab_size"]) for _ in range(p + c)]
        pad = width - p - c
        labels = ids if all_labels else [IGNORE] * p + ids[p:]
        batch["input_ids"].append(ids + [0] * pad)
        batch["attention_mask"].append([1] * (p + c) + [0] * pad)
        batch["labels"].append(labels + [IGNORE] * pad)
    return batch


def _windows(rng: random.Random) -> list[list[dict]]:
    """Windows whose micro-batches hold very different numbers of loss tokens."""
    first = [
        _micro_batch(rng, [(4, 4), (3, 9)], all_labels=True),
        _micro_batch(rng, [(5, 40)]),
        _micro_batch(rng, [(2, 20), (3, 25), (4, 30)]),
    ]
    empty = _micro_batch(rng, [(6, 0), (3, 0)])  # no loss token at all
    second = [
        _micro_batch(rng, [(rng.randint(1, 8), rng.randint(1, 30)) for _ in range(2)])
        for _ in range(3)
    ]
    return [first, [second[0], empty, second[1], second[2]]]


def _loss_tokens(window: list[dict]) -> int:
    return sum(sum(label != IGNORE for label in row[1:]) for mb in window for row in mb["labels"])


def _as_inputs(window: list[dict]) -> list[dict]:
    return [{k: tensor(v) for k, v in mb.items()} for mb in window]


def _model(seed: int):
    config = new("course_lib.model:TinyGPTConfig", **MODEL)
    return new("course_lib.model:TinyGPT", config, seed=seed, shown="model")


@contextmanager
def _one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _reference_model(seed: int):

    from course_lib.model import TinyGPT, TinyGPTConfig

    with seeded_torch(seed):
        return TinyGPT(TinyGPTConfig(**MODEL))


def _full_gradient(model, window: list[dict], clip: bool = False) -> list[float]:
    """The flat gradient of one forward/backward of the whole window (clipped to norm 1)."""
    import torch

    from course_lib.accumulation import concatenate_micro_batches

    model.zero_grad(set_to_none=True)
    batch = concatenate_micro_batches(
        [{k: torch.tensor(v) for k, v in mb.items()} for mb in window]
    )
    model(**batch).loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    flat = torch.cat([g.flatten() for g in grads]).tolist()
    model.zero_grad(set_to_none=True)
    return flat


def _relative_error(got: object, want: list[float], what: str) -> float:
    if not isinstance(got, Tensor) or len(got.data) != len(want):
        raise Reject(f"{what}: the model's gradient could not be read")
    if not all(math.isfinite(a) for a in got.data):
        raise Reject(f"{what}: the gradient holds NaN or an infinity")
    diff = math.sqrt(sum((a - b) ** 2 for a, b in zip(got.data, want)))
    return diff / math.sqrt(sum(b * b for b in want))


def _named(calls: list[dict], shown: list[str]) -> list[dict]:
    for c, text in zip(calls, shown):
        c["shown"] = text
    return calls


@ITEMS.item(
    "test-accumulate-tokens",
    answer="accumulate-tokens",
    points=4,
    function="accumulate_token_weighted",
    returns=Integer(),
    visible=Property(
        "accumulate_token_weighted",
        "a whole number back, and a gradient within float32 rounding of the full batch's on one "
        "window of unequal micro-batches (one with full-sequence labels)",
    ),
    allowed=("course_lib.model", "course_lib.loss"),
    forbidden=("course_lib.accumulation",),
)
def accumulate_tokens(ev: Evidence) -> str:
    """The token-weighted loop, right on windows drawn for each student: the gradient of one full
    batch of the window (relative error below 1e-5), N (the shifted loss tokens) returned, a
    micro-batch without loss tokens counting nothing and a window without any raising a
    ``ValueError``.

    Args:
        ev: the submission's evidence: ``accumulate_token_weighted(model, window)`` is called
            on two drawn windows and one without loss tokens, the model's gradient collected
            after each.

    Returns:
        The full-marks message.

    Raises:
        Reject: a call fails, returns another N, leaves a gradient further than ``TOLERANCE``
            (relative) from the full batch's, or does not raise on the empty window.
    """
    windows = _windows(ev.rng)
    empty_window = [_micro_batch(ev.rng, [(4, 0)]), _micro_batch(ev.rng, [(2, 0), (5, 0)])]
    every = [*windows, empty_window]
    calls = [call(_model(ev.seed), _as_inputs(w), after=({"grads": 0},)) for w in every]
    shown = [f"model, a window of {len(w)} micro-batches" for w in every]
    results = ev.call(_named(calls, shown))
    with _one_thread():
        model = _reference_model(ev.seed)
        for window, result in zip(windows, results):
            ev.returned(result, _loss_tokens(window), "not the window's number of loss tokens")
            error = _relative_error(result.after[0], _full_gradient(model, window), result.shown)
            ev.require(
                error < TOLERANCE,
                f"{result.shown}: the gradient is {error:.1e} (relative) away from one full "
                "batch's; the right loop lands at float32 rounding (below 1e-5)",
            )
    last = results[-1]
    ev.require(
        last.raised is not None and last.raised["type"] == "ValueError",
        f"{last.shown} without any loss token should raise a ValueError",
    )
    return "accumulate_token_weighted: right (full-batch gradients, N, empty windows)"


def _loaders(rng: random.Random) -> list[tuple[list[dict], int]]:
    """(loader, accum) cases: one-token rows (full-batch gradients far above norm 1, where a
    missing clip shows) between random ones; random rows (gradients below norm 1, where a summed
    loss shows through the clipping), one micro-batch with full-sequence labels and one without a
    loss token."""
    short = [_micro_batch(rng, [(rng.randint(1, 8), rng.randint(1, 30))]) for _ in range(8)]
    short[1] = _micro_batch(
        rng, [(3, 12), (rng.randint(1, 6), rng.randint(1, 40))], all_labels=True
    )
    short[6] = _micro_batch(rng, [(rng.randint(1, 8), 0)])
    long = [_micro_batch(rng, [(5, 33)]) for _ in range(3)] + [_micro_batch(rng, [(2, 50)])]
    same = [_micro_batch(rng, [(2, rng.randint(2, 30))], token=rng.randrange(48)) for _ in range(4)]
    mixed = [mb for pair in zip(same, short[:4]) for mb in pair]
    return [(mixed, 2), (short + long, 4), (short, 8)]


def _steps_of(ev: Evidence, result: Result, loader: list[dict], accum: int) -> list:
    steps = result.after[0] if result.after else None
    want = len(loader) // accum
    ev.require(
        isinstance(steps, list) and len(steps) == want,
        f"fixed_train({result.shown}) took {len(steps) if isinstance(steps, list) else '?'} "
        f"optimiser steps; {len(loader)} micro-batches at accum={accum} make {want}",
    )
    return steps  # type: ignore[return-value]


@ITEMS.item(
    "test-fix-recipe-loop",
    answer="fix-recipe-loop",
    points=4,
    function="fixed_train",
    returns=Integer(),
    visible=Property(
        "fixed_train",
        "the number of steps it took back, and every step within float32 rounding of its full "
        "batch on three windows of the lesson's data at accum=4",
    ),
    allowed=("course_lib.model", "course_lib.loss"),
    forbidden=("course_lib.accumulation",),
)
def fix_recipe_loop(ev: Evidence) -> str:
    """The fixed training loop, right on loaders drawn for each student at accum 2, 4 and 8: every
    optimiser step the gradient of one full batch of its micro-batches clipped to norm 1
    (relative error below 1e-5), one step per ``accum`` micro-batches, their number returned.

    Args:
        ev: the submission's evidence: ``fixed_train(model, optimizer, loader, accum)`` is
            called on three drawn loaders, every optimiser step's gradient recorded by the judge.

    Returns:
        The full-marks message.

    Raises:
        Reject: a call fails, takes another number of steps, a step's gradient is further than
            ``TOLERANCE`` (relative) from its clipped full batch, or it returns another count.
    """
    cases = _loaders(ev.rng)
    calls = [
        call(_model(ev.seed), recorder(0), _as_inputs(loader), accum, after=({"steps": 1},))
        for loader, accum in cases
    ]
    shown = [f"model, optimizer, a loader of {len(lo)} micro-batches, {a}" for lo, a in cases]
    results = ev.call(_named(calls, shown))
    with _one_thread():
        model = _reference_model(ev.seed)
        for (loader, accum), result in zip(cases, results):
            result.value()  # it ran, and returned a plain value
            for s, got in enumerate(_steps_of(ev, result, loader, accum)):
                window = loader[s * accum : (s + 1) * accum]
                error = _relative_error(got, _full_gradient(model, window, clip=True), "a step")
                ev.require(
                    error < TOLERANCE,
                    f"{result.shown}: step {s + 1} is {error:.1e} (relative) off its full batch "
                    "clipped to norm 1; the fixed loop lands at float32 rounding (below 1e-5)",
                )
            ev.returned(result, len(loader) // accum, "not the number of optimiser steps taken")
    return "fixed_train: right (every step lands on its full batch, clipped)"


# --- the noise target -------------------------------------------------------------------------


@cache
def rho_example() -> float:
    """The lesson's noise-to-signal ratio of a one-example step, measured as the lesson does.

    The 12 token-weighted training steps of section 6, then one summed-loss gradient per held-out
    example (section 10), on the lesson's parameters, one thread.

    Returns:
        The gradient noise of one example's step over the squared norm of the mean gradient
        (dimensionless), the ``rho`` of the 1/K law.
    """
    import torch

    from course_lib.accumulation import accumulate_gradients
    from course_lib.collate import PaddingCollator
    from course_lib.data import PAD_ID, make_instruction_dataset
    from course_lib.model import TinyGPT, TinyGPTConfig

    with _one_thread():
        examples = make_instruction_dataset(360, seed=SEED, max_len=256)
        collate = PaddingCollator(PAD_ID)
        per = MICRO_BATCH_SIZE
        windows = [
            [
                collate(
                    examples[
                        (s * GRAD_ACCUM_STEPS + i) * per : (s * GRAD_ACCUM_STEPS + i + 1) * per
                    ]
                )
                for i in range(GRAD_ACCUM_STEPS)
            ]
            for s in range(TRAIN_STEPS)
        ]
        config = TinyGPTConfig(
            d_model=D_MODEL, n_heads=N_HEADS, n_layers=N_LAYERS, max_seq_len=512, attn_impl="sdpa"
        )
        with seeded_torch(SEED):
            run = copy.deepcopy(TinyGPT(config))
        optimizer = torch.optim.AdamW(run.parameters(), lr=LEARNING_RATE)
        for window in windows:
            accumulate_gradients(run, window, "token_weighted")
            torch.nn.utils.clip_grad_norm_(run.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        pool = [
            ex
            for ex in make_instruction_dataset(128, seed=SEED + 1, max_len=256)
            if len(ex["input_ids"]) > ex["prompt_len"]
        ]
        n_tok = torch.tensor(
            [len(ex["input_ids"]) - ex["prompt_len"] for ex in pool], dtype=torch.float64
        )
        sums = []
        for ex in pool:
            run.zero_grad(set_to_none=True)
            run(**collate([ex]), num_items_in_batch=1).loss.backward()
            sums.append(torch.cat([p.grad.flatten() for p in run.parameters()]).double())
        S = torch.stack(sums)  # (examples, P)
        g_star = S.sum(0) / n_tok.sum()
        D = S - n_tok[:, None] * g_star
        noise = float((D @ D.T).diagonal().mean()) / float(n_tok.mean()) ** 2
        return noise / float(g_star.norm() ** 2)


def smallest_accumulation(rho: float, micro_batch_size: int, target: float) -> int:
    """The smallest ``K`` with ``rho / (micro_batch_size × K) <= target`` (the 1/K law).

    Args:
        rho: the noise-to-signal ratio of a one-example step (:func:`rho_example`).
        micro_batch_size: examples per micro-batch.
        target: the noise-to-signal ratio the step must reach at most.

    Returns:
        The number of accumulation steps, at least 1.
    """
    return max(1, math.ceil(rho / (micro_batch_size * target)))


def _noise_target() -> dict[str, object]:
    return {
        "target_accum_steps": smallest_accumulation(rho_example(), MICRO_BATCH_SIZE, NOISE_TARGET)
    }


@ITEMS.item(
    "test-noise-target",
    answer="noise-target",
    points=1,
    values={"target_accum_steps": Integer()},
    expected=_noise_target,
    visible=Property("target_accum_steps", "a whole number of accumulation steps from 1 to 128"),
    own_work=True,
)
def noise_target(ev: Evidence) -> str:
    """The smallest accumulation whose expected noise-to-signal ratio (the 1/K law from the measured
    one-example ratio) is at most the lesson's target. A wrong answer is told which side it is
    on, in the terms the explorer shows (the ratio at the student's own K), never the answer.

    Args:
        ev: the submission's evidence: ``target_accum_steps``, a whole number.

    Returns:
        The full-marks message.

    Raises:
        Reject: the value is missing, unreadable, or not that accumulation.
    """
    steps = int(ev.read("target_accum_steps"))  # type: ignore[call-overload]  # Integer()
    want = smallest_accumulation(rho_example(), MICRO_BATCH_SIZE, NOISE_TARGET)
    ratio = rho_example() / (MICRO_BATCH_SIZE * steps) if steps >= 1 else math.inf
    ev.require(
        steps >= want,
        f"target_accum_steps: at {steps} steps the 1/K law gives a noise-to-signal of "
        f"{ratio:.4g}, above the target {NOISE_TARGET:g}",
    )
    ev.require(
        steps == want,
        f"target_accum_steps: {steps} steps meet the target {NOISE_TARGET:g}, and so do fewer; "
        "the question asks for the smallest",
    )
    return ev.expect_all()


Q2_FACTORS = Ordered(Exact(), Exact(), Exact(), Exact(), Exact())


@ITEMS.item(
    "test-q2",
    answer="q2",
    points=1,
    values={"q2_factors": Q2_FACTORS, "q2_same_as_big_batch": Truth()},
    expected=lambda n: {
        "q2_factors": (1, 1, n["q2_accum"], n["q2_accum"], Fraction(1, n["q2_accum"])),
        "q2_same_as_big_batch": False,
    },
    visible=Property("q2", "five factors above 0, and True or False"),
    own_work=True,
    edition=True,
)
def q2(ev: Evidence) -> str:
    """What going from 1 to the class's accumulation steps multiplies (memory, FLOPs per token,
    effective batch, tokens per step, steps per epoch), each factor exact, and whether
    ``loss / accum`` then takes the big batch's step.

    Args:
        ev: the submission's evidence: ``q2_factors`` (five factors, in that order) and
            ``q2_same_as_big_batch`` (True or False).

    Returns:
        The full-marks message.

    Raises:
        Reject: either value is missing, unreadable or wrong.
    """
    return ev.expect_all()
