"""Lesson 3's figures: gradient accumulation and the mean-of-means bug.

The measurements come from :mod:`course_lib.lessons.accumulation`,
:mod:`course_lib.lessons.accumulation_cost` and :mod:`course_lib.noise`; these functions only
draw them. Relative errors below :data:`ERROR_FLOOR` (exact zeros included) are drawn at the
floor so a log axis can show them.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from ..lessons.accumulation import AccumulationRuns, AccumulationWindow, StepErrors
from ..lessons.accumulation_cost import AccumulationCost, SummedLoss
from ..noise import GradientNoise
from .style import BLUE, INK, MODE_COLOURS, MUTED, PURPLE, VERMILLION, label_above, mib, require

ERROR_FLOOR = 1e-9
RUN_COLOURS = {"averaged, lr": BLUE, "summed, lr": VERMILLION, "averaged, K × lr": INK}


def _floor(x: float) -> float:
    return max(float(x), ERROR_FLOOR)


def plot_gradient_error_vs_spread(
    points: Sequence[tuple[float, str, float]],
    real_points: Sequence[tuple[float, str, float]] | None = None,
    title: str = "",
) -> Figure:
    """Measured relative gradient error against the full batch, over the window's spread.

    Args:
        points: ``(spread, mode, error)`` triples from controlled windows, where ``spread`` is
            ``max n_i / min n_i`` (loss tokens of the micro-batches).
        real_points: the same for windows of untrimmed data, drawn as hollow markers.
        title: the axes' title (a default says what is drawn).

    Returns:
        The figure; errors below ``ERROR_FLOOR`` sit on the floor.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(points), "plot_gradient_error_vs_spread needs at least one measured point")
    require(all(len(p) == 3 for p in list(points) + list(real_points or [])),
            "plot_gradient_error_vs_spread needs (spread, mode, error) triples")  # fmt: skip
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for mode in dict.fromkeys(m for _, m, _ in points):
        colour = MODE_COLOURS.get(mode, INK)
        sel = sorted((s, e) for s, m, e in points if m == mode)
        xs = sorted({s for s, _ in sel})
        means = [sum(e for s, e in sel if s == x) / sum(1 for s, _ in sel if s == x) for x in xs]
        ax.plot([s for s, _ in sel], [_floor(e) for _, e in sel], "o", color=colour, alpha=0.7)
        ax.plot(xs, [_floor(m) for m in means], "-", color=colour,
                label=f"{mode}: windows with a set spread")  # fmt: skip
    real = list(real_points or [])
    for mode in dict.fromkeys(m for _, m, _ in real):
        sel = [(s, e) for s, m, e in real if m == mode]
        ax.plot([s for s, _ in sel], [_floor(e) for _, e in sel], "D", mfc="none",
                color=MODE_COLOURS.get(mode, INK), label=f"{mode}: untrimmed data")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.set_yscale("log")
    ax.axhline(ERROR_FLOOR, color=MUTED, lw=0.8, ls=":")
    ax.set_xlabel("spread: loss tokens of the fullest micro-batch / of the emptiest")
    ax.set_ylabel("‖g_acc − g_full‖ / ‖g_full‖")
    ax.set_title(title or "Accumulated gradient vs one full batch (measured)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _draw_window_weights(ax: Axes, window: AccumulationWindow) -> None:
    """Per micro-batch: ``n_i / N`` (the full batch's weight) beside ``1 / K`` (loss / accum)."""
    n = window.loss_tokens
    total, k, w = sum(n), len(n), 0.4
    xs = list(range(k))
    full = "n_i / N  (full batch, token-weighted)"
    ax.bar([x - w / 2 for x in xs], [ni / total for ni in n], w,
           color=MODE_COLOURS["token_weighted"], label=full)  # fmt: skip
    ax.bar([x + w / 2 for x in xs], [1 / k] * k, w, color=MODE_COLOURS["mean"],
           label="1 / K  (loss / accum)")  # fmt: skip
    for x, ni in zip(xs, n):
        label_above(ax, f"{ni}", (x - w / 2, ni / total), fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x + 1) for x in xs], fontsize=8)
    ax.set_xlabel("micro-batch i (numbers: its loss tokens n_i)")
    ax.set_ylabel("weight in the optimiser step")
    ax.set_title(f"K={k} micro-batches of {window.micro_batch_size} rows, N={total} loss tokens")
    ax.legend(fontsize=8)


