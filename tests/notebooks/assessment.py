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

After each item the pass restores the blank answer before running on, so every later cell's
output is what a student sees on a blank notebook (the spoiler test reads all of it); once the
notebook has run to its end, each value item's gate bypass is tried (``_gate_bypass``). Lessons
list their probes in ``items_NN.py``.
"""

from __future__ import annotations

import base64
import copy
import json
import pickle
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import attacks
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from probes import (
    IMPORTS,
    MEASURED,
    SHORTCUTS,
    printed_answers,
    result_forms,
    shortcuts,
    value_forms,
)

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
from course_grading.nbgrader import self_study
from course_grading.review.copies import course_references, find_clusters
from course_grading.review.names import Bindings
from course_grading.review.uses import bound_names, cells_after

#: The course secret the seed-table shortcut is graded with (a strong one, as the grader wants).
SECRET = b"7f655743dcac5f795d1f1cf36ada331b9fad90af5f266586774402813f741764"

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Item:
    """What to try against one autograded answer cell (by its nbgrader grade id)."""

    wrong: dict[str, str] | list[str] = field(default_factory=dict)  # name -> answer cell
    # a prediction's wrong values that its rule finds plausible: each earns the completion point,
    # exactly as the right value does (issue 27), and no more
    plausible: dict[str, str] = field(default_factory=dict)
    # a function item: the grader's reference function with the graded function's signature, in
    # the lesson's check module (the grader-source shortcut pastes it)
    grader: str | None = None
    library: str | None = None  # the closest course_lib call, written as an answer cell
    forms: dict[str, str] = field(default_factory=dict)  # more right forms: name -> answer cell
    shown: dict[str, str] = field(default_factory=dict)  # text where an answer may show -> why

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
    tried: list[Tried] = field(default_factory=list)
    right: dict[str, object] = field(default_factory=dict)  # the solution's values, plain
    visible_calls: str | None = None  # a function item: the visible test's calls, pickled
    visible: str = ""  # the student version's test cell
    blank: str = ""  # the student version's answer cell
    not_applicable: dict[str, str] = field(default_factory=dict)  # shortcut -> why not tried

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

    def submitted(
        self, gid: str, answer: str, added: str | None, below: str | None = None
    ) -> nbformat.NotebookNode:
        """The student notebook with ``answer`` in cell ``gid``, ``added`` just above it and
        ``below`` just below it."""
        nb = copy.deepcopy(self.nb)
        index = next(i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("grade_id") == gid)
        nb.cells[index].source = answer
        if below is not None:
            nb.cells.insert(index + 1, nbformat.v4.new_code_cell(below))
        if added is not None:
            nb.cells.insert(index, nbformat.v4.new_code_cell(added))
        return nb

    def score(
        self,
        gid: str,
        answer: str,
        added: str | None = None,
        below: str | None = None,
        secret: bytes | None = None,
        spy: list | None = None,
    ) -> tuple[list, tuple]:
        """The trusted verdicts of every item answered in ``gid`` (values as the kernel holds
        them now), and the report's review flags about the candidate's cells; ``spy`` collects
        every graded-function call the checks make, with what it returned."""
        found = [item for item in self.items.values() if item.answer == gid]
        values = self.take(sorted({n for item in found for n in item.values}))
        nb = self.submitted(gid, answer, added, below)
        verdicts = []
        for item in found:
            source, earlier = answer_and_earlier(nb, self.spec, item.answer)
            later = cells_after(nb, self.spec, item.answer)
            with _spying(spy):
                verdicts.append(decide(item, self.spec, "assessment", values, source, self.sandbox,
                                       earlier, secret=secret, later=later))  # fmt: skip
        flags = tuple(f for f in course_lib_review(nb, self.spec) if "added by" in f or gid in f)
        return verdicts, flags + self.listing(gid, answer)

    def listing(self, gid: str, answer: str) -> tuple[str, ...]:
        """What the copy listing says of ``answer`` handed in alone for ``gid`` (a graded
        function's cell; ``review/copies.py``): ``"listed for review with <sources>"`` when it is
        near-identical to the course's code, else nothing."""
        found = [i for i in self.items.values() if i.answer == gid and i.function]
        if not found:
            return ()
        blank = next(c.source for c in self.nb.cells if nbgrader_meta(c).get("grade_id") == gid)
        refs = course_references(self.solution[gid].source)
        clusters = find_clusters(self.lesson, gid, {"candidate": answer}, refs, blank)
        return tuple(f"listed for review with {' and '.join(c.sources)}" for c in clusters)


@contextmanager
def _spying(spy: list | None):
    """While it lasts, every ``Evidence.call`` appends ``(request, returned, raised)`` per call
    to ``spy`` (the requests as the check wrote them, before the runner took their ``shown``)."""
    if spy is None:
        yield
        return
    real = trusted.Evidence.call

    def call(self, calls):
        requests = copy.deepcopy(calls)
        results = real(self, calls)
        spy.extend((r, res.returned, res.raised) for r, res in zip(requests, results))
        return results

    trusted.Evidence.call = call
    try:
        yield
    finally:
        trusted.Evidence.call = real


def run_lesson(lesson: str, entries: dict[str, Item]) -> Run:
    """The instrumented pass (module docstring)."""
    p = Pass(lesson)
    probes: dict[str, Probe] = {}
    texts: list[tuple[str, str]] = []
    errors: list[str] = []
    with p.client.setup_kernel():
        p.run("import os; os.environ['CI'] = '1'")
        cells = p.nb.cells
        for i, cell in enumerate(cells):
            gid = nbgrader_meta(cell).get("grade_id") or f"cell {i + 1}"
            if cell.cell_type != "code":
                kind = "self-study check" if self_study.is_check_cell(cell) else "markdown"
                texts.append((f"{kind} {gid}", cell.source))
                continue
            if is_answer(cell):
                probes[gid] = _probe(p, cell, cells[i + 1], entries.get(gid, Item()))
                err, text = p.run(cell.source)
                texts.append((f"answer cell {gid} (blank)", text))
                continue
            err, text = p.run(cell.source)
            texts.append((f"{'test cell' if is_test(cell) else 'cell'} {gid}", text))
            if err and not is_test(cell):
                errors.append(f"{gid} raised {err}: {text[-300:]}")
        for gid, probe in probes.items():
            _gate_bypass(p, probe, cells, entries.get(gid, Item()))
    return Run(lesson, probes, texts, errors)


GATE = next(s.name for s in SHORTCUTS if s.letter == "B")


def _gate_bypass(p: Pass, probe: Probe, cells: list, entry: Item) -> None:
    """Junk in the answer, every later lesson cell that reads one of its names run again, and
    what they print read for the right values: the answer handed in is each right value that
    showed, junk for the rest (after the notebook has run to its end, on a blank notebook)."""
    found = [item for item in p.items.values() if item.answer == probe.grade_id]
    if any(item.function for item in found):
        return
    names = sorted({n for item in found for n in item.values})
    forms = {n: f for item in found for n, f in item.forms.items()}
    start = next(
        i for i, c in enumerate(cells) if nbgrader_meta(c).get("grade_id") == probe.grade_id
    )
    readers = [
        c.source for c in cells[start + 2:]
        if c.cell_type == "code" and not is_answer(c) and not is_test(c)
        and any(re.search(rf"\b{n}\b", c.source) for n in names)
    ]  # fmt: skip
    junk = {}
    for item in found:
        junk.update(attacks.junk(item, probe.right))
    p.run(attacks.assigned(junk))
    printed = "\n".join(p.run(source)[1] for source in readers)
    printed = MEASURED.sub(" ", printed)
    for context in entry.shown:
        printed = printed.replace(context, " ")
    shows = {n for n in names if printed_answers(probe.right[n], forms.get(n), printed)}
    typed = {n: probe.right[n] if n in shows else junk[n] for n in names}
    _try(p, probe, "shortcut", GATE, attacks.assigned(typed), probe.visible)
    p.run(probe.blank)  # the blank answer again: a name set to ... as before


def _try(p: Pass, probe: Probe, kind: str, name: str, code: str, visible: str, added=None,
         below=None, secret=None, spy=None):  # fmt: skip
    """Hand in ``code`` (after ``added``, a cell of the student's, and before ``below``), run the
    visible test, and score it (with ``secret``: as a graded run with a course secret); record
    it on ``probe``."""
    bound = sorted(set().union(*(bound_names(c) for c in (added, code, below) if c)))
    p.run(f"_shapes_kept = {{n: globals()[n] for n in {bound!r} if n in globals()}}")
    ran = p.run(added)[0] if added is not None else None
    ran = p.run(code)[0] or ran
    if below is not None:
        p.run(below)
    verdicts, flags = p.score(probe.grade_id, code, added, below, secret, spy)
    shown = said(*p.run(visible))
    if kind == "shortcut":  # what it bound goes (a pasted rho_example() shadowed the lesson's)
        p.run(f"for _n in {bound!r}:\n    globals().pop(_n, None)\nglobals().update(_shapes_kept)")
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


def _probe(p: Pass, cell, test_cell, entry: Item) -> Probe:
    gid = nbgrader_meta(cell)["grade_id"]
    found = [item for item in p.items.values() if item.answer == gid]
    probe = Probe(gid)
    visible = test_cell.source  # the student version's test cell: no hidden region
    solution = p.solution[gid].source
    probe.visible, probe.blank = visible, cell.source
    _try(p, probe, "blank", "blank", cell.source, visible)
    for name, code in entry.named_wrong():
        _try(p, probe, "wrong", name, code, visible)
    for name, code in entry.plausible.items():
        _try(p, probe, "plausible", name, code, visible)
    if entry.library is not None:
        _try(p, probe, "library", "closest library call", entry.library, visible)
    calls: list = []
    sol = _try(p, probe, "solution", "solution", solution, visible, spy=calls)
    if sol.ran:
        raise AssertionError(f"{p.lesson}: the solution of {gid} raised {sol.ran}")
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
    _issue_27(p, probe, found, entry, calls)
    return probe


def _issue_27(p: Pass, probe: Probe, found: list, entry: Item, calls: list) -> None:
    """The shortcut classes issue 27 found (``attacks``), the gate bypass aside (it needs the
    notebook run to its end: :func:`_gate_bypass`)."""
    by_letter = {s.letter: s.name for s in SHORTCUTS}
    visible = probe.visible
    function = next((item.function for item in found if item.function), None)
    lesson = Bindings.of_lesson(p.spec.lesson_code).imports
    junk = {}
    for item in found:
        junk.update(attacks.junk(item, probe.right))
    # G: the grader's source copied
    copied = [attacks.grader_source(item, probe.right, entry.grader) for item in found]
    if all(copied):
        code = "".join(copied)  # type: ignore[arg-type]
        if any(item.edition is not None for item in found):  # handed in to a class edition
            p.run(f"_shapes_was = {{n: globals()[n] for n in {sorted(bound_names(code))!r} "
                  "if n in globals()}")  # fmt: skip
            p.run(code)
            practice = sum(v.points for v in p.score(probe.grade_id, code)[0])
            p.run("globals().update(_shapes_was)")
            tried = _try(p, probe, "shortcut", by_letter["G"], code, visible, secret=SECRET)
            tried.review += (f"self-study edition (no course secret): {practice:g} point(s)",)
        else:
            _try(p, probe, "shortcut", by_letter["G"], code, visible)
    else:
        prediction = any(item.rules for item in found)
        probe.not_applicable[by_letter["G"]] = (
            "the grader holds no reference with the graded function's signature" if function
            else "a prediction's registration holds no expected value" if prediction
            else "the registration holds no expected value: the check works its answer out"
        )  # fmt: skip
    # T: a table of the practice seed's inputs, graded with a course secret
    table = attacks.seed_table(function, calls) if function else None
    if table is not None:
        practice = sum(v.points for v in p.score(probe.grade_id, table)[0])  # no secret
        tried = _try(p, probe, "shortcut", by_letter["T"], table, visible, secret=SECRET)
        tried.review += (f"practice grading (no course secret): {practice:g} point(s)",)
    elif function:
        probe.not_applicable[by_letter["T"]] = (
            "its inputs are built in the sandbox (tensors, models, proxies): no table keys them"
        )
    library = entry.library or ""
    # D: the library's code pasted in place of its import
    pasted = attacks.pasted_library(library, lesson) if function and library else None
    if pasted is not None:
        _try(p, probe, "shortcut", by_letter["D"], pasted, visible)
        p.run(attacks.reimported(pasted, lesson))  # the lesson's own names, not the pasted copies
    elif function:
        probe.not_applicable[by_letter["D"]] = "the library call uses no library function"
    # O: junk in the answer cell, the library call in a cell below it
    if not function and library:
        _try(p, probe, "shortcut", by_letter["O"], attacks.assigned(junk), visible, below=library)
    # N: the library reached through globals()["name"] of a name the lesson imported
    looked = attacks.namespace_lookup(library, lesson) if library else None
    if looked is not None:
        _try(p, probe, "shortcut", by_letter["N"], looked, visible)
    else:
        probe.not_applicable[by_letter["N"]] = (
            "the library call needs a course_lib name the lesson does not import"
        )


def shortcut_pattern(name: str) -> str:
    return next(s.named for s in SHORTCUTS if s.name == name)


def calls_of(probe: Probe) -> list:
    """The visible test's calls of a function item, unpickled: ``[(args, kwargs, result)]``."""
    if not probe.visible_calls:
        return []
    return pickle.loads(base64.b64decode(probe.visible_calls))


__all__ = ["IMPORTS", "Item", "Probe", "Run", "Tried", "run_lesson", "said"]
