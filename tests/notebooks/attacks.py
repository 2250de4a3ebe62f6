"""The shortcut classes issue 27 found, built for one item from its registration, the lesson and
the library call ``items_NN.py`` gives (``assessment.run_lesson`` hands each in, like those of
``probes.SHORTCUTS``):

* **G** grader-source answers: a value copied from the registration's ``expected=``, or the
  grader's own function pasted into the answer cell and called (:func:`grader_source`);
* **B** the gate bypass: junk, then the value a later cell prints (:func:`junk`, and the pass
  reads what the later cells print with it);
* **T** a seed table: a graded function answering from a table of the inputs the practice seed
  draws (:func:`seed_table`), graded with a course secret;
* **D** pasted library code: the library's functions pasted in place of their import into the
  graded function's cell (:func:`pasted_library`);
* **O** an after-answer overwrite: junk in the answer cell and the library call in a cell below
  it (the library call itself, added below);
* **N** a namespace lookup: every library name of the library call reached through
  ``globals()["name"]`` of a name the lesson imported (:func:`namespace_lookup`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from collections.abc import Callable

from course_grading.judge import plain
from course_lib.forms import Form, Integer, Ordered, Shape, Sig, Truth, Unordered, Word

# --- G: grader-source answers -------------------------------------------------------------------


#: The plain form of a grader helper a pasted reference calls, as a student copying it writes it
#: (the grader's own holds a lock that only its threads need).
STAND_INS = {
    "seeded_torch": (
        "@contextmanager\n"
        "def seeded_torch(seed):\n"
        "    import torch\n"
        "    with torch.random.fork_rng(devices=[]):\n"
        "        torch.manual_seed(seed)\n"
        "        yield\n"
    ),
}


def _module_sources(function: Callable, seen: set[str]) -> list[str]:
    """``function``'s source, after the sources of the module-level functions and constants it
    uses (what a student pastes so that it runs), each once."""
    module = inspect.getmodule(function)
    source = textwrap.dedent(inspect.getsource(function))
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Name) or node.id in seen:
            continue
        value = getattr(module, node.id, None)
        value = inspect.unwrap(value) if callable(value) else value  # a @cache function too
        if inspect.isfunction(value) and value.__module__ == module.__name__:
            seen.add(node.id)
            found += _module_sources(value, seen)
        elif inspect.isfunction(value) and value.__module__.startswith("course_grading"):
            seen.add(node.id)  # a helper of the grader's own: the student pastes its plain form
            if node.id not in STAND_INS:
                raise LookupError(f"{node.id} ({value.__module__}): give it a stand-in to paste")
            found.append(STAND_INS[node.id])
        elif type(value) in (int, float, str, bool) and node.id.isupper():
            seen.add(node.id)
            found.append(f"{node.id} = {value!r}\n")
    return [*found, source]


def _module_imports(module: object) -> str:
    """The module's own top-level imports a pasted function may need (not the grader's)."""
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    skipped = ("course_grading", "__future__")
    kept = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))
            and not (getattr(s, "module", "") or "").startswith(skipped)]  # fmt: skip
    return "".join(ast.unparse(s) + "\n" for s in kept)


def grader_source(item, right: dict[str, object], reference: str | None) -> str | None:
    """The answer cell copying the grader: for a function item, the grader's reference
    ``reference`` (a function of the lesson's check module with the graded function's signature)
    pasted under the graded function's name; for a value item, its ``expected=`` function pasted
    and called (with the module's imports it needs), or its ``expected=`` values typed (an
    edition-bound item's: the self-study edition's, handed in to a class edition). ``None``
    when the registration holds nothing to copy (a prediction has no expected value; some checks
    work their answer out themselves)."""
    module = importlib.import_module(item.check.__module__)
    if item.function:
        if reference is None:
            return None
        sources = _module_sources(getattr(module, reference), {reference})
        sources[-1] = sources[-1].replace(f"def {reference}(", f"def {item.function}(", 1)
        return _module_imports(module) + "\n".join(sources)
    if item.expected is None:
        return None
    if item.edition is not None:  # the self-study edition's answers, typed
        public = item.expected_values()
        return "".join(f"{n} = {public[n]!r}\n" for n in item.values)
    if callable(item.expected):
        name = item.expected.__name__
        sources = _module_sources(item.expected, {name})
        taken = "".join(f"{n} = _grader[{n!r}]\n" for n in item.values)
        return _module_imports(module) + "\n".join(sources) + f"_grader = {name}()\n" + taken
    return "".join(f"{n} = {item.expected[n]!r}\n" for n in item.values)


# --- B: junk that opens a gate ------------------------------------------------------------------


def _junk_of(form: Form, right: object) -> object:
    """A value of ``form``'s kind that is not ``right``: what a student sets to open a gate."""
    if isinstance(form, (Shape, Word)) and getattr(form, "choices", ()):
        wrong = [c for c in form.choices if not form.same(c, right)]
        return wrong[0] if wrong else "x"
    if isinstance(form, Truth):
        return not right
    if isinstance(form, Ordered):
        return tuple(_junk_of(p, r) for p, r in zip(form.parts, right))  # type: ignore[call-overload]
    if isinstance(form, Unordered):
        return frozenset()
    if isinstance(form, (Integer, Sig)) or right != 1:
        return 1
    return 2


def junk(item, right: dict[str, object]) -> dict[str, object]:
    """Name -> a junk value of each of ``item``'s values (never the right one)."""
    return {n: _junk_of(item.forms[n], right[n]) for n in item.values}


