"""Count what the assessment pass tried on every item, and what got through.

    .venv/bin/python tests/notebooks/counts.py [LESSON_PREFIX ...]

Runs each lesson's assessment pass (``assessment.run_lesson``, the same probes
``test_assessment.py`` asserts on: it takes a minute or two per lesson) and prints, per lesson and
in all: the listed wrong answers and wrong methods (how many scored any point, how many the
visible test called *right*), the right answers in other forms (how many lost a point or failed
their visible test) and the shortcuts (how many scored any point). These are the counts the
README and the closing notes quote; ``test_assessment.py`` fails if any "got through" count is
above 0.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from assessment import run_lesson  # noqa: E402

from course_grading.nbgrader.course import find_lessons  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("wrong", "wrong scored", "wrong told right", "forms", "forms rejected", "shortcuts",
        "shortcuts scored")  # fmt: skip


def count(lesson: str) -> dict[str, int]:
    """The assessment pass's tallies for one lesson (its ``items_NN.py`` registry)."""
    registry = importlib.import_module(f"items_{lesson[:2]}").ITEMS
    run = run_lesson(lesson, registry)
    tally = dict.fromkeys(KEYS, 0)
    for probe in run.probes.values():
        wrong, forms, shortcuts = probe.of("wrong"), probe.of("form"), probe.of("shortcut")
        tally["wrong"] += len(wrong)
        tally["wrong scored"] += sum(bool(t.points) for t in wrong)
        tally["wrong told right"] += sum(t.visible == "right" for t in wrong)
        tally["forms"] += len(forms)
        tally["forms rejected"] += sum(
            (not t.full) or t.visible.startswith("failed") for t in forms
        )
        tally["shortcuts"] += len(shortcuts)
        tally["shortcuts scored"] += sum(bool(t.points) for t in shortcuts)
    return tally


def main(prefixes: list[str]) -> None:
    lessons = [name for name in find_lessons(ROOT)
               if not prefixes or any(name.startswith(p) for p in prefixes)]  # fmt: skip
    total = dict.fromkeys(KEYS, 0)
    print("lesson".ljust(34) + "".join(k.rjust(18) for k in KEYS))
    for lesson in lessons:
        tally = count(lesson)
        for key in KEYS:
            total[key] += tally[key]
        print(lesson.ljust(34) + "".join(str(tally[k]).rjust(18) for k in KEYS), flush=True)
    print("all".ljust(34) + "".join(str(total[k]).rjust(18) for k in KEYS))


if __name__ == "__main__":
    main(sys.argv[1:])
