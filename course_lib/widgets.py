"""Sliders as a thin skin over the pure figure functions in :mod:`course_lib.figures`.

Every widget is built by :func:`explore`: it takes a function returning a matplotlib ``Figure``
and the sliders that feed its arguments. When the figure draws a result, ``compute`` is the
function (in the concept's own module) that makes the result from the slider values; the widget
calls ``figure_fn(compute(**values), **figure_kw)``. Under ``CI`` or ``NBGRADER_EXECUTION``
(headless test runs and autograding) it draws one static frame with the default values instead.

How a frame reaches the page. Each frame is rendered here to an image and set as the whole
``outputs`` of an ``ipywidgets.Output`` (the widget's own state, synced like a slider's value).
Nothing is ever *captured* into the ``Output`` (no ``with out:``, no ``clear_output``): a headless
client (nbclient, nbconvert, nbval) that mimics the ``Output`` widget answers every captured
output with a comm message sent back into the running kernel, and that exchange, in the middle
of a cell, is where a lesson hung for good (jupyter/nbclient#312). With the state set directly,
a client without a person sees plain widget state and never writes to the kernel, so executing
a notebook cannot hang on a widget, with or without ``CI``.

The controls are laid out in a grid of columns at least :data:`CONTROL_MIN_PX` pixels wide, one
control per cell, so that none is squeezed to a sliver (six sliders in one row once left tracks
of a few pixels); a line under them says when a frame is being computed, or why a position
could not be drawn.
"""

from __future__ import annotations

import base64
import html
import io
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ._checks import memory_budget as _budget
from .figures.attention import plot_split
from .figures.checkpointing import plot_budget_fit
from .lessons.attention import budget_split, split_seq_lens
from .lessons.checkpointing import budget_fit
from .memory import activation_bytes
from .memory.meter import Device
from .model import TinyGPTConfig

#: The narrowest a control's cell in the grid may be, in CSS pixels (its track is this minus the
#: label and the readout: about 250 px for the course's labels).
CONTROL_MIN_PX = 420

Spec = tuple[str, dict[str, Any]]  # a control, built lazily: ("int" | "choice", its arguments)

__all__ = [
    "headless",
    "explore",
    "build_explorer",
    "int_slider",
    "choice",
    "budget_split_explorer",
    "checkpointing_explorer",
    "CONTROL_MIN_PX",
]


def headless() -> bool:
    """True when no person is watching: CI, nbval, or nbgrader's autograder.

    Returns:
        True when ``CI`` or ``NBGRADER_EXECUTION`` is set (to anything non-empty): widgets then
        draw one static frame.
    """
    return bool(os.environ.get("CI") or os.environ.get("NBGRADER_EXECUTION"))


def int_slider(value: int, min: int, max: int, step: int = 1, description: str = "") -> Spec:
    """An ``IntSlider`` spec (built lazily so that importing this module needs no widgets).

    Args:
        value: the starting (and headless) value.
        min: the smallest value.
        max: the largest value.
        step: the slider's increment.
        description: the label beside it (default: the keyword's name).

    Returns:
        ``("int", {...})``: a spec :func:`explore` turns into an ``ipywidgets.IntSlider``.

    Raises:
        ValueError: ``value`` outside ``[min, max]``.
    """
    if not min <= value <= max:
        raise ValueError(f"slider {description!r}: value {value} is outside [{min}, {max}]")
    return ("int", dict(value=value, min=min, max=max, step=step, description=description))


def choice(value: Any, options: Iterable[Any], description: str = "") -> Spec:
    """A selection-slider spec over ``options`` (a list of values, or of ``(label, value)``).

    Args:
        value: the starting (and headless) value: one of the option values.
        options: values, or ``(label, value)`` pairs to show labels.
        description: the label beside it (default: the keyword's name).

    Returns:
        ``("choice", {...})``: a spec :func:`explore` turns into an
        ``ipywidgets.SelectionSlider``.

    Raises:
        ValueError: ``value`` is not one of ``options``.
    """
    options = list(options)
    values = [o[1] if isinstance(o, tuple) else o for o in options]
    if value not in values:
        raise ValueError(f"choice {description!r}: value {value!r} is not one of {options}")
    return ("choice", dict(value=value, options=options, description=description))


def _split(controls):
    def is_spec(v):
        return isinstance(v, tuple) and len(v) == 2 and v[0] in ("int", "choice")

    fixed = {k: v for k, v in controls.items() if not is_spec(v)}
    specs = {k: v for k, v in controls.items() if is_spec(v)}
    return fixed, specs


def _frame(figure_fn, compute, cache: bool, fixed: dict, figure_kw: dict | None = None):
    """``values -> Figure``: ``figure_fn(**fixed, **values)``, or with ``compute``
    ``figure_fn(compute(**fixed, **values), **figure_kw)``; with ``cache`` each result is computed
    once per combination of slider values (for results that take seconds to measure)."""
    if compute is None:
        return lambda **values: figure_fn(**fixed, **values)
    results: dict = {}
    kw = figure_kw or {}

    def frame(**values):
        key = tuple(sorted(values.items()))
        if not cache or key not in results:
            results[key] = compute(**fixed, **values)
        return figure_fn(results[key], **kw)

    return frame


