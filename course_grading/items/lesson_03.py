"""Trusted checks of lesson 3: gradient accumulation.

Ported from the lesson's hidden tests with the same strictness. The graded loops run in the
function sandbox on a small TinyGPT (``course_lib.model`` staged, nothing else of the library)
and fresh windows seeded per student; their gradients come back as plain data and are compared
here with one full batch of the same window, on the same model. What the hidden tests read from
the kernel (the measured noise-to-signal ratio ``rho_example``) is measured again here by
trusted code, as the lesson measures it, from the lesson's parameters.
"""

from __future__ import annotations

import copy
import math
import random
from contextlib import contextmanager
from functools import cache

from course_grading.items import Evidence, Lesson, Reject, call, describe, new, recorder, tensor
from course_grading.plain import Tensor

ITEMS = Lesson("03_gradient_accumulation")

#: The lesson's parameters (its first cell), with which the autograder runs it.
MICRO_BATCH_SIZE, GRAD_ACCUM_STEPS, TRAIN_STEPS = 2, 4, 12
D_MODEL, N_HEADS, N_LAYERS, LEARNING_RATE, SEED = 64, 4, 2, 3e-3, 0
NOISE_TARGET = 0.05  # the lesson's target (section 8)


@ITEMS.item(
    "test-predict-weights",
    answer="predict-weights",
    points=2,
    values=("weight_A_accum", "weight_A_full", "token_ratio"),
)
def predict_weights(ev: Evidence) -> str:
    for name, exact in (("weight_A_accum", 0.5), ("weight_A_full", 0.1), ("token_ratio", 9)):
        got = ev.number(name)
        ev.require(
            abs(got - exact) < 1e-6,
            f"{name}: your value {describe(got)}; the check needs it exact (within 1e-6)",
        )
    return "weight_A_accum, weight_A_full, token_ratio: right"


# --- the graded loops ---------------------------------------------------------------------------

#: The model the loops are checked on: small, so its gradients come back as plain data.
MODEL = {"vocab_size": 48, "d_model": 16, "n_heads": 2, "n_layers": 2, "max_seq_len": 64}


def _micro_batch(rng: random.Random, rows: list[tuple[int, int]], *, all_labels=False) -> dict:
    """A right-padded micro-batch of rows ``(prompt_len, completion_len)``, as plain lists.

    Labels are -100 on the prompt and the padding (``all_labels``: on the padding only).
    """
    width = max(p + c for p, c in rows)
    batch = {"input_ids": [], "attention_mask": [], "labels": []}
    for p, c in rows:
        ids = [rng.randrange(MODEL["vocab_size"]) for _ in range(p + c)]
        pad = width - p - c
        labels = ids if all_labels else [-100] * p + ids[p:]
        batch["input_ids"].append(ids + [0] * pad)
        batch["attention_mask"].append([1] * (p + c) + [0] * pad)
        batch["labels"].append(labels + [-100] * pad)
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
    return sum(sum(label != -100 for label in row[1:]) for mb in window for row in mb["labels"])


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
    import torch

    from course_lib.model import TinyGPT, TinyGPTConfig

    torch.manual_seed(seed)
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
    diff = math.sqrt(sum((a - b) ** 2 for a, b in zip(got.data, want)))
    return diff / math.sqrt(sum(b * b for b in want))


@ITEMS.item(
    "test-accumulate-tokens",
    answer="accumulate-tokens",
    points=3,
    function="accumulate_token_weighted",
    allowed=("course_lib.model", "course_lib.loss"),
    forbidden=("course_lib.accumulation",),
)
def accumulate_tokens(ev: Evidence) -> str:
    """The accumulated gradient is one full batch's (relative error < 1e-5) and N is returned;
    an empty micro-batch in a window counts nothing, a window without loss tokens raises."""
    windows = _windows(ev.rng)
    empty_window = [_micro_batch(ev.rng, [(4, 0)]), _micro_batch(ev.rng, [(2, 0), (5, 0)])]
    calls = [
        call(_model(ev.seed), _as_inputs(w), after=({"grads": 0},))
        for w in [*windows, empty_window]
    ]
    for c, w in zip(calls, [*windows, empty_window]):
        c["shown"] = f"model, a window of {len(w)} micro-batches"
    results = ev.call(calls)
    with _one_thread():
        model = _reference_model(ev.seed)
        for window, result in zip(windows, results):
            n = result.value()
            ev.require(
                type(n) in (int, float) and n == _loss_tokens(window),
                f"{result.shown} returned {describe(n)}: not the window's number of loss tokens",
            )
            error = _relative_error(result.after[0], _full_gradient(model, window), result.shown)
            ev.require(
                error < 1e-5,
                f"{result.shown}: the gradient is {error:.1e} (relative) away from one full "
                "batch's; the right loop lands at float32 rounding (below 1e-5)",
            )
    last = results[-1]
    ev.require(
        last.raised is not None and last.raised["type"] == "ValueError",
        f"{last.shown} without any loss token should raise a ValueError",
    )
    return "accumulate_token_weighted: right (full-batch gradients, N, empty windows)"


