"""Lesson 2's figures: padding and packing.

The token grid each batching scheme computes on, the measured waste over batch sizes, measured
training throughput, and the loss curves of a packed run with and without its document
boundaries; the results come from :mod:`course_lib.lessons.padding`.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..lessons.padding import PACKERS, BatchLayouts, RowLengthPadding, Throughput
from .style import (
    INK,
    PAD_COLOUR,
    PURPLE,
    SCHEME_COLOURS,
    SERIES_COLOURS,
    label_above,
    require,
)


def _scheme_colour(name: str) -> str:
    return next((c for k, c in SCHEME_COLOURS.items() if name.startswith(k)), INK)


def plot_padding_waste(batch_sizes: Sequence[int], waste: dict, title: str = "") -> Figure:
    """Measured fraction of computed slots that are padding, over the batch size, per scheme.

    Names starting with "random", "length-grouped" or "packed" get the course's colours.

    Args:
        batch_sizes: the batch sizes measured.
        waste: scheme name -> one fraction per batch size (``padding_stats(...).waste_fraction``).
        title: the figure's title (default: a description of what is drawn).

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(
        bool(batch_sizes) and bool(waste),
        "plot_padding_waste needs batch sizes and at least one scheme",
    )
    for name, values in waste.items():
        require(
            len(values) == len(batch_sizes),
            f"{name!r} has {len(values)} values for {len(batch_sizes)} batch sizes",
        )
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for name, values in waste.items():
        colour = _scheme_colour(name)
        ax.plot(batch_sizes, [100 * v for v in values], "o-", color=colour, label=name)
        ax.annotate(
            f"{100 * values[-1]:.{0 if values[-1] >= 0.01 else 1}f}%",
            (batch_sizes[-1], 100 * values[-1]),
            textcoords="offset points",
            xytext=(6, -3),
            fontsize=8,
            color=colour,
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(batch_sizes))
    ax.set_xticklabels([str(b) for b in batch_sizes])
    ax.set_ylim(0, 100)
    ax.set_xlabel("batch size (examples per padded batch)")
    ax.set_ylabel("padding: % of computed slots")
    ax.set_title(title or "Padding waste over one epoch (measured)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _draw_rows(ax, rows, width: int, colour: str) -> None:
    """Draw rows of documents (lists of lengths) as bars, padding up to ``width`` in gray."""
    ys, lefts, widths, colours = [], [], [], []
    shades = (colour, matplotlib.colors.to_rgba(colour, 0.55))
    for y, row in enumerate(rows):
        x = 0
        for k, n in enumerate(row):
            ys.append(y)
            lefts.append(x)
            widths.append(n)
            colours.append(shades[k % 2])
            x += n
        if x < width:
            ys.append(y)
            lefts.append(x)
            widths.append(width - x)
            colours.append(PAD_COLOUR)
    ax.barh(ys, widths, left=lefts, height=0.8, color=colours, edgecolor="white", linewidth=0.3)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks([])


def _layout_title(layout, batch_size: int) -> str:
    if layout.scheme == "packed":
        k = len(layout.rows)
        what = f"{k} packed row{'s' if k > 1 else ''} of {layout.width}"
    else:
        what = f"{layout.scheme} batch of {batch_size}, padded to {layout.width}"
    return f"{what}: {layout.waste:.1%} padding here, {layout.epoch_waste:.1%} over the epoch"


def plot_batch_layouts(layouts: BatchLayouts) -> Figure:
    """What the model computes on, one panel per scheme.

    Each document is a coloured segment, padding is gray; titles give the waste of the rows shown
    and of the whole epoch.

    Args:
        layouts: :func:`course_lib.lessons.padding.batch_layouts`.

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    panels = layouts.layouts
    require(bool(panels), "plot_batch_layouts needs at least one scheme's layout")
    heights = [max(len(p.rows), 1) for p in panels]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(8, 6.5),
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [h + 2 for h in heights]},
    )
    axes = axes[:, 0]
    for ax, layout in zip(axes, panels):
        _draw_rows(ax, layout.rows, layout.width, _scheme_colour(layout.scheme))
        ax.set_title(_layout_title(layout, layouts.batch_size), fontsize=9)
    axes[-1].set_xlim(0, max(p.width for p in panels))
    axes[-1].set_xlabel("token slot in the row (gray: padding, computed but useless)")
    fig.suptitle(
        f"{layouts.n_examples:,} examples, mean {layouts.mean_length:.0f} tokens", fontsize=10
    )
    fig.tight_layout()
    return fig


def plot_throughput(throughput: Throughput, title: str = "") -> Figure:
    """Measured training throughput of batching schemes that saw the same examples.

    Left: real (non-pad) tokens per second at each scheme's median epoch, with the median ratio
    to the first scheme over the paired rounds and the range of those pairs. Right: the slots
    each scheme computed on, split into real tokens and padding.

    Args:
        throughput: :func:`course_lib.lessons.padding.train_schemes`.
        title: the left panel's title (default: names the timing method).

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    runs = throughput.runs
    require(bool(runs), "plot_throughput needs at least one scheme's run")
    names, seconds = [r.name for r in runs], [r.seconds for r in runs]
    real_tokens, total_slots = [r.real_tokens for r in runs], [r.total_slots for r in runs]
    require(min(seconds) > 0, f"plot_throughput needs positive seconds, got {list(seconds)}")
    fig, (ax, ax_slots) = plt.subplots(1, 2, figsize=(10, 3.8))
    colours = [_scheme_colour(n) for n in names]
    xs = list(range(len(names)))
    rates = [r / s for r, s in zip(real_tokens, seconds)]
    ax.bar(xs, rates, color=colours)
    for x, name, rate in zip(xs, names, rates):
        mid, low, high = throughput.speed_ratio(name, names[0])
        label_above(ax, f"{rate:,.0f}\n×{mid:.2f} ({low:.2f}–{high:.2f})", (x, rate))
    ax.set_ylim(0, max(rates) * 1.25)
    ax.set_xticks(xs)
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylabel("real tokens per second")
    ax.set_title(title or f"Training throughput (measured, {throughput.method})", fontsize=9)
    pads = [t - r for t, r in zip(total_slots, real_tokens)]
    ax_slots.bar(xs, real_tokens, color=colours)
    ax_slots.bar(xs, pads, bottom=real_tokens, color=PAD_COLOUR)
    for x, t, r in zip(xs, total_slots, real_tokens):
        label_above(ax_slots, f"{1 - r / t:.0%} pad", (x, t))
    ax_slots.set_ylim(0, max(total_slots) * 1.15)
    ax_slots.set_xticks(xs)
    ax_slots.set_xticklabels(names, fontsize=8)
    ax_slots.set_ylabel("token slots computed")
    ax_slots.set_title("same examples: real tokens (colour) + padding (gray)")
    fig.tight_layout()
    return fig


def plot_loss_curves(curves: dict, title: str = "") -> Figure:
    """Training loss per step of runs that share initial weights and data.

    Args:
        curves: run name -> its loss per step.
        title: the figure's title (default: asks which run leaks).

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(curves), "plot_loss_curves needs at least one curve")
    require(all(len(v) for v in curves.values()), "plot_loss_curves got an empty curve")
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    styles = ("o-", "s--", "^:", "d-.")
    for k, (name, losses) in enumerate(curves.items()):
        colour = SERIES_COLOURS[k % len(SERIES_COLOURS)]
        ax.plot(range(1, len(losses) + 1), losses, styles[k % len(styles)], ms=3, label=name,
                color=colour)  # fmt: skip
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("training loss per label token (nats)")
    ax.set_title(title or "Same weights, same rows: can you tell which run leaks?")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_row_length_padding(result: RowLengthPadding, title: str = "") -> Figure:
    """Padding of one epoch packed at every split of a fixed token budget, per packer.

    Each point is labelled with its split, ``batch_size × seq_len``.

    Args:
        result: :func:`course_lib.lessons.padding.row_length_padding`.
        title: the figure's title (default: names the budget).

    Returns:
        The figure.

    Raises:
        ValueError: no split to draw.
    """
    splits = result.splits
    require(bool(splits), "plot_row_length_padding needs at least one split")
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    xs = [s.seq_len for s in splits]
    styles = {"greedy": ("o-", PURPLE), "bfd": ("s--", SCHEME_COLOURS["packed"])}
    for packer, name in PACKERS.items():
        ys = [100 * s.waste[packer] for s in splits]
        ax.plot(xs, ys, styles[packer][0], color=styles[packer][1], label=name)
        for s, y in zip(splits, ys):
            ax.annotate(f"{s.batch_size} × {s.seq_len}", (s.seq_len, y), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"row length (tokens); rows per step = {result.token_budget:,} / row length")
    ax.set_ylabel("padding: % of the epoch's slots")
    ax.set_title(
        title or f"Same {result.token_budget:,} tokens per step: longer rows, less padding?"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