def figure_output(fig: Figure) -> dict:
    """``fig`` as one notebook output (``display_data``), the way the inline backend shows it.

    Args:
        fig: the figure to show.

    Returns:
        ``{"output_type": "display_data", "data": {"image/png": base64, "text/plain": ...},
        "metadata": {...}}``, ready for an ``Output`` widget's ``outputs``.
    """
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        data, metadata = shell.display_formatter.format(fig)
    else:  # no kernel (a script, a test): the same PNG the inline backend would make
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", bbox_inches="tight")
        data, metadata = {"image/png": buffer.getvalue(), "text/plain": repr(fig)}, {}
    data = {k: base64.b64encode(v).decode("ascii") if isinstance(v, bytes) else v
            for k, v in data.items()}  # fmt: skip
    return {"output_type": "display_data", "data": data, "metadata": metadata}


def build_explorer(
    figure_fn: Callable[..., Figure],
    compute: Callable[..., Any] | None = None,
    cache: bool = False,
    figure_kw: dict[str, Any] | None = None,
    **controls: Any,
) -> tuple[Any, dict[str, Any]]:
    """Build (without displaying) the widget, its first frame drawn.

    The figure is redrawn whenever a control moves; each frame replaces the ``Output``'s
    ``outputs`` (see the module's docstring: nothing is captured into it).

    Args:
        figure_fn: draws one frame; called with the slider values (and the fixed keywords), or
            with ``compute``'s result.
        compute: makes the result a frame draws from the slider values; ``None``: ``figure_fn``
            takes the values itself.
        cache: compute each combination of slider values once (for results that take seconds).
        figure_kw: keywords for ``figure_fn`` after ``compute``'s result (fixed axes, a budget
            line); only with ``compute``.
        **controls: one per argument: a spec from :func:`int_slider` / :func:`choice` becomes a
            slider; any other value is passed to every frame unchanged.

    Returns:
        ``(container, {name: control})``: the ``VBox`` of the controls' grid, a status line and
        the output, and each control by its keyword (set ``.value`` to move it from code).

    Raises:
        Exception: whatever the first frame raises (a later frame's error is shown in the status
            line instead, so a slider never leaves a traceback behind).
    """
    import ipywidgets as w

    fixed, specs = _split(controls)
    frame = _frame(figure_fn, compute, cache, fixed, figure_kw)
    built = {}
    for name, (kind, kw) in specs.items():
        kw = dict(kw)
        desc = kw.pop("description") or name
        common = dict(
            description=desc,
            continuous_update=False,
            style={"description_width": "initial"},
            layout=w.Layout(width="auto"),
        )
        slider = w.IntSlider if kind == "int" else w.SelectionSlider
        built[name] = slider(**common, **kw)
    out, status = w.Output(), w.HTML()

    def draw() -> None:
        fig = frame(**{k: c.value for k, c in built.items()})
        out.outputs = (figure_output(fig),)
        plt.close(fig)

    def redraw(_change: Any = None) -> None:
        status.value = "<i>drawing this position…</i>"
        try:
            draw()
        except Exception as err:  # shown beside the sliders: the student moves on
            status.value = (
                f"cannot draw this position: {html.escape(f'{type(err).__name__}: {err}')}"
            )
        else:
            status.value = ""

    for control in built.values():
        control.observe(redraw, names="value")
    draw()
    grid = w.GridBox(
        list(built.values()),
        layout=w.Layout(
            grid_template_columns=f"repeat(auto-fill, minmax({CONTROL_MIN_PX}px, 1fr))",
            grid_gap="2px 24px",
            width="100%",
        ),
    )
    return w.VBox([grid, status, out]), built


def explore(
    figure_fn: Callable[..., Figure],
    compute: Callable[..., Any] | None = None,
    cache: bool = False,
    figure_kw: dict[str, Any] | None = None,
    **controls: Any,
) -> None:
    """Display ``figure_fn`` with one control per keyword; one static frame when headless.

    With ``compute``, every frame draws ``figure_fn(compute(**values), **figure_kw)``: the
    compute function owns the work (training, packing, measuring), the figure only draws its
    result.

    Args:
        figure_fn: draws one frame; called with the slider values (and the fixed keywords), or
            with ``compute``'s result.
        compute: makes the result a frame draws from the slider values; ``None``: ``figure_fn``
            takes the values itself.
        cache: compute each combination of slider values once (for results that take seconds).
        figure_kw: keywords for ``figure_fn`` after ``compute``'s result (fixed axes, a budget
            line); only with ``compute``.
        **controls: one per argument: a spec from :func:`int_slider` / :func:`choice` becomes a
            slider; any other value is passed to every frame unchanged.
    """
    from IPython.display import display

    if headless():
        fixed, specs = _split(controls)
        frame = _frame(figure_fn, compute, cache, fixed, figure_kw)
        fig = frame(**{k: s[1]["value"] for k, s in specs.items()})
        display(fig)
        plt.close(fig)
        return
    container, _ = build_explorer(figure_fn, compute, cache, figure_kw, **controls)
    display(container)


