"""Widgets are a thin skin: one static frame when headless, and with ``compute`` every frame
draws ``figure_fn(compute(**values))``, computing each slider position once when cached."""

import matplotlib.pyplot as plt
import pytest
from helpers import tiny_config

from course_lib import widgets
from course_lib.widgets import build_explorer, choice, explore, int_slider


class Recorder:
    """A compute function and a figure function that remember what they were called with."""

    def __init__(self):
        self.computed, self.drawn = [], []

    def compute(self, **values):
        self.computed.append(values)
        return ("result", values["n"])

    def figure(self, result):
        self.drawn.append(result)
        return plt.figure()


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_headless_explore_draws_one_frame_of_the_computed_result(monkeypatch):
    monkeypatch.setenv("CI", "1")
    rec = Recorder()
    explore(rec.figure, compute=rec.compute, fixed="x", n=int_slider(3, 1, 5))
    assert rec.computed == [{"fixed": "x", "n": 3}]
    assert rec.drawn == [("result", 3)]


def test_headless_explore_without_compute_passes_the_values_to_the_figure(monkeypatch):
    monkeypatch.setenv("CI", "1")
    seen = []
    explore(lambda **kw: seen.append(kw) or plt.figure(), k=choice("b", ["a", "b"]), z=0)
    assert seen == [{"z": 0, "k": "b"}]


@pytest.mark.parametrize("cache, computes", [(True, [1, 2]), (False, [1, 2, 1])])
def test_moving_a_slider_recomputes_unless_cached(cache, computes):
    rec = Recorder()
    _, controls = build_explorer(rec.figure, rec.compute, cache, n=int_slider(1, 1, 4))
    controls["n"].value = 2
    controls["n"].value = 1  # back to a position already drawn
    assert [v["n"] for v in rec.computed] == computes
    assert rec.drawn == [("result", 1), ("result", 2), ("result", 1)]


def test_headless_follows_ci_and_the_autograder(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert not widgets.headless()
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert widgets.headless()


def test_slider_specs_reject_a_default_outside_their_range():
    with pytest.raises(ValueError, match="outside"):
        int_slider(9, 1, 4)
    with pytest.raises(ValueError, match="not one of"):
        choice(3, [1, 2])


# --- frames reach the page as widget state, never by capturing output (issue 39, item 2) ---------


@pytest.fixture
def no_capture(monkeypatch):
    """Fail on the hang path: output captured into an ``Output`` (``with out:``) or cleared in
    it: a headless client answers each with a comm message into the running kernel."""
    import ipywidgets

    def refuse(*_args, **_kwargs):
        raise AssertionError("an explorer captured or cleared output in its Output widget")

    monkeypatch.setattr(ipywidgets.Output, "__enter__", refuse)
    monkeypatch.setattr(ipywidgets.Output, "clear_output", refuse)


def _frames(container):
    out = container.children[-1]
    return [o["data"]["image/png"] for o in out.outputs]


def test_each_frame_replaces_the_outputs_state_without_capturing(no_capture):
    rec = Recorder()
    container, controls = build_explorer(rec.figure, rec.compute, n=int_slider(1, 1, 4))
    first = _frames(container)
    controls["n"].value = 3
    assert len(first) == 1 and len(_frames(container)) == 1  # replaced, not appended
    assert rec.drawn == [("result", 1), ("result", 3)]


def test_the_hang_path_is_seen(no_capture):
    """The fixture fails the old way of drawing a frame (captured, then cleared)."""
    import ipywidgets

    out = ipywidgets.Output()
    with pytest.raises(AssertionError, match="captured or cleared"):
        with out:
            pass


def test_a_frame_that_cannot_be_drawn_is_named_in_the_status_line():
    def figure(n):
        if n == 3:
            raise ValueError("no frame at n=3")
        return plt.figure()

    container, controls = build_explorer(figure, n=int_slider(1, 1, 4))
    status = container.children[1]
    controls["n"].value = 3  # a later frame's error is shown, never raised into the comm
    assert "ValueError: no frame at n=3" in status.value
    assert len(_frames(container)) == 1  # the last good frame stays
    controls["n"].value = 2
    assert status.value == ""


def test_controls_sit_in_a_grid_of_wide_columns():
    rec = Recorder()
    container, controls = build_explorer(
        rec.figure, rec.compute, n=int_slider(1, 1, 4), m=int_slider(1, 1, 4)
    )
    grid = container.children[0]
    assert list(grid.children) == list(controls.values())
    assert f"minmax({widgets.CONTROL_MIN_PX}px" in grid.layout.grid_template_columns
    assert all(c.layout.width == "auto" for c in controls.values())  # each fills its column


def test_figure_keywords_reach_every_frame(monkeypatch):
    seen = []

    def figure(result, top=None):
        seen.append((result, top))
        return plt.figure()

    _, controls = build_explorer(figure, lambda n: n, figure_kw={"top": 7}, n=int_slider(1, 1, 4))
    controls["n"].value = 2
    monkeypatch.setenv("CI", "1")
    explore(figure, compute=lambda n: n, figure_kw={"top": 9}, n=int_slider(4, 1, 4))
    assert seen == [(1, 7), (2, 7), (4, 9)]


# --- the lessons' explorers keep their axes (issue 39, item 7) ------------------------------------


@pytest.fixture
def shown(monkeypatch):
    """The containers an explorer displays, with no kernel: what a person's notebook would get."""
    import IPython.display

    got = []
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(IPython.display, "display", got.append)
    return got


def _spy(monkeypatch, name):
    """Record the axes' limits of every frame ``widgets.<name>`` draws."""
    real, limits = getattr(widgets, name), []

    def spy(*args, **kwargs):
        fig = real(*args, **kwargs)
        limits.append((fig.axes[0].get_xlim(), fig.axes[0].get_ylim(), fig.axes[0].lines))
        return fig

    monkeypatch.setattr(widgets, name, spy)
    return limits


def test_lesson_1s_explorer_keeps_its_scale_and_draws_the_target(monkeypatch, shown):
    frames = _spy(monkeypatch, "plot_split")
    config = tiny_config(d_model=32, n_heads=2, n_layers=1, max_seq_len=256)
    widgets.budget_split_explorer(config, 256, device="cpu", memory_budget="2MiB")
    (container,) = shown
    slider = container.children[0].children[0]
    for position in slider.options:
        slider.value = position[1]
    tops = {round(y[1], 6) for _, y, _ in frames}
    assert len(frames) == len(slider.options) + 1 and len(tops) == 1  # one scale for every split
    lines = [ln.get_label() for ln in frames[0][2]]
    assert "target 2 MiB" in lines and "measured peak" in lines


def test_lesson_4s_explorer_keeps_its_axes_as_every_control_moves(monkeypatch, shown):
    frames = _spy(monkeypatch, "plot_budget_fit")
    widgets.checkpointing_explorer(tiny_config(n_layers=4, attn_impl="sdpa"), "16MiB")
    (container,) = shown
    controls = {c.description: c for c in container.children[0].children}
    assert len(controls) == 6
    controls["seq_len"].value = 640
    controls["blocks"].value = 12
    controls["batch"].value = 8
    controls["attention"].value = "eager"
    controls["budget"].value = 64 * 2**20
    assert len(frames) == 6
    assert len({(x, y) for x, y, _ in frames}) == 1  # neither axis moves
    assert frames[0][1] == pytest.approx((1.0, 1024.0))  # MiB: 1 MiB to 1 GiB
