"""Lesson 5's figures: choosing micro-batch, accumulation and tokens per step.

Inputs: :func:`course_lib.fit.find_largest` and :class:`course_lib.memory.MemoryProbe` (the
search), :class:`course_lib.token_log.TokensPerStepLogger` (a logged run) and
:mod:`course_lib.lessons.choosing` (the plan and the small-dataset trap).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..lessons.choosing import PlanCurve, SmallDatasetTrap
from ..token_log import StepTokens
from .style import (
    BLUE,
    FAINT,
    FIRST_COLOUR,
    FIT_COLOUR,
    INK,
    MUTED,
    NO_FIT_COLOUR,
    ORANGE,
    SECOND_COLOUR,
    YELLOW,
    draw_budget,
    mib,
    require,
)


def _probe_marker(fitted: bool) -> dict:
    return {"marker": "o" if fitted else "X", "color": FIT_COLOUR if fitted else NO_FIT_COLOUR}


def _label_offsets(xs: Sequence[float], near: float) -> list[tuple[int, int]]:
    """Offsets (points) for labels at ``xs`` in increasing order: a label within ``near`` of the
    last label on its side goes to the other side of its point (above first), so neighbouring
    numbers never print over each other."""
    offsets: list[tuple[int, int]] = []
    last = {1: -math.inf, -1: -math.inf}  # side -> x of its last label
    for x in xs:
        free = [side for side in (1, -1) if abs(x - last[side]) > near]
        side = free[0] if free else max((1, -1), key=lambda k: abs(x - last[k]))
        last[side] = x
        offsets.append((5, 5) if side > 0 else (5, -13))
    return offsets


def _draw_probe_bytes(ax, history, needed, memory_budget: int, predicted) -> None:
    """Bytes needed against the micro-batch size, each probe numbered in probe order."""
    if predicted:
        xs = sorted(predicted)
        ax.plot(xs, [mib(predicted[n]) for n in xs], "-", color=MUTED,
                label="memory model (predicted)")  # fmt: skip
    span = max(max(n for n, _ in history), max(predicted or [1])) - 1 or 1
    order = sorted(range(len(history)), key=lambda i: history[i][0])
    offsets = dict(zip(order, _label_offsets([history[i][0] for i in order], 0.06 * span)))
    for i, (n, fitted) in enumerate(history):
        y = mib(needed[n])
        ax.plot(n, y, linestyle="none", markersize=8, **_probe_marker(fitted))
        ax.annotate(str(i + 1), (n, y), textcoords="offset points", xytext=offsets[i], fontsize=8)
    ax.plot([], [], linestyle="none", label="probe fits", **_probe_marker(True))
    ax.plot([], [], linestyle="none", label="probe does not fit", **_probe_marker(False))
    draw_budget(ax, memory_budget)
    ax.set_xlabel("micro-batch size n (rows of the longest seq_len)")
    ax.set_ylabel("memory needed for one step (MiB)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    ax.grid(alpha=0.3)


def _draw_bracket(ax, history) -> None:
    """The size tried at each probe and the bracket [largest fit, smallest failure] closing in."""
    lo, hi, los, his = 0, None, [], []
    for n, fitted in history:
        if fitted:
            lo = max(lo, n)
        else:
            hi = n if hi is None else min(hi, n)
        los.append(lo)
        his.append(hi)
    steps = range(1, len(history) + 1)
    ax.plot(steps, [n for n, _ in history], "-", color=INK, alpha=0.3)
    for i, (n, fitted) in zip(steps, history):
        ax.plot(i, n, linestyle="none", **_probe_marker(fitted))
    ax.step(steps, los, where="post", color=FIT_COLOUR, alpha=0.6, label="largest fit so far")
    top = max(n for n, _ in history)
    ax.step(steps, [h if h is not None else top for h in his], where="post", color=NO_FIT_COLOUR,
            alpha=0.6, ls="--", label="smallest failure so far")  # fmt: skip
    ax.set_xlabel("probe")
    ax.set_ylabel("micro-batch size tried")
    ax.set_ylim(0, top * 1.08 + 0.5)  # linear: sizes a row apart stay apart (log ran them together)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xticks(list(steps))
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
    ax.grid(alpha=0.3)
    ax.set_title("double, then bisect")


def plot_search_probes(
    history: Sequence[tuple[int, bool]],
    needed: dict[int, int],
    memory_budget: int,
    predicted: dict[int, int] | None = None,
    title: str = "",
) -> Figure:
    """The largest-micro-batch search drawn probe by probe.

    Left: bytes needed against the micro-batch size, fits as blue circles, failures as
    vermillion crosses, each numbered in probe order (neighbouring numbers on either side of
    their points), the budget dashed. Right: the size tried at each probe (a linear axis) and the
    bracket ``[largest fit, smallest failure]`` closing in.

    Args:
        history: ``[(n, fitted), ...]`` in probe order (``SearchResult.history``).
        needed: ``{n: bytes}`` measured at each probe (``MemoryProbe.needed``).
        memory_budget: the card's budget in bytes (the dashed line).
        predicted: optional ``{n: bytes}`` from the memory model, drawn as a line.
        title: the left panel's title (default: the number of probes).

    Returns:
        The figure (two panels).

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(history), "plot_search_probes needs at least one probe in history")
    missing = [n for n, _ in history if n not in needed]
    require(not missing, f"plot_search_probes has no measured bytes for probes {missing}")
    fig, (ax, ax_order) = plt.subplots(
        1, 2, figsize=(10, 4.6), gridspec_kw={"width_ratios": [3, 2]}
    )
    _draw_probe_bytes(ax, history, needed, memory_budget, predicted)
    ax.set_title(title or f"{len(history)} probes (numbers: probe order)")
    _draw_bracket(ax_order, history)
    fig.tight_layout()
    return fig


