"""Lesson 4's closest library calls give the *right* answers, so that the assessment pass's "the
library call scores 0" (``test_assessment.py``) proves the item is the student's own work, not
that the library answer happens to be wrong.

Each value item's library answer runs here on the lesson's parameter and import cells (no
measurement cell), and the trusted check scores its values with full marks once ``own_work``
is set aside; the library's stride model agrees with the trusted reference on drawn models.
"""

from __future__ import annotations

import random
from dataclasses import replace

import nbformat
import pytest
from assessment import lesson_paths, nbgrader_meta
from items_04 import ITEMS

from course_grading.judge import items as trusted
from course_grading.judge.items import Evidence
from course_grading.judge.items.lesson_04 import _reference

LESSON = "04_activation_checkpointing"


@pytest.fixture(scope="module")
def lesson_namespace() -> dict:
    """The names the lesson's parameter and import cells define."""
    cells = {
        nbgrader_meta(c).get("grade_id"): c.source
        for c in nbformat.read(lesson_paths(LESSON)[0], as_version=4).cells
    }
    namespace: dict = {}
    for gid in ("parameters", "setup-imports"):
        source = "\n".join(line for line in cells[gid].split("\n") if not line.startswith("%"))
        exec(compile(source, gid, "exec"), namespace)
    return namespace


VALUE_ITEMS = [gid for gid, item in trusted.items_of(LESSON).items() if not item.function]


@pytest.mark.parametrize("gid", VALUE_ITEMS)
def test_the_library_answer_is_right_and_scores_only_as_own_work(gid, lesson_namespace):
    item = trusted.items_of(LESSON)[gid]
    namespace = dict(lesson_namespace)
    exec(ITEMS[item.answer].library, namespace)
    values = {name: namespace[name] for name in item.values}
    as_own_work = trusted.verdict(item, Evidence(item, "ann", values=values), ["course_lib"])
    assert as_own_work.points == 0 and "course_lib" in as_own_work.message
    without = replace(item, own_work=False)
    got = trusted.verdict(without, Evidence(without, "ann", values=values), ["course_lib"])
    assert got.full, f"{gid}: the library answer {values} is not right: {got.message}"


def test_the_library_stride_model_is_right():
    namespace: dict = {}
    exec(ITEMS["saved-values-per-token"].library, namespace)
    library = namespace["saved_values_per_token"]
    rng = random.Random(4)
    cases = [(4, 64, 256, 4, k) for k in range(6)] + [(3, 8, 32, 2, k) for k in range(5)]
    for _ in range(20):
        depth, heads = rng.randint(1, 12), rng.choice([1, 2, 4])
        cases.append((depth, 2 * heads * rng.randint(1, 32), rng.randint(1, 512), heads,
                      rng.randint(0, depth + 2)))  # fmt: skip
    assert [library(*c) for c in cases] == [_reference(*c) for c in cases]


@pytest.mark.parametrize(
    ("gid", "code"),
    [
        # a prediction earns its point for being plausible: more than the 4 blocks is not
        ("test-predict-peak-ratio", "predicted_peak_ratio = 4.5"),
        ("test-predict-time-ratio", "predicted_time_ratio = 0.5"),
    ],
)
def test_a_wrong_library_answer_would_be_caught(gid, code, lesson_namespace):
    """The check above can fail: an implausible prediction scores nothing."""
    item = replace(trusted.items_of(LESSON)[gid], own_work=False)
    namespace = dict(lesson_namespace)
    exec(code, namespace)
    values = {name: namespace[name] for name in item.values}
    assert trusted.verdict(item, Evidence(item, "ann", values=values), []).points == 0
