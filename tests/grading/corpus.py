"""The honest corpus and the copies the copy listing is calibrated on (``review/copies.py``).

``honest_corpus/<function>/`` holds answers to each graded function of the course, written
independently of the instructor's solution by people of different habits (loops and
comprehensions, numpy, torch and plain Python, helper functions, classes, recursion, comments
or none), each a whole answer cell as handed in; ``test_copies.py`` checks that every one is
right. The copies are what a copying student makes of a source (:func:`copies_of`): the
instructor's solution, the library's code pasted in place of its import (class D of
``tests/notebooks/attacks.py``), the grader's reference pasted (class G), and a classmate's
answer; each renamed, re-commented, its independent statements reordered, ten dead lines
spread through it, or all of these at once.

:func:`calibration` measures the listing: the share of honest answers listed (a class made of
the corpus, with the course's sources) and the share of copies found with their source.
``benchmarks/review_calibration.py`` prints both per function; ``test_copies.py`` holds the
listing to the figures the docs quote.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import random
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import nbformat

from course_grading.judge import items as trusted
from course_grading.judge.lesson import LessonSpec
from course_grading.nbgrader.course import find_lessons
from course_grading.review.copies import SOLUTION, THRESHOLD, course_references, find_clusters
from course_grading.review.fingerprints import without_solution_marks
from course_grading.review.names import Bindings

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "honest_corpus"
NOTEBOOK_TESTS = REPO / "tests" / "notebooks"


@dataclass(frozen=True)
class Graded:
    """One graded function of the course: where it is asked, the instructor's answer cell and
    the student's blank."""

    function: str
    lesson: str
    answer: str  # the answer cell's grade id
    solution: str  # without its solution delimiters
    blank: str


def _cells(folder: str, lesson: str) -> dict[str, str]:
    nb = nbformat.read(str(REPO / folder / lesson / f"{lesson}.ipynb"), as_version=4)
    return {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}


@cache
def graded_functions() -> dict[str, Graded]:
    """Every graded function of the course's lessons, by name."""
    found = {}
    for lesson in find_lessons(REPO):
        solution, blank = _cells("solutions", lesson), _cells("notebooks", lesson)
        for item in trusted.items_of(lesson).values():
            if item.function:
                found[item.function] = Graded(
                    item.function,
                    lesson,
                    item.answer,
                    without_solution_marks(solution[item.answer]),
                    blank[item.answer],
                )
    return found


def honest(function: str) -> dict[str, str]:
    """The corpus's answers for ``function``: file stem -> the answer cell."""
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted((CORPUS / function).glob("*.py"))}


# --- what a copying student does ---------------------------------------------------------------