def plot_step_tokens(
    history: Sequence[StepTokens],
    threshold: int = 4000,
    planned: int | None = None,
    title: str = "",
) -> Figure:
    """Tokens per optimiser step as a :class:`~course_lib.token_log.TokensPerStepLogger` logged
    them: for every step, the row slots (``all_tokens``), the real tokens (``non_pad_tokens``) and
    the tokens the loss trains on (``loss_tokens``), beside the ``threshold`` and the ``planned``
    full-row count.

    Args:
        history: the logger's steps (``TokensPerStepLogger.history``).
        threshold: the tokens-per-step rule of thumb (a dashed line).
        planned: the plan's full-row tokens per step (a dotted line), or ``None``.
        title: the title (default: "What the optimiser actually saw (logged)").

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(history), "plot_step_tokens needs at least one logged step")
    fig, ax = plt.subplots(figsize=(7.5, 4))
    xs = [s.step for s in history]
    width = 0.27
    series = (
        ("all_tokens", "row slots (padding included)", FAINT),
        ("non_pad_tokens", "real tokens", BLUE),
        ("loss_tokens", "loss tokens (completion only)", ORANGE),
    )
    for k, (name, label, colour) in enumerate(series):
        ax.bar([x + (k - 1) * width for x in xs], [getattr(s, name) for s in history], width,
               color=colour, label=label)  # fmt: skip
    ax.axhline(threshold, color=INK, ls="--", lw=1, label=f"threshold {threshold:,}")
    if planned is not None:
        ax.axhline(planned, color=INK, ls=":", lw=1.5, label=f"planned (full rows) {planned:,}")
    ax.set_xticks(xs)
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("tokens per optimiser step")
    ax.set_title(title or "What the optimiser actually saw (logged)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def _draw_rule_bands(ax, trap: SmallDatasetTrap) -> None:
    """Shade the ranges of ``E`` where each rule of thumb holds."""
    es = trap.effective_batches
    e_steps, e_tokens = trap.max_effective_for_steps, trap.min_effective_for_tokens
    if e_steps >= es[0]:
        ax.axvspan(es[0], min(e_steps, es[-1]), color=FIRST_COLOUR, alpha=0.12,
                   label=f">= {trap.min_steps} steps per epoch: E <= {e_steps:.0f}")  # fmt: skip
    if e_tokens <= es[-1]:
        words = f">= {trap.min_tokens:,} loss tokens per step: E >= {e_tokens:.0f}"
        ax.axvspan(max(e_tokens, es[0]), es[-1], facecolor=SECOND_COLOUR, alpha=0.15, hatch="//",
                   edgecolor=SECOND_COLOUR, linewidth=0, label=words)  # fmt: skip


def _draw_chosen(ax, ax2, trap: SmallDatasetTrap) -> str:
    """Mark ``trap.chosen`` on both curves; the title's words for it ("" when none)."""
    if trap.chosen is None:
        return ""
    i = trap.effective_batches.index(trap.chosen)
    steps, tokens = trap.steps[i], trap.tokens[i]
    ax.axvline(trap.chosen, color=INK, lw=0.8)
    star = dict(marker="*", markersize=15, color=YELLOW, markeredgecolor=INK, linestyle="none")
    ax.plot([trap.chosen], [max(steps, 1)], **star, label=f"your E = {trap.chosen}")
    ax2.plot([trap.chosen], [tokens], **star)
    return (
        f"\nyour E = {trap.chosen}: {steps} full steps per epoch, "
        f"{tokens:,.0f} loss tokens per step"
    )


