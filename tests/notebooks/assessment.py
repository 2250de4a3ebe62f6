"""One instrumented pass over a lesson: every graded item tried in a live kernel, as a student
who runs on past the questions would see it.

The pass executes the **blank student notebook** cell by cell in one kernel, carrying on past
errors. At each autograded answer cell it hands in candidates, runs the visible test on each
(what it said: ``right``, ``plausible``, ``silent``, or the exception), and scores each with the
item's trusted check exactly as the grader does: on the values taken out of the kernel as plain
data, and on the answer cell's source inside a submitted notebook built for the candidate (a
graded function is re-created from it in the function sandbox; a cell the student added goes in
front of the answer cell, so what it computes with ``course_lib`` is seen as the grader sees it).
The candidates (``Tried.kind``):

* ``blank``: the student version's cell; ``solution``: the instructor's;
* ``form``: the right answer in every other reasonable form (``probes.value_forms``,
  ``probes.result_forms``) and any ``items_NN.py`` adds;
* ``wrong``: each wrong answer and wrong method ``items_NN.py`` lists, by name;
* ``plausible``: a prediction's wrong values that its rule finds plausible (each earns the
  completion point the right value earns, no more);
* ``library``: the closest library call ``items_NN.py`` gives;
* ``shortcut``: every way to score without the work (``probes.SHORTCUTS``), built from the
  library call and the solution.

For an item registered with its forms and visible checks (``Item.migrated``) the pass then
restores the blank answer before running on, so every later cell's output is what a student sees
on a blank notebook (the spoiler test reads all of it); an older item leaves its solution in
place, as before (its lesson is checked above each question only). Lessons list their probes in
``items_NN.py``.
"""

from __future__ import annotations

import base64
import copy
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from probes import IMPORTS, SHORTCUTS, result_forms, shortcuts, value_forms

from course_grading.errors import GradingError
from course_grading.judge import items as trusted
from course_grading.judge.evidence import _TAKE as TAKE
from course_grading.judge.evidence import ENCODER
from course_grading.judge.functions import FunctionSandbox
from course_grading.judge.lesson import LessonSpec
from course_grading.judge.verdicts import (
    answer_and_earlier,
    course_lib_review,
    decide,
    taken_values,
)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Item:
    """What to try against one autograded answer cell (by its nbgrader grade id)."""

    wrong: dict[str, str] | list[str] = field(default_factory=dict)  # name -> answer cell
    # a prediction's wrong values that its rule finds plausible: each earns the completion point,
    # exactly as the right value does (issue 27), and no more
    plausible: dict[str, str] = field(default_factory=dict)
    library: str | None = None  # the closest course_lib call, written as an answer cell
    forms: dict[str, str] = field(default_factory=dict)  # more right forms: name -> answer cell
    shown: dict[str, str] = field(default_factory=dict)  # text where an answer may show -> why
    constants: list[str] = field(default_factory=list)  # older items: names kept from above
    allowed: list[str] = field(default_factory=list)  # older items: printed forms allowed above

    def named_wrong(self) -> list[tuple[str, str]]:
        if isinstance(self.wrong, dict):
            return list(self.wrong.items())
        return [(f"wrong answer {i + 1}", code) for i, code in enumerate(self.wrong)]


@dataclass
class Tried:
    """One candidate handed in for an item, what the visible test said and the points."""

    kind: str  # blank, solution, form, wrong, plausible, library, shortcut
    name: str
    code: str
    visible: str = ""  # right, plausible, silent, or "failed: <exception>"
    points: float = 0.0
    max_points: float = 0.0
    message: str = ""
    review: tuple[str, ...] = ()
    ran: str | None = None  # the exception the candidate itself raised in the kernel

    @property
    def full(self) -> bool:
        return self.max_points > 0 and self.points >= self.max_points


@dataclass
class Probe:
    """What happened to one item (its answer cell) during the pass."""

    grade_id: str
    migrated: bool = False
    tried: list[Tried] = field(default_factory=list)
    right: dict[str, object] = field(default_factory=dict)  # the solution's values, plain
    visible_calls: str | None = None  # a function item: the visible test's calls, pickled
    above: str = ""  # older items: markdown and outputs above the answer cell
    values: dict[str, object] = field(default_factory=dict)  # older items: constants' values

    def of(self, kind: str) -> list[Tried]:
        return [t for t in self.tried if t.kind == kind]


