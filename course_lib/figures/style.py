"""The course's figure style: one colour per thing drawn, bytes in MiB, and the small drawing
helpers that more than one lesson uses."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from matplotlib.axes import Axes

# Lesson 1: attention paths, and the components of the memory model.
IMPL_COLOURS = {"eager": "tab:red", "sdpa": "tab:blue", "varlen": "tab:green"}
COMPONENT_COLOURS = {
    "attention_scores": "tab:red",
    "attention_qkv": "tab:orange",
    "mlp_hidden": "tab:blue",
    "norms": "tab:cyan",
    "residual_stream": "tab:purple",
    "rope_and_masks": "tab:gray",
    "logits_and_loss": "tab:olive",
    "backward_transient": "lightgray",
}
# Lesson 2: batching schemes; padding is always this gray.
SCHEME_COLOURS = {"random": "tab:red", "length-grouped": "tab:orange", "packed": "tab:green"}
PAD_COLOUR = "lightgray"
# Lesson 3: accumulation modes.
MODE_COLOURS = {"token_weighted": "tab:blue", "mean": "tab:red", "full batch": "black"}
# Lessons 4 and 5: checkpointing modes (labels from ``course_lib.memory.mode_label``).
CHECKPOINT_COLOURS = {"off": "tab:red", "blocks": "tab:blue", "attention": "tab:purple"}
FIT_COLOUR, NO_FIT_COLOUR = "tab:green", "tab:red"


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
        **kwargs: passed to ``Axes.annotate`` (``ha`` defaults to ``"center"``).
    """
    kwargs.setdefault("ha", "center")
    ax.annotate(text, xy, textcoords="offset points", xytext=(0, 2), fontsize=fontsize, **kwargs)


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
    ax_ratio.axhline(1.0, color="black", lw=0.8)
    ratios = [r.ratio for r in rows]
    ax_ratio.set_ylim(min(0.95, min(ratios) - 0.01), max(1.05, max(ratios) + 0.01))
    ax_ratio.ticklabel_format(axis="y", useOffset=False)
    ax_ratio.set_ylabel("predicted / measured")
    ax_ratio.set_xticks(sorted({r.seq_len for r in rows}))
    ax_ratio.grid(alpha=0.3)
