"""Count what the assessment pass tried on every item, and what got through.

    .venv/bin/python tests/notebooks/counts.py [LESSON_PREFIX ...]

Runs each lesson's assessment pass (``assessment.run_lesson``, the same probes
``test_assessment.py`` asserts on: it takes a minute or two per lesson) and prints, per lesson and
in all: the listed wrong answers and wrong methods (how many scored any point, how many the
visible test called *right*); a prediction's wrong but plausible values (each earns the
completion point the right value earns: how many earned anything else); the right answers in
other forms (how many lost a point or failed their visible test); the shortcuts (how many scored
any point, and of those how many are a prediction's completion point, which any plausible value
earns, and how many copy the course's code into a graded function: scored on their results and
listed for review, never zeroed for a resemblance). A
second table gives every shortcut class by its letter (``probes.SHORTCUTS``): tried and scored.
These are the counts the README and the closing notes quote; ``test_assessment.py`` fails if a
shortcut scores outside those two kinds, or a wrong answer scores at all.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from assessment import run_lesson  # noqa: E402
from probes import SHORTCUTS  # noqa: E402
from test_assessment import listed_letters, prediction_letters  # noqa: E402

from course_grading.judge import items as trusted  # noqa: E402
from course_grading.nbgrader.course import find_lessons  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("wrong", "wrong scored", "wrong told right", "plausible", "plausible off",
        "forms", "forms rejected", "shortcuts", "scored", "completion", "listed")  # fmt: skip
LETTER = {s.name: s.letter for s in SHORTCUTS}


def count(lesson: str) -> tuple[dict[str, int], dict[str, list[int]], list[str]]:
    """The assessment pass's tallies for one lesson, per shortcut letter [tried, scored], and one
    line per item: the letters tried (a scoring one with its points) and those not applicable."""
    registry = importlib.import_module(f"items_{lesson[:2]}").ITEMS
    run = run_lesson(lesson, registry)
    tally = dict.fromkeys(KEYS, 0)
    letters = {s.letter: [0, 0] for s in SHORTCUTS}
    lines = []
    for gid, probe in run.probes.items():
        tried = [f"{LETTER[t.name]}={t.points:g}" if t.points else LETTER[t.name]
                 for t in probe.of("shortcut")]  # fmt: skip
        skipped = [f"{LETTER[n]} ({why})" for n, why in probe.not_applicable.items()]
        lines.append(
            f"  {gid}: {' '.join(tried)}" + (f"; n/a: {'; '.join(skipped)}" * bool(skipped))
        )
        wrong, forms, shortcuts = probe.of("wrong"), probe.of("form"), probe.of("shortcut")
        plausible, solution = probe.of("plausible"), probe.of("solution")[0]
        predicted = any(i.rules for i in trusted.items_of(lesson).values() if i.answer == gid)
        tally["wrong"] += len(wrong)
        tally["wrong scored"] += sum(bool(t.points) for t in wrong)
        tally["wrong told right"] += sum(t.visible == "right" for t in wrong)
        tally["plausible"] += len(plausible)
        tally["plausible off"] += sum(t.points != solution.points for t in plausible)
        tally["forms"] += len(forms)
        tally["forms rejected"] += sum(
            (not t.full) or t.visible.startswith("failed") for t in forms
        )
        tally["shortcuts"] += len(shortcuts)
        for t in shortcuts:
            letter = LETTER[t.name]
            letters[letter][0] += 1
            letters[letter][1] += bool(t.points)
            tally["scored"] += bool(t.points)
            if t.points and predicted and letter in prediction_letters:
                tally["completion"] += 1
            function = any(i.function for i in trusted.items_of(lesson).values() if i.answer == gid)
            if t.points and function and letter in listed_letters:
                tally["listed"] += 1  # a copy of the course's code: scored, and listed for review
    return tally, letters, lines


def main(prefixes: list[str]) -> None:
    lessons = [name for name in find_lessons(ROOT)
               if not prefixes or any(name.startswith(p) for p in prefixes)]  # fmt: skip
    total = dict.fromkeys(KEYS, 0)
    per_class = {s.letter: [0, 0] for s in SHORTCUTS}
    rows, details = [], []
    print("lesson".ljust(34) + "".join(k.rjust(17) for k in KEYS))
    for lesson in lessons:
        tally, letters, lines = count(lesson)
        details += [lesson, *lines]
        for key in KEYS:
            total[key] += tally[key]
        for letter, (tried, scored) in letters.items():
            per_class[letter][0] += tried
            per_class[letter][1] += scored
        rows.append((lesson, letters))
        print(lesson.ljust(34) + "".join(str(tally[k]).rjust(17) for k in KEYS), flush=True)
    print("all".ljust(34) + "".join(str(total[k]).rjust(17) for k in KEYS))
    print("\nshortcut classes, tried/scored:")
    print("lesson".ljust(34) + "".join(s.letter.rjust(7) for s in SHORTCUTS))
    for lesson, letters in [*rows, ("all", per_class)]:
        cells = "".join(
            f"{letters[s.letter][0]}/{letters[s.letter][1]}".rjust(7) for s in SHORTCUTS
        )
        print(lesson.ljust(34) + cells)
    print("\n" + "\n".join(f"{s.letter}: {s.name}" for s in SHORTCUTS))
    print("\nper item (letter=points where one scored):\n" + "\n".join(details))


if __name__ == "__main__":
    main(sys.argv[1:])
