"""Lesson 3's experiments: accumulation windows with set loss tokens, two training runs, ranks,
and training loops checked against the full batch.

Real windows mix short and long completions by chance. To show how the mean-of-means error grows
with the imbalance, :func:`window_from_completion_lens` builds windows whose every row keeps its
prompt and exactly ``c`` completion tokens of a real synthetic example (so ``c`` shifted loss
tokens), and :func:`spread_completion_lens` chooses ``c`` per micro-batch so that the fullest
holds ``spread`` times the loss tokens of the emptiest. :func:`accumulation_window` measures one
such window in both accumulation modes, :func:`window_weights` the weight each mode gives each
micro-batch; :func:`accumulation_runs` trains two models that differ only in the mode;
:func:`rank_recipes` plays data-parallel ranks in one process.

A loop is checked against the full batch by :func:`window_loop_error` (one window: what the loop
returned, and how far its gradient lands from one forward/backward of every row) and
:func:`step_errors` (a whole training loop, through :class:`StepRecorder`, a stand-in optimiser
that records the gradient of every step); :func:`full_sequence_labels` and
:func:`unshifted_count_loop` show the off-by-one of counting unshifted labels. The summed loss,
memory and wall time of accumulation are :mod:`course_lib.lessons.accumulation_cost`; the
gradient-noise experiment is :mod:`course_lib.noise`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from .._checks import non_negative_int, positive_int, positive_number
from ..accumulation import (
    MODES,
    Mode,
    accumulate_gradients,
    concatenate_micro_batches,
    flat_grad,
    gradient_error,
    relative_error,
)
from ..batch import IGNORE_INDEX, count_loss_tokens
from ..collate import PaddingCollator
from ..data import PAD_ID
from ..loss import causal_lm_loss
from ..memory.meter import Device, pick_device
from ..model import TinyGPT, TinyGPTConfig

Window = list[dict[str, torch.Tensor]]  # the micro-batches of one optimiser step
Loop = Callable[..., object]  # a training loop or accumulation function under test


def spread_completion_lens(
    grad_accum_steps: int, spread: float, micro_batch_size: int = 2, shortest: int = 4
) -> list[list[int]]:
    """Completion tokens per row, per micro-batch: ``shortest * spread**(i / (K - 1))`` for
    micro-batch ``i`` of ``K`` (geometric, rounded), the same for every row of a micro-batch.

    Args:
        grad_accum_steps: ``K``, the micro-batches of the window.
        spread: the longest micro-batch's loss tokens over the shortest's (1 = all equal).
        micro_batch_size: rows per micro-batch.
        shortest: completion tokens per row of the first micro-batch.

    Returns:
        ``K`` lists of ``micro_batch_size`` completion lengths.

    Raises:
        ValueError: a count that is not a positive int, or ``spread < 1``.
    """
    k = positive_int("grad_accum_steps", grad_accum_steps)
    positive_int("micro_batch_size", micro_batch_size)
    positive_int("shortest", shortest)
    if positive_number("spread", spread) < 1:
        raise ValueError(f"spread must be >= 1 (longest / shortest micro-batch), got {spread}")
    lens = [round(shortest * spread ** (i / (k - 1))) if k > 1 else shortest for i in range(k)]
    return [[c] * micro_batch_size for c in lens]


def window_from_completion_lens(
    examples: Sequence[dict], completion_lens: Sequence[Sequence[int]], start: int = 0
) -> Window:
    """One padded micro-batch (``PaddingCollator``, completion-only labels) per inner list.

    Row ``r`` of micro-batch ``i`` is the next unused example (from ``start``, wrapping) whose
    completion has at least ``completion_lens[i][r]`` tokens, cut right after them: it keeps its
    whole prompt and holds exactly ``completion_lens[i][r]`` loss tokens (0 is allowed).

    Args:
        examples: instruction examples (``input_ids``, ``prompt_len``).
        completion_lens: per micro-batch, the loss tokens of each of its rows.
        start: the first example to look at.

    Returns:
        The window: one batch dict per micro-batch.

    Raises:
        ValueError: no examples, a negative completion length, or no unused example with a
            completion that long.
    """
    if not examples:
        raise ValueError("no examples to build a window from")
    collate = PaddingCollator(PAD_ID)
    used: set[int] = set()
    i = non_negative_int("start", start) % len(examples)
    window = []
    for rows in completion_lens:
        batch = []
        for c in rows:
            non_negative_int("completion length", c)
            for _ in range(len(examples)):
                j, i = i, (i + 1) % len(examples)
                p = examples[j]["prompt_len"]
                if j not in used and len(examples[j]["input_ids"]) - p >= c:
                    used.add(j)
                    batch.append({"input_ids": examples[j]["input_ids"][: p + c], "prompt_len": p})
                    break
            else:
                raise ValueError(
                    f"no unused example has a completion of {c} tokens or more: pass more "
                    "(or longer) examples, or ask for shorter completions"
                )
        window.append(collate(batch))
    return window


@dataclass
class AccumulationWindow:
    """One window, measured: ``loss_tokens[i]`` is ``n_i`` of micro-batch ``i`` (shifted labels
    that are not ``IGNORE_INDEX``); ``errors[mode]`` the relative gradient error of accumulating
    it in that mode against one full batch (:func:`~course_lib.accumulation.gradient_error`)."""

    micro_batch_size: int
    loss_tokens: list[int]
    errors: dict[str, float]

    @property
    def spread(self) -> float:
        """Loss tokens of the fullest micro-batch over those of the emptiest (at least 1 token)."""
        return max(self.loss_tokens) / max(min(self.loss_tokens), 1)


def accumulation_window(
    model: torch.nn.Module,
    examples: Sequence[dict],
    grad_accum_steps: int = 4,
    spread: float = 8,
    micro_batch_size: int = 2,
    shortest: int = 4,
    start: int = 0,
) -> AccumulationWindow:
    """Build a window with a set ``spread`` and measure both modes' gradient error.

    The window comes from :func:`spread_completion_lens` and :func:`window_from_completion_lens`,
    on ``model``'s device. Runs ``2 (K + 1)`` forward/backward passes; the model's ``.grad`` is
    left as it was.

    Args:
        model: the model whose gradients are compared.
        examples: the instruction examples the rows are cut from.
        grad_accum_steps: ``K``, micro-batches in the window.
        spread: loss tokens of the fullest micro-batch over the emptiest's.
        micro_batch_size: rows per micro-batch.
        shortest: completion tokens per row of the emptiest micro-batch.
        start: the first example to look at.

    Returns:
        :class:`AccumulationWindow`: the loss tokens and each mode's relative error.

    Raises:
        ValueError: see :func:`spread_completion_lens` and :func:`window_from_completion_lens`.
    """
    lens = spread_completion_lens(grad_accum_steps, spread, micro_batch_size, shortest)
    window = _to(window_from_completion_lens(examples, lens, start), _device_of(model))
    return AccumulationWindow(
        micro_batch_size=micro_batch_size,
        loss_tokens=[count_loss_tokens(mb["labels"]) for mb in window],
        errors={mode: gradient_error(model, window, mode) for mode in MODES[::-1]},
    )


def _to(window: Window, device: torch.device) -> Window:
    return [{k: v.to(device) for k, v in mb.items()} for mb in window]


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@dataclass
class WindowWeights:
    """The weight each mode gives each micro-batch of one window: ``weights[mode][i]`` solves
    ``g_mode = sum_i w_i g_i`` (least squares), ``g_i`` being micro-batch ``i``'s own mean-loss
    gradient; ``loss_tokens[i]`` its loss tokens."""

    loss_tokens: list[int]
    weights: dict[str, list[float]]

    @property
    def token_ratio(self) -> float:
        """Under ``"mean"``, one token of the first micro-batch against one of the second."""
        w = self.weights["mean"]
        return (w[0] / self.loss_tokens[0]) / (w[1] / self.loss_tokens[1])


def window_weights(model: torch.nn.Module, window: Window) -> WindowWeights:
    """Measure the weight each accumulation mode gives each micro-batch of ``window``.

    Args:
        model: the model (its ``.grad`` is cleared afterwards).
        window: micro-batches that each hold at least one loss token.

    Returns:
        :class:`WindowWeights`, one weight per micro-batch and mode.
    """
    basis = []
    for mb in window:  # g_i: the gradient of each micro-batch's own mean loss
        model.zero_grad(set_to_none=True)
        model(**mb).loss.backward()
        basis.append(flat_grad(model))
    gs = torch.stack(basis, dim=1)  # (P, K)
    weights: dict[str, list[float]] = {}
    for mode in MODES[::-1]:
        model.zero_grad(set_to_none=True)
        accumulate_gradients(model, window, mode)
        g = flat_grad(model)[:, None]  # (P, 1)
        weights[mode] = torch.linalg.lstsq(gs, g).solution.flatten().tolist()
    model.zero_grad(set_to_none=True)
    return WindowWeights([count_loss_tokens(mb["labels"]) for mb in window], weights)


@dataclass
class AccumulationRuns:
    """:func:`accumulation_runs`: per mode the training loss per loss token at every step and
    the trained model; ``distance[s]``: ``||θ_mean − θ_tw|| / ||θ_tw − θ_0||`` after step ``s``;
    ``heldout[mode][group]``: held-out loss per token by completion length."""

    losses: dict[str, list[float]]
    distance: list[float]
    heldout: dict[str, dict[str, float]]
    models: dict[str, TinyGPT]


def accumulation_runs(
    config: TinyGPTConfig, windows: Sequence[Window], heldout: Sequence[dict], lr: float,
    seed: int = 0, device: Device = None, progress: bool = False,
) -> AccumulationRuns:  # fmt: skip
    """Two runs from the same weights on the same ``windows``, one per mode (token-weighted
    first): accumulate, clip the gradient norm to 1, AdamW at ``lr``; then the loss per token of
    each on the ``heldout`` examples (:func:`heldout_loss`).

    Args:
        config: the model both runs start from (seeded with ``seed``).
        windows: one window per optimiser step.
        heldout: examples never trained on.
        lr: AdamW's learning rate.
        seed: the initial weights' seed.
        device: where the runs train (default: CUDA when available).
        progress: show a progress bar.

    Returns:
        :class:`AccumulationRuns`: losses, the distance between the runs, held-out losses.
    """
    dev = pick_device(device)
    torch.manual_seed(seed)
    start = TinyGPT(config).to(dev)
    theta_0 = _theta(start)
    losses: dict[str, list[float]] = {}
    thetas: dict[str, list[torch.Tensor]] = {}
    models: dict[str, TinyGPT] = {}
    for mode in MODES:
        model = models[mode] = copy.deepcopy(start)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        losses[mode], thetas[mode] = [], []
        for window in tqdm(windows, desc=mode, disable=not progress):
            stats = accumulate_gradients(model, window, mode)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses[mode].append(stats.loss_per_token)
            thetas[mode].append(_theta(model))
    distance = [float((m - t).norm() / (t - theta_0).norm())
                for m, t in zip(thetas["mean"], thetas["token_weighted"])]  # fmt: skip
    held: dict[str, dict[str, float]] = {
        m: heldout_loss(model, heldout, dev) for m, model in models.items()
    }
    return AccumulationRuns(losses, distance, held, models)


def _theta(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def heldout_loss(
    model: torch.nn.Module, examples: Sequence[dict], device: Device = None
) -> dict[str, float]:
    """Loss per completion token on ``examples`` (one padded batch), by completion length.

    Args:
        model: the trained model.
        examples: held-out examples.
        device: where the model is.

    Returns:
        Nats per loss token over the examples whose completion is at most the median length
        (``"short (≤m)"``), over the others (``"long"``) and over all (``"all tokens"``).
    """
    batch = {k: v.to(pick_device(device)) for k, v in PaddingCollator(PAD_ID)(examples).items()}
    completion = np.array([len(ex["input_ids"]) - ex["prompt_len"] for ex in examples])
    median = np.median(completion)
    short = torch.as_tensor(completion <= median, device=batch["input_ids"].device)
    rows = {f"short (≤{int(median)})": short, "long": ~short, "all tokens": short | ~short}
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return {name: float(causal_lm_loss(logits[r], batch["labels"][r])[0])
                for name, r in rows.items()}  # fmt: skip


RANK_RECIPES = ("N_all and × W", "each rank's own N", "loss / accum")


def rank_recipes(model: torch.nn.Module, rank_windows: Sequence[Window]) -> dict[str, float]:
    """Each rank's accumulation recipe, one replica per rank, DDP's gradient average done by hand.

    ``"N_all and × W"``: the window's loss tokens summed over ranks, the loss times the world
    size (what :func:`~course_lib.accumulation.accumulate_gradients` does under DDP);
    ``"each rank's own N"``: token-weighted per rank; ``"loss / accum"``: the mean of means.

    Args:
        model: the weights every rank holds (its ``.grad`` is cleared).
        rank_windows: one window per rank.

    Returns:
        Per recipe, the relative error of the ranks' averaged gradient against one full batch of
        every rank's rows.
    """
    full = _full_gradient(model, [mb for w in rank_windows for mb in w])
    n_all = sum(count_loss_tokens(mb["labels"]) for w in rank_windows for mb in w)
    out = {}
    for recipe in RANK_RECIPES:
        grads = []
        for w in rank_windows:
            replica = copy.deepcopy(model)  # every rank holds the same weights
            mode: Mode = "mean" if recipe == "loss / accum" else "token_weighted"
            ranks = (n_all, len(rank_windows)) if recipe == "N_all and × W" else None
            accumulate_gradients(replica, w, mode, distributed=False, simulate_ranks=ranks)
            grads.append(flat_grad(replica, torch.float32))
        out[recipe] = relative_error(torch.stack(grads).mean(0), full)  # DDP's average
    return out


def _full_gradient(
    model: torch.nn.Module, window: Window, max_norm: float | None = None
) -> torch.Tensor:
    """The float32 flat gradient of one forward/backward of every row of ``window`` (clipped to
    ``max_norm`` when given); the model's ``.grad`` is cleared before and after."""
    model.zero_grad(set_to_none=True)
    model(**concatenate_micro_batches(window)).loss.backward()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    g = flat_grad(model, torch.float32)
    model.zero_grad(set_to_none=True)
    return g


