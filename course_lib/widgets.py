"""Sliders as a thin skin over the pure figure functions in :mod:`course_lib.plots`.

Every widget is built by :func:`explore`: it takes a function returning a matplotlib ``Figure``
and the sliders that feed its arguments. Under ``CI`` or ``NBGRADER_EXECUTION`` (headless test
runs and autograding) it draws one static frame with the default values instead, so executing a
notebook can never hang on a widget.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import matplotlib.pyplot as plt

__all__ = ["headless", "explore", "build_explorer", "int_slider", "choice"]


def headless() -> bool:
    """True when no person is watching: CI, nbval, or nbgrader's autograder."""
    return bool(os.environ.get("CI") or os.environ.get("NBGRADER_EXECUTION"))


def int_slider(value: int, min: int, max: int, step: int = 1, description: str = ""):
    """An ``IntSlider`` spec (built lazily so that importing this module needs no widgets)."""
    if not min <= value <= max:
        raise ValueError(f"slider {description!r}: value {value} is outside [{min}, {max}]")
    return ("int", dict(value=value, min=min, max=max, step=step, description=description))


def choice(value, options, description: str = ""):
    """A selection-slider spec over ``options`` (a list of values, or of ``(label, value)``)."""
    options = list(options)
    values = [o[1] if isinstance(o, tuple) else o for o in options]
    if value not in values:
        raise ValueError(f"choice {description!r}: value {value!r} is not one of {options}")
    return ("choice", dict(value=value, options=options, description=description))


def _default(spec):
    return spec[1]["value"]


def build_explorer(figure_fn: Callable[..., plt.Figure], **controls):
    """Build (without displaying) the widget: ``(container, {name: control})``.

    ``figure_fn(**values)`` is redrawn into an ``Output`` whenever a control moves. Plain keyword
    values (not specs from :func:`int_slider` / :func:`choice`) are passed through unchanged.
    """
    import ipywidgets as w
    from IPython.display import display

    fixed, specs = _split(controls)
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
            fig = figure_fn(**fixed, **{k: c.value for k, c in built.items()})
            display(fig)
            plt.close(fig)

    for control in built.values():
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox(list(built.values())), out]), built


def _split(controls):
    def is_spec(v):
        return isinstance(v, tuple) and len(v) == 2 and v[0] in ("int", "choice")

    fixed = {k: v for k, v in controls.items() if not is_spec(v)}
    specs = {k: v for k, v in controls.items() if is_spec(v)}
    return fixed, specs


def explore(figure_fn: Callable[..., plt.Figure], **controls) -> None:
    """Display ``figure_fn`` with one control per keyword; one static frame when headless."""
    from IPython.display import display

    if headless():
        fixed, specs = _split(controls)
        fig = figure_fn(**fixed, **{k: _default(s) for k, s in specs.items()})
        display(fig)
        plt.close(fig)
        return
    container, _ = build_explorer(figure_fn, **controls)
    display(container)


def budget_split_explorer(config, token_budget: int, seq_lens=None, device=None) -> None:
    """Lesson 1's slider: one token budget, every (batch, seq) split of it, predicted and measured.

    Each position of the slider is a shape ``(token_budget // seq_len) x seq_len``; the figure
    shows the predicted components for eager and sdpa attention and the measured peak of a real
    training step at that shape (measured on first view, then cached).
    """
    from dataclasses import replace

    from .memory import compare_shapes
    from .plots import plot_split

    if seq_lens is None:
        seq_lens = [
            t
            for t in (2**k for k in range(4, 16))
            if t <= min(token_budget, config.max_seq_len) and token_budget % t == 0
        ]
    if not seq_lens:
        raise ValueError(
            f"no seq_len divides token_budget={token_budget} within "
            f"max_seq_len={config.max_seq_len}"
        )
    cache: dict[int, dict] = {}

    def frame(seq_len: int):
        if seq_len not in cache:
            rows = compare_shapes(
                replace(config), [(token_budget // seq_len, seq_len)], device=device
            )
            cache[seq_len] = {r.attn_impl: r for r in rows}
        return plot_split(config, token_budget, seq_len, cache[seq_len])

    options = [(f"{token_budget // t}×{t}", t) for t in seq_lens]
    start = seq_lens[len(seq_lens) // 2]
    explore(frame, seq_len=choice(start, options, "batch × seq"))
