"""One instrumented pass over a lesson: every graded item probed in a live kernel.

The solution notebook runs top to bottom in one kernel. At each autograded answer cell, before
the solution runs, the pass tries what a student might hand in and records what the visible test
said and what the item's trusted check (``course_grading.items``) decided, exactly as the grader
decides it: on the values taken out of the kernel as plain data, and on the candidate answer
cell's source (a graded function is re-created from it in the function sandbox):

* the blank cell (from the student version): the visible test must fail, the item score 0;
* each wrong answer listed for the item: the visible test must fail, the item score 0;
* the closest library call listed for the item: the item must score 0;
* then the solution: the item must score full marks.

It also records the text a student sees above every question (markdown and printed outputs) and,
after the solution ran, the values of the item's constant answers, so a test can look for the
answer's printed forms above its question. Lessons list their probes in ``items_NN.py``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from course_grading import items as trusted
from course_grading.errors import GradingError
from course_grading.evidence import _TAKE as TAKE
from course_grading.evidence import ENCODER
from course_grading.functions import FunctionSandbox
from course_grading.lesson import LessonSpec
from course_grading.verdicts import decide, taken_values

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Item:
    """What to try against one autograded answer cell (by its nbgrader grade id)."""

    wrong: list[str] = field(default_factory=list)  # wrong answers of the right type
    library: str | None = None  # the closest course_lib call, written as an answer
    constants: list[str] = field(default_factory=list)  # names whose values must stay unprinted
    allowed: list[str] = field(default_factory=list)  # printed forms that may appear above (why)


@dataclass
class Probe:
    """What happened to one item during the pass."""

    grade_id: str
    blank_visible: str | None = None  # exception name of the visible test on the blank, or None
    wrong_visible: list[tuple[str, str | None]] = field(default_factory=list)
    # points the trusted checks gave each candidate, and their messages
    blank_points: float | None = None
    wrong_points: list[tuple[str, float, str]] = field(default_factory=list)
    library_points: float | None = None
    library_message: str = ""
    library_error: str | None = None  # exception name if the library answer itself raised
    solution_points: float | None = None
    solution_max: float = 0.0
    solution_message: str = ""
    above: str = ""  # markdown and outputs above the answer cell
    values: dict[str, object] = field(default_factory=dict)


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_answer(cell) -> bool:
    m = nbgrader_meta(cell)
    return cell.cell_type == "code" and m.get("solution") and not m.get("grade")


def is_test(cell) -> bool:
    m = nbgrader_meta(cell)
    return cell.cell_type == "code" and m.get("grade") and not m.get("solution")


def lesson_paths(lesson: str) -> tuple[Path, Path]:
    return (
        ROOT / "solutions" / lesson / f"{lesson}.ipynb",
        ROOT / "notebooks" / lesson / f"{lesson}.ipynb",
    )


def _outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
            parts.append(out["data"].get("text/markdown", ""))
    return "".join(parts)


class Pass:
    """Runs cells, and probe cells, in one kernel."""

    def __init__(self, lesson: str, timeout: int = 180) -> None:
        self.lesson = lesson
        solution, student = lesson_paths(lesson)
        self.nb = nbformat.read(solution, as_version=4)
        self.student = {
            nbgrader_meta(c).get("grade_id"): c
            for c in nbformat.read(student, as_version=4).cells
            if nbgrader_meta(c).get("grade_id")
        }
        self.client = NotebookClient(
            self.nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(solution.parent)}},
        )
        self.spec = LessonSpec.from_notebooks(lesson, solution, student)
        self.items = trusted.check_notebook(lesson, self.nb)
        try:
            self.sandbox = FunctionSandbox.default()
        except GradingError:
            self.sandbox = FunctionSandbox(None)  # no bubblewrap here: the checks still decide

    def run(self, source: str) -> tuple[str | None, str]:
        """Execute ``source``; return (exception name or None, printed text)."""
        cell = nbformat.v4.new_code_cell(source)
        try:
            self.client.execute_cell(cell, 0, store_history=False)
        except CellExecutionError as exc:
            return exc.ename, _outputs_text(cell)
        return None, _outputs_text(cell)

    def verdicts(self, gid: str, source: str) -> list:
        """The trusted verdicts of every item answered in ``gid``, on the kernel's values now
        and ``source`` as the answer cell (what the grader would read from the file)."""
        found = [item for item in self.items.values() if item.answer == gid]
        names = sorted({n for item in found for n in item.values})
        values = {}
        if names:
            code = ENCODER.read_text() + TAKE + f"\nprint('VALUES' + _shapes_take({names!r}))"
            err, text = self.run(code)
            payload = json.loads(text.split("VALUES", 1)[1]) if not err else {"error": err}
            values = taken_values(payload)
        return [
            decide(item, self.spec, "assessment", values, source, self.sandbox) for item in found
        ]

    def value(self, name: str):
        err, text = self.run(f"print(repr({name}))")
        if err:
            raise AssertionError(f"{self.lesson}: could not read {name} after its solution ran")
        import ast

        try:
            return ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            return text.strip()


def run_lesson(lesson: str, items: dict[str, Item]) -> dict[str, Probe]:
    """The instrumented pass (module docstring). Returns one probe per autograded answer cell."""
    p = Pass(lesson)
    probes: dict[str, Probe] = {}
    seen = []  # what the student has seen so far (markdown, printed outputs)
    with p.client.setup_kernel():
        p.run("import os; os.environ['CI'] = '1'")
        cells = p.nb.cells
        for i, cell in enumerate(cells):
            if cell.cell_type == "markdown":
                seen.append(cell.source)
                continue
            gid = nbgrader_meta(cell).get("grade_id")
            if is_answer(cell):
                probes[gid] = _probe(p, cell, cells[i + 1], items.get(gid, Item()), "\n".join(seen))
                continue
            err, text = p.run(cell.source)
            if err:
                raise AssertionError(
                    f"{lesson}: cell {i} ({gid or 'read-only'}) raised {err}:\n{text}"
                )
            seen.append(text)
    return probes


def _points(verdicts: list) -> tuple[float, str]:
    return sum(v.points for v in verdicts), "; ".join(v.message for v in verdicts)


def _probe(p: Pass, cell, test_cell, item: Item, above: str) -> Probe:
    gid = nbgrader_meta(cell)["grade_id"]
    probe = Probe(gid, above=above)
    visible = p.student[nbgrader_meta(test_cell)["grade_id"]].source
    blank = p.student[gid].source
    p.run(blank)
    probe.blank_points = _points(p.verdicts(gid, blank))[0]
    probe.blank_visible = p.run(visible)[0]
    for wrong in item.wrong:
        p.run(wrong)
        probe.wrong_points.append((wrong, *_points(p.verdicts(gid, wrong))))
        probe.wrong_visible.append((wrong, p.run(visible)[0]))
    if item.library is not None:
        err, _ = p.run(item.library)
        probe.library_error = f"answer raised {err}" if err else None
        probe.library_points, probe.library_message = _points(p.verdicts(gid, item.library))
    err, text = p.run(cell.source)
    if err:
        raise AssertionError(f"{p.lesson}: the solution of {gid} raised {err}:\n{text}")
    verdicts = p.verdicts(gid, cell.source)
    probe.solution_points, probe.solution_message = _points(verdicts)
    probe.solution_max = sum(v.max_points for v in verdicts)
    for name in item.constants:
        probe.values[name] = p.value(name)
    return probe


def printed_forms(value) -> set[str]:
    """How a constant answer could be shown to a student (distinctive forms only)."""
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {str(value), f"{value:,}"} if abs(value) >= 10 else set()
    if isinstance(value, float):
        forms = {f"{value:.3g}", f"{value:.2f}", f"{value:.1f}", f"{value:g}"}
        if 0 < value < 1:
            forms |= {
                f"{100 * value:.1f} %",
                f"{100 * value:.1f}%",
                f"{100 * value:.0f}%",
                f"{100 * value:.0f} %",
            }
        return {f for f in forms if len(f.strip("0.%-")) >= 2}  # "0.5", "2" are everywhere
    if isinstance(value, str):
        return {value} if len(value) >= 3 else set()
    if isinstance(value, (list, tuple, set, frozenset)):
        return set().union(*(printed_forms(v) for v in value)) if value else set()
    return set()


def spoilers(probe: Probe, allowed: list[str]) -> list[str]:
    """Printed forms of the probe's constants that appear above its question."""
    found = []
    for name, value in probe.values.items():
        for form in sorted(printed_forms(value) - set(allowed)):
            if re.search(rf"(?<![\w.]){re.escape(form)}(?![\w]|\.\d)", probe.above):
                found.append(f"{name} = {value!r} shows as {form!r}")
    return found
