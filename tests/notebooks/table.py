"""Print the per-item assessment table of docs/instructors.md (section 3.2), from the registry.

    .venv/bin/python tests/notebooks/table.py [LESSON_PREFIX ...]

For every item: its points, kind, what earns it (the check's docstring), its visible test (every
one a property that says *plausible*, never *right*; a prediction's also says its value was
recorded), and the shortcut classes ``test_assessment.py`` tries on it, by letter
(``probes.SHORTCUTS``). No visible test is a digest any more, so there is no search to price.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probes import SHORTCUTS  # noqa: E402

from course_grading.judge import items, visible  # noqa: E402
from course_grading.nbgrader.course import find_lessons  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _earns(item: items.Item) -> str:
    doc = (item.check.__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split()) or "(no docstring)"


def rows(lesson: str) -> list[list[str]]:
    found = []
    for gid, item in items.items_of(lesson).items():
        kind = (
            f"function `{item.function}`"
            if item.function
            else "value(s) " + ", ".join(f"`{n}`" for n in item.values)
        )
        shown = "; ".join(c.describe(item) for c in visible.checks(item)) or "(none declared)"
        tried = [s.letter for s in SHORTCUTS if s.applies(item)]
        found.append([gid, f"{item.points:g}", kind, _earns(item), shown, " ".join(tried)])
    return found


def main(argv: list[str]) -> int:
    head = ["item", "points", "kind", "what earns it", "visible check", "shortcut classes tried"]
    for lesson in find_lessons(ROOT):
        if argv and not any(lesson.startswith(a) for a in argv):
            continue
        print(f"### {lesson}\n")
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in rows(lesson):
            print("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
