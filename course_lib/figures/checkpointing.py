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
from .style import (
    CHECKPOINT_COLOURS,
    GREEN,
    MUTED,
    draw_budget,
    draw_predicted_vs_measured,
    mib,
    require,
)

FIT_LABELS: dict[Checkpointing, str] = {"off": "checkpointing off", "blocks": "checkpointed blocks"}


def _checkpoint_colour(label: str) -> str:
    return CHECKPOINT_COLOURS.get(label.split("/")[0], GREEN)


def _strided(n_layers: int, every: int) -> str:
    """Blocks ``0, k, 2k, ...`` of ``n_layers``, in words."""
    blocks = list(range(0, n_layers, every))
    return ", ".join(map(str, blocks)) if len(blocks) <= 6 else f"0, {every}, ..., {blocks[-1]}"


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


def plot_budget_fit(fit: BudgetFit, y_range_bytes: tuple[int, int] | None = None) -> Figure:
    """Does one step fit a memory budget? (:func:`course_lib.lessons.checkpointing.budget_fit`)

    Predicted peaks over ``seq_len`` (a linear axis: neighbouring row lengths stay apart),
    checkpointing off and on; the dashed line is the budget; the chosen ``seq_len`` is marked (a
    circle fits, a cross does not), its predicted peaks are written beside the markers and the
    title says which fits.

    Args:
        fit: the predicted peaks of both modes, from
            :func:`~course_lib.lessons.checkpointing.budget_fit`.
        y_range_bytes: ``(bottom, top)`` of the log y axis in bytes, the same for every frame of
            an explorer; ``None``: matplotlib's choice.

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
    require(
        y_range_bytes is None or 0 < y_range_bytes[0] < y_range_bytes[1],
        f"plot_budget_fit needs y_range_bytes as (bottom, top), 0 < bottom < top; got "
        f"{y_range_bytes}",
    )
    fig, ax = plt.subplots(figsize=(8.5, 4))
    for mode, label in FIT_LABELS.items():
        colour = _checkpoint_colour(mode_label(mode))
        here = mib(fit.at_seq_len[mode])
        peaks = [mib(p) for p in fit.peaks[mode]]
        ax.plot(fit.seq_lens, peaks, "-", color=colour, label=f"{label} (predicted)")
        words = f"{here:.1f} MiB"
        ax.plot([fit.seq_len], [here], "o" if fit.fits[mode] else "X", color=colour, ms=10)
        ax.annotate(
            words,
            (fit.seq_len, here),
            textcoords="offset points",
            xytext=(8, 4 if mode == "off" else -13),
            fontsize=9,
            color=colour,
            bbox=dict(fc="white", ec="none", alpha=0.85, pad=1),
        )
    draw_budget(ax, fit.memory_budget)
    ax.axvline(fit.seq_len, color=MUTED, lw=0.8)
    ax.set_xlim(0, max(max(fit.seq_lens), fit.seq_len) * 1.02)
    ax.set_yscale("log")
    if y_range_bytes is not None:
        ax.set_ylim(mib(y_range_bytes[0]), mib(y_range_bytes[1]))
    ax.set_xlabel("seq_len (tokens per row)")
    ax.set_ylabel("predicted peak of one step (MiB)")
    ax.set_title(
        f"{fit.batch_size} × {fit.seq_len}, {fit.n_layers} blocks, {fit.attn_impl}, checkpointed: "
        f"blocks {_strided(fit.n_layers, fit.checkpoint_every)}\n{fit.verdict}",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig
