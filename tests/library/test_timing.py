"""The one interleaved timing loop: turns alternate, warm-ups are not timed, counts are kept."""

import pytest

from course_lib.timing import interleave


def test_turns_alternate_and_warmups_are_not_timed():
    calls = []
    steps = {name: (lambda r, name=name: calls.append((name, r)) or r) for name in "abc"}
    t = interleave(steps, rounds=3, warmup=1)
    assert calls == [
        ("c", -1), ("b", -1), ("a", -1),  # round -1 is odd: reversed, and untimed
        ("a", 0), ("b", 0), ("c", 0),
        ("c", 1), ("b", 1), ("a", 1),
        ("a", 2), ("b", 2), ("c", 2),
    ]  # fmt: skip
    assert {n: len(s) for n, s in t.seconds.items()} == {"a": 3, "b": 3, "c": 3}
    assert t.results["b"] == [0, 1, 2]  # what each timed call returned, warm-up excluded


def test_a_name_stops_after_its_own_rounds():
    t = interleave({"long": lambda r: r, "short": lambda r: r}, {"long": 4, "short": 2}, warmup=0)
    assert t.results == {"long": [0, 1, 2, 3], "short": [0, 1]}


def test_ratio_is_the_median_of_paired_rounds():
    t = interleave({"x": lambda r: None, "y": lambda r: None}, 5, warmup=0)
    t.seconds = {"x": [2.0, 2.0, 9.0, 2.0, 2.0], "y": [1.0, 1.0, 1.0, 1.0, 10.0]}
    assert t.pair_ratios("x", "y") == [2.0, 2.0, 9.0, 2.0, 0.2]
    assert t.ratio("x", "y") == 2.0
    assert t.total("x") == 17.0 and t.median("y") == 1.0


@pytest.mark.parametrize(
    "steps, rounds, warmup, message",
    [
        ({}, 3, 1, "at least one step"),
        ({"a": print}, 0, 1, r"rounds\['a'\] must be a positive int"),
        ({"a": print}, {"b": 2}, 1, r"rounds\['a'\] must be a positive int, got None"),
        ({"a": print}, 2, -1, "warmup must be a non-negative int"),
    ],
)
def test_bad_arguments_are_named(steps, rounds, warmup, message):
    with pytest.raises(ValueError, match=message):
        interleave(steps, rounds, warmup)


def test_the_timing_label_names_the_clock():
    from course_lib.timing import CPU_TIMING, GPU_TIMING, timing_method

    assert timing_method("cpu") == CPU_TIMING == "CPU: wall clock"
    assert timing_method("cuda:0") == GPU_TIMING and "synchronize" in GPU_TIMING
    with pytest.raises(RuntimeError):
        timing_method("no-such-device")