def _draw_window_errors(ax: Axes, window: AccumulationWindow) -> None:
    errors = window.errors
    names = list(errors)
    ax.bar(names, [_floor(errors[m]) for m in names],
           color=[MODE_COLOURS.get(m, INK) for m in names])  # fmt: skip
    for x, m in enumerate(names):
        label_above(ax, f"{errors[m]:.1e}", (x, _floor(errors[m])))
    ax.tick_params(axis="x", labelsize=8)
    ax.set_yscale("log")
    ax.set_ylim(ERROR_FLOOR / 2, 10)
    ax.set_ylabel("relative gradient error vs full batch")
    ax.set_title(f"measured, spread {window.spread:.0f}×")


def plot_accumulation_window(window: AccumulationWindow) -> Figure:
    """One window, measured (:func:`course_lib.lessons.accumulation.accumulation_window`).

    Left: per micro-batch, its share of the window's loss tokens ``n_i / N`` (what the full batch
    gives it) beside ``1 / K`` (what ``loss / accum`` gives it). Right: the relative error of the
    accumulated gradient against one full batch, in each mode measured.

    Args:
        window: the measured window.

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(window.loss_tokens), "plot_accumulation_window needs at least one micro-batch")
    require(sum(window.loss_tokens) > 0,
            "plot_accumulation_window needs a window with at least one loss token")  # fmt: skip
    require(bool(window.errors), "plot_accumulation_window needs at least one mode's error")
    k = len(window.loss_tokens)
    fig, (ax, ax_err) = plt.subplots(
        1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [max(3, min(k, 8)), 2]}
    )
    _draw_window_weights(ax, window)
    _draw_window_errors(ax_err, window)
    fig.tight_layout()
    return fig


def _draw_heldout(ax: Axes, heldout: dict) -> None:
    """Grouped bars: held-out loss per token, one group per data slice, one bar per mode."""
    modes = list(heldout)
    groups = list(dict.fromkeys(g for m in modes for g in heldout[m]))
    w = 0.8 / len(modes)
    for j, mode in enumerate(modes):
        xs = [g + (j - (len(modes) - 1) / 2) * w for g in range(len(groups))]
        vals = [heldout[mode][g] for g in groups]
        ax.bar(xs, vals, w, color=MODE_COLOURS.get(mode, INK), label=mode)
        for x, v in zip(xs, vals):
            label_above(ax, f"{v:.3f}", (x, v), fontsize=7)
    lo = min(min(h.values()) for h in heldout.values())
    hi = max(max(h.values()) for h in heldout.values())
    ax.set_ylim(lo - 0.15 * (hi - lo + 0.1), hi + 0.15 * (hi - lo + 0.1))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel("held-out loss per token (nats)")
    ax.set_title("after training, by completion length")
    ax.legend(fontsize=8)


def plot_accumulation_runs(runs: AccumulationRuns) -> Figure:
    """Two training runs from the same weights on the same windows, differing only in the mode
    (:func:`course_lib.lessons.accumulation.accumulation_runs`).

    Left: the training loss per loss token at every step (nats). Middle: ``||θ_mean −
    θ_token_weighted|| / ||θ_token_weighted − θ_0||`` per step. Right, when measured: the
    held-out loss per token, one group of bars per slice of the data.

    Args:
        runs: the two measured runs.

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    loss_by_mode, distance, heldout = runs.losses, runs.distance, runs.heldout
    require(bool(loss_by_mode), "plot_accumulation_runs needs at least one run's losses")
    require(not heldout or all(heldout.values()),
            "plot_accumulation_runs: every held-out mode needs at least one group")  # fmt: skip
    panels = 3 if heldout else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.8))
    ax_loss, ax_dist = axes[0], axes[1]
    for mode, losses in loss_by_mode.items():
        ax_loss.plot(range(1, len(losses) + 1), losses, "-", color=MODE_COLOURS.get(mode, INK),
                     label=mode, alpha=0.8)  # fmt: skip
    ax_loss.set_xlabel("optimiser step")
    ax_loss.set_ylabel("training loss per loss token (nats)")
    ax_loss.set_title("training loss (same init, same windows)")
    ax_loss.legend(fontsize=8)
    ax_loss.grid(alpha=0.3)
    ax_dist.plot(range(1, len(distance) + 1), distance, "o-", color=PURPLE, ms=3)
    ax_dist.set_xlabel("optimiser step")
    ax_dist.set_ylabel("‖θ_mean − θ_tw‖ / ‖θ_tw − θ_0‖")
    ax_dist.set_title("distance between the two runs")
    ax_dist.set_ylim(0, max(distance) * 1.15 if distance else 1)
    ax_dist.grid(alpha=0.3)
    if heldout:
        _draw_heldout(axes[2], heldout)
    fig.tight_layout()
    return fig