def plot_small_dataset_trap(
    trap: SmallDatasetTrap, steps_range: tuple[float, float] | None = None
) -> Figure:
    """Two rules against one dataset (:func:`course_lib.lessons.choosing.small_dataset_trap`):
    optimiser steps per epoch and loss tokens per step over the effective batch ``E``. The
    shaded bands mark where each rule of thumb holds; ``trap.chosen``, when set, is starred on
    both curves and its two numbers are written in the title. Ticks and step counts are written
    at the powers of two only, so a chosen ``E`` beside one never prints over it.

    Args:
        trap: the steps per epoch and loss tokens per step over the effective batches.
        steps_range: ``(bottom, top)`` of the steps axis (log), fixed across an explorer's
            frames; ``None``: matplotlib's choice.

    Returns:
        The figure (steps on the left axis, tokens on the right, the legend below).

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    es = trap.effective_batches
    require(bool(es), "plot_small_dataset_trap needs at least one effective batch")
    require(
        len(trap.steps) == len(trap.tokens) == len(es),
        "plot_small_dataset_trap needs one step count and one token count per effective batch",
    )
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ax.plot(es, [max(s, 0.5) for s in trap.steps], "o-", color=FIRST_COLOUR,
            label="full optimiser steps per epoch")  # fmt: skip
    ax.axhline(trap.min_steps, color=FIRST_COLOUR, ls="--", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if steps_range is not None:
        ax.set_ylim(*steps_range)
    ax.set_xlabel("effective batch E (examples per optimiser step)")
    ax.set_ylabel("steps per epoch", color=FIRST_COLOUR)
    ticks = [e for e in es if e & (e - 1) == 0] or es
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(e) for e in ticks])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    for e, s in zip(es, trap.steps):
        if e in ticks:
            ax.annotate(str(s), (e, max(s, 0.5)), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=8, color=FIRST_COLOUR)  # fmt: skip
    ax2 = ax.twinx()
    ax2.plot(es, trap.tokens, "s-", color=SECOND_COLOUR, label="loss tokens per step")
    ax2.axhline(trap.min_tokens, color=SECOND_COLOUR, ls="--", lw=1)
    ax2.set_yscale("log")
    ax2.set_ylabel("loss tokens per step", color=SECOND_COLOUR)
    _draw_rule_bands(ax, trap)
    chosen = _draw_chosen(ax, ax2, trap)
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles, [str(h.get_label()) for h in handles], fontsize=8, ncol=2,
              loc="upper center", bbox_to_anchor=(0.5, -0.15))  # fmt: skip
    ax.set_title(
        f"{trap.dataset_size:,} examples, {trap.loss_tokens_per_example:.0f} loss tokens each "
        f"(measured mean){chosen}",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def _plan_text(curve: PlanCurve) -> str:
    if curve.plan is None:
        return "nothing fits:\n" + textwrap.fill(curve.error, 64)
    p = curve.plan
    rows = [f"{k:<18} {v}" for k, v in p.rows()[1:]]
    extra = [f"note: {n}" for n in p.notes] + [f"WARNING: {w}" for w in p.warnings]
    return "\n".join(rows + [line for e in extra for line in textwrap.wrap(e, 70)])


def plot_training_plan(curve: PlanCurve) -> Figure:
    """One frame of the planner (:func:`course_lib.lessons.choosing.plan_curve`).

    Left: the memory model's bytes for one training step over the micro-batch size (weights,
    gradients and AdamW state at the bottom), the budget, the search's probes and the chosen
    micro-batch. Right: the plan as a table, with its notes and warnings.

    Args:
        curve: one frame of the planner (the plan, or the reason nothing fits, and its curve).

    Returns:
        The figure (two panels).

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(curve.micro_batch_sizes), "plot_training_plan needs at least one micro-batch")
    require(
        len(curve.totals) == len(curve.micro_batch_sizes),
        "plot_training_plan needs one total per micro-batch size",
    )
    fig, (ax, ax_text) = plt.subplots(
        1, 2, figsize=(11.5, 4.8), gridspec_kw={"width_ratios": [2, 3]}
    )
    ax_text.axis("off")
    ax_text.text(0, 1, _plan_text(curve), family="monospace", fontsize=8, va="top", ha="left",
                 transform=ax_text.transAxes)  # fmt: skip
    ns, budget = curve.micro_batch_sizes, mib(curve.memory_budget)
    ax.fill_between(
        ns, 0, mib(curve.fixed_bytes), color=MUTED, alpha=0.3, label="weights + grads + AdamW"
    )
    ax.plot(ns, [mib(t) for t in curve.totals], "-", color=BLUE, label="one step (model)")
    draw_budget(ax, curve.memory_budget)
    for n, fitted, total in curve.probes:
        ax.plot(n, mib(total), linestyle="none", **_probe_marker(fitted))
    if curve.plan is not None:
        p = curve.plan
        ax.plot(p.micro_batch, mib(p.memory.total), "*", color=YELLOW, markersize=16,
                markeredgecolor=INK, label=f"chosen micro-batch {p.micro_batch}")  # fmt: skip
    ax.set_ylim(0, max(budget, mib(curve.totals[-1])) * 1.1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("micro-batch size")
    ax.set_ylabel("MiB per device")
    ckpt = "" if curve.checkpointing == "off" else f", checkpointing={curve.checkpointing}"
    ax.set_title(f"seq_len {curve.seq_len}, {budget:g} MiB{ckpt}", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
