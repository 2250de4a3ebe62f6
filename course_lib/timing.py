"""The one interleaved timing loop: several training steps compared in one run, turn by turn.

Timing two ways of training one after the other lets a burst of background load (a shared
machine, a thermal dip) land on one side only. :func:`interleave` runs the competitors in turns
instead: round ``r`` runs every step once, in the given order on even rounds and reversed on odd
ones, so no side always runs first on a warmer cache. Negative rounds are warm-ups, not timed.
On a GPU the device is synchronised around every timed call.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from ._checks import non_negative_int, positive_int

Step = Callable[[int], object]  # one timed call: step(round) -> anything worth keeping
GPU_TIMING = "GPU: wall clock after torch.cuda.synchronize()"  # what interleave times on CUDA
CPU_TIMING = "CPU: wall clock"  # everywhere else


def timing_method(device: str | torch.device | None = None) -> str:
    """How :func:`interleave` times on ``device``, for a label beside the figures it prints.

    Args:
        device: where the steps run; ``None`` picks CUDA when it is available, else the CPU
            (as :func:`course_lib.memory.pick_device` does).

    Returns:
        :data:`GPU_TIMING` on a CUDA device, :data:`CPU_TIMING` everywhere else.

    Raises:
        RuntimeError: a string torch does not know as a device (torch's own message).
    """
    if device is None:
        return GPU_TIMING if torch.cuda.is_available() else CPU_TIMING
    return GPU_TIMING if torch.device(device).type == "cuda" else CPU_TIMING


@dataclass
class Timings:
    """Wall seconds of every timed call, per name, in round order, and what each call returned."""

    seconds: dict[str, list[float]]
    results: dict[str, list] = field(default_factory=dict, repr=False)

    def total(self, name: str) -> float:
        """Seconds of every timed call of ``name``, summed.

        Args:
            name: a step's name, as given to :func:`interleave`.

        Returns:
            Seconds, warm-up excluded.
        """
        return sum(self.seconds[name])

    def median(self, name: str) -> float:
        """The median seconds of one call of ``name``.

        Args:
            name: a step's name.

        Returns:
            Seconds per call, the median over its timed rounds.
        """
        return statistics.median(self.seconds[name])

    def pair_ratios(self, name: str, baseline: str) -> list[float]:
        """``name / baseline`` for every round both ran, in round order.

        Args:
            name: the step compared.
            baseline: the step it is divided by.

        Returns:
            One ratio per round both timed: pairs that ran back to back, so a burst of load
            slows both.
        """
        return [a / b for a, b in zip(self.seconds[name], self.seconds[baseline])]

    def ratio(self, name: str, baseline: str) -> float:
        """The median of :meth:`pair_ratios`: robust to a slow round on either side.

        Args:
            name: the step compared.
            baseline: the step it is divided by.

        Returns:
            How many times longer one call of ``name`` takes than one of ``baseline`` (> 1: slower).
        """
        return statistics.median(self.pair_ratios(name, baseline))


def _synchronize(device: str | torch.device | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def interleave(
    steps: dict[str, Step],
    rounds: int | dict[str, int],
    warmup: int = 1,
    device: str | torch.device | None = None,
    progress: bool = False,
    desc: str = "interleaved steps",
) -> Timings:
    """Call ``steps[name](r)`` for ``r`` in ``-warmup .. rounds - 1``, the names taking turns.

    ``r < 0`` are warm-up calls (``batches[r]`` then picks from the end), untimed.

    Args:
        steps: each competitor by name; ``step(r)`` runs round ``r`` and may return a result.
        rounds: timed rounds, one count for every step or a count per name (a name stops once its
            rounds are done, e.g. an epoch with fewer batches).
        warmup: untimed rounds first.
        device: synchronised around every call when it is a CUDA device (GPU work is
            asynchronous: without it the clock stops before the kernels finish).
        progress: show a tqdm bar over the rounds.
        desc: the bar's label.

    Returns:
        :class:`Timings`: every timed call's wall seconds (``time.perf_counter``) and return value,
        per name, in round order.

    Raises:
        ValueError: no step, a round count that is not a positive int, or a negative warm-up.
    """
    if not steps:
        raise ValueError("interleave needs at least one step to time")
    counts = dict.fromkeys(steps, rounds) if isinstance(rounds, int) else dict(rounds)
    for name in steps:
        positive_int(f"rounds[{name!r}]", counts.get(name))
    non_negative_int("warmup", warmup)
    timings = Timings({n: [] for n in steps}, {n: [] for n in steps})
    order = list(steps)
    schedule: Iterable[int] = range(-warmup, max(counts.values()))
    if progress:
        from tqdm.auto import tqdm

        schedule = tqdm(schedule, desc=desc)
    for r in schedule:
        for name in order if r % 2 == 0 else order[::-1]:
            if r >= counts[name]:
                continue
            _synchronize(device)
            start = time.perf_counter()
            out = steps[name](r)
            _synchronize(device)
            if r >= 0:
                timings.seconds[name].append(time.perf_counter() - start)
                timings.results[name].append(out)
    return timings