@dataclass
class Run:
    """The pass over one lesson: a probe per answer cell, and what a student reads."""

    lesson: str
    probes: dict[str, Probe]
    texts: list[tuple[str, str]]  # (where, text): markdown and every output of the blank run
    lesson_errors: list[str]  # lesson cells that raised on the blank notebook


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


def outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename', '')}: {out.get('evalue', '')}")
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
            parts.append(out["data"].get("text/markdown", ""))
            parts.append(re.sub(r"<[^>]*>", " ", out["data"].get("text/html", "")))
    return "\n".join(parts)


def said(error: str | None, text: str) -> str:
    """What a visible test said: ``failed: <exception>``, ``plausible``, ``right`` or
    ``silent`` (it passed without saying either)."""
    if error:
        return f"failed: {error}"
    if "plausible" in text:
        return "plausible"
    if re.search(r": right\b", text):
        return "right"
    return "silent"


class Pass:
    """Runs cells, and candidates, in one kernel."""

    def __init__(self, lesson: str, timeout: int = 240) -> None:
        self.lesson = lesson
        solution, student = lesson_paths(lesson)
        self.solution = {
            nbgrader_meta(c).get("grade_id"): c
            for c in nbformat.read(solution, as_version=4).cells
            if nbgrader_meta(c).get("grade_id")
        }
        self.nb = nbformat.read(student, as_version=4)
        self.client = NotebookClient(
            copy.deepcopy(self.nb),
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(student.parent)}},
        )
        self.spec = LessonSpec.from_notebooks(lesson, solution, student)
        self.items = trusted.check_notebook(lesson, nbformat.read(solution, as_version=4))
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
            return exc.ename, outputs_text(cell)
        return None, outputs_text(cell)

    def take(self, names: list[str]) -> dict[str, object]:
        """``names`` out of the kernel as the grader takes them (plain data)."""
        if not names:
            return {}
        code = ENCODER.read_text() + TAKE + f"\nprint('VALUES' + _shapes_take({names!r}))"
        err, text = self.run(code)
        # the encoder hands back base64 of its JSON, as the kernel's reply to the grader
        encoded = text.split("VALUES", 1)[1].strip() if not err else ""
        payload = json.loads(base64.b64decode(encoded)) if not err else {"error": err}
        return taken_values(payload)

    def submitted(self, gid: str, answer: str, added: str | None) -> nbformat.NotebookNode:
        """The student notebook with ``answer`` in cell ``gid`` and ``added`` just above it."""
        nb = copy.deepcopy(self.nb)
        index = next(i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("grade_id") == gid)
        nb.cells[index].source = answer
        if added is not None:
            nb.cells.insert(index, nbformat.v4.new_code_cell(added))
        return nb

    def score(self, gid: str, answer: str, added: str | None = None) -> tuple[list, tuple]:
        """The trusted verdicts of every item answered in ``gid`` (values as the kernel holds
        them now), and the report's review flags about the candidate's cells."""
        found = [item for item in self.items.values() if item.answer == gid]
        values = self.take(sorted({n for item in found for n in item.values}))
        nb = self.submitted(gid, answer, added)
        verdicts = []
        for item in found:
            source, earlier = answer_and_earlier(nb, self.spec, item.answer)
            verdicts.append(
                decide(item, self.spec, "assessment", values, source, self.sandbox, earlier)
            )
        flags = tuple(f for f in course_lib_review(nb, self.spec) if "added by" in f or gid in f)
        return verdicts, flags

    def value(self, name: str):
        err, text = self.run(f"print(repr({name}))")
        if err:
            raise AssertionError(f"{self.lesson}: could not read {name} after its solution ran")
        import ast

        try:
            return ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            return text.strip()


def run_lesson(lesson: str, entries: dict[str, Item]) -> Run:
    """The instrumented pass (module docstring)."""
    p = Pass(lesson)
    probes: dict[str, Probe] = {}
    texts: list[tuple[str, str]] = []
    errors: list[str] = []
    seen: list[str] = []  # older items: what the student has seen so far
    with p.client.setup_kernel():
        p.run("import os; os.environ['CI'] = '1'")
        cells = p.nb.cells
        for i, cell in enumerate(cells):
            gid = nbgrader_meta(cell).get("grade_id") or f"cell {i + 1}"
            if cell.cell_type != "code":
                seen.append(cell.source)
                texts.append((f"markdown {gid}", cell.source))
                continue
            if is_answer(cell):
                probe = _probe(p, cell, cells[i + 1], entries.get(gid, Item()), "\n".join(seen))
                probes[gid] = probe
                err, text = p.run(cell.source if probe.migrated else p.solution[gid].source)
                texts.append((f"answer cell {gid} (blank)", text)) if probe.migrated else None
                continue
            err, text = p.run(cell.source)
            seen.append(text)
            texts.append((f"{'test cell' if is_test(cell) else 'cell'} {gid}", text))
            if err and not is_test(cell):
                errors.append(f"{gid} raised {err}: {text[-300:]}")
    if any(not probe.migrated for probe in probes.values()) and errors:
        raise AssertionError(f"{lesson}: lesson cells raised in the pass: {errors}")
    return Run(lesson, probes, texts, errors)


