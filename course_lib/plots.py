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


def _draw_predicted_vs_measured(ax, ax_ratio, rows, group, colour_of) -> None:
    """One group per ``group(row)``: predicted bytes as a line, measured as points, over
    ``seq_len``; predicted / measured on ``ax_ratio``. Rows need ``seq_len``,
    ``predicted_bytes``, ``measured_bytes`` and ``ratio``."""
    for name in dict.fromkeys(group(r) for r in rows):
        sel = sorted((r for r in rows if group(r) == name), key=lambda r: r.seq_len)
        xs = [r.seq_len for r in sel]
        colour = colour_of(name)
        ax.plot(
            xs,
            [_mib(r.predicted_bytes) for r in sel],
            "-",
            color=colour,
            alpha=0.6,
            label=f"{name}: predicted",
        )
        ax.plot(
            xs, [_mib(r.measured_bytes) for r in sel], "o", color=colour, label=f"{name}: measured"
        )
        ax_ratio.plot(xs, [r.ratio for r in sel], "o-", color=colour)


def plot_measured_vs_predicted(rows: Sequence[ShapeComparison], title: str = "") -> Figure:
    """Peak memory over sequence length at a fixed token budget: measured points, predicted lines.

    The lower panel shows predicted / measured for every point (1.0 = the model is exact).
    """
    if not rows:
        raise ValueError("plot_measured_vs_predicted needs at least one measured row")
    fig, (ax, ax_ratio) = plt.subplots(
        2, 1, figsize=(7.5, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    _draw_predicted_vs_measured(
        ax, ax_ratio, rows, lambda r: r.attn_impl, lambda impl: IMPL_COLOURS.get(impl, "black")
    )
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


# --- lesson 03 ---
# Gradient accumulation. Windows whose loss-token counts are a knob (every row keeps its prompt and
# the first ``c`` completion tokens of a real synthetic example, so it holds exactly ``c`` shifted
# loss tokens), and the figures of lesson 3. The error figures measure: each frame runs real
# forward/backward passes through ``accumulation.gradient_error``.

MODE_COLOURS = {"token_weighted": "tab:blue", "mean": "tab:red", "full batch": "black"}
ERROR_FLOOR = 1e-9  # relative errors below this (exact zeros included) are drawn at the floor


def spread_completion_lens(
    grad_accum_steps: int, spread: float, micro_batch_size: int = 2, shortest: int = 4
) -> list[list[int]]:
    """Completion tokens per row, per micro-batch: ``shortest * spread**(i / (K - 1))`` for
    micro-batch ``i`` of ``K`` (geometric, rounded), the same for every row of a micro-batch.

    ``spread`` is the ratio of the longest to the shortest micro-batch's loss tokens (1 = equal).
    """
    if grad_accum_steps < 1 or micro_batch_size < 1 or shortest < 1 or spread < 1:
        raise ValueError(
            f"need grad_accum_steps, micro_batch_size, shortest >= 1 and spread >= 1, got "
            f"{grad_accum_steps}, {micro_batch_size}, {shortest}, {spread}"
        )
    k = grad_accum_steps
    lens = [round(shortest * spread ** (i / (k - 1))) if k > 1 else shortest for i in range(k)]
    return [[c] * micro_batch_size for c in lens]


def window_from_completion_lens(
    examples, completion_lens: Sequence[Sequence[int]], start: int = 0
) -> list[dict]:
    """One padded micro-batch (``PaddingCollator``, completion-only labels) per inner list.

    Row ``r`` of micro-batch ``i`` is the next unused example (from ``start``, wrapping) whose
    completion has at least ``completion_lens[i][r]`` tokens, cut right after them: it keeps its
    whole prompt and holds exactly ``completion_lens[i][r]`` loss tokens (0 is allowed).
    """
    from .collate import PaddingCollator
    from .data import PAD_ID

    examples = list(examples)
    if not examples:
        raise ValueError("no examples to build a window from")
    collate = PaddingCollator(PAD_ID)
    used: set[int] = set()
    i = start % len(examples)
    window = []
    for rows in completion_lens:
        batch = []
        for c in rows:
            for _ in range(len(examples)):
                j, i = i, (i + 1) % len(examples)
                p = examples[j]["prompt_len"]
                if j not in used and len(examples[j]["input_ids"]) - p >= c:
                    used.add(j)
                    batch.append({"input_ids": examples[j]["input_ids"][: p + c], "prompt_len": p})
                    break
            else:
                raise ValueError(
                    f"no unused example has a completion of {c} tokens or more: pass more "
                    "(or longer) examples, or ask for shorter completions"
                )
        window.append(collate(batch))
    return window


def _floor(x: float) -> float:
    return max(float(x), ERROR_FLOOR)


def plot_gradient_error_vs_spread(points, real_points=None, title: str = "") -> Figure:
    """Measured relative gradient error against the full batch, over the window's spread.

    ``points``: ``(spread, mode, error)`` triples from controlled windows, where ``spread`` is
    ``max n_i / min n_i`` (loss tokens of the micro-batches); ``real_points`` the same for windows
    of untrimmed data, drawn as hollow markers. Errors below ``ERROR_FLOOR`` sit on the floor.
    """
    if not points:
        raise ValueError("plot_gradient_error_vs_spread needs at least one measured point")
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for mode in dict.fromkeys(m for _, m, _ in points):
        colour = MODE_COLOURS.get(mode, "black")
        sel = sorted((s, e) for s, m, e in points if m == mode)
        xs = sorted({s for s, _ in sel})
        means = [sum(e for s, e in sel if s == x) / sum(1 for s, _ in sel if s == x) for x in xs]
        ax.plot([s for s, _ in sel], [_floor(e) for _, e in sel], "o", color=colour, alpha=0.7)
        ax.plot(
            xs,
            [_floor(m) for m in means],
            "-",
            color=colour,
            label=f"{mode}: windows with a set spread",
        )
    for mode in dict.fromkeys(m for _, m, _ in real_points or []):
        sel = [(s, e) for s, m, e in real_points if m == mode]
        ax.plot(
            [s for s, _ in sel],
            [_floor(e) for _, e in sel],
            "D",
            mfc="none",
            color=MODE_COLOURS.get(mode, "black"),
            label=f"{mode}: untrimmed data",
        )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.set_yscale("log")
    ax.axhline(ERROR_FLOOR, color="gray", lw=0.8, ls=":")
    ax.set_xlabel("spread: loss tokens of the fullest micro-batch / of the emptiest")
    ax.set_ylabel("‖g_acc − g_full‖ / ‖g_full‖")
    ax.set_title(title or "Accumulated gradient vs one full batch (measured)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_accumulation_window(
    model,
    examples,
    grad_accum_steps: int = 4,
    spread: float = 8,
    micro_batch_size: int = 2,
    shortest: int = 4,
    start: int = 0,
) -> Figure:
    """One window, measured: the weight each micro-batch gets, and both modes' gradient error.

    Left: per micro-batch, its share of the window's loss tokens ``n_i / N`` (what the full batch
    gives it) beside ``1 / K`` (what ``loss / accum`` gives it). Right: the relative error of the
    accumulated gradient against one full batch (:func:`accumulation.gradient_error`), both modes.
    Runs ``2 (K + 1)`` forward/backward passes of ``model``; its ``.grad`` is left as it was.
    """
    from .accumulation import count_loss_tokens, gradient_error

    lens = spread_completion_lens(grad_accum_steps, spread, micro_batch_size, shortest)
    device = next(model.parameters()).device
    window = [
        {k: v.to(device) for k, v in mb.items()}
        for mb in window_from_completion_lens(examples, lens, start)
    ]
    n = [count_loss_tokens(mb["labels"]) for mb in window]
    total, k = sum(n), len(n)
    errors = {m: gradient_error(model, window, m) for m in ("mean", "token_weighted")}

    fig, (ax, ax_err) = plt.subplots(
        1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [max(3, min(k, 8)), 2]}
    )
    xs = list(range(k))
    w = 0.4
    ax.bar(
        [x - w / 2 for x in xs],
        [ni / total for ni in n],
        w,
        color=MODE_COLOURS["token_weighted"],
        label="n_i / N  (full batch, token-weighted)",
    )
    ax.bar(
        [x + w / 2 for x in xs],
        [1 / k] * k,
        w,
        color=MODE_COLOURS["mean"],
        label="1 / K  (loss / accum)",
    )
    for x, ni in zip(xs, n):
        ax.annotate(
            f"{ni}",
            (x - w / 2, ni / total),
            textcoords="offset points",
            xytext=(0, 2),
            ha="center",
            fontsize=7,
        )
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x + 1) for x in xs], fontsize=8)
    ax.set_xlabel("micro-batch i (numbers: its loss tokens n_i)")
    ax.set_ylabel("weight in the optimiser step")
    ax.set_title(f"K={k} micro-batches of {micro_batch_size} rows, N={total} loss tokens")
    ax.legend(fontsize=8)
    names = list(errors)
    ax_err.bar(names, [_floor(errors[m]) for m in names], color=[MODE_COLOURS[m] for m in names])
    for x, m in enumerate(names):
        ax_err.annotate(
            f"{errors[m]:.1e}",
            (x, _floor(errors[m])),
            textcoords="offset points",
            xytext=(0, 2),
            ha="center",
            fontsize=8,
        )
    ax_err.tick_params(axis="x", labelsize=8)
    ax_err.set_yscale("log")
    ax_err.set_ylim(ERROR_FLOOR / 2, 10)
    ax_err.set_ylabel("relative gradient error vs full batch")
    ax_err.set_title(f"measured, spread {max(n) / max(min(n), 1):.0f}×")
    fig.tight_layout()
    return fig


