"""Lesson 4's figures: activation checkpointing, memory against recompute.

Inputs: :func:`course_lib.memory.compare_checkpointing` (measured and predicted peaks),
:func:`course_lib.checkpointing.time_checkpointing` (step times) and
:func:`course_lib.lessons.checkpointing.budget_fit` (what fits a budget).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .._checks import Checkpointing
from ..checkpointing import StepTimes
from ..lessons.checkpointing import BudgetFit
from ..memory import ShapeComparison, mode_label
from .style import CHECKPOINT_COLOURS, draw_predicted_vs_measured, mib, require

FIT_LABELS: dict[Checkpointing, str] = {"off": "checkpointing off", "blocks": "checkpointed blocks"}


def _checkpoint_colour(label: str) -> str:
    return CHECKPOINT_COLOURS.get(label.split("/")[0], "tab:green")


def plot_checkpointing_peaks(rows: Sequence[ShapeComparison], title: str = "") -> Figure:
    """Peak memory of one step over ``seq_len``, one colour per checkpointing mode.

    Predictions as lines, measurements as points; the lower panel is predicted / measured
    (1.0 = exact).

    Args:
        rows: measured and predicted peaks from :func:`~course_lib.memory.compare_checkpointing`.
        title: the figure's title (default: depth, attention path, batch and how it was measured).

    Returns:
        The figure (two panels).

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(rows), "plot_checkpointing_peaks needs at least one measured row")
    fig, (ax, ax_ratio) = plt.subplots(
        2, 1, figsize=(7.5, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    draw_predicted_vs_measured(ax, ax_ratio, rows, lambda r: r.label, _checkpoint_colour)
    first = rows[0]
    ax.set_title(
        title
        or f"{first.n_layers} blocks, {first.attn_impl}, batch {first.batch_size} ({first.method})"
    )
    ax.legend(fontsize=8)
    ax_ratio.set_xlabel("seq_len")
    ax_ratio.set_xticklabels([str(t) for t in sorted({r.seq_len for r in rows})])
    fig.tight_layout()
    return fig


def plot_step_times(times: StepTimes, title: str = "") -> Figure:
    """Step time with and without checkpointing: every repeat as a dot, the median as a bar.

    Args:
        times: one interleaved timing from :func:`~course_lib.checkpointing.time_checkpointing`.
        title: the figure's title (default: the shape, the median ratio and the pairs' range).

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(
        bool(times.off_seconds) and bool(times.checkpointed_seconds),
        "plot_step_times needs at least one timed repeat on each side",
    )
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    sides = [
        ("off", times.off_seconds, times.off_median, CHECKPOINT_COLOURS["off"]),
        (
            "checkpointed",
            times.checkpointed_seconds,
            times.checkpointed_median,
            _checkpoint_colour(times.checkpointing),
        ),
    ]
    for x, (_, seconds, median, colour) in enumerate(sides):
        ax.bar(x, 1e3 * median, color=colour, alpha=0.4, width=0.6)
        ax.plot([x] * len(seconds), [1e3 * s for s in seconds], "o", color=colour)
    ax.set_xticks([0, 1])
    ax.set_xticklabels([name for name, *_ in sides])
    ax.set_ylabel("forward + backward (ms)")
    ax.set_title(
        title
        or f"{times.batch_size}×{times.seq_len}, {times.n_layers} blocks: "
        f"×{times.ratio:.2f} (median of {times.repeats} pairs, range "
        f"{min(times.pair_ratios):.2f}-{max(times.pair_ratios):.2f}, {times.device})"
    )
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def plot_budget_fit(fit: BudgetFit) -> Figure:
    """Does one step fit a memory budget? (:func:`course_lib.lessons.checkpointing.budget_fit`)

    Predicted peaks over ``seq_len``, checkpointing off and on; the dashed line is the budget; the
    chosen ``seq_len`` is marked (a circle fits, a cross does not) and the title says which fits.

    Args:
        fit: the predicted peaks of both modes, from
            :func:`~course_lib.lessons.checkpointing.budget_fit`.

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(fit.seq_lens), "plot_budget_fit needs at least one seq_len")
    require(
        set(fit.peaks) == set(fit.at_seq_len) == set(FIT_LABELS),
        f"plot_budget_fit needs peaks for the modes {tuple(FIT_LABELS)}, got {tuple(fit.peaks)}",
    )
    fig, ax = plt.subplots(figsize=(7.5, 4))
    budget = mib(fit.memory_budget)
    for mode, label in FIT_LABELS.items():
        colour = _checkpoint_colour(mode_label(mode))
        here = mib(fit.at_seq_len[mode])
        peaks = [mib(p) for p in fit.peaks[mode]]
        ax.plot(fit.seq_lens, peaks, "-", color=colour, label=f"{label} (predicted)")
        ax.plot([fit.seq_len], [here], "o" if fit.fits[mode] else "X", color=colour, ms=10)
        ax.annotate(
            f"{here:.1f} MiB",
            (fit.seq_len, here),
            textcoords="offset points",
            xytext=(6, 6 if mode == "off" else -12),
            fontsize=8,
            color=colour,
        )
    ax.axhline(budget, color="black", ls="--", lw=1, label=f"budget {budget:g} MiB")
    ax.axvline(fit.seq_len, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("seq_len")
    ax.set_ylabel("predicted peak of one step (MiB)")
    ax.set_title(
        f"{fit.batch_size} × {fit.seq_len}, {fit.n_layers} blocks, {fit.attn_impl}: {fit.verdict}"
    )
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig
