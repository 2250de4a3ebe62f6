"""Sliders as a thin skin over the pure figure functions in :mod:`course_lib.figures`.

Every widget is built by :func:`explore`: it takes a function returning a matplotlib ``Figure``
and the sliders that feed its arguments. When the figure draws a result, ``compute`` is the
function (in the concept's own module) that makes the result from the slider values; the widget
calls ``figure_fn(compute(**values))``. Under ``CI`` or ``NBGRADER_EXECUTION`` (headless test
runs and autograding) it draws one static frame with the default values instead, so executing a
notebook can never hang on a widget.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .figures.attention import plot_split
from .lessons.attention import budget_split, split_seq_lens
from .memory.meter import Device
from .model import TinyGPTConfig

Spec = tuple[str, dict[str, Any]]  # a control, built lazily: ("int" | "choice", its arguments)

__all__ = [
    "headless",
    "explore",
    "build_explorer",
    "int_slider",
    "choice",
    "budget_split_explorer",
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


def _frame(figure_fn, compute, cache: bool, fixed: dict) -> Callable[..., plt.Figure]:
    """``values -> Figure``: ``figure_fn(**fixed, **values)``, or with ``compute``
    ``figure_fn(compute(**fixed, **values))``; with ``cache`` each result is computed once per
    combination of slider values (for results that take seconds to measure)."""
    if compute is None:
        return lambda **values: figure_fn(**fixed, **values)
    results: dict = {}

    def frame(**values):
        key = tuple(sorted(values.items()))
        if not cache or key not in results:
            results[key] = compute(**fixed, **values)
        return figure_fn(results[key])

    return frame


def build_explorer(
    figure_fn: Callable[..., Figure],
    compute: Callable[..., Any] | None = None,
    cache: bool = False,
    **controls: Any,
) -> tuple[Any, dict[str, Any]]:
    """Build (without displaying) the widget.

    The figure is redrawn into an ``Output`` whenever a control moves.

    Args:
        figure_fn: draws one frame; called with the slider values (and the fixed keywords), or
            with ``compute``'s result.
        compute: makes the result a frame draws from the slider values; ``None``: ``figure_fn``
            takes the values itself.
        cache: compute each combination of slider values once (for results that take seconds).
        **controls: one per argument: a spec from :func:`int_slider` / :func:`choice` becomes a
            slider; any other value is passed to every frame unchanged.

    Returns:
        ``(container, {name: control})``: the ``VBox`` of sliders and output, and each slider by
        its keyword (set ``.value`` to move it from code).
    """
    import ipywidgets as w
    from IPython.display import display

    fixed, specs = _split(controls)
    frame = _frame(figure_fn, compute, cache, fixed)
    built = {}
    for name, (kind, kw) in specs.items():
        kw = dict(kw)
        desc = kw.pop("description") or name
        style = {"description_width": "initial"}
        if kind == "int":
            built[name] = w.IntSlider(description=desc, continuous_update=False, style=style, **kw)
        else:
            built[name] = w.SelectionSlider(
                description=desc, continuous_update=False, style=style, **kw
            )
    out = w.Output()

    def redraw(_change=None):
        with out:
            out.clear_output(wait=True)
            fig = frame(**{k: c.value for k, c in built.items()})
            display(fig)
            plt.close(fig)

    for control in built.values():
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox(list(built.values())), out]), built


def explore(
    figure_fn: Callable[..., Figure],
    compute: Callable[..., Any] | None = None,
    cache: bool = False,
    **controls: Any,
) -> None:
    """Display ``figure_fn`` with one control per keyword; one static frame when headless.

    With ``compute``, every frame draws ``figure_fn(compute(**values))``: the compute function
    owns the work (training, packing, measuring), the figure only draws its result.

    Args:
        figure_fn: draws one frame; called with the slider values (and the fixed keywords), or
            with ``compute``'s result.
        compute: makes the result a frame draws from the slider values; ``None``: ``figure_fn``
            takes the values itself.
        cache: compute each combination of slider values once (for results that take seconds).
        **controls: one per argument: a spec from :func:`int_slider` / :func:`choice` becomes a
            slider; any other value is passed to every frame unchanged.
    """
    from IPython.display import display

    if headless():
        fixed, specs = _split(controls)
        frame = _frame(figure_fn, compute, cache, fixed)
        fig = frame(**{k: s[1]["value"] for k, s in specs.items()})
        display(fig)
        plt.close(fig)
        return
    container, _ = build_explorer(figure_fn, compute, cache, **controls)
    display(container)


def budget_split_explorer(
    config: TinyGPTConfig,
    token_budget: int,
    seq_lens: Sequence[int] | None = None,
    device: Device = None,
) -> None:
    """Lesson 1's slider: one token budget, every (batch, seq) split of it, predicted and measured.

    Each position of the slider is a shape ``(token_budget // seq_len) x seq_len``
    (:func:`course_lib.lessons.attention.budget_split`); the figure shows the predicted
    components for eager and sdpa attention and the measured peak of a real training step at that
    shape (measured on first view, then cached).

    Args:
        config: the model measured; ``attn_impl`` is set per curve.
        token_budget: tokens per step (``batch_size * seq_len``) every split keeps.
        seq_lens: the sequence lengths the slider offers; ``None``: the powers of two from 16 to
            ``config.max_seq_len`` that divide ``token_budget``
            (:func:`~course_lib.lessons.attention.split_seq_lens`).
        device: where the measured steps run (default: CUDA when available, else the CPU).
    """
    if seq_lens is None:
        seq_lens = split_seq_lens(token_budget, config.max_seq_len)
    options = [(f"{token_budget // t}×{t}", t) for t in seq_lens]
    start = seq_lens[len(seq_lens) // 2]
    explore(
        plot_split,
        compute=budget_split,
        cache=True,
        config=config,
        token_budget=token_budget,
        device=device,
        seq_len=choice(start, options, "batch × seq"),
    )
