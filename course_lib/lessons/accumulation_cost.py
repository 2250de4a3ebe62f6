"""Lesson 3's measurements of what accumulation does to an optimiser step besides its weights:
the scale of a summed loss, and the memory and wall time of ``K`` micro-batches.

* :func:`summed_loss_runs`: the recipe's loop without its ``/ accum`` (the micro-batch losses
  summed over the window, not averaged). Its gradient is ``K`` times the averaged one; plain SGD
  then takes the averaged run's step at ``K`` times the learning rate, measured by training all
  three; AdamW (with clipping) is measured beside it.
* :func:`accumulation_cost`: the peak memory (:func:`course_lib.memory.measure`) and wall time
  (:func:`course_lib.timing.interleave`, rounds taking turns) of one optimiser step that
  accumulates ``K`` micro-batches, beside one step on a single batch of the same ``K × B`` rows.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from .._checks import positive_int, positive_number
from ..accumulation import accumulate_gradients, concatenate_micro_batches, flat_grad
from ..memory.meter import Device, measure, measurement_method, pick_device
from ..model import TinyGPT, TinyGPTConfig
from ..timing import Step, interleave

Window = list[dict[str, torch.Tensor]]  # the micro-batches of one optimiser step
SUMMED_RUNS = ("averaged, lr", "summed, lr", "averaged, K × lr")


@dataclass
class SummedLoss:
    """What :func:`summed_loss_runs` measured.

    ``scale[k]``: ``||g_summed|| / ||g_averaged||`` over the first ``k`` micro-batches of the
    first window. ``losses[run]``: the training loss (the mean of the micro-batch means, nats) at
    every SGD step of each run of :data:`SUMMED_RUNS`. ``same_as_k_lr``: ``||θ_summed −
    θ_K×lr|| / ||θ_K×lr − θ_0||`` after the SGD runs. ``adamw_distance``: ``||θ_summed −
    θ_averaged|| / ||θ_averaged − θ_0||`` of two AdamW runs clipped to norm 1, as the lesson
    trains.
    """

    grad_accum_steps: int
    lr: float
    scale: dict[int, float]
    losses: dict[str, list[float]]
    same_as_k_lr: float
    adamw_distance: float


def _recipe_window(model: torch.nn.Module, window: Window, summed: bool) -> float:
    """The recipe's loop over one window, with or without ``/ accum``; its mean loss (nats)."""
    total = 0.0
    for mb in window:
        loss = model(**mb).loss
        (loss if summed else loss / len(window)).backward()
        total += float(loss.detach()) / len(window)
    return total


def _trained(
    start: TinyGPT, windows: Sequence[Window], optimizer: Callable, summed: bool, clip: bool
) -> tuple[torch.Tensor, list[float]]:
    model, losses = copy.deepcopy(start), []
    opt = optimizer(model.parameters())
    for window in windows:
        losses.append(_recipe_window(model, window, summed))
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return _theta(model), losses


