"""Read the student's code before it runs: a pointer for the instructor, never a judge.

No grade depends on this reading: every autograded point is decided by trusted checks outside
the student's kernel (``verdicts.py``), so nothing a cell does to the kernel can earn one. What
it finds is *flagged for review* in the report, so that a person looks:

- **tampering** (``cheat=True``): swallowing exceptions (``set_custom_exc``,
  ``sys.excepthook``, replacing ``showtraceback``); leaving the kernel (``sys.exit``,
  ``os._exit``, ``exit()``, ``os.kill``, ``raise SystemExit``); reaching into the kernel or the
  namespace (``get_ipython()`` attributes, ``events.register``, ``sys.modules[...] =``,
  ``globals()[...] =``, ``builtins``, ``exec``); redefining a name the lesson's visible checks
  use (``isclose = ...``, ``import numpy as math``); monkeypatching ``course_lib``;
- **reaching outside** (``cheat=False``): files, processes, the network (the sandbox stops
  them).

An honest ``from IPython.display import display, Markdown`` is neither. Only the student's code
is read: answer cells and cells the student added or changed (the lesson's own cells are
restored before grading). A static reading can be fooled; nothing relies on it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import nbformat

from course_grading.judge.lesson import LessonSpec
from course_grading.review.names import Bindings, cell_tree, dotted, free_names

#: Cheat categories: (dotted-name pattern, what it does).
CHEAT_CALLS = [
    (
        r"(^|\.)(set_custom_exc|excepthook|showtraceback|_showtraceback|showsyntaxerror)$",
        "swallows exceptions",
    ),
    (r"(^|\.)(CustomTB|InteractiveTB)$", "swallows exceptions"),
    (
        r"^(sys\.exit|os\._exit|os\.abort|os\.kill|os\.killpg|exit|quit|signal\.\w+)$",
        "exits the kernel",
    ),
    (
        r"(^|\.)events\.(register|unregister)$|^get_ipython\(\)\.(kernel|run_cell)",
        "tampers with the kernel",
    ),
    (
        r"(^|\.)(ast_transformers|input_transformers_post|input_transformers_cleanup|"
        r"input_transformer_manager|user_ns|user_global_ns|user_ns_hidden|history_manager)(\.|$)",
        "tampers with the kernel",
    ),
    (  # IPython.display (display, Markdown, HTML...) only shows things: not tampering
        r"^(ipykernel|IPython(?!\.(display|core\.display)(\.|$)))(\.|$)|"
        r"^sys\.(displayhook|settrace|setprofile|modules)$",
        "tampers with the kernel",
    ),
    (
        r"^(builtins|__builtins__)(\.|$)|^(exec|eval|compile|__import__|globals|vars)$",
        "tampers with the namespace",
    ),
    (r"^importlib\.(reload|import_module)$", "tampers with the namespace"),
    (r"^(marshal\.loads?|types\.(FunctionType|CodeType|LambdaType))$", "builds code from bytes"),
]
#: Suspicious calls: (pattern, what it does). The sandbox confines them; they are reported.
SUSPICIOUS_CALLS = [
    (
        r"^(shutil\.(rmtree|move)|os\.(remove|unlink|rmdir|removedirs|rename|replace))$|"
        r"\.(unlink|rmdir|rmtree)$",
        "deletes files",
    ),
    (
        r"^(os\.(walk|listdir|scandir|chdir)|glob\.i?glob)$|\.(iterdir|rglob|glob)$",
        "looks through folders",
    ),
    (
        r"^(os\.(fork|forkpty|system|popen|posix_spawnp?|spawn\w*|exec\w*)|pty\.\w+)$|"
        r"^(subprocess|multiprocessing)(\.|$)|^get_ipython\(\)\.(system|getoutput)$",
        "starts processes",
    ),
    (r"^(socket|urllib|http|requests|ftplib|smtplib|ssl)(\.|$)", "uses the network"),
    (r"^(ctypes|cffi)(\.|$)", "loads native code"),
    (r"\.(write_text|write_bytes)$|^shutil\.copy\w*$", "writes files"),
]
SHELL_MAGICS = {"system", "sx", "bash", "sh", "script", "perl", "ruby"}


@dataclass(frozen=True)
class Finding:
    """One thing found in one cell of the student's code (flagged for review, nothing more)."""

    cell: int  # index in the submitted notebook
    cheat: bool  # tampering with the kernel or the tests, or only reaching outside
    what: str  # plain words, with the code that did it
    tests: tuple[str, ...] = ()  # the later test cells it could have aimed at


def student_cells(nb: nbformat.NotebookNode, spec: LessonSpec) -> list[tuple[int, str]]:
    """(index, source) of every code cell holding the student's code.

    That is every answer cell, and every other code cell that is neither a test nor locked
    and whose source is no cell of the lesson's (one the student added or changed).

    Args:
        nb: the submitted notebook.
        spec: the lesson, whose own cell sources are not the student's.

    Returns:
        ``(index in nb.cells, source)`` pairs, in notebook order.
    """
    found = []
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade") or meta.get("locked"):
            continue
        if meta.get("solution") or cell.source not in spec.lesson_sources:
            found.append((index, cell.source))
    return found


def cell_owner(nb: nbformat.NotebookNode, index: int, spec: LessonSpec) -> str:
    """How the report names cell ``index``: by its grade id, as a cell the lesson provides for
    editing (an explorer, a scratch cell: ``LessonSpec.provided``), or as one the student added.

    Args:
        nb: the submitted notebook.
        index: the cell's index in ``nb.cells``.
        spec: the lesson.

    Returns:
        ``"cell 12 ('q1')"``, ``"cell 30 (the lesson's explorer)"`` or ``"cell 31 (added by the
        student)"``.
    """
    cell = nb.cells[index]
    gid = cell.metadata.get("nbgrader", {}).get("grade_id")
    if gid:
        return f"cell {index + 1} ({gid!r})"
    if (provided := spec.provided.get(str(cell.get("id", "")))) is not None:
        return f"cell {index + 1} (the lesson's {provided[0]})"
    return f"cell {index + 1} (added by the student)"


def lesson_version(nb: nbformat.NotebookNode, index: int, spec: LessonSpec) -> str:
    """The lesson's own version of cell ``index`` (what it holds before the student edits it):
    an answer cell's blank, a provided cell's source; ``""`` for a cell the student added.

    Args:
        nb: the submitted notebook.
        index: the cell's index in ``nb.cells``.
        spec: the lesson.

    Returns:
        The source the lesson hands out for that cell.
    """
    cell = nb.cells[index]
    if gid := cell.metadata.get("nbgrader", {}).get("grade_id"):
        return spec.release_text.get(gid, "")
    return spec.provided.get(str(cell.get("id", "")), ("", ""))[1]


def _match(name: str, table) -> str | None:
    return next((what for pattern, what in table if re.search(pattern, name)), None)


def _calls(tree: ast.AST, names: Bindings) -> list[tuple[str, str, bool]]:
    """(what, code, cheat) for what the tables name in ``tree``: one per kind, its first code.

    ``ast.walk`` meets a call before its parts, so the code named is the most specific one
    (``socket.create_connection`` rather than ``socket``).
    """
    seen: dict[str, tuple[str, bool]] = {}
    # only whole dotted names: ``IPython`` inside ``IPython.display.display`` is not a use
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if dotted(exc, names) in ("SystemExit", "KeyboardInterrupt"):
                seen.setdefault("exits the kernel", (f"raise {dotted(exc, names)}", True))
        if not isinstance(node, (ast.Attribute, ast.Name, ast.Call)):
            continue
        if id(node) in inner and not isinstance(node, ast.Call):
            continue
        name = dotted(node.func if isinstance(node, ast.Call) else node, names)
        if not name:
            continue
        if isinstance(node, ast.Call) and name.endswith(("run_line_magic", "run_cell_magic")):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and first.value in SHELL_MAGICS:
                seen.setdefault("starts processes", (f"%{first.value}", False))
        if what := _match(name, CHEAT_CALLS):
            seen.setdefault(what, (name, True))
        elif what := _match(name, SUSPICIOUS_CALLS):
            seen.setdefault(what, (name, False))
        elif name == "open" and isinstance(node, ast.Call) and _writes(node):
            seen.setdefault("writes files", ("open(..., 'w')", False))
    return [(what, code, cheat) for what, (code, cheat) in seen.items()]