class _Renamer(ast.NodeTransformer):
    def __init__(self, keep: set[str], seed: int) -> None:
        self.names: dict[str, str] = {}
        self.keep = keep
        self.rng = random.Random(seed)

    def new(self, name: str) -> str:
        if name in self.keep or name.startswith("__"):
            return name
        if name not in self.names:
            self.names[name] = (
                f"{self.rng.choice(['my', 'the', 'x', 'tmp', 'val'])}_{len(self.names)}"
            )
        return self.names[name]

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.new(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self.new(node.arg)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.name = self.new(node.name)
        self.generic_visit(node)
        return node


def renamed(source: str, keep: str, seed: int = 0) -> str:
    """Every name the code binds renamed (but ``keep``, the graded function, builtins and
    imported modules), comments dropped, laid out anew."""
    tree = ast.parse(source)
    kept = {keep, *dir(builtins)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            kept |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return ast.unparse(_Renamer(kept, seed).visit(tree)) + "\n"


def _names(node: ast.AST, ctx: type) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def _independent(a: ast.stmt, b: ast.stmt) -> bool:
    simple = (ast.Assign, ast.AugAssign, ast.AnnAssign)
    if not (isinstance(a, simple) and isinstance(b, simple)):
        return False
    wa, wb = _names(a, ast.Store), _names(b, ast.Store)
    ra, rb = _names(a, ast.Load) | wa, _names(b, ast.Load) | wb
    return not (wa & rb) and not (wb & ra)


def reordered(source: str) -> str:
    """Every pair of neighbouring assignments that do not depend on each other swapped."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for name in ("body", "orelse"):
            body = getattr(node, name, None)
            i = 0
            while isinstance(body, list) and i + 1 < len(body):
                if _independent(body[i], body[i + 1]):
                    body[i], body[i + 1] = body[i + 1], body[i]
                    i += 1
                i += 1
    return ast.unparse(tree) + "\n"


#: Lines that do nothing, each on its own (a copy padded to look different).
DEAD = (
    "_debug = False",
    "_unused_counter = 0",
    "if False:\n    print('never')",
    "_scratch = []",
    "_note = 'checked by hand'",
    "_total_checks = 3 * 7",
    "for _i in range(0):\n    pass",
    "_tmp = len(str(123))",
    "_flags = {'verbose': True}",
    "assert True",
)


def dead_code(source: str, lines: int = 10, seed: int = 0) -> str:
    """``lines`` dead lines spread through the function bodies."""
    rng = random.Random(seed)
    tree = ast.parse(source)
    functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
    for i in range(lines):
        body = functions[i % len(functions)].body
        at = rng.randint(1 if len(body) > 1 else 0, len(body))
        body[at:at] = ast.parse(DEAD[i % len(DEAD)]).body
    return ast.unparse(tree) + "\n"


def recommented(source: str) -> str:
    """Comments dropped and every docstring rewritten."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.FunctionDef, ast.Module)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                first.value.value = "My own implementation."
    return ast.unparse(tree) + "\n"


def _attacks():
    """``tests/notebooks``' attack builders and each lesson's library call and grader reference."""
    if str(NOTEBOOK_TESTS) not in sys.path:
        sys.path.insert(0, str(NOTEBOOK_TESTS))
    return importlib.import_module("attacks")


def _entry(graded: Graded):
    _attacks()
    return importlib.import_module(f"items_{graded.lesson[:2]}").ITEMS.get(graded.answer)


def copies_of(graded: Graded, corpus: dict[str, str]) -> list[tuple[str, str, str]]:
    """``(what, code, copied from)`` of every copy of ``graded`` the calibration tries; copied
    from: ``"solution"``, ``"library"``, ``"grader"`` or ``"peer:<stem>"`` of ``corpus``."""
    f = graded.function

    def variants(code: str, seed: int) -> list[tuple[str, str]]:
        return [
            ("renamed", renamed(code, f, seed)),
            ("re-commented", recommented(code)),
            ("reordered", reordered(code)),
            ("ten dead lines", dead_code(code, 10, seed)),
            ("all of these", dead_code(reordered(renamed(code, f, seed)), 10, seed + 1)),
        ]

    found = [
        (f"the solution, {how}", code, "solution") for how, code in variants(graded.solution, 1)
    ]
    attacks, entry = _attacks(), _entry(graded)
    if entry is not None and entry.library:
        source = REPO / "solutions" / graded.lesson / f"{graded.lesson}.ipynb"
        release = REPO / "notebooks" / graded.lesson / f"{graded.lesson}.ipynb"
        spec = LessonSpec.from_notebooks(graded.lesson, source, release)
        pasted = attacks.pasted_library(entry.library, Bindings.of_lesson(spec.lesson_code).imports)
        if pasted:
            found += [
                (f"the library pasted, {how}", code, "library")
                for how, code in [("as is", pasted), *variants(pasted, 2)[::3]]
            ]
    if entry is not None and entry.grader:
        item = next(i for i in trusted.items_of(graded.lesson).values() if i.function == f)
        if reference := attacks.grader_source(item, {}, entry.grader):
            found += [
                (f"the grader's reference pasted, {how}", code, "grader")
                for how, code in [("as is", reference), *variants(reference, 3)[::3]]
            ]
    for i, stem in enumerate(sorted(corpus)[:4]):
        for how, code in variants(corpus[stem], 10 + i)[::4]:
            found.append((f"classmate {stem}, {how}", code, f"peer:{stem}"))
    return found


# --- the listing, measured -----------------------------------------------------------------------


def _found_with_source(clusters, student: str, source: str) -> bool:
    for c in clusters:
        if student not in c.students:
            continue
        if source == "solution" and SOLUTION in c.sources:
            return True
        if source == "library" and any(s.startswith("course_lib/") for s in c.sources):
            return True
        if source == "grader" and any(s.startswith("the grader's checks") for s in c.sources):
            return True
        if source.startswith("peer:") and source[5:] in c.students:
            return True
    return False


def listed_honest(graded: Graded, stems: list[str] | None = None, threshold: float = THRESHOLD):
    """The corpus's answers (``stems``, default all) graded as one class: the stems listed in any
    cluster, and how many were judged."""
    corpus = honest(graded.function)
    answers = {s: corpus[s] for s in (stems or sorted(corpus))}
    refs = course_references(graded.solution)
    clusters = find_clusters(graded.lesson, graded.function, answers, refs, graded.blank, threshold)
    return sorted({s for c in clusters for s in c.students}), len(answers)


def caught_copies(graded: Graded, threshold: float = THRESHOLD) -> list[tuple[str, bool]]:
    """Each copy (:func:`copies_of`) handed in among the honest corpus: whether it is listed in a
    cluster with what it was copied from."""
    corpus = honest(graded.function)
    refs = course_references(graded.solution)
    found = []
    for what, code, source in copies_of(graded, corpus):
        answers = {**corpus, "the copy": code}
        clusters = find_clusters(
            graded.lesson, graded.function, answers, refs, graded.blank, threshold
        )
        found.append((what, _found_with_source(clusters, "the copy", source)))
    return found


# --- one more student: an honest answer of the corpus, written again in a person's own way -----


class _Hoist(ast.NodeTransformer):
    """A call nested in another call's arguments, taken out into a name of its own first."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.count = 0

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            out += self._hoisted(stmt) if self.rng.random() < 0.6 else [stmt]
        return out

    def _hoisted(self, stmt: ast.stmt) -> list[ast.stmt]:
        if not isinstance(stmt, (ast.Assign, ast.Expr, ast.Return)) or stmt.value is None:
            return [stmt]
        scoped = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
        if any(isinstance(n, scoped) for n in ast.walk(stmt)):
            return [stmt]
        for node in ast.walk(stmt.value):
            if isinstance(node, ast.Call):
                for i, arg in enumerate(node.args):
                    if isinstance(arg, (ast.Call, ast.BinOp, ast.Subscript)):
                        self.count += 1
                        name = f"part_{self.count}"
                        node.args[i] = ast.Name(name, ast.Load())
                        first = ast.Assign([ast.Name(name, ast.Store())], arg, lineno=0)
                        return [first, stmt]
        return [stmt]

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for name in ("body", "orelse"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                setattr(node, name, self._body(body))
        return node


class _Rewrite(ast.NodeTransformer):
    """``x += y`` as ``x = x + y``, and ``a < b`` as ``b > a``, each now and then."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.stmt:
        if isinstance(node.target, ast.Name) and self.rng.random() < 0.7:
            value = ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op, node.value)
            return ast.Assign([ast.Name(node.target.id, ast.Store())], value, lineno=0)
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        flipped = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
        op = type(node.ops[0])
        if len(node.ops) == 1 and op in flipped and self.rng.random() < 0.7:
            return ast.Compare(node.comparators[0], [flipped[op]()], [node.left])
        return node


def individual(source: str, function: str, seed: int) -> str:
    """An honest answer of the corpus as another person would write the same idea: renamed, its
    nested calls taken apart into names, ``+=`` and comparisons written the other way, its
    independent statements in another order. Only for a synthetic class's review page
    (``benchmarks/review_scale.py``): the result is not run, and it may differ from the
    original in evaluation order."""
    rng = random.Random(seed)
    tree = _Rewrite(rng).visit(_Hoist(rng).visit(ast.parse(source)))
    code = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    code = reordered(code) if rng.random() < 0.5 else code
    return renamed(code, function, seed)
