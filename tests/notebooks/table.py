"""Print the per-item assessment table of docs/instructors.md (section 3.2), from the registry.

    .venv/bin/python tests/notebooks/table.py [LESSON_PREFIX ...]

For every item: its points, kind, what earns it (the check's docstring), its visible test, the
candidate space of a visible digest and the cost of searching it on one core of this machine
(the per-candidate cost is measured here: the least CPU time of three digests), and the shortcut
classes ``test_assessment.py`` tries on it. Items not yet declared with forms and visible checks
are listed as such.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probes import SHORTCUTS  # noqa: E402

from course_grading.judge import items, visible
from course_grading.nbgrader.course import find_lessons  # noqa: E402
from course_lib.answers import digest_seconds  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _earns(item: items.Item) -> str:
    doc = (item.check.__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split()) or "(no docstring)"


def _cost(seconds: float) -> str:
    if math.isinf(seconds):
        return "no digest: nothing to search"
    return f"{seconds / 3600:,.0f} h" if seconds >= 3600 else f"{seconds:,.0f} s (under an hour!)"


def rows(lesson: str, per_candidate: float) -> list[list[str]]:
    found = []
    for gid, item in items.items_of(lesson).items():
        kind = (
            f"function `{item.function}`"
            if item.function
            else "value(s) " + ", ".join(f"`{n}`" for n in item.values)
        )
        if not item.migrated:
            found.append([gid, f"{item.points:g}", kind, _earns(item), "older: not declared",
                          "-", "-", "-"])  # fmt: skip
            continue
        shown = "; ".join(c.describe(item) for c in visible.checks(item))
        digests = [c for c in visible.checks(item) if isinstance(c, visible.Digest)]
        space = "; ".join(d.why or "(stated above)" for d in digests) or "-"
        tried = [s.name for s in SHORTCUTS if (s.functions if item.function else s.values)]
        cost = _cost(visible.search_seconds(item, per_candidate))
        found.append([gid, f"{item.points:g}", kind, _earns(item), shown, space, cost,
                      "; ".join(tried)])  # fmt: skip
    return found


def main(argv: list[str]) -> int:
    per_candidate = digest_seconds(3)
    print(f"one visible digest: {per_candidate:.3f} s of CPU (least of 3, this machine)\n")
    head = ["item", "points", "kind", "what earns it", "visible check", "candidate space",
            "brute force, one core", "shortcut classes tested"]  # fmt: skip
    for lesson in find_lessons(ROOT):
        if argv and not any(lesson.startswith(a) for a in argv):
            continue
        print(f"### {lesson}\n")
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in rows(lesson, per_candidate):
            print("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
