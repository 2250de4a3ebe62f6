"""The ``course_lib`` modules a graded function may use, staged as a package for its sandbox.

An item may allow some ``course_lib`` modules (``course_lib.model`` to build the model a packed
forward runs on). Only those modules and the ``course_lib`` modules they import are copied into
the function sandbox (``functions.py``), as a package whose ``__init__`` files are empty; a
closure that reaches a module the item forbids is refused, so the grader never stages the
library's answer by accident.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from course_grading.errors import GradingError


def _module_file(name: str, root: Path) -> Path | None:
    parts = name.split(".")
    base = root.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """``course_lib`` modules that ``module``'s code imports (absolute or relative)."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "course_lib"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "course_lib":
                continue
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}  # a submodule, if it is one
    return found


def closure(modules: tuple[str, ...], root: Path | None = None) -> list[str]:
    """``modules`` and every ``course_lib`` module they import, transitively.

    Args:
        modules: dotted ``course_lib`` module names (an item's ``allowed``).
        root: the ``course_lib`` package folder read; ``None``: the installed one.

    Returns:
        The module names, sorted, with every package on the way (``course_lib.hf`` for
        ``course_lib.hf.arch``).

    Raises:
        GradingError: one of ``modules`` has no file under ``root``.
    """
    root = root or _course_lib_root()
    seen: set[str] = set()
    pending = list(modules)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        path = _module_file(name, root)
        if path is None:
            if name in modules:
                raise GradingError(f"no module {name} in {root}: fix the item's allowed list")
            continue  # ``from course_lib.x import name``: a name, not a module
        seen.add(name)
        parents = name.split(".")
        pending += [".".join(parents[:i]) for i in range(2, len(parents))]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        pending += sorted(_imported(tree, name, path.name == "__init__.py"))
    return sorted(seen)


def _course_lib_root() -> Path:
    import course_lib

    return Path(course_lib.__file__).resolve().parent


def stage(allowed: tuple[str, ...], forbidden: tuple[str, ...], dest: Path) -> list[str]:
    """Copy the closure of ``allowed`` into ``dest/course_lib`` as a minimal package.

    Every package on the way gets an empty ``__init__.py`` (the real one may import more).

    Args:
        allowed: the ``course_lib`` modules the item allows.
        forbidden: modules (and their submodules) the closure must not reach.
        dest: the folder that becomes the sandbox's ``stage`` (``course_lib/`` is made in it).

    Returns:
        The staged module names (:func:`closure`); empty when nothing is allowed.

    Raises:
        GradingError: the closure reaches a module in ``forbidden``, or an allowed module does
            not exist.
    """
    if not allowed:
        return []
    modules = closure(allowed)
    bad = [m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden)]
    if bad:
        raise GradingError(
            f"the course_lib modules allowed for this item ({', '.join(allowed)}) import "
            f"{', '.join(bad)}, which the item forbids: change the item's allowed list or the "
            "library's imports"
        )
    root = _course_lib_root()
    for name in ["course_lib", *modules]:
        parts = name.split(".")
        source = _module_file(name, root)
        if source is not None and source.name != "__init__.py":
            target = dest.joinpath(*parts[:-1], f"{parts[-1]}.py")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        folder = dest.joinpath(*parts) if source is None or source.name == "__init__.py" else None
        for depth in range(1, len(parts) + (1 if folder else 0)):
            init = dest.joinpath(*parts[:depth], "__init__.py")
            init.parent.mkdir(parents=True, exist_ok=True)
            init.touch()
    return modules
