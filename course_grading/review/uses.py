"""Where a student's cells use ``course_lib``: read from the submitted file, never run.

A value can always be computed somewhere and typed in, so the grader does not try to prove how a
value was made. It reads the answer cells and the cells the student added, as stored in the
submitted file, and names every use of ``course_lib`` it finds, for the instructor's review:

- an import of it (``import course_lib.memory as m``, ``from course_lib.budget import *``);
- a name the lesson imported from it (``attention_elements(...)``), also through an alias
  (``f = attention_elements``) or an attribute (``m.predict``);
- a string that names it (``importlib.import_module("course_lib.memory")``,
  ``sys.modules["course_lib.budget"]``), but not a docstring (a string alone as a statement,
  which reaches nothing: "my own version of course_lib.packing" is prose);
- a lesson-imported name looked up in the namespace (``globals()["attention_elements"]``,
  ``vars().get("ae")``);
- an import or attribute lookup whose name is built at run time (``__import__(a + b)``,
  ``getattr(m, name)``, ``importlib.import_module(x)``, ``globals()[k]``): it cannot be read,
  so it is named too;
- a reach into the running program that names nothing: the garbage collector's lists of
  objects (``gc.get_objects()``, ``gc.get_referrers``, ``gc.get_referents``), a frame or a
  function's globals (``sys._getframe()``, ``inspect.currentframe()``, ``inspect.stack()``,
  ``.f_globals``, ``.f_locals``, ``.f_back``, ``.__globals__``), the namespace read whole
  (``globals().values()``, ``vars()``, ``locals()`` but for a lookup by a written name), and
  ``sys.modules`` read whole or by a built name.

Uses of ``course_lib.answers`` (the lessons' own feedback helpers, ``check`` and
``ensure_answered``) are not counted: they answer nothing. The first four are *definite* (an
``own_work`` item scores 0 when its answer cell has one); the last two are not (what they reach
cannot be read), but an ``own_work`` answer cell holding one scores 0 too, and every one but a
``getattr`` of a built name *hides* what it reaches, so a cell before the answer holding it counts
as one that used ``course_lib`` (:func:`borrowed`, :func:`rebound`). A determined student can
hide a use from any reading (``exec`` of a decoded string): this is a pointer for a person, never
proof.

:func:`borrowed` follows names between cells: a value computed with ``course_lib`` in a cell the
student added (or in another answer cell) and only copied by the answer cell (``predicted_ratio
= _x``) is named, as is anything computed from it in between.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from nbformat.notebooknode import NotebookNode

from course_grading.judge.lesson import LessonSpec
from course_grading.review.cheats import cell_owner, lesson_version, student_cells
from course_grading.review.names import Bindings, cell_tree, dotted, free_names

_DYNAMIC = {
    "__import__",
    "importlib.import_module",
    "importlib.__import__",
    "getattr",
    "eval",
    "exec",
    "compile",
}
#: Calls that reach objects or namespaces of the running program without naming what they reach.
_REACHES = {
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys._getframe",
    "inspect.currentframe",
    "inspect.stack",
    "inspect.getouterframes",
}
#: Attributes that hold a frame's or a function's namespace (or the frame that holds one).
_FRAME_ATTRIBUTES = {"f_globals", "f_locals", "f_back", "__globals__", "gi_frame", "tb_frame"}


@dataclass(frozen=True)
class Use:
    """One use of ``course_lib`` in a cell: the code, whether it is certain, and the dotted name
    it reaches (``course_lib.memory.predict``; ``""`` when it cannot be read)."""

    code: str
    definite: bool = True
    origin: str = ""
    hides: bool = False  # reaches what it cannot name: a cell holding it is not followed

    @property
    def counts(self) -> bool:
        """Whether a cell holding it before the answer counts as one that used ``course_lib``:
        a definite use, or one that hides what it reaches."""
        return self.definite or self.hides

    def within(self, modules: tuple[str, ...]) -> bool:
        """Whether it reaches only into ``modules`` (an item's allowed modules).

        Args:
            modules: dotted module names (``("course_lib.memory",)``); a use of one of them or
                of anything inside it counts as within.

        Returns:
            ``True`` when the use's origin is known and lies in one of ``modules``; a use whose
            origin cannot be read is never within.
        """
        return bool(self.origin) and any(
            self.origin == m or self.origin.startswith(m + ".") for m in modules
        )

    def within_lesson(self, imported: set[str]) -> bool:
        """Whether it reaches only what the lesson's own cells import from ``course_lib``.

        Args:
            imported: the dotted origins of the lesson's imports (``Bindings.imports``' values).

        Returns:
            ``True`` for a call or attribute of a lesson-imported name, or an import of exactly
            the names the lesson imports; ``False`` for anything else, and for a use whose
            origin cannot be read.
        """
        if not self.definite or not self.origin:
            return False
        if self.code.startswith("from "):
            module, _, names = self.code[len("from ") :].partition(" import ")
            return all(f"{module}.{n.strip()}" in imported for n in names.split(","))
        reached = self.origin.split("(")[0]  # a call's result: what was called
        return any(reached == o or reached.startswith(o + ".") for o in imported)


#: The lessons' feedback helpers: using them is not using the library for an answer.
HELPERS = "course_lib.answers"


def _names_course_lib(text: str) -> bool:
    text = text.replace(" ", "")
    return "course_lib" in text and not text.startswith(HELPERS)


def _is_library(origin: str) -> bool:
    return origin.split(".")[0] == "course_lib" and not (
        origin == HELPERS or origin.startswith(HELPERS + ".")
    )


def uses(source: str, lesson: Bindings) -> list[Use]:
    """Every use of ``course_lib`` in ``source`` (module docstring), first one of each code.

    A dotted name is reported once at its longest (``m.predict``, not also ``m``).

    Args:
        source: one cell's source, as stored in the submitted file.
        lesson: the names the lesson's own cells import (``Bindings.of_lesson``).

    Returns:
        The uses in the order ``ast.walk`` meets them, each code cut to 80 characters;
        ``[]`` for a cell that does not parse.
    """
    tree = cell_tree(source)
    if tree is None:
        return []
    names = lesson.with_cell(tree)
    found: dict[str, Use] = {}
    looked_up = {id(pair[0]) for node in ast.walk(tree) if (pair := _lookup(node)) is not None}
    # a string alone as a statement (a docstring) reaches nothing: only text that code uses does
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}

    def add(code: str, definite: bool = True, origin: str = "", hides: bool = False) -> None:
        found.setdefault(code, Use(code[:80], definite, origin, hides))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_library(alias.name):
                    add(f"import {alias.name}", origin=alias.name)
        elif isinstance(node, ast.ImportFrom) and _is_library(node.module or ""):
            imported = ", ".join(a.name for a in node.names)
            add(f"from {node.module} import {imported}", origin=node.module or "")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _names_course_lib(node.value) and id(node) not in prose:
                add(repr(node.value), origin=node.value.strip())
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            origin = dotted(node, names)
            if _is_library(origin) and not _inside_seen(node, found, names):
                add(origin, origin=origin)
        if (key := _namespace_key(node)) is not None:  # globals()["ae"], vars().get(k)
            if not isinstance(key, ast.Constant) or not isinstance(key.value, str):
                add("a name looked up in globals() built at run time", False, hides=True)
            elif _is_library(origin := dotted(ast.Name(id=key.value, ctx=ast.Load()), names)):
                add(origin, origin=origin)
        for code in _reaches(node, names, looked_up):
            add(code, definite=False, hides=True)
        if isinstance(node, ast.Call):
            name = dotted(node.func, names)
            if name in _DYNAMIC and node.args:
                built = [a for a in node.args[:2] if not isinstance(a, ast.Constant)]
                if name == "getattr":
                    built = [a for a in node.args[1:2] if not isinstance(a, ast.Constant)]
                if built:
                    hides = name != "getattr"  # an attribute of a named object: pointed at only
                    add(f"{name}(...) with a name built at run time", False, hides=hides)
    return list(found.values())


def _reaches(node: ast.AST, names: Bindings, looked_up: set[int]) -> list[str]:
    """What ``node`` reaches without naming it (module docstring), as use codes; ``looked_up``:
    the ids of namespaces and ``sys.modules`` reads that are looked up by a key (:func:`_lookup`),
    which ``uses`` reads itself."""
    if isinstance(node, ast.Call):
        name = dotted(node.func, names)
        if name in _REACHES:
            return [f"{name}() (reaches objects without naming them)"]
        if _is_namespace(node) and not node.args and id(node) not in looked_up:
            return [f"{name}() read whole (a name found in it is not written)"]
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        if node.attr in _FRAME_ATTRIBUTES:
            return [f".{node.attr} (a frame's or function's namespace)"]
        if dotted(node, names) == "sys.modules" and id(node) not in looked_up:
            return ["sys.modules read whole"]
    if isinstance(node, ast.Subscript) and dotted(node.value, names) == "sys.modules":
        if not isinstance(node.slice, ast.Constant):
            return ["sys.modules[...] with a name built at run time"]
    return []


_NAMESPACES = {"globals", "vars", "locals"}


def _is_namespace(call: ast.AST) -> bool:
    """Whether ``call`` is ``globals()``, ``vars()`` or ``locals()`` (or ``vars(x)``)."""
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id in _NAMESPACES)  # fmt: skip


def _lookup(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """``(mapping, key)`` of a lookup by key (``m[k]``, ``m.get(k)``, ``m.__getitem__(k)``,
    ``m.pop(k)``, ``m.setdefault(k)``); ``None`` for anything else."""
    if isinstance(node, ast.Subscript):
        return node.value, node.slice
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "__getitem__", "pop", "setdefault")
            and node.args):  # fmt: skip
        return node.func.value, node.args[0]
    return None


def _namespace_key(node: ast.AST) -> ast.expr | None:
    """The key of a lookup in the cell's own namespace (``globals()["ae"]``,
    ``vars().get("ae")``, ``globals().__getitem__(k)``): a lesson-imported name reached without
    writing it; ``None`` for anything else."""
    pair = _lookup(node)
    return pair[1] if pair is not None and _is_namespace(pair[0]) else None


def _inside_seen(node: ast.AST, found: dict[str, Use], names: Bindings) -> bool:
    """Whether a longer dotted name already reported covers ``node`` (``m.predict`` covers
    ``m``)."""
    origin = dotted(node, names)
    return any(code.startswith(origin + ".") for code in found)


def bound_names(source: str) -> set[str]:
    """Every name ``source`` binds, at any depth (assignments, loops, ``def``, ``class``,
    imports): what a later cell can take from it.

    Args:
        source: one cell's source.

    Returns:
        The bound names (an import's top-level name unless it is aliased; ``*`` imports add
        none); empty for a cell that does not parse.
    """
    tree = cell_tree(source)
    if tree is None:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
    return found


def borrowed(
    answer: str, earlier: Sequence[tuple[str, str, frozenset[str]]], lesson: Bindings
) -> list[str]:
    """Names the ``answer`` cell reads that an earlier cell computed with ``course_lib``.

    ``earlier``: ``(where, source, given)`` for each of the student's cells before the answer
    cell, in order (``where``: "cell 12 (added by the student)"; ``given``: the use codes the
    lesson's own blank of that cell already holds, which are not the student's). A cell that
    uses ``course_lib``, or reads a name such a cell bound, taints every name it binds; a cell
    that binds a name without either cleans it. Returns ``"`_x` (cell 12 (...) uses ...)"``.

    Definite uses taint, and so do those that hide what they reach (``Use.counts``: ``globals()``
    read by a built name or whole, ``gc.get_objects()``, a frame's globals); a ``getattr`` of a
    built name is pointed at by ``uses`` itself, not followed.

    Args:
        answer: the answer cell's source.
        earlier: ``(where, source, given)`` for each earlier cell of the student's, in order.
        lesson: the names the lesson's own cells import (``Bindings.of_lesson``).

    Returns:
        One line per tainted name the answer cell reads, sorted by name, saying which cell
        computed it with what.
    """
    tainted: dict[str, str] = {}
    for where, source, given in earlier:
        found = [u.code for u in uses(source, lesson) if u.counts and u.code not in given]
        via = sorted(free_names(source) & set(tainted))
        for name in bound_names(source):
            if found:
                tainted[name] = f"{where} uses {found[0]}"
            elif via:
                tainted[name] = tainted[via[0]]
            else:
                tainted.pop(name, None)
    return [f"`{name}` ({tainted[name]})" for name in sorted(free_names(answer) & set(tainted))]


def rebound(
    names: Sequence[str],
    before: Sequence[tuple[str, str, frozenset[str]]],
    later: Sequence[tuple[str, str, frozenset[str]]],
    lesson: Bindings,
) -> list[str]:
    """Graded names a cell *after* the answer cell sets again with ``course_lib``.

    The values leave the kernel after its last cell, so a cell the student added below the
    answer can overwrite an answer worked out by hand (``predicted_ratio = ratio(...)``). A
    later cell that binds one of ``names`` and uses ``course_lib`` (a definite use its blank does
    not hold) or reads a name a cell computed with it (:func:`borrowed`, over every cell before
    it) is named.

    Args:
        names: the item's graded value names.
        before: ``(where, source, given)`` for the student's cells up to and including the
            answer cell, in order.
        later: the same for the student's cells after the answer cell, in order.
        lesson: the names the lesson's own cells import (``Bindings.of_lesson``).

    Returns:
        One line per name set again with ``course_lib``: ``"`x`, set again in cell 14 (added
        by the student), which uses course_lib.memory.y"``.
    """
    found, seen = [], list(before)
    for where, source, given in later:
        if binds := sorted(bound_names(source) & set(names)):
            direct = [u.code for u in uses(source, lesson) if u.counts and u.code not in given]
            via = borrowed(source, seen, lesson)
            if direct or via:
                how = f"which uses {direct[0]}" if direct else f"which takes {via[0]}"
                found += [f"`{name}`, set again in {where}, {how}" for name in binds]
        seen.append((where, source, given))
    return found


def feeding(
    submitted: NotebookNode, spec: LessonSpec, graded: Sequence[tuple[str, Sequence[str]]]
) -> list[str]:
    """Every value that a cell of the student's computed with ``course_lib`` and an answer cell
    takes, or that a cell below its answer sets again (:func:`borrowed`, :func:`rebound`).

    Args:
        submitted: the notebook as submitted.
        spec: its lesson.
        graded: ``(answer cell's grade id, its graded value names)`` of each value item.

    Returns:
        One line per such value, each naming the cell that used ``course_lib`` (its ``where``).
    """
    lesson = Bindings.of_lesson(spec.lesson_code)
    found = []
    for answer_id, names in graded:
        answer, earlier = answer_and_earlier(submitted, spec, answer_id)
        given = frozenset(u.code for u in uses(spec.release_text.get(answer_id, ""), lesson))
        found += borrowed(answer or "", earlier, lesson)
        later = cells_after(submitted, spec, answer_id)
        found += rebound(names, [*earlier, ("", answer or "", given)], later, lesson)
    return found


# --- the student's cells, as borrowed() and rebound() read them ---------------------------


def cells_by_id(nb: NotebookNode) -> dict[str, NotebookNode]:
    """Grade id -> cell; a repeated id gives its last copy (the one nbgrader grades).

    Args:
        nb: a notebook.

    Returns:
        Each nbgrader cell by its grade id.
    """
    return {
        c.metadata["nbgrader"]["grade_id"]: c
        for c in nb.cells
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    }


def answer_and_earlier(
    submitted: NotebookNode, spec: LessonSpec, answer_id: str
) -> tuple[str | None, list[tuple[str, str, frozenset[str]]]]:
    """The answer cell's source as submitted, and every cell of the student's before it.

    Args:
        submitted: the notebook as submitted.
        spec: its lesson.
        answer_id: the answer cell's grade id.

    Returns:
        The answer's source (``None``: no such code cell), and each earlier student cell as
        ``(where, source, use codes its lesson blank already holds)``.
    """
    cell = cells_by_id(submitted).get(answer_id)
    answer = cell.source if cell is not None and cell.cell_type == "code" else None
    stop = _position(submitted, answer_id)
    return answer, [entry for index, entry in student_entries(submitted, spec) if index < stop]


def cells_after(
    submitted: NotebookNode, spec: LessonSpec, answer_id: str
) -> list[tuple[str, str, frozenset[str]]]:
    """The student's cells after the answer cell, as :func:`answer_and_earlier` gives the ones
    before it (none when there is no such cell): where a value can be set again.

    Args:
        submitted: the notebook as submitted.
        spec: its lesson.
        answer_id: the answer cell's grade id.

    Returns:
        ``(where, source, use codes its lesson blank already holds)`` per cell, in order.
    """
    stop = _position(submitted, answer_id)
    return [entry for index, entry in student_entries(submitted, spec) if index > stop]


def _position(submitted: NotebookNode, answer_id: str) -> int:
    """The answer cell's index (its last copy); past the end when there is none."""
    cell = cells_by_id(submitted).get(answer_id)
    return next((i for i, c in enumerate(submitted.cells) if c is cell), len(submitted.cells))


def student_entries(
    submitted: NotebookNode, spec: LessonSpec
) -> list[tuple[int, tuple[str, str, frozenset[str]]]]:
    """Every cell of the student's (``cheats.student_cells``), as :func:`borrowed` reads them.

    Args:
        submitted: the notebook as submitted.
        spec: its lesson.

    Returns:
        ``(index, (where, source, given))`` per cell, in order: where the report names it
        (``cheats.cell_owner``), its source, and the ``course_lib`` uses its lesson version
        (the answer cell's blank, the provided cell's source) already holds.
    """
    lesson = Bindings.of_lesson(spec.lesson_code)
    entries = []
    for index, source in student_cells(submitted, spec):
        given = frozenset(u.code for u in uses(lesson_version(submitted, index, spec), lesson))
        entries.append((index, (cell_owner(submitted, index, spec), source, given)))
    return entries