def budget_split_explorer(
    config: TinyGPTConfig,
    token_budget: int,
    seq_lens: Sequence[int] | None = None,
    device: Device = None,
    memory_budget: int | str | None = None,
) -> None:
    """Lesson 1's slider: one token budget, every (batch, seq) split of it, predicted and measured.

    Each position of the slider is a shape ``(token_budget // seq_len) x seq_len``
    (:func:`course_lib.lessons.attention.budget_split`); the figure shows the predicted
    components for eager and sdpa attention and the measured peak of a real training step at that
    shape (measured on first view, then cached), with its size written above it. The y axis is
    the same at every position (up to the largest predicted peak of any split), so moving the
    slider moves the bars, not the scale.

    Args:
        config: the model measured; ``attn_impl`` is set per curve.
        token_budget: tokens per step (``batch_size * seq_len``) every split keeps.
        seq_lens: the sequence lengths the slider offers; ``None``: the powers of two from 16 to
            ``config.max_seq_len`` that divide ``token_budget``
            (:func:`~course_lib.lessons.attention.split_seq_lens`).
        device: where the measured steps run (default: CUDA when available, else the CPU).
        memory_budget: a target for one step (bytes, or ``"100MiB"``), drawn as a dashed line;
            ``None``: no line.

    Raises:
        ValueError: a budget that is not an amount of memory, or no split of ``token_budget``.
    """
    if seq_lens is None:
        seq_lens = split_seq_lens(token_budget, config.max_seq_len)
    target = None if memory_budget is None else _budget(memory_budget)
    tallest = max(activation_bytes(replace(config, attn_impl=impl), token_budget // t, t).total
                  for t in seq_lens for impl in ("eager", "sdpa"))  # fmt: skip
    options = [(f"{token_budget // t}×{t}", t) for t in seq_lens]
    start = seq_lens[len(seq_lens) // 2]
    explore(
        plot_split,
        compute=budget_split,
        cache=True,
        figure_kw={"memory_budget": target, "y_max_bytes": int(1.15 * max(tallest, target or 0))},
        config=config,
        token_budget=token_budget,
        device=device,
        seq_len=choice(start, options, "batch × seq"),
    )


def _checkpointing_fit(config: TinyGPTConfig, checkpoint_every: int, **kw: Any):
    return budget_fit(replace(config, checkpoint_every=checkpoint_every), **kw)


def checkpointing_explorer(
    config: TinyGPTConfig, memory_budget: int | str, longest: int = 8192, row_step: int = 128
) -> None:
    """Lesson 4's explorer: does one step fit ``memory_budget``, plain or checkpointed?

    Six controls (row length, depth, stride, budget, batch, attention path) feed
    :func:`~course_lib.lessons.checkpointing.budget_fit`; the figure
    (:func:`~course_lib.figures.checkpointing.plot_budget_fit`) keeps the same axes at every
    position: row lengths from ``row_step`` to ``longest`` on a linear axis (neighbouring
    multiples of ``row_step`` are told apart), peaks from 1 MiB to 1 GiB on a log axis, the
    budget dashed, and the predicted peaks at the chosen row written beside their markers.

    Args:
        config: the lesson's model (its depth, attention path and stride are the sliders'
            starting values).
        memory_budget: the starting budget (bytes, or ``"16MiB"``); the slider offers 4 to 128
            MiB.
        longest: the longest row the slider offers (tokens).
        row_step: the slider's step, and the sweep's (tokens).

    Raises:
        ValueError: a budget that is not an amount of memory, or a size that is not positive.
    """
    budget = _budget(memory_budget)
    budgets = sorted({m * 2**20 for m in (4, 8, 12, 16, 24, 32, 64, 128)} | {budget})
    sweep = list(range(row_step, longest + 1, row_step))
    explore(
        plot_budget_fit,
        compute=_checkpointing_fit,
        figure_kw={"y_range_bytes": (2**20, 2**30)},
        config=config,
        seq_lens=sweep,
        seq_len=int_slider(min(1024, longest), row_step, longest, step=row_step,
                           description="seq_len"),
        n_layers=int_slider(config.n_layers, 1, 16, description="blocks"),
        checkpoint_every=int_slider(1, 1, 16, description="stride k"),
        memory_budget=choice(budget, [(f"{m / 2**20:g} MiB", m) for m in budgets],
                             description="budget"),
        batch_size=int_slider(1, 1, 8, description="batch"),
        attn_impl=choice(config.attn_impl, ["sdpa", "eager"], description="attention"),
    )  # fmt: skip
