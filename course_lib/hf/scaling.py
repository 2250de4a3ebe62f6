"""The step as lines in the micro-batch and the depth, read off short models: a plan's probes in
microseconds instead of a whole replay each.

Every tensor of a training step grows linearly with the rows of the micro-batch (for two rows and
more: one row skips the labels' copy, 8 bytes per token), so the live bytes after each
allocation of :func:`~course_lib.hf.replay.replay`, and their split by kind, are ``a + b * rows``.
The same holds layer for layer in the depth when every layer runs the same recipe: what the
layers below (or above) keep grows by a fixed amount per layer. So the live bytes at a given
moment of layer ``i`` are a line in ``i``, whose most is at one of its ends: only the first and
the last layer need following (:data:`ENDS`). A 32- or 80-layer model's step is read off models
of 2 and 3 layers at two and three rows (:func:`step_line`), and any micro-batch is then one
pass over the line (:meth:`StepLine.at`): the same peak, split, forward peak and saved bytes as
the whole replay, which ``tests/library/test_finetune_plan.py`` checks, byte for byte, on every
family.

Where the layers differ in a repeating pattern (Gemma 2's and 3's sliding windows on some
layers, checkpointing every n-th layer) the short models are a whole number of periods apart and
as long as the real one modulo the period, so the same layers sit at both ends
(:func:`period`); a model too short for that is read off its whole depth. Packed micro-batches
(whose shape is not a line in the rows) and a mixture of experts (its routed tokens are counted
per micro-batch) are carried in the depth only, at their own rows (:func:`replay_step`
decides).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache

from .models import record_step
from .replay import Replayed, replay
from .spec import Arch, StepSpec

_LAYER = re.compile(r"layers\.(\d+)\.")
_TOP = re.compile(r"layers\.top-(\d+)\.")
ENDS = 1  # layers followed at each end of the stack (a whole period, where layers repeat)
FIELDS = 6  # numbers per log entry: live, gradients finished, and the four kinds


@dataclass(frozen=True)
class StepLine:
    """One step's log as lines in the rows (two and more): per allocation ``a + b * rows`` of
    the live bytes, the gradients finished before it and the four kinds; the forward's share of
    the log; the saved bytes by component; and the real depth (to name the layers)."""

    where: tuple[str, ...]
    a: tuple[tuple[int, ...], ...]
    b: tuple[tuple[int, ...], ...]
    forward_events: int
    saved_a: tuple[tuple[str, int], ...]
    saved_b: tuple[tuple[str, int], ...]
    depth: int
    flops_a: tuple[tuple[str, float], ...] = ()
    flops_b: tuple[tuple[str, float], ...] = ()

    def at(self, rows: int) -> Replayed:
        """What :func:`~course_lib.hf.replay.replay` finds at ``rows`` rows (two or more).

        Args:
            rows: the micro-batch.

        Returns:
            The :class:`~course_lib.hf.replay.Replayed` peak, split and forward peak.
        """
        live = [a[0] + b[0] * rows for a, b in zip(self.a, self.b)]
        best = live.index(max(live))  # the first to reach it, as the replay names it
        a, b = self.a[best], self.b[best]
        act, loss, grads, transient = (a[k] + b[k] * rows for k in range(2, FIELDS))
        forward = max(live[: self.forward_events], default=0)
        saved = {k: v + dict(self.saved_b)[k] * rows for k, v in self.saved_a}
        flops = {k: v + dict(self.flops_b)[k] * rows for k, v in self.flops_a}
        where = _TOP.sub(lambda m: f"layers.{self.depth - 1 - int(m.group(1))}.", self.where[best])
        return Replayed(live[best], where, act, loss, grads, transient, forward, saved,
                        flops=flops)  # fmt: skip

    def peak(self, rows: int, grads: int | None) -> tuple[int, str, int]:
        """``(peak bytes, where, bytes per extra row there)`` at ``rows`` rows, with ``grads``
        bytes of gradients there from the start (``None``: none, as after ``zero_grad``): the
        second micro-batch of an accumulation window.

        Args:
            rows: the micro-batch.
            grads: gradient bytes there from the start, or ``None``.

        Returns:
            ``(peak bytes, where, bytes per extra row there)``.
        """
        g = [0] * len(self.a) if grads is None else [a[1] for a in self.a]
        live = [a[0] + b[0] * rows - gi for a, b, gi in zip(self.a, self.b, g)]
        best = live.index(max(live))
        return live[best] + (grads or 0), self.where[best], self.b[best][0]


def _log(arch: Arch, spec: StepSpec, n_layers: int, rows: int, ends: int) -> tuple:
    """The allocation log at ``rows`` rows of ``arch`` cut to ``n_layers`` (``ends`` > 0: its
    middle layers dropped, ``ends`` layers kept at each end, the top ones named from the top),
    the forward's share, the saved bytes."""
    cut = ends > 0

    def label(m: re.Match) -> str:
        i = int(m.group(1))
        return f"layers.{i}." if i < ends else f"layers.top-{n_layers - 1 - i}."

    r = replay(record_step(replace(arch, num_hidden_layers=n_layers),
                           replace(spec, batch_size=rows)), log=True)  # fmt: skip
    assert r.log is not None  # replay(..., log=True) keeps one
    kept, forward = [], 0
    assert r.flops is not None
    counts = {**r.saved, **{"flops:" + k: v for k, v in r.flops.items()}}
    for i, (where, *numbers) in enumerate(r.log):
        m = _LAYER.search(where)
        if cut and m and ends <= int(m.group(1)) < n_layers - ends:
            continue  # a middle layer: never above both ends
        kept.append((_LAYER.sub(label, where) if cut else where, *numbers))
        forward += i < r.forward_events
    return kept, forward, counts


