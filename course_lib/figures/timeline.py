"""Memory over one training step (lessons 1 and 4): live bytes op by op, the worst moment named.

Input: :func:`course_lib.memory.timeline.step_timelines` (or :func:`~course_lib.memory.
timeline.record_step` / :func:`~course_lib.memory.timeline.allocator_step` for one step).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..memory.timeline import StepTimeline
from .style import (
    CHECKPOINT_COLOURS,
    IMPL_COLOURS,
    INK,
    PALETTE,
    YELLOW,
    draw_budget,
    mib,
    require,
)

#: A timeline's colour by its label: the attention paths' and the checkpointing modes' colours.
_NAMED = {
    **IMPL_COLOURS,
    "plain": CHECKPOINT_COLOURS["off"],
    "checkpointed": CHECKPOINT_COLOURS["blocks"],
    **CHECKPOINT_COLOURS,
}


def _colours(labels: Sequence[str]) -> dict[str, str]:
    spare = [c for c in PALETTE.values() if c not in _NAMED.values() and c != INK]
    return {label: _NAMED.get(label) or spare[i % len(spare)] for i, label in enumerate(labels)}


def _peak_words(t: StepTimeline) -> str:
    p = t.peak
    where = f"{p.op}\nin {p.node}" if p.node else p.op
    return f"{t.label}: peak {mib(p.live_bytes):.1f} MiB ({p.phase})\n{where}"


def _draw_method(ax, timelines: Sequence[StepTimeline], colours: dict[str, str]) -> None:
    for k, t in enumerate(timelines):
        colour = colours[t.label]
        xs = [e.index + 1 for e in t.events]
        ax.plot(xs, [mib(e.live_bytes) for e in t.events], "-", color=colour, lw=1.4,
                label=t.label)  # fmt: skip
        recomputed = [e for e in t.events if e.phase == "recompute"]
        if recomputed:
            ax.plot([e.index + 1 for e in recomputed], [mib(e.live_bytes) for e in recomputed],
                    "o", color=colour, ms=3, mfc="white",
                    label=f"{t.label}: recomputed op")  # fmt: skip
        back = t.first("backward")
        if back is not None:
            ax.axvline(back + 1, color=colour, ls=":", lw=1)
            ax.annotate("backward →", (back + 1, 1), xycoords=("data", "axes fraction"),
                        xytext=(3, -12 - 12 * k), textcoords="offset points", fontsize=8,
                        color=colour)  # fmt: skip
        p = t.peak
        ax.plot([p.index + 1], [mib(p.live_bytes)], "*", ms=15, color=YELLOW,
                markeredgecolor=colour, markeredgewidth=1.5, linestyle="none")  # fmt: skip
        ax.text(1.02, 0.62 - 0.24 * k, _peak_words(t), transform=ax.transAxes, fontsize=8,
                color=colour, va="top", ha="left",
                bbox=dict(fc="white", ec=colour, lw=0.6, pad=3))  # fmt: skip
    ax.set_ylim(0, max(mib(t.peak_bytes) for t in timelines) * 1.12)
    ax.set_ylabel("live bytes of the step (MiB)")
    ax.grid(alpha=0.3)


def plot_step_timeline(
    timelines: Sequence[StepTimeline], memory_budget: int | None = None, title: str = ""
) -> Figure:
    """Live bytes over one training step, op by op, one line per timeline; the worst moment of
    each starred and named (its op, and the autograd node running it), the start of each
    backward pass dotted, recomputed ops dotted on their line. One panel per way of measuring
    (counted bytes per op; on a GPU also the allocator's history, per allocation).

    Args:
        timelines: from :func:`~course_lib.memory.timeline.step_timelines`.
        memory_budget: a budget in bytes, dashed; ``None``: no line.
        title: the figure's title (default: what is compared, and where each peak was).

    Returns:
        The figure.

    Raises:
        ValueError: no timeline, or a timeline without events; the message names it.
    """
    require(bool(timelines), "plot_step_timeline needs at least one timeline")
    empty = [t.label for t in timelines if not t.events]
    require(not empty, f"plot_step_timeline: the timelines {empty} have no events")
    methods = list(dict.fromkeys(t.method for t in timelines))
    colours = _colours(list(dict.fromkeys(t.label for t in timelines)))
    fig, axes = plt.subplots(len(methods), 1, figsize=(10, 4.2 * len(methods)), squeeze=False)
    for ax, method in zip(axes[:, 0], methods):
        _draw_method(ax, [t for t in timelines if t.method == method], colours)
        if memory_budget is not None:
            draw_budget(ax, memory_budget)
        unit = "op" if method.startswith("CPU") else "allocation or free"
        ax.set_xlabel(f"{unit} of the step, in order ({method})")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[0, 0].set_title(title or "Memory over one training step: " + " against ".join(colours))
    fig.tight_layout()
    return fig