def plot_accumulation_runs(
    loss_by_mode: dict, distance: Sequence[float], heldout: dict | None = None
) -> Figure:
    """Two training runs from the same weights on the same windows, differing only in the mode.

    ``loss_by_mode``: mode -> training loss per loss token at every step (nats). ``distance``:
    ``||θ_mean − θ_token_weighted|| / ||θ_token_weighted − θ_0||`` per step. ``heldout``: mode ->
    {group name: held-out loss per token}, drawn as grouped bars.
    """
    panels = 3 if heldout else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.8))
    ax_loss, ax_dist = axes[0], axes[1]
    for mode, losses in loss_by_mode.items():
        ax_loss.plot(
            range(1, len(losses) + 1),
            losses,
            "-",
            color=MODE_COLOURS.get(mode, "k"),
            label=mode,
            alpha=0.8,
        )
    ax_loss.set_xlabel("optimiser step")
    ax_loss.set_ylabel("training loss per loss token (nats)")
    ax_loss.set_title("training loss (same init, same windows)")
    ax_loss.legend(fontsize=8)
    ax_loss.grid(alpha=0.3)
    ax_dist.plot(range(1, len(distance) + 1), distance, "o-", color="tab:purple", ms=3)
    ax_dist.set_xlabel("optimiser step")
    ax_dist.set_ylabel("‖θ_mean − θ_tw‖ / ‖θ_tw − θ_0‖")
    ax_dist.set_title("distance between the two runs")
    ax_dist.set_ylim(0, max(distance) * 1.15 if distance else 1)
    ax_dist.grid(alpha=0.3)
    if heldout:
        ax_h = axes[2]
        modes = list(heldout)
        groups = list(dict.fromkeys(g for m in modes for g in heldout[m]))
        w = 0.8 / len(modes)
        for j, mode in enumerate(modes):
            xs = [g + (j - (len(modes) - 1) / 2) * w for g in range(len(groups))]
            vals = [heldout[mode][g] for g in groups]
            ax_h.bar(xs, vals, w, color=MODE_COLOURS.get(mode, "k"), label=mode)
            for x, v in zip(xs, vals):
                ax_h.annotate(
                    f"{v:.3f}",
                    (x, v),
                    textcoords="offset points",
                    xytext=(0, 2),
                    ha="center",
                    fontsize=7,
                )
        lo = min(min(h.values()) for h in heldout.values())
        hi = max(max(h.values()) for h in heldout.values())
        ax_h.set_ylim(lo - 0.15 * (hi - lo + 0.1), hi + 0.15 * (hi - lo + 0.1))
        ax_h.set_xticks(range(len(groups)))
        ax_h.set_xticklabels(groups, fontsize=8)
        ax_h.set_ylabel("held-out loss per token (nats)")
        ax_h.set_title("after training, by completion length")
        ax_h.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --- lesson 05 ---