def period(arch: Arch, spec: StepSpec) -> int:
    """Layers after which the recipe repeats: the sliding windows' pattern (Gemma 2 alternates,
    Gemma 3 holds five local layers to a global one) and checkpointing every n-th layer.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.

    Returns:
        The period in layers (1: every layer the same).
    """
    w = arch.windows
    p = next((p for p in range(1, len(w) + 1) if all(w[i] == w[i % p] for i in range(len(w)))),
             1)  # fmt: skip
    every = spec.checkpoint_every if spec.checkpointing == "blocks" else 1
    return math.lcm(p, every)


def _at_depth(arch: Arch, spec: StepSpec, rows: int) -> tuple:
    """The log at ``rows`` rows carried to ``arch``'s depth from two short models, ``p`` layers
    apart and as long as the real one modulo the period ``p`` (so the same layers sit at both
    ends), or read off the whole depth: its names, numbers, forward share and saved bytes."""
    L, p = arch.num_hidden_layers, period(arch, spec)
    ends = max(ENDS, p)
    base = 2 * ends + (L - 2 * ends) % p
    cut = L > base + p
    base = base if cut else L
    lo, forward, saved_lo = _log(arch, spec, base, rows, ends if cut else 0)
    hi, _, saved_hi = _log(arch, spec, base + p, rows, ends) if cut else (lo, 0, saved_lo)
    names = [e[0] for e in lo]
    if [e[0] for e in hi] != names:
        raise AssertionError("the step's ops changed with the depth")
    extra = (L - base) // p
    numbers = [tuple(x + (y - x) * extra for x, y in zip(e[1:], f[1:])) for e, f in zip(lo, hi)]
    saved = {k: v + (saved_hi.get(k, 0) - v) * extra for k, v in saved_lo.items()}
    return names, numbers, forward, saved


@lru_cache(maxsize=64)
def step_line(arch: Arch, spec: StepSpec, one: bool = False) -> StepLine:
    """The step's log as lines in the rows at ``arch``'s depth (module docstring); ``spec``'s
    ``batch_size`` is ignored (``one``: the line is flat, the step at ``spec``'s own rows).

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.
        one: carried in the depth only, at ``spec.batch_size`` rows (one row skips the labels'
            copy, so it is not on the line of two and more; packed rows and experts' routed
            tokens change with the micro-batch).

    Returns:
        The :class:`StepLine`.

    Raises:
        AssertionError: the recorded ops changed with the rows or the depth (the line would not
            hold); a bug in the recipes, not in the caller's input.
    """
    L = arch.num_hidden_layers
    if one:
        names, numbers, forward, counts = _at_depth(arch, spec, spec.batch_size)
        flat = tuple((0,) * FIELDS for _ in numbers)
        zero = {k: 0 for k in counts}
        saved_a, saved_b, flops_a, flops_b = _split(counts, zero)
        return StepLine(tuple(names), tuple(numbers), flat, forward, saved_a, saved_b, L, flops_a,
                        flops_b)  # fmt: skip
    names, two, forward, s2 = _at_depth(arch, spec, 2)
    names3, three, _, s3 = _at_depth(arch, spec, 3)
    if names3 != names:
        raise AssertionError("the step's ops changed with the rows")
    b = tuple(tuple(y - x for x, y in zip(e2, e3)) for e2, e3 in zip(two, three))
    a = tuple(tuple(x - 2 * d for x, d in zip(e2, eb)) for e2, eb in zip(two, b))
    sb = {k: s3[k] - s2[k] for k in s2}
    sa = {k: s2[k] - 2 * sb[k] for k in s2}
    saved_a, saved_b, flops_a, flops_b = _split(sa, sb)
    return StepLine(tuple(names), a, b, forward, saved_a, saved_b, L, flops_a, flops_b)


def _split(a: dict, b: dict) -> tuple:
    """The saved bytes' and the operations' lines, apart (``saved_a, saved_b, flops_a,
    flops_b`` in :class:`StepLine`'s order, the depth between them)."""
    saved = [(k, v) for k, v in a.items() if not k.startswith("flops:")]
    flops = [(k.removeprefix("flops:"), v) for k, v in a.items() if k.startswith("flops:")]
    return (tuple(saved), tuple((k, b[k]) for k, _ in saved), tuple(flops),
            tuple((k, b["flops:" + k]) for k, _ in flops))  # fmt: skip


def peak_line(arch: Arch, spec: StepSpec) -> StepLine:
    """The step's line at ``arch``'s depth (:func:`step_line`), for :meth:`StepLine.peak`.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.

    Returns:
        The :class:`StepLine`.
    """
    return step_line(arch, replace(spec, batch_size=0))


def replay_step(arch: Arch, spec: StepSpec) -> Replayed:
    """The step's replay: read off its line where the step is one (module docstring), else
    the whole step replayed.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.

    Returns:
        The :class:`~course_lib.hf.replay.Replayed` step.
    """
    if spec.documents or spec.expert_tokens or spec.batch_size == 1:  # in the depth only
        return step_line(arch, spec, True).at(2)
    return step_line(arch, replace(spec, batch_size=0)).at(spec.batch_size)
