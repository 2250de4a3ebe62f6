"""Lesson 1's figures: tokens per step, and why attention memory is different.

Inputs come from :mod:`course_lib.memory` (measured and predicted peaks) and
:mod:`course_lib.lessons.attention` (splits of one token budget).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..lessons.attention import BudgetSplit, ValuesPerLayer
from ..memory import ActivationBreakdown, ShapeComparison
from .style import (
    BLUE,
    COMPONENT_COLOURS,
    IMPL_COLOURS,
    INK,
    VERMILLION,
    draw_budget,
    draw_predicted_vs_measured,
    label_above,
    mib,
    require,
)


def plot_measured_vs_predicted(rows: Sequence[ShapeComparison], title: str = "") -> Figure:
    """Peak memory over sequence length at a fixed token budget: measured points, predicted lines.

    The lower panel shows predicted / measured for every point (1.0 = the model is exact).

    Args:
        rows: one comparison per attention path and shape, from
            :func:`~course_lib.memory.compare_shapes`.
        title: the upper panel's title; empty: "Same tokens per step, different shapes" and the
            measurement method.

    Returns:
        A new matplotlib ``Figure``: two panels: peaks in MiB, then predicted / measured. The caller
        shows or closes it.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(rows), "plot_measured_vs_predicted needs at least one measured row")
    fig, (ax, ax_ratio) = plt.subplots(
        2, 1, figsize=(7.5, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    draw_predicted_vs_measured(
        ax, ax_ratio, rows, lambda r: r.attn_impl, lambda impl: IMPL_COLOURS.get(impl, INK)
    )
    labels = [f"{r.batch_size}×{r.seq_len}" for r in sorted(rows, key=lambda r: r.seq_len)]
    ax.set_title(title or f"Same tokens per step, different shapes ({rows[0].method})")
    ax.legend(fontsize=8)
    ax_ratio.set_xlabel("seq_len (batch × seq shown on the ticks)")
    ax_ratio.set_xticklabels(dict.fromkeys(labels), rotation=30, fontsize=8)
    fig.tight_layout()
    return fig


def plot_breakdown(
    breakdowns: Sequence[ActivationBreakdown],
    measured: Sequence[int] | None = None,
    title: str = "",
    memory_budget: int | None = None,
    y_max_bytes: int | None = None,
) -> Figure:
    """Stacked bars of predicted components per shape; measured peaks (bytes, one per breakdown)
    as black diamonds, each with its size written above it.

    Args:
        breakdowns: predictions, one bar each (:func:`~course_lib.memory.activation_bytes`).
        measured: measured peak bytes, one per breakdown; ``None`` draws no diamonds.
        title: the title; empty: "Where the bytes go (predicted)".
        memory_budget: a target in bytes, drawn as a dashed line; ``None``: no line.
        y_max_bytes: the top of the y axis in bytes (an explorer keeps it fixed from frame to
            frame); ``None``: matplotlib's choice.

    Returns:
        A new matplotlib ``Figure``: one bar per shape, in MiB, stacked by component. The caller
        shows or closes it.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(breakdowns), "plot_breakdown needs at least one breakdown")
    require(
        measured is None or len(measured) == len(breakdowns),
        f"plot_breakdown got {len(measured or [])} measured peaks for {len(breakdowns)} "
        "breakdowns: pass one per breakdown, or none",
    )
    fig, ax = plt.subplots(figsize=(7.5, 4))
    xs = range(len(breakdowns))
    bottom = [0.0] * len(breakdowns)
    for name, colour in COMPONENT_COLOURS.items():
        heights = [mib(b.components()[name]) for b in breakdowns]
        if not any(heights):
            continue
        ax.bar(xs, heights, bottom=bottom, color=colour, label=name.replace("_", " "),
               edgecolor="white", linewidth=0.5)  # fmt: skip
        bottom = [b + h for b, h in zip(bottom, heights)]
    if measured is not None:
        ax.plot(list(xs), [mib(m) for m in measured], "D", color=INK, label="measured peak")
        for x, m in zip(xs, measured):
            label_above(ax, f"{mib(m):.1f} MiB", (x, mib(m)), xytext=(0, 7), fontsize=9,
                        bbox=dict(fc="white", ec="none", alpha=0.85, pad=1))  # fmt: skip
    if memory_budget is not None:
        draw_budget(ax, memory_budget, "target")
    if y_max_bytes is not None:
        ax.set_ylim(0, mib(y_max_bytes))
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{b.attn_impl}\n{b.batch_size}×{b.seq_len}" for b in breakdowns])
    ax.set_ylabel("MiB")
    ax.set_title(title or "Where the bytes go (predicted)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def plot_linear_vs_quadratic(values: ValuesPerLayer) -> Figure:
    """Per-layer values kept for backward at a fixed token budget, split into the two shapes
    (:func:`~course_lib.lessons.attention.values_per_layer`): the linear parts stay put over
    ``seq_len`` while the eager scores grow with it.

    Args:
        values: counts of values per layer (not bytes) per ``seq_len``.

    Returns:
        A new matplotlib ``Figure``: both counts over seq_len, log-log. The caller shows or closes
        it.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(values.seq_lens), "plot_linear_vs_quadratic needs at least one seq_len")
    require(
        len(values.linear) == len(values.scores) == len(values.seq_lens),
        "plot_linear_vs_quadratic needs one linear and one score count per seq_len",
    )
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(
        values.seq_lens,
        values.linear,
        "s-",
        color=BLUE,
        label="linear / MLP: ∝ batch × seq",
    )
    ax.plot(
        values.seq_lens,
        values.scores,
        "o-",
        color=VERMILLION,
        label="attention scores: ∝ batch × heads × seq²",
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"seq_len (batch = {values.token_budget} // seq_len)")
    ax.set_ylabel("values per layer")
    ax.set_title(f"{values.token_budget:,} tokens per step, {values.n_heads} heads")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def plot_split(
    split: BudgetSplit, memory_budget: int | None = None, y_max_bytes: int | None = None
) -> Figure:
    """One split of a token budget (:func:`~course_lib.lessons.attention.budget_split`): predicted
    components and, when measured, the measured peaks, one bar per attention path.

    Args:
        split: one ``batch_size × seq_len`` split, predicted (and maybe measured) per path.
        memory_budget: a target in bytes, drawn as a dashed line; ``None``: no line.
        y_max_bytes: the top of the y axis in bytes (fixed across an explorer's frames).

    Returns:
        A new matplotlib ``Figure``: :func:`plot_breakdown` of the split, its shape in the title.
        The caller shows or closes it.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(split.breakdowns), "plot_split needs a split with at least one breakdown")
    measured = None
    if split.measured:
        by_impl = {r.attn_impl: r.measured_bytes for r in split.measured}
        require(
            all(b.attn_impl in by_impl for b in split.breakdowns),
            "plot_split needs a measured row for every predicted attention path",
        )
        measured = [by_impl[b.attn_impl] for b in split.breakdowns]
    fig = plot_breakdown(
        split.breakdowns,
        measured,
        title=f"{split.batch_size} × {split.seq_len} = {split.token_budget:,} tokens; "
        f"{split.score_elements:,} score elements per layer",
        memory_budget=memory_budget,
        y_max_bytes=y_max_bytes,
    )
    fig.axes[0].set_xlabel(split.method)
    fig.tight_layout()
    return fig