def plot_search_probes(
    history, needed, budget_bytes: int, predicted=None, title: str = ""
) -> Figure:
    """The largest-micro-batch search drawn probe by probe.

    ``history``: ``[(n, fitted), ...]`` in probe order (``SearchResult.history``); ``needed``:
    ``{n: bytes}`` measured at each probe (``MemoryProbe.needed``); ``predicted``: optional
    ``{n: bytes}`` from the memory model, drawn as a line. Left: bytes needed against the
    micro-batch size, fits as green circles, failures as red crosses, each numbered in probe order,
    the budget dashed. Right: the size tried at each probe and the bracket ``[largest fit, smallest
    failure]`` closing in.
    """
    if not history:
        raise ValueError("plot_search_probes needs at least one probe in history")
    fig, (ax, ax_order) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    if predicted:
        xs = sorted(predicted)
        ax.plot(
            xs,
            [_mib(predicted[n]) for n in xs],
            "-",
            color="gray",
            alpha=0.6,
            label="memory model (predicted)",
        )
    for i, (n, fitted) in enumerate(history, start=1):
        y = _mib(needed[n])
        ax.plot(
            n, y, "o" if fitted else "X", color="tab:green" if fitted else "tab:red", markersize=8
        )
        ax.annotate(str(i), (n, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.plot([], [], "o", color="tab:green", label="probe fits")
    ax.plot([], [], "X", color="tab:red", label="probe does not fit")
    ax.axhline(
        _mib(budget_bytes),
        color="black",
        ls="--",
        lw=1,
        label=f"budget {format_bytes(budget_bytes)}",
    )
    ax.set_xlabel("micro-batch size n (rows of the longest seq_len)")
    ax.set_ylabel("memory needed for one step (MiB)")
    ax.set_title(title or f"{len(history)} probes (numbers: probe order)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    lo, hi, los, his = 0, None, [], []
    for n, fitted in history:
        if fitted:
            lo = max(lo, n)
        else:
            hi = n if hi is None else min(hi, n)
        los.append(lo)
        his.append(hi)
    steps = range(1, len(history) + 1)
    ax_order.plot(steps, [n for n, _ in history], "k-", alpha=0.3)
    for i, (n, fitted) in zip(steps, history):
        ax_order.plot(i, n, "o" if fitted else "X", color="tab:green" if fitted else "tab:red")
    ax_order.step(
        steps, los, where="post", color="tab:green", alpha=0.5, label="largest fit so far"
    )
    top = max(n for n, _ in history)
    ax_order.step(
        steps,
        [h if h is not None else top for h in his],
        where="post",
        color="tab:red",
        alpha=0.5,
        label="smallest failure so far",
    )
    ax_order.set_xlabel("probe")
    ax_order.set_ylabel("micro-batch size tried")
    ax_order.set_yscale("log", base=2)
    ax_order.set_xticks(list(steps))
    ax_order.legend(fontsize=8)
    ax_order.grid(alpha=0.3)
    ax_order.set_title("double, then bisect")
    fig.tight_layout()
    return fig


def plot_step_tokens(
    history, threshold: int = 4000, planned: int | None = None, title: str = ""
) -> Figure:
    """Tokens per optimiser step as a :class:`~course_lib.accumulation.TokensPerStepLogger` logged
    them: for every step, the row slots (``all_tokens``), the real tokens (``non_pad_tokens``) and
    the tokens the loss trains on (``loss_tokens``), beside the ``threshold`` and the ``planned``
    full-row count."""
    if not history:
        raise ValueError("plot_step_tokens needs at least one logged step")
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


def plot_small_dataset_trap(
    dataset_size: int,
    loss_tokens_per_example: float,
    effective_batches,
    min_tokens: int = 4000,
    min_steps: int = 25,
) -> Figure:
    """Two rules against one dataset: optimiser steps per epoch (``dataset_size // E``, full
    steps) and loss tokens per step (``E x loss_tokens_per_example``) over effective batch ``E``.
    The shaded bands mark where each rule of thumb holds."""
    es = sorted(int(e) for e in effective_batches)
    if not es or es[0] <= 0:
        raise ValueError(f"effective_batches must be positive ints, got {effective_batches!r}")
    steps = [dataset_size // e for e in es]
    tokens = [e * loss_tokens_per_example for e in es]
    fig, ax = plt.subplots(figsize=(7.5, 4))
    ax.plot(es, steps, "o-", color="tab:purple", label="full optimiser steps per epoch")
    ax.axhline(min_steps, color="tab:purple", ls="--", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("effective batch (examples per optimiser step)")
    ax.set_ylabel("steps per epoch", color="tab:purple")
    ax.set_xticks(es)
    ax.set_xticklabels([str(e) for e in es])
    for e, s in zip(es, steps):
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
    ax2.plot(es, tokens, "s-", color="tab:orange", label="loss tokens per step")
    ax2.axhline(min_tokens, color="tab:orange", ls="--", lw=1)
    ax2.set_yscale("log")
    ax2.set_ylabel("loss tokens per step", color="tab:orange")
    # Where each rule holds, as continuous ranges of E: steps >= min_steps while
    # E <= dataset_size / min_steps; tokens >= min_tokens once E >= min_tokens / tokens per example.
    e_steps, e_tokens = dataset_size / min_steps, min_tokens / loss_tokens_per_example
    if e_steps >= es[0]:
        ax.axvspan(
            es[0],
            min(e_steps, es[-1]),
            color="tab:purple",
            alpha=0.12,
            label=f">= {min_steps} steps per epoch: E <= {e_steps:.0f}",
        )
    if e_tokens <= es[-1]:
        ax.axvspan(
            max(e_tokens, es[0]),
            es[-1],
            color="tab:orange",
            alpha=0.12,
            label=f">= {min_tokens:,} loss tokens per step: E >= {e_tokens:.0f}",
        )
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="center left")
    ax.set_title(
        f"{dataset_size:,} examples, {loss_tokens_per_example:.0f} loss tokens each (measured mean)"
    )
    fig.tight_layout()
    return fig


def plot_training_plan(
    config, memory_mib: int, seq_len: int, dataset_size: int, **plan_kwargs
) -> Figure:
    """One frame of the planner: :func:`~course_lib.budget.plan` at ``memory_mib`` MiB per device.

    Left: the memory model's bytes for one training step over the micro-batch size (weights,
    gradients and AdamW state at the bottom), the budget, the search's probes and the chosen
    micro-batch. Right: the plan as a table, with its notes and warnings.
    """
    import textwrap
    from dataclasses import replace

    from matplotlib.ticker import MaxNLocator

    from .budget import NoBatchFitsError, plan, training_memory

    budget = int(memory_mib * 2**20)
    cfg = replace(config, max_seq_len=max(config.max_seq_len, seq_len))
    fig, (ax, ax_text) = plt.subplots(
        1, 2, figsize=(11.5, 4.2), gridspec_kw={"width_ratios": [2, 3]}
    )
    ax_text.axis("off")
    try:
        p = plan(cfg, budget, seq_len, dataset_size, **plan_kwargs)
    except NoBatchFitsError as exc:
        p, text = None, "nothing fits:\n" + textwrap.fill(str(exc), 64)
    if p is not None:
        rows = [f"{k:<18} {v}" for k, v in p.rows()[1:]]
        extra = [f"note: {n}" for n in p.notes] + [f"WARNING: {w}" for w in p.warnings]
        text = "\n".join(rows + [line for e in extra for line in textwrap.wrap(e, 70)])
        cfg = p.config
    ax_text.text(
        0, 1, text, family="monospace", fontsize=8, va="top", ha="left", transform=ax_text.transAxes
    )
    top = max(2, 2 * (p.max_micro_batch_size if p else 1))
    ns = list(range(1, top + 1))
    totals = [training_memory(cfg, n, seq_len).total for n in ns]
    fixed = totals[0] - training_memory(cfg, 1, seq_len).activations
    ax.fill_between(
        ns, 0, _mib(fixed), color="tab:gray", alpha=0.3, label="weights + grads + AdamW"
    )
    ax.plot(ns, [_mib(t) for t in totals], "-", color="tab:blue", label="one step (model)")
    ax.axhline(memory_mib, color="black", ls="--", lw=1, label=f"budget {memory_mib} MiB")
    if p is not None:
        for n, fitted in p.search.history:
            t = training_memory(cfg, n, seq_len).total
            ax.plot(n, _mib(t), "o" if fitted else "X", color="tab:green" if fitted else "tab:red")
        ax.plot(
            p.micro_batch_size,
            _mib(p.memory.total),
            "*",
            color="gold",
            markersize=16,
            markeredgecolor="black",
            label=f"chosen micro-batch {p.micro_batch_size}",
        )
    ax.set_ylim(0, max(memory_mib, _mib(totals[-1])) * 1.1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("micro-batch size")
    ax.set_ylabel("MiB per device")
    ckpt = f", checkpointing={cfg.checkpointing}" if cfg.checkpointing else ""
    ax.set_title(f"seq_len {seq_len}, {memory_mib} MiB{ckpt}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# --- lesson 02 ---
# Padding and packing: the token grid each batching scheme computes on, the measured waste over
# batch sizes, measured training throughput, and the loss curves of a packed run with and without
# its document boundaries.

SCHEME_COLOURS = {"random": "tab:red", "length-grouped": "tab:orange", "packed": "tab:green"}
PAD_COLOUR = "lightgray"


def _scheme_colour(name: str) -> str:
    return next((c for k, c in SCHEME_COLOURS.items() if name.startswith(k)), "black")


def plot_padding_waste(batch_sizes: Sequence[int], waste: dict, title: str = "") -> Figure:
    """Measured fraction of computed slots that are padding, over the batch size, per scheme.

    ``waste``: scheme name -> one fraction per batch size (``padding_stats(...).waste_fraction``).
    Names starting with "random", "length-grouped" or "packed" get the course's colours.
    """
    if not batch_sizes or not waste:
        raise ValueError("plot_padding_waste needs batch sizes and at least one scheme")
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for name, values in waste.items():
        if len(values) != len(batch_sizes):
            raise ValueError(f"{name!r} has {len(values)} values for {len(batch_sizes)} sizes")
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


def plot_batch_layouts(lengths, batch_size: int, capacity: int, seed: int = 0) -> Figure:
    """What the model computes on, three ways, for the same example lengths (tokens).

    Top: a typical random batch of ``batch_size`` examples padded to its longest (the batch with
    the median waste of the epoch). Middle: the same for a :class:`LengthGroupedSampler` epoch.
    Bottom: rows of ``capacity`` tokens packed by best-fit decreasing, as many as hold the real
    tokens of the random batch shown (picked at random, ``seed``). Each document is a coloured
    segment, padding is gray; titles give the waste of the batch shown and of the whole epoch.
    """
    import numpy as np

    from .collate import LengthGroupedSampler, padding_stats, random_batches
    from .packing import pack_lengths

    lengths = np.asarray(lengths, dtype=np.int64)
    schemes = {
        "random": random_batches(lengths.size, batch_size, seed=seed),
        "length-grouped": LengthGroupedSampler(lengths, batch_size, seed=seed).batches(),
    }
    panels = []
    for name, batches in schemes.items():
        as_lengths = [lengths[b].tolist() for b in batches]
        epoch = padding_stats(as_lengths).waste_fraction
        waste = [padding_stats([b]).waste_fraction for b in as_lengths]
        typical = as_lengths[int(np.argsort(waste, kind="stable")[len(waste) // 2])]
        rows = [[n] for n in sorted(typical, reverse=True)]
        panels.append((name, rows, max(typical), waste[as_lengths.index(typical)], epoch))
    packed = [lengths[r].tolist() for r in pack_lengths(lengths, capacity)]
    fills = [sum(r) for r in packed]
    epoch = 1 - lengths.sum() / (len(packed) * capacity)
    want = sum(sum(r) for r in panels[0][1])
    k = min(len(packed), max(1, -(-want // capacity)))
    picked = sorted(np.random.default_rng(seed).choice(len(packed), size=k, replace=False))
    shown = [packed[i] for i in picked]
    shown_waste = 1 - sum(fills[i] for i in picked) / (k * capacity)
    panels.append(("packed", shown, capacity, shown_waste, epoch))

    width = max(p[2] for p in panels)
    heights = [max(len(p[1]), 1) for p in panels]
    fig, axes = plt.subplots(
        3, 1, figsize=(8, 6.5), sharex=True, gridspec_kw={"height_ratios": [h + 2 for h in heights]}
    )
    labels = {
        "random": f"random batch of {batch_size}, padded to {panels[0][2]}",
        "length-grouped": f"length-grouped batch of {batch_size}, padded to {panels[1][2]}",
        "packed": f"{k} packed row{'s' if k > 1 else ''} of {capacity}",
    }
    for ax, (name, rows, row_width, waste, epoch_waste) in zip(axes, panels):
        _draw_rows(ax, rows, row_width, SCHEME_COLOURS[name])
        ax.set_title(
            f"{labels[name]}: {waste:.1%} padding here, {epoch_waste:.1%} over the epoch",
            fontsize=9,
        )
    axes[-1].set_xlim(0, width)
    axes[-1].set_xlabel("token slot in the row (gray: padding, computed but useless)")
    fig.suptitle(f"{lengths.size:,} examples, mean {lengths.mean():.0f} tokens", fontsize=10)
    fig.tight_layout()
    return fig


def plot_throughput(
    names: Sequence[str],
    real_tokens: Sequence[int],
    total_slots: Sequence[int],
    seconds: Sequence[float],
    title: str = "",
) -> Figure:
    """Measured training throughput of batching schemes that saw the same examples.

    Left: real (non-pad) tokens per second, with the ratio to the first scheme. Right: the slots
    each scheme computed on, split into real tokens and padding.
    """
    if not (len(names) == len(real_tokens) == len(total_slots) == len(seconds)) or not names:
        raise ValueError("plot_throughput needs one real_tokens, total_slots, seconds per name")
    fig, (ax, ax_slots) = plt.subplots(1, 2, figsize=(10, 3.8))
    colours = [_scheme_colour(n) for n in names]
    xs = list(range(len(names)))
    rates = [r / s for r, s in zip(real_tokens, seconds)]
    ax.bar(xs, rates, color=colours)
    for x, rate in zip(xs, rates):
        ax.annotate(
            f"{rate:,.0f}\n×{rate / rates[0]:.2f}",
            (x, rate),
            textcoords="offset points",
            xytext=(0, 2),
            ha="center",
            fontsize=8,
        )
    ax.set_ylim(0, max(rates) * 1.25)
    ax.set_xticks(xs)
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylabel("real tokens per second")
    ax.set_title(title or "Training throughput (measured)")
    pads = [t - r for t, r in zip(total_slots, real_tokens)]
    ax_slots.bar(xs, real_tokens, color=colours)
    ax_slots.bar(xs, pads, bottom=real_tokens, color=PAD_COLOUR)
    for x, t, r in zip(xs, total_slots, real_tokens):
        ax_slots.annotate(
            f"{1 - r / t:.0%} pad",
            (x, t),
            textcoords="offset points",
            xytext=(0, 2),
            ha="center",
            fontsize=8,
        )
    ax_slots.set_ylim(0, max(total_slots) * 1.15)
    ax_slots.set_xticks(xs)
    ax_slots.set_xticklabels(names, fontsize=8)
    ax_slots.set_ylabel("token slots computed")
    ax_slots.set_title("same examples: real tokens (colour) + padding (gray)")
    fig.tight_layout()
    return fig


def plot_loss_curves(curves: dict, title: str = "") -> Figure:
    """Training loss per step of runs that share initial weights and data (``name -> losses``)."""
    if not curves:
        raise ValueError("plot_loss_curves needs at least one curve")
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    styles = ("o-", "s--", "^:", "d-.")
    for k, (name, losses) in enumerate(curves.items()):
        ax.plot(range(1, len(losses) + 1), losses, styles[k % len(styles)], ms=3, label=name)
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("training loss per label token (nats)")
    ax.set_title(title or "Same weights, same rows: can you tell which run leaks?")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# Lesson 4: activation checkpointing
# --------------------------------------------------------------------------------------------

CHECKPOINT_COLOURS = {"plain": "tab:red", "blocks": "tab:blue", "attention": "tab:purple"}


def _checkpoint_colour(label: str) -> str:
    return CHECKPOINT_COLOURS.get(label.split("/")[0], "tab:green")


def plot_checkpointing_peaks(rows, title: str = "") -> Figure:
    """Peak memory of one step over ``seq_len``, one colour per checkpointing mode.

    ``rows`` are :class:`~course_lib.checkpointing.CheckpointingRow`: predictions as lines,
    measurements as points; the lower panel is predicted / measured (1.0 = exact).
    """
    if not rows:
        raise ValueError("plot_checkpointing_peaks needs at least one measured row")
    fig, (ax, ax_ratio) = plt.subplots(
        2, 1, figsize=(7.5, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    _draw_predicted_vs_measured(ax, ax_ratio, rows, lambda r: r.label, _checkpoint_colour)
    first = rows[0]
    ax.set_xscale("log", base=2)
    ax.set_ylabel("peak memory of one step (MiB)")
    ax.set_title(
        title
        or f"{first.n_layers} blocks, {first.attn_impl}, batch {first.batch_size} ({first.method})"
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax_ratio.axhline(1.0, color="black", lw=0.8)
    ratios = [r.ratio for r in rows]
    ax_ratio.set_ylim(min(0.95, min(ratios) - 0.01), max(1.05, max(ratios) + 0.01))
    ax_ratio.ticklabel_format(axis="y", useOffset=False)
    ax_ratio.set_ylabel("predicted / measured")
    ax_ratio.set_xlabel("seq_len")
    ticks = sorted({r.seq_len for r in rows})
    ax_ratio.set_xticks(ticks)
    ax_ratio.set_xticklabels([str(t) for t in ticks])
    ax_ratio.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_step_times(times, title: str = "") -> Figure:
    """Step time with and without checkpointing: every repeat as a dot, the median as a bar.

    ``times`` is a :class:`~course_lib.checkpointing.StepTimes`.
    """
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    sides = [("plain", times.plain_seconds), ("checkpointed", times.checkpointed_seconds)]
    for x, (name, seconds) in enumerate(sides):
        ms = [1e3 * s for s in seconds]
        colour = "tab:red" if name == "plain" else "tab:blue"
        ax.bar(x, sorted(ms)[len(ms) // 2], color=colour, alpha=0.4, width=0.6)
        ax.plot([x] * len(ms), ms, "o", color=colour)
    ax.set_xticks([0, 1])
    ax.set_xticklabels(["plain", "checkpointed"])
    ax.set_ylabel("forward + backward (ms)")
    ax.set_title(
        title
        or f"{times.batch_size}×{times.seq_len}, {times.n_layers} blocks: "
        f"×{times.ratio:.2f} (median of {times.repeats} pairs, {times.device})"
    )
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def plot_budget_fit(
    config,
    seq_len: int,
    n_layers: int,
    budget_mib: float,
    batch_size: int = 1,
    seq_lens: Sequence[int] | None = None,
    attn_impl: str | None = None,
) -> Figure:
    """Does one step fit a memory budget? Predicted peaks over ``seq_len``, plain and checkpointed.

    The model is ``config`` with ``n_layers`` blocks (and ``attn_impl``, if given); the dashed
    line is the budget; the chosen ``seq_len`` is marked, and the title says which of the two fits
    there.
    """
    from dataclasses import replace

    from .memory import activation_bytes

    if budget_mib <= 0:
        raise ValueError(f"budget_mib must be positive, got {budget_mib}")
    if seq_lens is None:
        # From 64 tokens: below that the weights' gradients, not activations, set the peak.
        seq_lens = sorted({2**k for k in range(6, 16) if 2**k <= 4 * seq_len} | {seq_len})
    longest = max(max(seq_lens), seq_len)
    cfg = replace(
        config,
        n_layers=n_layers,
        max_seq_len=max(config.max_seq_len, longest),
        attn_impl=attn_impl or config.attn_impl,
    )
    fig, ax = plt.subplots(figsize=(7.5, 4))
    fits = {}
    for mode, label in ((False, "plain"), (True, "checkpointed blocks")):
        peaks = [
            _mib(activation_bytes(cfg, batch_size, t, checkpointing=mode).total) for t in seq_lens
        ]
        here = _mib(activation_bytes(cfg, batch_size, seq_len, checkpointing=mode).total)
        fits[mode] = here <= budget_mib
        colour = "tab:red" if mode is False else "tab:blue"
        ax.plot(seq_lens, peaks, "-", color=colour, label=f"{label} (predicted)")
        ax.plot([seq_len], [here], "o" if fits[mode] else "X", color=colour, ms=10)
        ax.annotate(
            f"{here:.1f} MiB",
            (seq_len, here),
            textcoords="offset points",
            xytext=(6, -12 if mode else 6),
            fontsize=8,
            color=colour,
        )
    ax.axhline(budget_mib, color="black", ls="--", lw=1, label=f"budget {budget_mib:g} MiB")
    ax.axvline(seq_len, color="gray", lw=0.8)
    if fits[False]:
        verdict = "fits without checkpointing"
    elif fits[True]:
        verdict = "fits only with checkpointing"
    else:
        verdict = "does not fit, even with checkpointing"
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("seq_len")
    ax.set_ylabel("predicted peak of one step (MiB)")
    ax.set_title(f"{batch_size} × {seq_len}, {n_layers} blocks, {cfg.attn_impl}: {verdict}")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig
