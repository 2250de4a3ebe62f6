"""Every figure draws the result it is given (a Figure whose data is that result) and rejects an
empty or inconsistent result with a ValueError that says what is missing."""

from __future__ import annotations

import importlib
import inspect
import itertools
import pkgutil
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import pytest
from helpers import tiny_config
from matplotlib.figure import Figure

import course_lib.figures
from course_lib.checkpointing import StepTimes
from course_lib.figures import (
    accumulation,
    attention,
    checkpointing,
    choosing,
    padding,
    style,
    timeline,
)
from course_lib.lessons.accumulation import AccumulationRuns, AccumulationWindow, StepErrors
from course_lib.lessons.accumulation_cost import AccumulationCost, SummedLoss
from course_lib.lessons.attention import BudgetSplit, ValuesPerLayer, budget_split, values_per_layer
from course_lib.lessons.checkpointing import budget_fit
from course_lib.lessons.choosing import PlanCurve, SmallDatasetTrap, plan_curve, small_dataset_trap
from course_lib.lessons.padding import (
    BatchLayouts,
    RowLengthPadding,
    SchemeRun,
    Throughput,
    batch_layouts,
    row_length_padding,
)
from course_lib.memory import ShapeComparison, activation_bytes
from course_lib.memory.timeline import OpEvent, StepTimeline
from course_lib.noise import GradientNoise
from course_lib.token_log import StepTokens

MiB = 2**20


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def row(impl="eager", seq_len=64, measured=3 * MiB, predicted=3 * MiB, mode="off", batch=4):
    return ShapeComparison(
        attn_impl=impl,
        checkpointing=mode,
        checkpoint_every=1,
        n_layers=2,
        n_heads=4,
        batch_size=batch,
        seq_len=seq_len,
        predicted_bytes=predicted,
        measured_bytes=measured,
        predicted_saved_bytes=predicted // 2,
        saved_bytes=measured // 2,
        peak_at="loss",
        method="CPU: counted bytes",
    )


def step_times(plain=(0.010, 0.012, 0.011), checkpointed=(0.014, 0.015, 0.013)):
    return StepTimes("blocks", 1, "sdpa", 4, 2, 128, "cpu", list(plain), list(checkpointed))


def noise(ks=(1, 2, 4)):
    per = {"short": 10.0, "long": 40.0, "all": 25.0}
    one = {"short": 4.0, "long": 1.0, "all": 2.0}
    measured = {g: [one[g] / k * 1.1 for k in ks] for g in per}
    return GradientNoise(
        list(ks), per, one, {"short": 1.0, "long": 1.0, "all": 4.0}, measured, "cpu"
    )


def step_tokens(step, loss_tokens):
    return StepTokens(step, 2, 8, 1024, 800, loss_tokens, 1, loss_tokens < 4000)


def ydata(ax, label: str) -> list[float]:
    """The y values of the one line labelled ``label`` on ``ax``."""
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == label]
    return [float(y) for y in line.get_ydata()]


# --- one case per figure: build it from a small result, then check it drew that result ---------


def case_measured_vs_predicted():
    rows = [row(seq_len=t, measured=t * MiB, predicted=t * MiB + MiB) for t in (32, 64)]
    fig = attention.plot_measured_vs_predicted(rows)
    assert ydata(fig.axes[0], "eager: measured") == [32.0, 64.0]
    assert ydata(fig.axes[0], "eager: predicted") == [33.0, 65.0]
    return fig


def case_breakdown():
    cfg = tiny_config(attn_impl="eager")
    breakdowns = [activation_bytes(cfg, 4, 64), activation_bytes(cfg, 1, 256)]
    fig = attention.plot_breakdown(breakdowns, [b.total for b in breakdowns])
    measured = ydata(fig.axes[0], "measured peak")
    assert measured == pytest.approx([b.total / MiB for b in breakdowns])
    # The stacked bars reach each breakdown's predicted total.
    tops = {}
    for bar in fig.axes[0].patches:
        x = round(bar.get_x() + bar.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), bar.get_y() + bar.get_height())
    assert [tops[0], tops[1]] == pytest.approx([b.total / MiB for b in breakdowns])
    return fig


def case_linear_vs_quadratic():
    values = values_per_layer(
        n_heads=4, d_model=64, d_mlp=256, token_budget=1024, seq_lens=[32, 64]
    )
    fig = attention.plot_linear_vs_quadratic(values)
    scores = [ln for ln in fig.axes[0].get_lines() if "scores" in ln.get_label()][0]
    assert list(scores.get_ydata()) == values.scores
    return fig


def case_split():
    split = budget_split(tiny_config(), 256, 64, measure=False)
    split.measured = [row("eager", 64, measured=MiB), row("sdpa", 64, measured=2 * MiB)]
    fig = attention.plot_split(split, memory_budget=3 * MiB, y_max_bytes=10 * MiB)
    assert ydata(fig.axes[0], "measured peak") == [1.0, 2.0]
    assert "4 × 64 = 256 tokens" in fig.axes[0].get_title()
    assert ydata(fig.axes[0], "target 3 MiB") == [3.0, 3.0]
    assert [t.get_text() for t in fig.axes[0].texts] == ["1.0 MiB", "2.0 MiB"]  # peaks printed
    assert fig.axes[0].get_ylim() == (0.0, 10.0)
    return fig


def case_padding_waste():
    fig = padding.plot_padding_waste([1, 2, 4], {"random": [0.0, 0.25, 0.5]})
    assert ydata(fig.axes[0], "random") == [0.0, 25.0, 50.0]
    return fig


def case_batch_layouts():
    layouts = batch_layouts([5, 9, 30, 2, 17, 8, 12, 3], 4, 32, seed=1)
    fig = padding.plot_batch_layouts(layouts)
    assert len(fig.axes) == len(layouts.layouts) == 3
    for ax, layout in zip(fig.axes, layouts.layouts):
        assert f"{layout.waste:.1%} padding here" in ax.get_title()
    return fig


def case_throughput():
    runs = [
        SchemeRun("random", 3, 100, 200, 90, [2.0, 2.0, 4.0]),
        SchemeRun("packed", 2, 100, 110, 90, [1.0, 2.0, 1.0]),
    ]
    fig = padding.plot_throughput(Throughput(runs, "cpu"))
    assert [b.get_height() for b in fig.axes[0].patches] == [50.0, 100.0]  # median epochs
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels[1] == "100\n×2.00 (1.00–4.00)"  # the median of the pairs, and their range
    return fig


def case_row_length_padding():
    result = row_length_padding([30, 200, 64, 17, 90, 120, 8, 40, 33] * 4, 512, [64, 128, 512])
    fig = padding.plot_row_length_padding(result)
    greedy = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("next-fit")][0]
    assert list(greedy.get_ydata()) == [100 * s.waste["greedy"] for s in result.splits]
    assert [t.get_text() for t in fig.axes[0].texts][:3] == ["8 × 64", "4 × 128", "1 × 512"]
    return fig


def case_loss_curves():
    fig = padding.plot_loss_curves({"correct": [3.0, 2.5], "careless": [3.0, 2.4]})
    assert ydata(fig.axes[0], "careless") == [3.0, 2.4]
    return fig


def case_gradient_error_vs_spread():
    points = [(1.0, "mean", 1e-7), (4.0, "mean", 0.3), (4.0, "token_weighted", 0.0)]
    fig = accumulation.plot_gradient_error_vs_spread(points, [(3.0, "mean", 0.2)])
    assert ydata(fig.axes[0], "mean: windows with a set spread") == [1e-7, 0.3]
    # An exact zero is drawn on the floor of the log axis, not dropped.
    assert ydata(fig.axes[0], "token_weighted: windows with a set spread") == [
        accumulation.ERROR_FLOOR
    ]
    return fig


def case_accumulation_window():
    window = AccumulationWindow(2, [4, 12], {"mean": 0.25, "token_weighted": 1e-8})
    fig = accumulation.plot_accumulation_window(window)
    heights = [b.get_height() for b in fig.axes[0].patches]
    assert heights == pytest.approx([0.25, 0.75, 0.5, 0.5])  # n_i / N beside 1 / K
    assert "spread 3×" in fig.axes[1].get_title()
    return fig


def case_accumulation_runs():
    heldout = {"mean": {"short": 2.0, "long": 2.5}, "token_weighted": {"short": 2.1, "long": 2.4}}
    losses = {"mean": [3.0, 2.0], "token_weighted": [3.0, 2.1]}
    fig = accumulation.plot_accumulation_runs(AccumulationRuns(losses, [0.1, 0.2], heldout, {}))
    assert len(fig.axes) == 3
    assert ydata(fig.axes[0], "mean") == [3.0, 2.0]
    return fig


def summed_loss(scale=None):
    losses = {"averaged, lr": [5.0, 4.0], "summed, lr": [5.0, 9.0], "averaged, K × lr": [5.0, 9.0]}
    return SummedLoss(4, 0.3, {1: 1.0, 2: 2.0} if scale is None else scale, losses, 0.0, 1e-7)


def case_summed_loss():
    fig = accumulation.plot_summed_loss(summed_loss())
    assert ydata(fig.axes[0], "measured") == [1.0, 2.0]
    assert ydata(fig.axes[1], "summed, lr") == [5.0, 9.0]
    assert ydata(fig.axes[1], "averaged, 4 × lr") == [5.0, 9.0]  # K written as the measured 4
    return fig


def accumulation_cost(ks=(1, 2)):
    ks = list(ks)
    return AccumulationCost(
        ks, 2, 64, "CPU: counted bytes", {k: MiB for k in ks}, {k: k * MiB for k in ks},
        {k: [0.01 * k, 0.02 * k, 0.05 * k] for k in ks}, {k: [0.01 * k] * 3 for k in ks},
    )  # fmt: skip


def case_accumulation_cost():
    fig = accumulation.plot_accumulation_cost(accumulation_cost())
    mem, time = fig.axes
    assert [line.get_ydata().tolist() for line in mem.get_lines()] == [[1.0, 1.0], [1.0, 2.0]]
    # the medians in milliseconds, with bars from the fastest to the slowest round
    assert time.get_lines()[0].get_ydata().tolist() == pytest.approx([20.0, 40.0])
    assert "CPU: counted bytes" in mem.get_ylabel()
    return fig


def case_step_errors():
    recipe, fixed = StepErrors([0.2, 0.1], 2, 2), StepErrors([1e-7, 0.0], 2, 2)
    fig = accumulation.plot_step_errors(recipe, fixed)
    heights = [b.get_height() for b in fig.axes[0].patches]
    assert heights == pytest.approx([0.2, 0.1, 1e-7, accumulation.ERROR_FLOOR])
    assert len(accumulation.plot_step_errors(recipe).axes[0].patches) == 2  # not written yet
    return fig


def case_checkpointing_peaks():
    rows = [row(seq_len=t, measured=t * MiB, mode=m) for t in (64, 128) for m in ("off", "blocks")]
    fig = checkpointing.plot_checkpointing_peaks(rows)
    assert ydata(fig.axes[0], "off: measured") == [64.0, 128.0]
    assert ydata(fig.axes[0], "blocks: measured") == [64.0, 128.0]
    return fig


def case_step_times():
    times = step_times()
    fig = checkpointing.plot_step_times(times)
    medians = [b.get_height() for b in fig.axes[0].patches]
    assert medians == pytest.approx([11.0, 14.0])  # ms
    # the pairs' ratios are 1.40, 1.25 and 1.18: the title gives their median and their range
    assert "×1.25 (median of 3 pairs, range 1.18-1.40" in fig.axes[0].get_title()
    return fig


def case_budget_fit():
    config = tiny_config(n_layers=4, checkpoint_every=2)
    fit = budget_fit(config, seq_len=512, n_layers=4, memory_budget="8MiB")
    fig = checkpointing.plot_budget_fit(fit, y_range_bytes=(MiB, 2**30))
    assert fit.verdict in fig.axes[0].get_title() and "blocks 0, 2" in fig.axes[0].get_title()
    plain = ydata(fig.axes[0], "checkpointing off (predicted)")
    assert plain == pytest.approx([p / MiB for p in fit.peaks["off"]])
    assert fig.axes[0].get_ylim() == pytest.approx((1.0, 1024.0))
    assert fig.axes[0].get_xscale() == "linear"  # neighbouring row lengths stay apart
    assert "budget 8 MiB" in [ln.get_label() for ln in fig.axes[0].get_lines()]
    peaks = [t.get_text() for t in fig.axes[0].texts]
    assert peaks == [f"{fit.at_seq_len[m] / MiB:.1f} MiB" for m in ("off", "blocks")]
    return fig


def case_search_probes():
    history = [(1, True), (2, True), (4, False), (3, True)]
    needed = {1: MiB, 2: 2 * MiB, 3: 3 * MiB, 4: 5 * MiB}
    fig = choosing.plot_search_probes(history, needed, 4 * MiB, predicted=needed)
    assert ydata(fig.axes[0], "memory model (predicted)") == [1.0, 2.0, 3.0, 5.0]
    assert ydata(fig.axes[1], "largest fit so far") == [1, 2, 2, 3]
    return fig


def case_step_tokens():
    fig = choosing.plot_step_tokens([step_tokens(0, 900), step_tokens(1, 1100)], planned=4096)
    loss_bars = [b.get_height() for b in fig.axes[0].patches[-2:]]
    assert loss_bars == [900, 1100]
    return fig


def case_small_dataset_trap():
    trap = small_dataset_trap(800, 30.0, [16, 64, 256], chosen=72)
    fig = choosing.plot_small_dataset_trap(trap, steps_range=(0.5, 1000))
    assert ydata(fig.axes[0], "full optimiser steps per epoch") == [50, 12, 11, 3]
    assert ydata(fig.axes[0], "your E = 72") == [11]  # the chosen batch starred...
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["16", "64", "256"]
    assert "your E = 72: 11 full steps per epoch, 2,160 loss tokens" in fig.axes[0].get_title()
    assert fig.axes[0].get_ylim() == pytest.approx((0.5, 1000))
    return fig


def case_training_plan():
    curve = plan_curve(tiny_config(), "8MiB", 128, 800)
    fig = choosing.plot_training_plan(curve)
    assert f"chosen micro-batch {curve.plan.micro_batch}" in [
        ln.get_label() for ln in fig.axes[0].get_lines()
    ]
    nothing = plan_curve(tiny_config(d_model=256, n_layers=4), "1MiB", 512, 800)
    text = choosing.plot_training_plan(nothing).axes[1].texts[0].get_text()
    assert text.startswith("nothing fits")
    return fig


def case_gradient_noise():
    fig = accumulation.plot_gradient_noise(noise())
    short = [ln for ln in fig.axes[1].get_lines() if ln.get_label().startswith("short")][0]
    assert list(short.get_xdata()) == [10.0, 20.0, 40.0]  # against tokens: k * 10 per example
    assert list(short.get_ydata()) == pytest.approx([4.4, 2.2, 1.1])
    assert fig._suptitle.get_text().startswith("CPU:")
    return fig


def case_noise_target():
    fig = accumulation.plot_noise_target(noise(), accum=4, micro_batch_size=2, target=0.05)
    (point,) = [ln for ln in fig.axes[0].get_lines() if list(ln.get_xdata()) == [4]]
    assert list(point.get_ydata()) == pytest.approx([0.5 / 8])  # noise_to_signal 2 / 4, 8 rows
    # lesson 3's near miss: 0.0405 at K = 22 once read "0.040" beside the target 0.04
    near = accumulation.plot_noise_target(noise(), accum=11, micro_batch_size=2, target=0.02)
    title = near.axes[0].get_title()  # noise_to_signal 0.5 / 22 rows = 0.0227
    assert "0.02273" in title and "above the target 0.02" in title
    exact = accumulation.plot_noise_target(noise(), accum=4, micro_batch_size=2, target=0.0625)
    assert "0.0625: at or below the target 0.0625" in exact.axes[0].get_title()
    assert point.get_markerfacecolor() == "none"  # hollow: the target line shows through
    return fig


def timeline_of(label, lives, phases=None):
    phases = phases or ["forward"] * (len(lives) // 2) + ["backward"] * (
        len(lives) - len(lives) // 2
    )
    events = [OpEvent(i, f"aten.op{i}", ph, "" if ph == "forward" else "MmBackward0", b)
              for i, (b, ph) in enumerate(zip(lives, phases))]  # fmt: skip
    return StepTimeline(label, "CPU: counted bytes", events)


def case_step_timeline():
    plain = timeline_of("plain", [MiB, 3 * MiB, 4 * MiB, 2 * MiB])
    ckpt = timeline_of("checkpointed", [MiB, MiB, 2 * MiB, 3 * MiB, MiB],
                       ["forward", "forward", "recompute", "backward", "backward"])  # fmt: skip
    gpu = replace(plain, method="GPU: allocator history")
    fig = timeline.plot_step_timeline([plain, ckpt, gpu], memory_budget=2 * MiB)
    assert len(fig.axes) == 2  # one panel per way of measuring
    assert ydata(fig.axes[0], "plain") == [1.0, 3.0, 4.0, 2.0]
    assert ydata(fig.axes[0], "checkpointed: recomputed op") == [2.0]
    stars = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "*"]
    assert [list(s.get_xydata()[0]) for s in stars] == [[3, 4.0], [4, 3.0]]  # op 3, op 4
    words = [t.get_text() for t in fig.axes[0].texts if "peak" in t.get_text()]
    assert words[0].startswith("plain: peak 4.0 MiB (backward)\naten.op2\nin MmBackward0")
    assert "allocation" in fig.axes[1].get_xlabel()
    return fig


CASES = {
    "plot_step_timeline": case_step_timeline,
    "plot_gradient_noise": case_gradient_noise,
    "plot_noise_target": case_noise_target,
    "plot_measured_vs_predicted": case_measured_vs_predicted,
    "plot_breakdown": case_breakdown,
    "plot_linear_vs_quadratic": case_linear_vs_quadratic,
    "plot_split": case_split,
    "plot_padding_waste": case_padding_waste,
    "plot_batch_layouts": case_batch_layouts,
    "plot_throughput": case_throughput,
    "plot_row_length_padding": case_row_length_padding,
    "plot_loss_curves": case_loss_curves,
    "plot_gradient_error_vs_spread": case_gradient_error_vs_spread,
    "plot_accumulation_window": case_accumulation_window,
    "plot_accumulation_runs": case_accumulation_runs,
    "plot_summed_loss": case_summed_loss,
    "plot_accumulation_cost": case_accumulation_cost,
    "plot_step_errors": case_step_errors,
    "plot_checkpointing_peaks": case_checkpointing_peaks,
    "plot_step_times": case_step_times,
    "plot_budget_fit": case_budget_fit,
    "plot_search_probes": case_search_probes,
    "plot_step_tokens": case_step_tokens,
    "plot_small_dataset_trap": case_small_dataset_trap,
    "plot_training_plan": case_training_plan,
}


def public_figures() -> set[str]:
    names = set()
    for info in pkgutil.iter_modules(course_lib.figures.__path__):
        module = importlib.import_module(f"course_lib.figures.{info.name}")
        names |= {
            name
            for name, fn in inspect.getmembers(module, inspect.isfunction)
            if name.startswith("plot_") and fn.__module__ == module.__name__
        }
    return names


def test_every_figure_has_a_case():
    assert public_figures() == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_figure_draws_its_result(name):
    fig = CASES[name]()
    assert isinstance(fig, Figure)
    assert fig.axes


# --- bad input: a ValueError that names the problem ----------------------------------------------


def _fit_without_checkpointing():
    fit = budget_fit(tiny_config(), seq_len=128, n_layers=2, memory_budget="8MiB")
    del fit.peaks["blocks"]
    return fit


BAD = {
    "plot_step_timeline": (
        lambda: timeline.plot_step_timeline([StepTimeline("plain", "CPU: counted bytes")]),
        r"timelines \['plain'\] have no events",
    ),
    "plot_measured_vs_predicted": (lambda: attention.plot_measured_vs_predicted([]), "at least"),
    "plot_breakdown": (
        lambda: attention.plot_breakdown([activation_bytes(tiny_config(), 1, 8)], [1, 2]),
        "one per breakdown",
    ),
    "plot_linear_vs_quadratic": (
        lambda: attention.plot_linear_vs_quadratic(ValuesPerLayer(8, 1, [], [], [])),
        "at least one seq_len",
    ),
    "plot_split": (
        lambda: attention.plot_split(BudgetSplit(64, 8, 8, 0, [])),
        "at least one breakdown",
    ),
    "plot_padding_waste": (
        lambda: padding.plot_padding_waste([1, 2], {"random": [0.1]}),
        "1 values for 2 batch sizes",
    ),
    "plot_batch_layouts": (
        lambda: padding.plot_batch_layouts(BatchLayouts(2, 3.5, 1, 8, [])),
        "at least one scheme",
    ),
    "plot_throughput": (
        lambda: padding.plot_throughput(Throughput([], "cpu")),
        "at least one scheme's run",
    ),
    "plot_row_length_padding": (
        lambda: padding.plot_row_length_padding(RowLengthPadding(64, 10, [])),
        "at least one split",
    ),
    "plot_gradient_noise": (
        lambda: accumulation.plot_gradient_noise(noise(ks=())),
        "at least one step size",
    ),
    "plot_noise_target": (
        lambda: accumulation.plot_noise_target(noise(), accum=0, micro_batch_size=2, target=0.1),
        "positive sizes",
    ),
    "plot_loss_curves": (lambda: padding.plot_loss_curves({}), "at least one curve"),
    "plot_gradient_error_vs_spread": (
        lambda: accumulation.plot_gradient_error_vs_spread([]),
        "at least one measured point",
    ),
    "plot_accumulation_window": (
        lambda: accumulation.plot_accumulation_window(AccumulationWindow(2, [0, 0], {"mean": 1})),
        "at least one loss token",
    ),
    "plot_accumulation_runs": (
        lambda: accumulation.plot_accumulation_runs(AccumulationRuns({}, [], {}, {})),
        "at least one run",
    ),
    "plot_summed_loss": (
        lambda: accumulation.plot_summed_loss(summed_loss(scale={})),
        "needs a measurement",
    ),
    "plot_accumulation_cost": (
        lambda: accumulation.plot_accumulation_cost(accumulation_cost(ks=())),
        "at least one measured K",
    ),
    "plot_step_errors": (
        lambda: accumulation.plot_step_errors(StepErrors([], 0, 2)),
        "at least one measured step",
    ),
    "plot_checkpointing_peaks": (
        lambda: checkpointing.plot_checkpointing_peaks([]),
        "at least one measured row",
    ),
    "plot_step_times": (
        lambda: checkpointing.plot_step_times(step_times(plain=())),
        "at least one timed repeat",
    ),
    "plot_budget_fit": (
        lambda: checkpointing.plot_budget_fit(_fit_without_checkpointing()),
        "peaks for the modes",
    ),
    "plot_search_probes": (
        lambda: choosing.plot_search_probes([(1, True), (2, False)], {1: 10}, 100),
        r"no measured bytes for probes \[2\]",
    ),
    "plot_step_tokens": (lambda: choosing.plot_step_tokens([]), "at least one logged step"),
    "plot_small_dataset_trap": (
        lambda: choosing.plot_small_dataset_trap(
            SmallDatasetTrap(800, 30.0, 4000, 25, [16, 32], [50], [480.0])
        ),
        "one step count",
    ),
    "plot_training_plan": (
        lambda: choosing.plot_training_plan(
            PlanCurve(MiB, 8, None, "no plan", "off", [], [], 0, [])
        ),
        "at least one micro-batch",
    ),
}


def test_every_figure_has_a_bad_input():
    assert public_figures() == set(BAD)


@pytest.mark.parametrize("name", sorted(BAD))
def test_figure_rejects_bad_input(name):
    make, match = BAD[name]
    with pytest.raises(ValueError, match=match):
        make()


# --- labels that never print over each other (issue 39, item 7) ---------------------------------


def overlapping_labels(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of texts (annotations and x tick labels) drawn over each other on one axes."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        texts = [*ax.texts, *ax.get_xticklabels()]
        boxes = [(t.get_text(), t.get_window_extent(renderer))
                 for t in texts if t.get_visible() and t.get_text().strip()]  # fmt: skip
        found += [(a, b) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1 :]
                  if box.overlaps(other)]  # fmt: skip
    return found


def crowded_probes() -> Figure:
    """A search whose last probes are a row apart on an axis 64 rows wide."""
    history = [(1, True), (2, True), (4, True), (8, True), (16, True), (32, True), (64, False),
               (48, False), (40, True), (44, False), (42, True), (43, False)]  # fmt: skip
    needed = {n: (3 + n / 2) * MiB for n in range(1, 65)}
    return choosing.plot_search_probes(history, needed, 24 * MiB, predicted=needed)


def crowded_trap() -> Figure:
    """An effective batch of 136 chosen beside the tick at 128."""
    return choosing.plot_small_dataset_trap(
        small_dataset_trap(3500, 30.0, [8, 16, 32, 64, 128, 256, 512], chosen=136)
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_labels_overlap(name):
    assert overlapping_labels(CASES[name]()) == []


@pytest.mark.parametrize("make", [crowded_probes, crowded_trap])
def test_no_labels_overlap_where_the_numbers_crowd(make):
    assert overlapping_labels(make()) == []


def test_the_overlap_check_sees_labels_printed_over_each_other():
    fig, ax = plt.subplots()
    ax.annotate("128", (0.5, 0.5))
    ax.annotate("136", (0.51, 0.5))
    assert overlapping_labels(fig) == [("128", "136")]


# --- a palette for every reader (issue 39, item 7) -----------------------------------------------

#: Machado, Oliveira and Fernandes (2009), severity 1: linear RGB as each kind of dichromat sees it.
CVD = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                   [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                     [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                   [0.004733, 0.691367, 0.303900]],
}  # fmt: skip
MIN_DELTA_E = 20  # CIE76 distance between two colours a reader must tell apart


def _lab(colour: str, matrix) -> np.ndarray:
    from matplotlib.colors import to_rgb

    c = np.asarray(to_rgb(colour))
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    seen = np.clip(np.asarray(matrix) @ linear, 0, 1)
    to_xyz = [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
    xyz = np.asarray(to_xyz) @ seen / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def too_close(colours: dict[str, str]) -> list[str]:
    """Pairs of ``colours`` closer than :data:`MIN_DELTA_E` for some reader."""
    found = []
    for (a, ca), (b, cb) in itertools.combinations(colours.items(), 2):
        for who, matrix in {"normal vision": np.eye(3), **CVD}.items():
            distance = float(np.linalg.norm(_lab(ca, matrix) - _lab(cb, matrix)))
            if distance < MIN_DELTA_E:
                found.append(f"{a}/{b} for {who}: {distance:.0f}")
    return found


@pytest.mark.parametrize("group", sorted(style.COMPARED))
def test_colours_compared_side_by_side_stay_apart_for_colour_blind_readers(group):
    assert too_close(style.COMPARED[group]) == []


def test_stacked_components_differ_from_their_neighbours():
    stack = list(style.COMPONENT_COLOURS.items())
    assert [p for a, b in zip(stack, stack[1:]) for p in too_close(dict([a, b]))] == []


def test_the_palette_check_sees_a_red_green_pair():
    assert any("deuteranopia" in p for p in too_close({"eager": "tab:red", "varlen": "tab:green"}))


def _drawn_colours(fig: Figure) -> set[tuple[float, float, float]]:
    from matplotlib.colors import to_rgb

    found = []
    for ax in fig.axes:
        for line in ax.get_lines():
            found += [line.get_color(), line.get_markerfacecolor(), line.get_markeredgecolor()]
        for patch in ax.patches:
            found += [patch.get_facecolor()]
        for collection in ax.collections:
            found += [tuple(c) for c in collection.get_facecolors()]
        found += [t.get_color() for t in ax.texts]
    return {tuple(round(x, 3) for x in to_rgb(c)) for c in found
            if not (isinstance(c, str) and c == "none")}  # fmt: skip


def _allowed() -> set[tuple[float, float, float]]:
    from matplotlib.colors import to_rgb

    return {tuple(round(x, 3) for x in to_rgb(c)) for c in style.PALETTE.values()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_figure_draws_with_the_palette(name):
    """Okabe and Ito's colours, black, white and greys: nothing else (no tab:red, no tab:green)."""
    odd = {c for c in _drawn_colours(CASES[name]()) - _allowed() if len(set(c)) > 1}
    assert odd == set()