def assigned(values: dict[str, object]) -> str:
    """An answer cell setting each name to its value."""
    return "".join(f"{n} = {v!r}\n" for n, v in values.items())


# --- T: a table of the practice seed's inputs ---------------------------------------------------

_BUILT = ("tensor", "new", "predicate", "recorder")


def _decoded(arg: object) -> object:
    """A call's argument as the graded function receives it; ``ValueError`` for a built input
    (a tensor, a model, a proxy): no table keys those."""
    if isinstance(arg, dict) and set(arg) & set(_BUILT):
        raise ValueError("a built input")
    if isinstance(arg, dict) and set(arg) <= {"list", "tuple"}:
        kind, items = next(iter(arg.items()))
        return (list if kind == "list" else tuple)(_decoded(x) for x in items)
    return plain.decode(arg)


def _as_python(value: object) -> object:
    """A returned value as Python literals rebuild it (a tensor as nested lists)."""
    if isinstance(value, plain.Tensor):
        return value.nested()
    if type(value) in (list, tuple):
        return type(value)(_as_python(v) for v in value)  # type: ignore[call-arg]
    return value


def seed_table(function: str, calls: list[tuple[dict, object, object]]) -> str | None:
    """A graded function that knows nothing but a table: the practice seed's calls (as the
    trusted check made them on the solution) and what the solution returned, or that it raised.
    ``None`` when an input is built in the sandbox (a tensor, a model, a proxy)."""
    table = {}
    for request, returned, raised in calls:
        try:
            args = tuple(_decoded(a) for a in request["args"])
            kwargs = {k: _decoded(v) for k, v in request["kwargs"].items()}
        except ValueError:
            return None
        table[repr((args, kwargs))] = "__raises__" if raised else _as_python(returned)
    return (
        f"_TABLE = {table!r}\n"
        f"def {function}(*args, **kwargs):\n"
        "    found = _TABLE[repr((args, kwargs))]\n"
        "    if found == '__raises__':\n"
        "        raise ValueError('the table says this call raises')\n"
        "    return found\n"
    )


# --- D and N: the library call, pasted or looked up ---------------------------------------------


def _origin(name: str, lesson: dict[str, str], tree: ast.Module) -> str | None:
    """The ``course_lib`` object ``name`` stands for in the library call (its import there, or the
    lesson's)."""
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("course_lib"):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    return f"{stmt.module}.{alias.name}"
    origin = lesson.get(name, "")
    return origin if origin.startswith("course_lib.") else None


def _object(origin: str) -> object:
    module, _, name = origin.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _library_names(library: str, lesson: dict[str, str]) -> tuple[ast.Module, dict[str, str]]:
    """The library call's tree and every name in it that stands for a ``course_lib`` object."""
    tree = ast.parse(library)
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and (origin := _origin(node.id, lesson, tree)):
            names[node.id] = origin
    return tree, names


def _without_course_lib_imports(tree: ast.Module) -> list[ast.stmt]:
    return [
        s
        for s in tree.body
        if not (isinstance(s, ast.ImportFrom) and (s.module or "").startswith("course_lib"))
        and not (
            isinstance(s, ast.Import) and any(a.name.startswith("course_lib") for a in s.names)
        )
    ]


def pasted_library(library: str, lesson: dict[str, str]) -> str | None:
    """The library call with every ``course_lib`` function or class it uses pasted in place of
    its import, under the name the call uses: the library's code in the student's cell, no
    ``course_lib`` left to name. ``None`` when it uses none that has a source."""
    tree, names = _library_names(library, lesson)
    pasted = []
    for name, origin in sorted(names.items()):
        found = _object(origin)
        if not (inspect.isfunction(found) or inspect.isclass(found)):
            continue
        source = textwrap.dedent(inspect.getsource(found))
        if found.__name__ != name:
            source += f"\n{name} = {found.__name__}\n"
        pasted.append(source)
    if not pasted:
        return None
    rest = ast.unparse(ast.Module(body=_without_course_lib_imports(tree), type_ignores=[]))
    return "\n\n".join([*pasted, rest]) + "\n"


def namespace_lookup(library: str, lesson: dict[str, str]) -> str | None:
    """The library call with every ``course_lib`` name reached as ``globals()["name"]`` of the
    name the lesson imported it under, its imports dropped. ``None`` when the call needs a
    ``course_lib`` name the lesson does not import (no lookup reaches it)."""
    tree, names = _library_names(library, lesson)
    imported = {origin: local for local, origin in lesson.items()}
    if not names or any(origin not in imported for origin in names.values()):
        return None

    class Lookup(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in names and isinstance(node.ctx, ast.Load):
                key = ast.Constant(imported[names[node.id]])
                call = ast.Call(ast.Name("globals", ast.Load()), [], [])
                return ast.copy_location(ast.Subscript(call, key, ast.Load()), node)
            return node

    body = _without_course_lib_imports(tree)
    return ast.unparse(Lookup().visit(ast.Module(body=body, type_ignores=[]))) + "\n"


def reimported(code: str, lesson: dict[str, str]) -> str:
    """Imports that bind again every lesson-imported name ``code`` defined (a pasted copy of a
    library function shadows the lesson's own, which later lesson cells call)."""
    tree = ast.parse(code)
    bound = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    bound |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name)}  # fmt: skip
    lines = []
    for name in sorted(bound & set(lesson)):
        module, _, attr = lesson[name].rpartition(".")
        lines.append(f"from {module} import {attr} as {name}\n")
    return "".join(lines) or "pass\n"