def _try(p: Pass, probe: Probe, kind: str, name: str, code: str, visible: str, added=None):
    """Hand in ``code`` (after ``added``, a cell of the student's), run the visible test, and
    score it; record it on ``probe``."""
    ran = p.run(added)[0] if added is not None else None
    ran = p.run(code)[0] or ran
    verdicts, flags = p.score(probe.grade_id, code, added)
    shown = said(*p.run(visible))
    points = sum(v.points for v in verdicts)
    tried = Tried(kind, name, code, shown, points, sum(v.max_points for v in verdicts),
                  "; ".join(v.message for v in verdicts), flags, ran)  # fmt: skip
    probe.tried.append(tried)
    return tried


def _record_calls(p: Pass, function: str, visible: str) -> str | None:
    """Run the visible test with ``function`` recording its calls; the calls, pickled."""
    p.run(
        f"_shapes_calls = []\n_shapes_real = {function}\n"
        f"def {function}(*args, **kwargs):\n"
        "    result = _shapes_real(*args, **kwargs)\n"
        "    _shapes_calls.append((args, kwargs, result))\n    return result\n"
    )
    p.run(visible)
    err, text = p.run(
        "import base64 as _b64, pickle as _pickle\n"
        "print('CALLS' + _b64.b64encode(_pickle.dumps(_shapes_calls)).decode())\n"
        f"{function} = _shapes_real"
    )
    return None if err else text.split("CALLS", 1)[1].strip()


def _probe(p: Pass, cell, test_cell, entry: Item, above: str) -> Probe:
    gid = nbgrader_meta(cell)["grade_id"]
    found = [item for item in p.items.values() if item.answer == gid]
    probe = Probe(gid, migrated=bool(found) and all(item.migrated for item in found), above=above)
    visible = test_cell.source  # the student version's test cell: no hidden region
    solution = p.solution[gid].source
    _try(p, probe, "blank", "blank", cell.source, visible)
    for name, code in entry.named_wrong():
        _try(p, probe, "wrong", name, code, visible)
    for name, code in entry.plausible.items():
        _try(p, probe, "plausible", name, code, visible)
    if entry.library is not None:
        _try(p, probe, "library", "closest library call", entry.library, visible)
    sol = _try(p, probe, "solution", "solution", solution, visible)
    if sol.ran:
        raise AssertionError(f"{p.lesson}: the solution of {gid} raised {sol.ran}")
    for name in entry.constants:
        probe.values[name] = p.value(name)
    if not probe.migrated:
        return probe
    names = sorted({n for item in found for n in item.values})
    function = next((item.function for item in found if item.function), None)
    probe.right = p.take(names)
    p.run(solution)
    if function:
        probe.visible_calls = _record_calls(p, function, visible)
        forms = result_forms(solution, function)
    else:
        declared = {n: f for item in found for n, f in item.forms.items()}
        forms = value_forms(probe.right, declared)
    for name, code in [*forms, *entry.forms.items()]:
        _try(p, probe, "form", name, code, visible)
    built = shortcuts(names=names, function=function, library=entry.library, solution=solution,
                      right=probe.right, visible_calls=probe.visible_calls)  # fmt: skip
    for shortcut, added, code in built:
        _try(p, probe, "shortcut", shortcut.name, code, visible, added)
    return probe


def shortcut_pattern(name: str) -> str:
    return next(s.named for s in SHORTCUTS if s.name == name)


def calls_of(probe: Probe) -> list:
    """The visible test's calls of a function item, unpickled: ``[(args, kwargs, result)]``."""
    if not probe.visible_calls:
        return []
    return pickle.loads(base64.b64decode(probe.visible_calls))


__all__ = ["IMPORTS", "Item", "Probe", "Run", "Tried", "run_lesson", "said"]