def _writes(call: ast.Call) -> bool:
    modes = [a for a in call.args[1:2]] + [k.value for k in call.keywords if k.arg == "mode"]
    return any(isinstance(m, ast.Constant) and set(str(m.value)) & set("wax+") for m in modes)


def _patches_course_lib(tree: ast.AST, names: Bindings) -> list[str]:
    """Assignments, deletions, setattr and mock.patch aimed at course_lib."""
    hits = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and names.module_of(target.value).startswith(
                "course_lib"
            ):
                hits.append(f"{dotted(target, names)} = ...")
        if isinstance(node, ast.Call):
            name = dotted(node.func, names)
            first = node.args[0] if node.args else None
            if name in ("setattr", "delattr") and first is not None:
                if names.module_of(first).startswith("course_lib"):
                    hits.append(f"{name}({dotted(first, names)}, ...)")
            if name.endswith(("patch", "patch.object")) and first is not None:
                text = first.value if isinstance(first, ast.Constant) else dotted(first, names)
                if str(text).startswith("course_lib") or names.module_of(first).startswith(
                    "course_lib"
                ):
                    hits.append(f"{name}({text!r})")
    return hits


def scan(nb: nbformat.NotebookNode, spec: LessonSpec) -> list[Finding]:
    """Every cheat and suspicious call in the student's code of ``nb``, in cell order.

    A redefinition is reported only when a later test cell reads the name; a cell that does
    not parse is skipped (it runs nothing). Nothing is executed.

    Args:
        nb: the submitted notebook.
        spec: the lesson: its imports, answer names and test cells.

    Returns:
        One ``Finding`` per kind of thing found in each cell: the calls the tables name, a
        monkeypatch of ``course_lib``, a redefined name the tests use; a cheat names the
        later test cells it could have aimed at.
    """
    tests = _test_positions(nb, spec)
    lesson = Bindings.of_lesson(spec.lesson_code)
    allowed = Bindings.answer_names(spec)
    findings: list[Finding] = []
    for index, source in student_cells(nb, spec):
        tree = cell_tree(source)
        if tree is None:
            continue  # a syntax error: the cell runs nothing
        names = lesson.with_cell(tree)
        later = tuple(gid for gid, at in tests if at > index)
        for what, code, cheat in _calls(tree, names):
            findings.append(Finding(index, cheat, f"{what} ({code})", later if cheat else ()))
        for code in _patches_course_lib(tree, names):
            findings.append(Finding(index, True, f"monkeypatches course_lib ({code})", later))
        for name, code in lesson.redefinitions(tree, allowed, spec):
            uses = tuple(gid for gid in later if name in free_names(spec.source_text[gid]))
            if uses:
                findings.append(
                    Finding(index, True, f"redefines {name!r}, which the tests use ({code})", uses)
                )
    return findings


def _test_positions(nb: nbformat.NotebookNode, spec: LessonSpec) -> list[tuple[str, int]]:
    return [
        (cell.metadata["nbgrader"]["grade_id"], index)
        for index, cell in enumerate(nb.cells)
        if cell.metadata.get("nbgrader", {}).get("grade_id") in spec.tests
    ]
