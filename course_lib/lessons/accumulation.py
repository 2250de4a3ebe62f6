"""Lesson 3's experiments: accumulation windows with set loss tokens, two training runs, ranks.

Real windows mix short and long completions by chance. To show how the mean-of-means error grows
with the imbalance, :func:`window_from_completion_lens` builds windows whose every row keeps its
prompt and exactly ``c`` completion tokens of a real synthetic example (so ``c`` shifted loss
tokens), and :func:`spread_completion_lens` chooses ``c`` per micro-batch so that the fullest
holds ``spread`` times the loss tokens of the emptiest. :func:`accumulation_window` measures one
such window in both accumulation modes, :func:`window_weights` the weight each mode gives each
micro-batch; :func:`accumulation_runs` trains two models that differ only in the mode;
:func:`rank_recipes` plays data-parallel ranks in one process. The gradient-noise experiment is
:mod:`course_lib.noise`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
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
from ..batch import count_loss_tokens
from ..collate import PaddingCollator
from ..data import PAD_ID
from ..loss import causal_lm_loss
from ..memory.meter import Device, pick_device
from ..model import TinyGPT, TinyGPTConfig

Window = list[dict[str, torch.Tensor]]  # the micro-batches of one optimiser step


def spread_completion_lens(
    grad_accum_steps: int, spread: float, micro_batch_size: int = 2, shortest: int = 4
) -> list[list[int]]:
    """Completion tokens per row, per micro-batch: ``shortest * spread**(i / (K - 1))`` for
    micro-batch ``i`` of ``K`` (geometric, rounded), the same for every row of a micro-batch.

    ``spread`` is the ratio of the longest to the shortest micro-batch's loss tokens (1 = equal).

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
    that are not -100); ``errors[mode]`` the relative gradient error of accumulating it in that
    mode against one full batch (:func:`~course_lib.accumulation.gradient_error`)."""

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
    """Build a window of ``grad_accum_steps`` micro-batches with the given ``spread``
    (:func:`spread_completion_lens`, :func:`window_from_completion_lens`) on ``model``'s device
    and measure both modes' gradient error. Runs ``2 (K + 1)`` forward/backward passes; the
    model's ``.grad`` is left as it was."""
    lens = spread_completion_lens(grad_accum_steps, spread, micro_batch_size, shortest)
    device = next(model.parameters()).device
    window = [
        {k: v.to(device) for k, v in mb.items()}
        for mb in window_from_completion_lens(examples, lens, start)
    ]
    return AccumulationWindow(
        micro_batch_size=micro_batch_size,
        loss_tokens=[count_loss_tokens(mb["labels"]) for mb in window],
        errors={mode: gradient_error(model, window, mode) for mode in MODES[::-1]},
    )


def _to(window: Window, device: torch.device) -> Window:
    return [{k: v.to(device) for k, v in mb.items()} for mb in window]


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
    """Measure :class:`WindowWeights` on ``model`` (its ``.grad`` is cleared afterwards)."""
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
    each on the ``heldout`` examples (:func:`heldout_loss`)."""
    dev = pick_device(device)
    torch.manual_seed(seed)
    start = TinyGPT(config).to(dev)
    theta_0 = torch.cat([p.detach().flatten() for p in start.parameters()])
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
            thetas[mode].append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    distance = [float((m - t).norm() / (t - theta_0).norm())
                for m, t in zip(thetas["mean"], thetas["token_weighted"])]  # fmt: skip
    held: dict[str, dict[str, float]] = {
        m: heldout_loss(model, heldout, dev) for m, model in models.items()
    }
    return AccumulationRuns(losses, distance, held, models)


def heldout_loss(model: torch.nn.Module, examples: Sequence[dict], device: Device = None) -> dict:
    """Loss per completion token on ``examples`` (one padded batch), over the examples whose
    completion is at most the median length (``"short (≤m)"``), the others (``"long"``) and all.
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
    """Each rank's accumulation recipe, one replica per rank, DDP's gradient average done by hand:
    the relative error of the averaged gradient against one full batch of every rank's rows.

    ``"N_all and × W"``: the window's loss tokens summed over ranks, the loss times the world
    size (what :func:`~course_lib.accumulation.accumulate_gradients` does under DDP);
    ``"each rank's own N"``: token-weighted per rank; ``"loss / accum"``: the mean of means.
    """
    model.zero_grad(set_to_none=True)
    model(**concatenate_micro_batches([mb for w in rank_windows for mb in w])).loss.backward()
    g_full = flat_grad(model, torch.float32)
    model.zero_grad(set_to_none=True)
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
        out[recipe] = relative_error(torch.stack(grads).mean(0), g_full)  # DDP's average
    return out
