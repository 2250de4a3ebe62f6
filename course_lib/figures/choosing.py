"""Lesson 5's figures: choosing micro-batch, accumulation and tokens per step.

Inputs: :func:`course_lib.fit.find_largest` and :class:`course_lib.memory.MemoryProbe` (the
search), :class:`course_lib.token_log.TokensPerStepLogger` (a logged run) and
:mod:`course_lib.lessons.choosing` (the plan and the small-dataset trap).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..lessons.choosing import PlanCurve, SmallDatasetTrap
from ..token_log import StepTokens
from ..units import format_bytes
from .style import FIT_COLOUR, NO_FIT_COLOUR, mib, require


def _probe_marker(fitted: bool) -> dict:
    return {"marker": "o" if fitted else "X", "color": FIT_COLOUR if fitted else NO_FIT_COLOUR}


def _draw_probe_bytes(ax, history, needed, memory_budget: int, predicted) -> None:
    """Bytes needed against the micro-batch size, each probe numbered in probe order."""
    if predicted:
        xs = sorted(predicted)
        ax.plot(
            xs,
            [mib(predicted[n]) for n in xs],
            "-",
            color="gray",
            alpha=0.6,
            label="memory model (predicted)",
        )
    for i, (n, fitted) in enumerate(history, start=1):
        y = mib(needed[n])
        ax.plot(n, y, linestyle="none", markersize=8, **_probe_marker(fitted))
        ax.annotate(str(i), (n, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.plot([], [], linestyle="none", label="probe fits", **_probe_marker(True))
    ax.plot([], [], linestyle="none", label="probe does not fit", **_probe_marker(False))
    ax.axhline(
        mib(memory_budget),
        color="black",
        ls="--",
        lw=1,
        label=f"budget {format_bytes(memory_budget)}",
    )
    ax.set_xlabel("micro-batch size n (rows of the longest seq_len)")
    ax.set_ylabel("memory needed for one step (MiB)")
    ax.legend(fontsize=8)
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
    ax.plot(steps, [n for n, _ in history], "k-", alpha=0.3)
    for i, (n, fitted) in zip(steps, history):
        ax.plot(i, n, linestyle="none", **_probe_marker(fitted))
    ax.step(steps, los, where="post", color=FIT_COLOUR, alpha=0.5, label="largest fit so far")
    top = max(n for n, _ in history)
    ax.step(
        steps,
        [h if h is not None else top for h in his],
        where="post",
        color=NO_FIT_COLOUR,
        alpha=0.5,
        label="smallest failure so far",
    )
    ax.set_xlabel("probe")
    ax.set_ylabel("micro-batch size tried")
    ax.set_yscale("log", base=2)
    ax.set_xticks(list(steps))
    ax.legend(fontsize=8)
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

    Left: bytes needed against the micro-batch size, fits as green circles, failures as red
    crosses, each numbered in probe order, the budget dashed. Right: the size tried at each probe
    and the bracket ``[largest fit, smallest failure]`` closing in.

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
    fig, (ax, ax_order) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
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
        ("all_tokens", "row slots (padding included)", "lightgray"),
        ("non_pad_tokens", "real tokens", "tab:blue"),
        ("loss_tokens", "loss tokens (completion only)", "tab:orange"),
    )
    for k, (name, label, colour) in enumerate(series):
        ax.bar(
            [x + (k - 1) * width for x in xs],
            [getattr(s, name) for s in history],
            width,
            color=colour,
            label=label,
        )
    ax.axhline(threshold, color="tab:red", ls="--", lw=1, label=f"threshold {threshold:,}")
    if planned is not None:
        ax.axhline(planned, color="black", ls=":", lw=1, label=f"planned (full rows) {planned:,}")
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
        ax.axvspan(
            es[0],
            min(e_steps, es[-1]),
            color="tab:purple",
            alpha=0.12,
            label=f">= {trap.min_steps} steps per epoch: E <= {e_steps:.0f}",
        )
    if e_tokens <= es[-1]:
        ax.axvspan(
            max(e_tokens, es[0]),
            es[-1],
            color="tab:orange",
            alpha=0.12,
            label=f">= {trap.min_tokens:,} loss tokens per step: E >= {e_tokens:.0f}",
        )


def plot_small_dataset_trap(trap: SmallDatasetTrap) -> Figure:
    """Two rules against one dataset (:func:`course_lib.lessons.choosing.small_dataset_trap`):
    optimiser steps per epoch and loss tokens per step over the effective batch ``E``. The
    shaded bands mark where each rule of thumb holds.

    Args:
        trap: the steps per epoch and loss tokens per step over the effective batches.

    Returns:
        The figure (steps on the left axis, tokens on the right).

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    es = trap.effective_batches
    require(bool(es), "plot_small_dataset_trap needs at least one effective batch")
    require(
        len(trap.steps) == len(trap.tokens) == len(es),
        "plot_small_dataset_trap needs one step count and one token count per effective batch",
    )
    fig, ax = plt.subplots(figsize=(7.5, 4))
    ax.plot(es, trap.steps, "o-", color="tab:purple", label="full optimiser steps per epoch")
    ax.axhline(trap.min_steps, color="tab:purple", ls="--", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("effective batch (examples per optimiser step)")
    ax.set_ylabel("steps per epoch", color="tab:purple")
    ax.set_xticks(es)
    ax.set_xticklabels([str(e) for e in es])
    for e, s in zip(es, trap.steps):
        ax.annotate(
            str(s),
            (e, max(s, 1)),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=8,
            color="tab:purple",
        )
    ax2 = ax.twinx()
    ax2.plot(es, trap.tokens, "s-", color="tab:orange", label="loss tokens per step")
    ax2.axhline(trap.min_tokens, color="tab:orange", ls="--", lw=1)
    ax2.set_yscale("log")
    ax2.set_ylabel("loss tokens per step", color="tab:orange")
    _draw_rule_bands(ax, trap)
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles, [str(h.get_label()) for h in handles], fontsize=8, loc="center left")
    ax.set_title(
        f"{trap.dataset_size:,} examples, {trap.loss_tokens_per_example:.0f} loss tokens each "
        "(measured mean)"
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
        1, 2, figsize=(11.5, 4.2), gridspec_kw={"width_ratios": [2, 3]}
    )
    ax_text.axis("off")
    ax_text.text(
        0,
        1,
        _plan_text(curve),
        family="monospace",
        fontsize=8,
        va="top",
        ha="left",
        transform=ax_text.transAxes,
    )
    ns, budget = curve.micro_batch_sizes, mib(curve.memory_budget)
    ax.fill_between(
        ns, 0, mib(curve.fixed_bytes), color="tab:gray", alpha=0.3, label="weights + grads + AdamW"
    )
    ax.plot(ns, [mib(t) for t in curve.totals], "-", color="tab:blue", label="one step (model)")
    ax.axhline(budget, color="black", ls="--", lw=1, label=f"budget {budget:g} MiB")
    for n, fitted, total in curve.probes:
        ax.plot(n, mib(total), linestyle="none", **_probe_marker(fitted))
    if curve.plan is not None:
        p = curve.plan
        ax.plot(
            p.micro_batch,
            mib(p.memory.total),
            "*",
            color="gold",
            markersize=16,
            markeredgecolor="black",
            label=f"chosen micro-batch {p.micro_batch}",
        )
    ax.set_ylim(0, max(budget, mib(curve.totals[-1])) * 1.1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("micro-batch size")
    ax.set_ylabel("MiB per device")
    ckpt = "" if curve.checkpointing == "off" else f", checkpointing={curve.checkpointing}"
    ax.set_title(f"seq_len {curve.seq_len}, {budget:g} MiB{ckpt}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