@ITEMS.item(
    "test-fix-recipe-loop",
    answer="fix-recipe-loop",
    points=3,
    function="fixed_train",
    allowed=("course_lib.model", "course_lib.loss"),
    forbidden=("course_lib.accumulation",),
)
def fix_recipe_loop(ev: Evidence) -> str:
    """Every optimiser step of the fixed loop uses one full batch's gradient, clipped to norm 1
    (relative error < 1e-5), and the loop takes one step per ``accum`` micro-batches."""
    rng = ev.rng
    micro = [_micro_batch(rng, [(rng.randint(1, 8), rng.randint(1, 30))]) for _ in range(8)]
    micro += [_micro_batch(rng, [(3, 12), (rng.randint(1, 6), rng.randint(1, 40))])]
    micro += [_micro_batch(rng, [(5, 33)]) for _ in range(3)]
    cases = [(micro, 4), (micro[:8], 2), (micro[:8], 8)]
    calls = []
    for loader, accum in cases:
        c = call(_model(ev.seed), recorder(0), _as_inputs(loader), accum, after=({"steps": 1},))
        c["shown"] = f"model, optimizer, a loader of {len(loader)} micro-batches, {accum}"
        calls.append(c)
    results = ev.call(calls)
    with _one_thread():
        model = _reference_model(ev.seed)
        for (loader, accum), result in zip(cases, results):
            result.value()  # it ran without raising
            steps = result.after[0]
            want = len(loader) // accum
            ev.require(
                isinstance(steps, list) and len(steps) == want,
                f"fixed_train({result.shown}) took "
                f"{len(steps) if isinstance(steps, list) else '?'} optimiser steps; "
                f"{len(loader)} micro-batches at accum={accum} make {want}",
            )
            for s, got in enumerate(steps):
                window = loader[s * accum : (s + 1) * accum]
                error = _relative_error(got, _full_gradient(model, window, clip=True), "a step")
                ev.require(
                    error < 1e-5,
                    f"fixed_train({result.shown}): step {s + 1} is {error:.1e} (relative) off "
                    "its full batch; the fixed loop lands at float32 rounding (below 1e-5)",
                )
    return "fixed_train: right (every step lands on its full batch)"


# --- the noise target -------------------------------------------------------------------------


@cache
def rho_example() -> float:
    """The lesson's noise-to-signal ratio of a one-example step, measured as the lesson does.

    The 12 token-weighted training steps of section 6, then one summed-loss gradient per
    held-out example (section 8), on the lesson's parameters, one thread.
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
        torch.manual_seed(SEED)
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


@ITEMS.item(
    "test-noise-target",
    answer="noise-target",
    points=1,
    values=("target_accum_steps",),
)
def noise_target(ev: Evidence) -> str:
    k = ev.integer("target_accum_steps")
    ev.require(k >= 1, f"target_accum_steps: {k} is not a number of micro-batches (at least 1)")
    want = math.ceil(rho_example() / (MICRO_BATCH_SIZE * NOISE_TARGET))
    ev.require(
        k == want,
        f"target_accum_steps: {k} is not the smallest accumulation that reaches the target",
    )
    return "target_accum_steps: right"


@ITEMS.item("test-q2", answer="q2", points=3, values=("q2_factors", "q2_same_as_big_batch"))
def q2(ev: Evidence) -> str:
    factors, same = ev.value("q2_factors"), ev.value("q2_same_as_big_batch")
    ev.require(
        isinstance(factors, (tuple, list))
        and len(factors) == 5
        and all(type(f) in (int, float) for f in factors),
        f"q2_factors: {describe(factors)} is not 5 numbers",
    )
    ev.require(
        all(abs(a - b) < 1e-6 for a, b in zip(factors, (1, 1, 8, 8, 1 / 8))),
        f"q2_factors: your factors {describe(factors)}; at least one is not right (each is "
        "checked exactly, within 1e-6)",
    )
    ev.require(same is False, f"q2_same_as_big_batch: {describe(same)} is not right")
    return "q2_factors, q2_same_as_big_batch: right"