# --- loops checked against the full batch -------------------------------------------------------


def full_sequence_labels(window: Window) -> Window:
    """A copy of ``window`` whose labels are the input ids on every real token (as in
    pre-training) and ``IGNORE_INDEX`` on padding: the first label of every row is then a token.

    Args:
        window: micro-batches with ``input_ids`` and ``attention_mask``.

    Returns:
        New micro-batch dicts (the tensors of ``window`` are not changed).
    """
    out = []
    for mb in window:
        real = mb["attention_mask"].bool()
        out.append(dict(mb, labels=torch.where(real, mb["input_ids"], IGNORE_INDEX)))
    return out


def unshifted_count_loop(model: torch.nn.Module, window: Window) -> int:
    """The token-weighted loop with the off-by-one: it counts ``labels != IGNORE_INDEX``, the
    unshifted labels, so every row whose first label is a token claims one phantom loss token.

    Args:
        model: the model; gradients add up in its ``.grad``.
        window: micro-batches that each hold at least one loss token.

    Returns:
        The (over-)counted tokens of the window.
    """
    counts = [int((mb["labels"] != IGNORE_INDEX).sum()) for mb in window]
    for mb, n in zip(window, counts):
        (model(**mb).loss * n / sum(counts)).backward()  # (S_i / n_i) · (n'_i / N')
    return sum(counts)


