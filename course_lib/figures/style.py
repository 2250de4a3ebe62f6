"""The course's figure style: one colour per thing drawn, bytes in MiB, and the small drawing
helpers that more than one lesson uses."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from matplotlib.axes import Axes

from ..units import format_bytes

# Okabe and Ito's palette ("Color Universal Design", 2008): eight colours that stay apart for the
# common kinds of colour blindness. Every figure draws with these, black and greys; colours shown
# side by side for a comparison are never a red/green pair (tests/library/test_figures.py checks
# each pair simulated for protanopia, deuteranopia and tritanopia).
PALETTE = {
    "vermillion": "#D55E00",
    "blue": "#0072B2",
    "reddish purple": "#CC79A7",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "black": "#000000",
}
VERMILLION, BLUE, PURPLE = PALETTE["vermillion"], PALETTE["blue"], PALETTE["reddish purple"]
ORANGE, SKY, GREEN, YELLOW = (
    PALETTE["orange"],
    PALETTE["sky blue"],
    PALETTE["bluish green"],
    PALETTE["yellow"],
)
INK, MUTED, FAINT = "#000000", "#999999", "#D3D3D3"  # text and reference lines, models, padding

# Lesson 1: attention paths, and the components of the memory model (stacked in this order:
# neighbours in the stack differ for every kind of colour blindness too).
IMPL_COLOURS = {"eager": VERMILLION, "sdpa": BLUE, "varlen": PURPLE}
COMPONENT_COLOURS = {
    "attention_scores": VERMILLION,
    "attention_qkv": SKY,
    "mlp_hidden": BLUE,
    "norms": YELLOW,
    "residual_stream": GREEN,
    "rope_and_masks": INK,
    "logits_and_loss": PURPLE,
    "backward_transient": FAINT,
}
# Lesson 2: batching schemes; padding is always this gray.
SCHEME_COLOURS = {"random": VERMILLION, "length-grouped": PURPLE, "packed": BLUE}
PAD_COLOUR = FAINT
# Lesson 3: accumulation modes.
MODE_COLOURS = {"token_weighted": BLUE, "mean": VERMILLION, "full batch": INK}
# Lessons 4 and 5: checkpointing modes (labels from ``course_lib.memory.mode_label``).
CHECKPOINT_COLOURS = {"off": VERMILLION, "blocks": BLUE, "attention": PURPLE}
# Lesson 5: a probe that fits, one that does not (also told apart by the marker: o against X).
FIT_COLOUR, NO_FIT_COLOUR = BLUE, VERMILLION
# Two quantities on twin axes, or a pair of series with no role of their own; more series, in order.
FIRST_COLOUR, SECOND_COLOUR = BLUE, ORANGE
SERIES_COLOURS = (BLUE, ORANGE, PURPLE, SKY, GREEN, VERMILLION)
#: Groups of colours a reader compares side by side (the figures' test checks each pair).
COMPARED = {
    "attention paths": IMPL_COLOURS,
    "batching schemes": SCHEME_COLOURS,
    "accumulation modes": MODE_COLOURS,
    "checkpointing modes": CHECKPOINT_COLOURS,
    "fits or not": {"fits": FIT_COLOUR, "does not fit": NO_FIT_COLOUR},
    "twin axes": {"first": FIRST_COLOUR, "second": SECOND_COLOUR},
}


def mib(n_bytes: float) -> float:
    """Bytes to MiB (2**20 bytes), the unit every memory axis uses.

    Args:
        n_bytes: a size in bytes.

    Returns:
        The same size in MiB (a float: ``mib(3 * 2**19) == 1.5``).
    """
    return n_bytes / 2**20


def require(condition: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``condition``: a figure's one input check.

    Args:
        condition: what the figure's input must satisfy.
        message: what is wrong and what to pass instead.

    Raises:
        ValueError: ``condition`` is false.
    """
    if not condition:
        raise ValueError(message)


def label_above(
    ax: Axes, text: str, xy: tuple[float, float], fontsize: int = 8, **kwargs: Any
) -> None:
    """Write ``text`` just above the point ``xy`` (data coordinates), centred.

    Args:
        ax: the axes to write on.
        text: the label.
        xy: the point, in data coordinates.
        fontsize: in points.
        **kwargs: passed to ``Axes.annotate`` (``ha`` defaults to ``"center"``, ``xytext`` to 2
            points above).
    """
    kwargs.setdefault("ha", "center")
    kwargs.setdefault("xytext", (0, 2))
    ax.annotate(text, xy, textcoords="offset points", fontsize=fontsize, **kwargs)


def draw_budget(ax: Axes, memory_budget: int, name: str = "budget") -> None:
    """A memory budget (or target) as a dashed black line across ``ax``, its size in the legend.

    Args:
        ax: axes whose y axis is in MiB.
        memory_budget: bytes.
        name: what the line is (``"budget"``, ``"target"``), the legend's first word.
    """
    ax.axhline(
        mib(memory_budget), color=INK, ls="--", lw=1, label=f"{name} {format_bytes(memory_budget)}"
    )


def draw_predicted_vs_measured(
    ax: Axes, ax_ratio: Axes, rows: Sequence, group: Callable, colour_of: Callable[[str], str]
) -> None:
    """Predicted peaks as lines, measured peaks as points, over ``seq_len``; predicted / measured
    on ``ax_ratio`` (1.0 = the memory model is exact), with its axis finished.

    One series per ``group(row)``. Rows need ``seq_len``, ``predicted_bytes``,
    ``measured_bytes`` and ``ratio`` (:class:`~course_lib.memory.ShapeComparison`).

    Args:
        ax: the upper axes: peaks in MiB over ``seq_len`` (log 2 axis).
        ax_ratio: the lower axes: predicted / measured.
        rows: the comparisons to draw.
        group: names each row's series (``lambda r: r.attn_impl``).
        colour_of: a series name's colour.
    """
    for name in dict.fromkeys(group(r) for r in rows):
        sel = sorted((r for r in rows if group(r) == name), key=lambda r: r.seq_len)
        xs = [r.seq_len for r in sel]
        colour = colour_of(name)
        ax.plot(
            xs,
            [mib(r.predicted_bytes) for r in sel],
            "-",
            color=colour,
            alpha=0.6,
            label=f"{name}: predicted",
        )
        ax.plot(
            xs, [mib(r.measured_bytes) for r in sel], "o", color=colour, label=f"{name}: measured"
        )
        ax_ratio.plot(xs, [r.ratio for r in sel], "o-", color=colour)
    ax.set_xscale("log", base=2)
    ax.set_ylabel("peak memory of one step (MiB)")
    ax.grid(alpha=0.3)
    ax_ratio.axhline(1.0, color=INK, lw=0.8)
    ratios = [r.ratio for r in rows]
    ax_ratio.set_ylim(min(0.95, min(ratios) - 0.01), max(1.05, max(ratios) + 0.01))
    ax_ratio.ticklabel_format(axis="y", useOffset=False)
    ax_ratio.set_ylabel("predicted / measured")
    ax_ratio.set_xticks(sorted({r.seq_len for r in rows}))
    ax_ratio.grid(alpha=0.3)
