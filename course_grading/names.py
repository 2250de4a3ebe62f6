"""Names in notebook code: what a cell imports, binds and uses (for ``cheats.py``).

Cells are read as IPython reads them (``!ls`` and ``%magic`` become calls) and parsed with
``ast``; nothing is executed.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import TYPE_CHECKING

from IPython.core.inputtransformer2 import TransformerManager

from course_grading.lesson import LessonSpec

if TYPE_CHECKING:
    from collections.abc import Iterator

_TRANSFORMER = TransformerManager()


@lru_cache(maxsize=4096)
def cell_tree(source: str) -> ast.Module | None:
    """The cell's syntax tree, magics included as calls; ``None`` if it does not parse.

    IPython's own transformer turns ``!ls`` and ``%time f()`` into ``get_ipython()`` calls first,
    so a shell escape or a magic is seen as the call it runs. Cached: the cheat scan and the
    uses scan parse the same cells many times.

    Args:
        source: the text of one code cell, as the notebook stores it.

    Returns:
        The parsed module, or ``None`` when the cell is not valid Python even after IPython's
        rewriting (such a cell raises at run time and so runs nothing).
    """
    try:
        return ast.parse(_TRANSFORMER.transform_cell(source))
    except (SyntaxError, ValueError):
        return None


@lru_cache(maxsize=4096)
def free_names(source: str) -> frozenset[str]:
    """Names a cell reads without binding them itself (what it takes from the namespace).

    A name is free if it is loaded somewhere in the cell and never stored, defined (``def``,
    ``class``) or taken as a parameter anywhere in it; scopes are not told apart, so a name a
    function's body binds hides the same name read at module level.

    Args:
        source: the text of one code cell.

    Returns:
        The free names; empty when the cell does not parse.
    """
    tree = cell_tree(source)
    if tree is None:
        return frozenset()
    loaded: set[str] = set()
    stored: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, ast.arg):
            stored.add(node.arg)
    return frozenset(loaded - stored)


def _imports(tree: ast.AST) -> dict[str, str]:
    """Local name -> what it is bound to, for every import in ``tree``."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    found[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def _bindings(statements: list[ast.stmt]) -> list[tuple[str, ast.AST, ast.stmt]]:
    """(name, target, statement) for every module-level binding, blocks included."""
    found: list[tuple[str, ast.AST, ast.stmt]] = []
    for stmt in statements:
        targets: list[ast.AST] = []
        if isinstance(stmt, ast.Assign):
            targets = list(stmt.targets)
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            targets = [stmt.target]
        elif isinstance(stmt, ast.Delete):
            targets = list(stmt.targets)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            targets = [item.optional_vars for item in stmt.items if item.optional_vars]
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((stmt.name, stmt, stmt))
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            found += [(name, stmt, stmt) for name in _imports(stmt)]
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, (ast.Name, ast.Attribute)):
                    if isinstance(node.ctx, (ast.Store, ast.Del)):
                        found.append((_base(node), node, stmt))
        for block in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(stmt, block, None)
            if inner and not isinstance(
                stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                found += _bindings(
                    [s for s in inner if isinstance(s, ast.stmt)]
                    + [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body]
                )
    return found


def _base(node: ast.AST) -> str:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


class Bindings:
    """What each imported name in a namespace refers to (``math`` -> ``math``,
    ``predict`` -> ``course_lib.memory.predict``), to resolve the code a cell calls.

    Args:
        imports: local name -> the dotted name it is bound to (copied, so the caller's dict
            may change afterwards).
    """

    def __init__(self, imports: dict[str, str]) -> None:
        self.imports = dict(imports)

    @classmethod
    def of_lesson(cls, code: list[str]) -> Bindings:
        """The namespace the lesson's own cells set up by importing, before any student code.

        Later cells win, as they would when the notebook runs top to bottom; cells that do not
        parse are skipped.

        Args:
            code: sources of the lesson's own code cells (``LessonSpec.lesson_code``), in
                notebook order.

        Returns:
            The bindings of every import in those cells.
        """
        imports: dict[str, str] = {}
        for source in code:
            tree = cell_tree(source)
            if tree is not None:
                imports.update(_imports(tree))
        return cls(imports)

    def with_cell(self, tree: ast.AST) -> Bindings:
        """This namespace as one cell sees it: its own imports added over the lesson's.

        Args:
            tree: the cell's syntax tree (``cell_tree``).

        Returns:
            New bindings; ``self`` is left unchanged, so each cell starts from the lesson's.
        """
        return Bindings({**self.imports, **_imports(tree)})

    def module_of(self, node: ast.AST) -> str:
        """The dotted origin of ``node`` if it comes from an import, else ``""``.

        Args:
            node: a name, attribute chain or call in a cell (``e``, ``os.path.join``, ``f()``).

        Returns:
            What ``dotted`` resolves it to when its leftmost name is imported
            (``from os import _exit as e; e`` -> ``"os._exit"``), else ``""``: a local name
            says nothing about which module the code comes from.
        """
        base = _base(node)
        return dotted(node, self) if base in self.imports else ""

    @staticmethod
    def answer_names(spec: LessonSpec) -> frozenset[str]:
        """Names the answer cells bind (instructor and student versions): the student's to set.

        Rebinding one of these is the exercise, not a cheat, so the redefinition scan lets
        them through.

        Args:
            spec: the lesson whose answer cells are read.

        Returns:
            Every module-level name bound in either version of any answer cell.
        """
        names = set()
        for gid in spec.answers:
            for text in (spec.source_text.get(gid, ""), spec.release_text.get(gid, "")):
                tree = cell_tree(text)
                if tree is not None:
                    names |= {name for name, _, _ in _bindings(tree.body)}
        return frozenset(names)

    def redefinitions(
        self, tree: ast.Module, allowed: frozenset[str], spec: LessonSpec
    ) -> Iterator[tuple[str, str]]:
        """(name, code) for each module-level rebinding in ``tree`` of a name not in ``allowed``.

        Importing what the lesson imports under the same name is not a rebinding; assigning to
        an attribute of a lesson import (``math.isclose = ...``) rebinds that import, unless it
        resolves into ``course_lib`` (the monkeypatch scan reports those).

        Args:
            tree: a student cell's syntax tree.
            allowed: names the student may rebind (``answer_names``).
            spec: the lesson being scanned (not read by this method).

        Yields:
            ``(name, code)``: the rebound name and a short rendering of the rebinding for the
            report (``"x = ..."``, ``"def f"``, ``"import as np: numpy"``,
            ``"math.isclose = ..."``).
        """
        mine = _imports(tree)
        for name, target, stmt in _bindings(tree.body):
            if name in allowed and not isinstance(target, ast.Attribute):
                continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if self.imports.get(name) == mine.get(name):
                    continue
                yield name, f"import as {name}: {mine.get(name)}"
            elif isinstance(target, ast.Attribute):
                origin = dotted(target, self)
                if name in self.imports and not origin.startswith("course_lib"):
                    yield name, f"{origin} = ..."
            else:
                yield name, f"{name} = ..." if not hasattr(target, "name") else f"def {name}"


def dotted(node: ast.AST, names: Bindings) -> str:
    """``os._exit`` for ``os._exit``, ``get_ipython().kernel`` for ``get_ipython().kernel``,
    with imported names resolved (``from os import _exit as e; e`` -> ``os._exit``); ``""``
    for anything else.

    Args:
        node: an expression from a cell; only names, attributes and calls resolve.
        names: the imports in force, to resolve the leftmost name.

    Returns:
        The dotted rendering (a call as ``()``, its arguments dropped), or ``""`` when any part
        of the chain is something else (a subscript, a literal, a lambda).
    """
    if isinstance(node, ast.Name):
        return names.imports.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = dotted(node.value, names)
        return f"{base}.{node.attr}" if base else ""
    if isinstance(node, ast.Call):
        base = dotted(node.func, names)
        return f"{base}()" if base else ""
    return ""
