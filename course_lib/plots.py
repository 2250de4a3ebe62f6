"""Figures as pure functions: data in, a matplotlib ``Figure`` out (nothing is shown or saved).

Lessons call these directly for static plots and through :mod:`course_lib.widgets` for sliders.
Measured values are drawn as markers, predictions as lines, so the two are never confused.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use(matplotlib.get_backend())  # keep the inline backend in notebooks
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from .memory import ActivationBreakdown, ShapeComparison, format_bytes  # noqa: E402

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


def _mib(x: float) -> float:
    return x / 2**20


def plot_measured_vs_predicted(rows: Sequence[ShapeComparison], title: str = "") -> Figure:
    """Peak memory over sequence length at a fixed token budget: measured points, predicted lines.

    The lower panel shows predicted / measured for every point (1.0 = the model is exact).
    """
    if not rows:
        raise ValueError("plot_measured_vs_predicted needs at least one measured row")
    fig, (ax, ax_ratio) = plt.subplots(
        2, 1, figsize=(7.5, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for impl in dict.fromkeys(r.attn_impl for r in rows):
        sel = sorted((r for r in rows if r.attn_impl == impl), key=lambda r: r.seq_len)
        xs = [r.seq_len for r in sel]
        colour = IMPL_COLOURS.get(impl, "black")
        ax.plot(
            xs,
            [_mib(r.predicted_bytes) for r in sel],
            "-",
            color=colour,
            alpha=0.6,
            label=f"{impl}: predicted",
        )
        ax.plot(
            xs, [_mib(r.measured_bytes) for r in sel], "o", color=colour, label=f"{impl}: measured"
        )
        ax_ratio.plot(xs, [r.ratio for r in sel], "o-", color=colour)
    labels = [f"{r.batch_size}×{r.seq_len}" for r in sorted(rows, key=lambda r: r.seq_len)]
    ax.set_xscale("log", base=2)
    ax.set_ylabel("peak memory of one step (MiB)")
    ax.set_title(title or f"Same tokens per step, different shapes ({rows[0].method})")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax_ratio.axhline(1.0, color="black", lw=0.8)
    ratios = [r.ratio for r in rows]
    ax_ratio.set_ylim(min(0.95, min(ratios) - 0.01), max(1.05, max(ratios) + 0.01))
    ax_ratio.ticklabel_format(axis="y", useOffset=False)
    ax_ratio.set_ylabel("predicted / measured")
    ax_ratio.set_xlabel("seq_len (batch × seq shown on the ticks)")
    ticks = sorted({r.seq_len for r in rows})
    ax_ratio.set_xticks(ticks)
    ax_ratio.set_xticklabels(dict.fromkeys(labels), rotation=30, fontsize=8)
    ax_ratio.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_breakdown(
    breakdowns: Sequence[ActivationBreakdown],
    measured: Sequence[int] | None = None,
    title: str = "",
) -> Figure:
    """Stacked bars of predicted components per shape; measured peaks as black diamonds."""
    if not breakdowns:
        raise ValueError("plot_breakdown needs at least one breakdown")
    fig, ax = plt.subplots(figsize=(7.5, 4))
    xs = range(len(breakdowns))
    bottom = [0.0] * len(breakdowns)
    for name, colour in COMPONENT_COLOURS.items():
        heights = [_mib(b.components()[name]) for b in breakdowns]
        if not any(heights):
            continue
        ax.bar(xs, heights, bottom=bottom, color=colour, label=name.replace("_", " "))
        bottom = [b + h for b, h in zip(bottom, heights)]
    if measured is not None:
        ax.plot(list(xs), [_mib(m) for m in measured], "D", color="black", label="measured peak")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{b.attn_impl}\n{b.batch_size}×{b.seq_len}" for b in breakdowns])
    ax.set_ylabel("MiB")
    ax.set_title(title or "Where the bytes go (predicted)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def plot_linear_vs_quadratic(
    n_heads: int, d_model: int, d_mlp: int, token_budget: int, seq_lens: Sequence[int]
) -> Figure:
    """Per-layer values kept for backward at a fixed token budget, split into the two shapes.

    Linear parts keep ``8 C + 2 M + 4`` values per token whatever the split; the eager scores
    keep ``H T`` per token, so they grow with ``seq_len`` while the token count stays put.
    """
    fig, ax = plt.subplots(figsize=(7, 4))
    linear = [token_budget * (8 * d_model + 2 * d_mlp + 4) for _ in seq_lens]
    scores = [(token_budget // t) * n_heads * t * t for t in seq_lens]
    ax.plot(seq_lens, linear, "s-", color="tab:blue", label="linear / MLP: ∝ batch × seq")
    ax.plot(
        seq_lens, scores, "o-", color="tab:red", label="attention scores: ∝ batch × heads × seq²"
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"seq_len (batch = {token_budget} // seq_len)")
    ax.set_ylabel("values per layer")
    ax.set_title(f"{token_budget:,} tokens per step, {n_heads} heads")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def annotate_bytes(ax, x, y_bytes: int) -> None:
    """Write a byte count next to a point (used by the lessons' single-frame figures)."""
    ax.annotate(
        format_bytes(y_bytes),
        (x, _mib(y_bytes)),
        textcoords="offset points",
        xytext=(4, 4),
        fontsize=8,
    )


def plot_split(config, token_budget: int, seq_len: int, measured: dict) -> Figure:
    """One split of a token budget: predicted components and measured peaks, eager beside sdpa.

    ``measured`` maps an attention path to its :class:`ShapeComparison` at this shape.
    """
    from dataclasses import replace

    from .memory import activation_bytes, attention_elements

    if token_budget % seq_len:
        raise ValueError(f"seq_len={seq_len} does not divide token_budget={token_budget}")
    batch_size = token_budget // seq_len
    impls = list(measured) or ["eager", "sdpa"]
    breakdowns = [
        activation_bytes(replace(config, attn_impl=i), batch_size, seq_len) for i in impls
    ]
    fig = plot_breakdown(
        breakdowns,
        [measured[i].measured_bytes for i in impls],
        title=f"{batch_size} × {seq_len} = {token_budget:,} tokens; "
        f"{attention_elements(batch_size, config.n_heads, seq_len):,} "
        "score elements per layer",
    )
    method = next(iter(measured.values())).method if measured else "predicted only"
    fig.axes[0].set_xlabel(method)
    return fig