def _theta(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _distance(a: torch.Tensor, b: torch.Tensor, start: torch.Tensor) -> float:
    return float((a - b).norm() / (b - start).norm())


def summed_loss_runs(
    config: TinyGPTConfig, windows: Sequence[Window], lr: float, adamw_lr: float = 3e-3,
    seed: int = 0, device: Device = None,
) -> SummedLoss:  # fmt: skip
    """Train the recipe's loop with its losses averaged and summed over each window.

    Three SGD runs from the same weights on the same windows (no clipping, so nothing hides the
    scale): averaged at ``lr``, summed at ``lr``, averaged at ``K × lr``; then two AdamW runs at
    ``adamw_lr`` clipped to norm 1, averaged and summed.

    Args:
        config: the model every run starts from (seeded with ``seed``).
        windows: one window of ``K`` micro-batches per step, every micro-batch with a loss token.
        lr: SGD's learning rate.
        adamw_lr: AdamW's learning rate.
        seed: the initial weights' seed.
        device: where the runs train (default: CUDA when available).

    Returns:
        :class:`SummedLoss`.

    Raises:
        ValueError: no window, windows of different sizes, or a learning rate that is not
            positive.
    """
    k = len(windows[0]) if windows else 0
    if not windows or any(len(w) != k for w in windows):
        raise ValueError("summed_loss_runs needs windows that all hold the same number of "
                         f"micro-batches, got sizes {[len(w) for w in windows]}")  # fmt: skip
    positive_number("lr", lr)
    positive_number("adamw_lr", adamw_lr)
    torch.manual_seed(seed)
    start = TinyGPT(config).to(pick_device(device))
    scale = {}
    for i in range(1, k + 1):
        grads = []
        for summed in (True, False):
            start.zero_grad(set_to_none=True)
            _recipe_window(start, windows[0][:i], summed)
            grads.append(flat_grad(start).norm())
        scale[i] = float(grads[0] / grads[1])
    start.zero_grad(set_to_none=True)
    theta_0 = _theta(start)
    sgd = {name: lambda p, r=rate: torch.optim.SGD(p, lr=r)
           for name, rate in zip(SUMMED_RUNS, (lr, lr, k * lr))}  # fmt: skip
    thetas, losses = {}, {}
    for name, summed in zip(SUMMED_RUNS, (False, True, False)):
        thetas[name], losses[name] = _trained(start, windows, sgd[name], summed, clip=False)
    adamw = [_trained(start, windows, lambda p: torch.optim.AdamW(p, lr=adamw_lr), s, clip=True)[0]
             for s in (False, True)]  # fmt: skip
    return SummedLoss(
        grad_accum_steps=k,
        lr=lr,
        scale=scale,
        losses=losses,
        same_as_k_lr=_distance(thetas["summed, lr"], thetas["averaged, K × lr"], theta_0),
        adamw_distance=_distance(adamw[1], adamw[0], theta_0),
    )


@dataclass
class AccumulationCost:
    """What :func:`accumulation_cost` measured, per ``k`` of ``ks`` (sizes in bytes).

    ``peak_bytes[k]``: the peak of one optimiser step that accumulates ``k`` micro-batches of
    ``micro_batch_size`` full rows of ``seq_len`` tokens; ``batch_peak_bytes[k]``: one step on a
    single batch of the same ``k × micro_batch_size`` rows; ``seconds[k]`` and
    ``batch_seconds[k]``: the wall seconds of every timed step of each, in round order.
    """

    ks: list[int]
    micro_batch_size: int
    seq_len: int
    method: str
    peak_bytes: dict[int, int]
    batch_peak_bytes: dict[int, int]
    seconds: dict[int, list[float]]
    batch_seconds: dict[int, list[float]]

    def median(self, k: int, batch: bool = False) -> float:
        """The median seconds of one optimiser step.

        Args:
            k: the accumulation steps (or the batch of ``k`` micro-batches' rows).
            batch: the single batch instead of the accumulated step.

        Returns:
            Seconds.
        """
        return statistics.median((self.batch_seconds if batch else self.seconds)[k])

    def spread(self, k: int, batch: bool = False) -> tuple[float, float]:
        """The fastest and slowest timed step, in seconds.

        Args:
            k: as :meth:`median`.
            batch: as :meth:`median`.

        Returns:
            ``(min, max)`` seconds.
        """
        times = (self.batch_seconds if batch else self.seconds)[k]
        return min(times), max(times)

    def pair_ratios(self, k: int) -> list[float]:
        """The accumulated step's seconds over the one batch's, round by round (each round ran
        both, in turns: :func:`course_lib.timing.interleave`).

        Args:
            k: the accumulation steps.

        Returns:
            One ratio per timed round.
        """
        return [a / b for a, b in zip(self.seconds[k], self.batch_seconds[k])]


def _full_rows(rows: int, seq_len: int, vocab_size: int, gen: torch.Generator) -> dict:
    """A micro-batch of full rows of random tokens: every label a loss token but the first."""
    ids = torch.randint(0, vocab_size, (rows, seq_len), generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def _optimiser_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, window: Window
) -> None:
    accumulate_gradients(model, window, "token_weighted", distributed=False)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _step_of(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, window: Window
) -> Callable[..., None]:
    """One optimiser step on ``window`` as a call (for the meter, and for the timing loop)."""
    return lambda *_: _optimiser_step(model, optimizer, window)


def accumulation_cost(
    config: TinyGPTConfig, micro_batch_size: int = 2, seq_len: int = 128,
    ks: Iterable[int] = (1, 2, 4, 8), rounds: int = 5, seed: int = 0, device: Device = None,
) -> AccumulationCost:  # fmt: skip
    """Measure one optimiser step (token-weighted accumulation, clipping, AdamW) at every ``k``.

    The model and its AdamW state exist before anything is measured (one warm-up step), as in a
    running training loop; memory is measured once per step kind, then every kind is timed in
    ``rounds`` interleaved rounds (one untimed warm-up round).

    Args:
        config: the model's shape (seeded with ``seed``).
        micro_batch_size: rows per micro-batch.
        seq_len: tokens per row (full rows: every micro-batch holds the same loss tokens).
        ks: the accumulation steps to measure.
        rounds: timed rounds.
        seed: seeds the weights and the random tokens.
        device: where it runs (default: CUDA when available).

    Returns:
        :class:`AccumulationCost`.

    Raises:
        ValueError: no ``ks``, or a count that is not a positive int.
    """
    ks = sorted({positive_int("k", k) for k in ks})
    if not ks:
        raise ValueError("accumulation_cost needs at least one accumulation step count in ks")
    dev = pick_device(device)
    torch.manual_seed(seed)
    model = TinyGPT(config).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(seed)
    micro = [{name: t.to(dev) for name, t in
              _full_rows(micro_batch_size, seq_len, config.vocab_size, gen).items()}
             for _ in range(ks[-1])]  # fmt: skip
    kinds = {(k, batch): [concatenate_micro_batches(micro[:k])] if batch else micro[:k]
             for k in ks for batch in (False, True)}  # fmt: skip
    _optimiser_step(model, optimizer, kinds[ks[0], False])  # AdamW's state exists from here on
    steps = {kind: _step_of(model, optimizer, w) for kind, w in kinds.items()}
    peaks = {kind: measure(step, dev).peak_bytes for kind, step in steps.items()}
    named: dict[str, Step] = {f"{k} {batch}": step for (k, batch), step in steps.items()}
    timed = interleave(named, positive_int("rounds", rounds), warmup=1, device=dev)
    return AccumulationCost(
        ks=ks,
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        method=measurement_method(dev),
        peak_bytes={k: peaks[k, False] for k in ks},
        batch_peak_bytes={k: peaks[k, True] for k in ks},
        seconds={k: timed.seconds[f"{k} False"] for k in ks},
        batch_seconds={k: timed.seconds[f"{k} True"] for k in ks},
    )
