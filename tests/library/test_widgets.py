"""Widgets are a thin skin: one static frame when headless, and with ``compute`` every frame
draws ``figure_fn(compute(**values))``, computing each slider position once when cached."""

import matplotlib.pyplot as plt
import pytest

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