def plot_summed_loss(summed: SummedLoss) -> Figure:
    """Summing the window's losses instead of averaging them
    (:func:`course_lib.lessons.accumulation_cost.summed_loss_runs`).

    Left: ``||g_summed|| / ||g_averaged||`` against the micro-batches accumulated, on the line
    ``y = k``. Right: the training loss of the three SGD runs at every step.

    Args:
        summed: the measurement.

    Returns:
        The figure.

    Raises:
        ValueError: no scale or no run measured.
    """
    require(bool(summed.scale) and bool(summed.losses), "plot_summed_loss needs a measurement")
    fig, (ax_scale, ax_loss) = plt.subplots(1, 2, figsize=(10, 3.8))
    ks = sorted(summed.scale)
    ax_scale.plot(ks, ks, "-", color=MUTED, alpha=0.6, label="y = k")
    ax_scale.plot(ks, [summed.scale[k] for k in ks], "o", color=VERMILLION, label="measured")
    ax_scale.set_xticks(ks)
    ax_scale.set_xlabel("micro-batches accumulated, k")
    ax_scale.set_ylabel("‖g_summed‖ / ‖g_averaged‖")
    ax_scale.set_title("the summed loss's gradient is k times larger")
    ax_scale.legend(fontsize=8)
    for name, losses in summed.losses.items():
        style = ":" if name.endswith("K × lr") else "-"
        ax_loss.plot(range(1, len(losses) + 1), losses, style, color=RUN_COLOURS.get(name, INK),
                     label=name.replace("K", str(summed.grad_accum_steps)), lw=2)  # fmt: skip
    ax_loss.set_xlabel("optimiser step")
    ax_loss.set_ylabel("training loss (nats)")
    ax_loss.set_title(f"SGD at lr = {summed.lr:g}, no clipping")
    ax_loss.legend(fontsize=8)
    ax_loss.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_accumulation_cost(cost: AccumulationCost) -> Figure:
    """What one optimiser step costs at ``K`` accumulation steps, beside one batch of the same
    rows (:func:`course_lib.lessons.accumulation_cost.accumulation_cost`).

    Left: the measured peak memory (MiB). Right: the wall time per optimiser step, medians of
    the interleaved rounds with bars from the fastest to the slowest.

    Args:
        cost: the measurement.

    Returns:
        The figure.

    Raises:
        ValueError: nothing measured.
    """
    require(bool(cost.ks), "plot_accumulation_cost needs at least one measured K")
    fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(10, 3.8))
    rows = f"{cost.micro_batch_size} rows of {cost.seq_len}"
    for batch, colour, name in ((False, BLUE, f"accumulate K micro-batches of {rows}"),
                                (True, MUTED, "one batch of the same K × rows")):  # fmt: skip
        peaks = cost.batch_peak_bytes if batch else cost.peak_bytes
        ax_mem.plot(cost.ks, [mib(peaks[k]) for k in cost.ks], "o-", color=colour, label=name)
        med = np.array([cost.median(k, batch) for k in cost.ks]) * 1e3
        spread = np.array([cost.spread(k, batch) for k in cost.ks]).T * 1e3
        ax_time.errorbar(cost.ks, med, yerr=[med - spread[0], spread[1] - med], fmt="o-",
                         color=colour, capsize=3, label=name)  # fmt: skip
    for ax in (ax_mem, ax_time):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.set_xlabel("accumulation steps K")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_mem.set_ylabel(f"peak memory of one step (MiB, {cost.method})")
    ax_time.set_ylabel("wall time per optimiser step (ms)")
    ax_time.set_title("medians of interleaved rounds, bars: fastest to slowest", fontsize=9)
    fig.tight_layout()
    return fig


def plot_step_errors(recipe: StepErrors, fixed: StepErrors | None = None) -> Figure:
    """Every optimiser step of a training loop against the full batch of its micro-batches
    (:func:`course_lib.lessons.accumulation.step_errors`), the recipe's loop beside the fix.

    Args:
        recipe: the recipe's loop, measured.
        fixed: the fixed loop, measured (``None``: not written yet).

    Returns:
        The figure.

    Raises:
        ValueError: the recipe's loop took no step.
    """
    require(bool(recipe.errors), "plot_step_errors needs at least one measured step")
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    loops = [("the recipe's loop", recipe, MODE_COLOURS["mean"])]
    loops += [("your fixed_train", fixed, MODE_COLOURS["token_weighted"])] if fixed else []
    w = 0.8 / len(loops)
    for j, (name, measured, colour) in enumerate(loops):
        xs = [s + 1 + (j - (len(loops) - 1) / 2) * w for s in range(len(measured.errors))]
        ax.bar(xs, [_floor(e) for e in measured.errors], w, color=colour, label=name)
    ax.set_yscale("log")
    ax.set_ylim(ERROR_FLOOR / 2, 10)
    ax.set_xticks(range(1, len(recipe.errors) + 1))
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("relative error vs its full batch")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_gradient_noise(noise: GradientNoise) -> Figure:
    """Gradient noise of a step against examples per step (left) and loss tokens per step
    (right), for short and long completions (:func:`course_lib.noise.gradient_noise`): measured
    points, and the ``1 / K`` law through the noise of a one-example step as lines.

    Args:
        noise: the measurement.

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(bool(noise.ks), "plot_gradient_noise needs at least one step size")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for name, colour in (("short", BLUE), ("long", VERMILLION)):
        per_example = noise.tokens_per_example[name]
        label = f"{name} completions (~{per_example:.0f} loss tokens each)"
        for ax, unit in zip(axes, (1, per_example)):
            x = np.array(noise.ks) * unit
            ax.loglog(x, noise.noise[name], "o", color=colour, label=label)
            ax.loglog(x, [noise.one_example_noise[name] / k for k in noise.ks], "-",
                      color=colour, alpha=0.5)  # fmt: skip
    axes[0].set_xlabel("examples per step")
    axes[1].set_xlabel("loss tokens per step")
    axes[0].set_ylabel("gradient noise  E||g - g*||²")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"{noise.device.split(':')[0].upper()}: the noise of a step's gradient, against "
                 "examples and against tokens per step")  # fmt: skip
    return fig


def noise_verdict(ratio: float, target: float) -> str:
    """Where a noise-to-signal ratio stands against the target, in words (four significant
    figures can round 0.0405 to the 0.040 it misses).

    Args:
        ratio: the noise-to-signal ratio of a step.
        target: the largest ratio allowed.

    Returns:
        ``"above the target 0.04"`` or ``"at or below the target 0.04"``.
    """
    return f"{'above' if ratio > target else 'at or below'} the target {target:g}"


def plot_noise_target(
    noise: GradientNoise, accum: int, micro_batch_size: int, target: float
) -> Figure:
    """The measured noise-to-signal law for steps of ``micro_batch_size x accum`` examples
    (``noise.noise_to_signal / examples``) against the ``target``, the chosen step marked.

    Args:
        noise: the measurement.
        accum: the accumulation steps marked.
        micro_batch_size: examples per micro-batch.
        target: the noise-to-signal target (a dashed line).

    Returns:
        The figure.

    Raises:
        ValueError: an empty or inconsistent input; the message names what is missing.
    """
    require(accum >= 1 and micro_batch_size >= 1, "plot_noise_target needs positive sizes")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    rho, grid = noise.noise_to_signal, np.arange(1, 129)
    ax.loglog(grid, rho / (micro_batch_size * grid), color=PURPLE, alpha=0.6,
              label="measured 1/K law (all examples)")  # fmt: skip
    # the target drawn over a hollow marker: a point near the line must not hide it
    ax.axhline(target, color=INK, ls="--", label=f"target {target}", zorder=3)
    ratio = rho / (micro_batch_size * accum)
    ax.loglog([accum], [ratio], "o", ms=10, color=PURPLE, mfc="none", mew=2)
    tokens = micro_batch_size * accum * noise.tokens_per_example["all"]
    ax.set_title(f"accumulation {accum}: ~{tokens:,.0f} loss tokens per step, noise-to-signal "
                 f"{ratio:.4g}: {noise_verdict(ratio, target)}", fontsize=10)  # fmt: skip
    ax.set_xlabel("gradient accumulation steps")
    ax.set_ylabel("noise-to-signal ratio")
    ax.legend(fontsize=8)
    return fig