@dataclass
class LoopError:
    """What :func:`window_loop_error` measured: what the loop returned, and the relative error
    of the gradient it left against one full batch of the window."""

    returned: object
    error: float


def window_loop_error(loop: Loop, model: torch.nn.Module, window: Window) -> LoopError:
    """Run ``loop(model, window)`` from zero gradients and compare what it leaves in ``.grad``
    with one forward/backward of every row of the window at once.

    Args:
        loop: an accumulation function (``accumulate_token_weighted(model, window)``).
        model: the model (its ``.grad`` is cleared afterwards).
        window: the micro-batches.

    Returns:
        :class:`LoopError`.

    Raises:
        ValueError: the full batch's gradient is exactly 0 (:func:`relative_error`).
    """
    model.zero_grad(set_to_none=True)
    returned = loop(model, window)
    got = flat_grad(model, torch.float32)
    return LoopError(returned, relative_error(got, _full_gradient(model, window)))


class StepRecorder:
    """A stand-in optimiser: ``step()`` records the flat gradient it would use and changes no
    weight; ``zero_grad()`` clears the gradients. ``steps`` holds one vector per step."""

    def __init__(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Watch ``params``.

        Args:
            params: the parameters a real optimiser would update (``model.parameters()``).
        """
        self.params = list(params)
        self.steps: list[torch.Tensor] = []

    def step(self) -> None:
        """Record the flat gradient (zeros where a parameter has none)."""
        self.steps.append(flat_grad(self.params, torch.float32).clone())

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every gradient.

        Args:
            set_to_none: accepted as torch's optimisers do; the gradients are always dropped.
        """
        for p in self.params:
            p.grad = None


@dataclass
class StepErrors:
    """What :func:`step_errors` measured: ``errors[s]``, the relative error of step ``s`` against
    the full batch of its micro-batches; the steps taken and expected; what the loop returned."""

    errors: list[float]
    steps_taken: int
    steps_expected: int
    returned: object = None


def step_errors(
    train: Loop, model: torch.nn.Module, loader: Sequence[dict], accum: int, max_norm: float = 1.0
) -> StepErrors:
    """Run ``train(model, optimizer, loader, accum)`` with a :class:`StepRecorder` for the
    optimiser and compare every recorded step with one forward/backward of that step's
    ``accum`` micro-batches, clipped to ``max_norm`` the same way.

    Args:
        train: the training loop under test.
        model: the model (its weights never change; its ``.grad`` is cleared afterwards).
        loader: the micro-batches, in order.
        accum: micro-batches per optimiser step.
        max_norm: the gradient clipping of the loop.

    Returns:
        :class:`StepErrors`; steps beyond ``len(loader) // accum`` are not compared.

    Raises:
        ValueError: ``accum`` is not a positive int.
    """
    positive_int("accum", accum)
    recorder = StepRecorder(model.parameters())
    model.zero_grad(set_to_none=True)
    returned = train(model, recorder, loader, accum)
    expected = len(loader) // accum
    errors = []
    for s, g in enumerate(recorder.steps[:expected]):
        full = _full_gradient(model, list(loader[s * accum : (s + 1) * accum]), max_norm)
        errors.append(relative_error(g, full))
    model.zero_grad(set_to_none=True)
    return StepErrors(errors, len(recorder.steps), expected, returned)
