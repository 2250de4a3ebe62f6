"""The layout keeps the promises of docs/architecture.md: its module tables (and README's short one)
match the tree, modules and functions stay within the limits it states, public functions are
typed and carry Google-style Args:/Returns:/Raises: sections, imports form no cycle, nothing
lazily re-exports, and nothing reads outside the repository. Every rule covers both packages,
the student's (course_lib) and the instructors' (course_grading); the few files allowed past the
module limit are listed below, each with its reason. Every check is also fed a case that must
fail it."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "course_lib"
GRADER = ROOT / "course_grading"
DOC = ROOT / "docs" / "architecture.md"
BOTH = (PACKAGE, GRADER)  # every rule below covers both packages
# Listed as one row each in the table (a data package, and the instructors' package).
LISTED_WHOLE = {"hf_configs/": PACKAGE / "hf_configs", "course_grading/": ROOT / "course_grading"}


def modules(*packages: Path) -> dict[str, Path]:
    """Dotted name -> file of every module in ``packages`` (default: course_lib)."""
    found = {}
    for path in sorted(p for package in packages or (PACKAGE,) for p in package.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


# --- the module table ----------------------------------------------------------------------------


def page_section(text: str, title: str) -> str:
    """The text under the ``## {title}`` heading, up to the next ``## `` heading."""
    body = text[text.index(f"## {title}\n") :]
    end = body.find("\n## ", 1)
    return body if end < 0 else body[:end]


def table_names(text: str) -> set[str]:
    """Every `name` written in the first column of the table under ``## Modules``."""
    table = page_section(text, "Modules")
    names = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return names


def tree_names() -> set[str]:
    """What the table must list: every course_lib file, except the package markers of data
    packages listed whole, plus the rows listed whole that exist."""
    names = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        whole = [k for k, folder in LISTED_WHOLE.items() if folder in path.parents]
        if whole:
            names.add(whole[0])
        elif rel != "lengths/__init__.py":  # a data folder's marker: not a module with a job
            names.add(rel)
    return names | {k for k, folder in LISTED_WHOLE.items() if folder.is_dir()}


def grader_table_names(text: str) -> set[str]:
    """Every `name` in the first column of the table under ``## The grader's modules``."""
    table = page_section(text, "The grader's modules")
    return {n for ln in table.splitlines() if ln.startswith("| `")
            for n in re.findall(r"`([^`]+)`", ln.split("|")[1])}  # fmt: skip


def grader_tree_names() -> set[str]:
    """Every course_grading file, as a path below the package (``judge/functions.py``)."""
    return {p.relative_to(GRADER).as_posix() for p in GRADER.rglob("*.py")}


def table_drift(listed: set[str], on_disk: set[str]) -> str:
    missing, extra = sorted(on_disk - listed), sorted(listed - on_disk)
    if not missing and not extra:
        return ""
    return f"in the tree but not in the table: {missing}; in the table but not in the tree: {extra}"


def test_the_architecture_table_matches_the_tree():
    assert not (drift := table_drift(table_names(DOC.read_text()), tree_names())), drift


def test_the_table_check_sees_a_missing_row_and_a_stale_one():
    text = DOC.read_text()
    without_fit = "\n".join(ln for ln in text.splitlines() if not ln.startswith("| `fit.py`"))
    assert "fit.py" in table_drift(table_names(without_fit), tree_names())
    stale = text.replace("| `fit.py` |", "| `windows.py` | lesson 3's windows |\n| `fit.py` |")
    assert "windows.py" in table_drift(table_names(stale), tree_names())


def test_the_grader_table_matches_the_tree():
    listed = grader_table_names(DOC.read_text())
    assert not (drift := table_drift(listed, grader_tree_names())), drift


def test_the_grader_table_check_sees_a_missing_row_and_a_stale_one():
    text = DOC.read_text()
    without = "\n".join(ln for ln in text.splitlines() if not ln.startswith("| `judge/plain.py`"))
    assert "judge/plain.py" in table_drift(grader_table_names(without), grader_tree_names())
    stale = text.replace(
        "| `judge/plain.py` |", "| `judge/oracle.py` | answers |\n| `judge/plain.py` |"
    )
    assert "judge/oracle.py" in table_drift(grader_table_names(stale), grader_tree_names())


# README's short table groups the same files by stage; it must name every top-level module and
# package (the package's own markers and its data folder aside) and nothing that is gone.
README = ROOT / "README.md"
README_UNLISTED = {"__init__.py", "__main__.py", "lengths/"}


def readme_names(text: str) -> set[str]:
    """Every `name` in the first column of README's ``| modules | own |`` table."""
    lines = text[text.index("| modules | own |") :].splitlines()[2:]
    rows = lines[: next((i for i, ln in enumerate(lines) if not ln.startswith("|")), len(lines))]
    return {n for ln in rows for n in re.findall(r"`([^`]+)`", ln.split("|")[1])}


def top_level_names() -> set[str]:
    """course_lib's own modules (``x.py``) and packages (``x/``), one level deep."""
    found = {p.name for p in PACKAGE.glob("*.py")}
    found |= {f"{p.name}/" for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    return found - README_UNLISTED


def test_the_readme_table_names_every_top_level_module():
    drift = table_drift(readme_names(README.read_text()), top_level_names())
    assert not drift, f"README.md's module table: {drift}"


def test_the_readme_check_sees_a_missing_module_and_a_stale_one():
    text = README.read_text()
    without_forms = text.replace(", `forms.py`", "")
    assert "forms.py" in table_drift(readme_names(without_forms), top_level_names())
    stale = text.replace("| `isolation.py` |", "| `isolation.py`, `windows.py` |")
    assert "windows.py" in table_drift(readme_names(stale), top_level_names())


# --- the limits the document states --------------------------------------------------------------


def stated_limits() -> tuple[int, int]:
    """(lines of code per module, per function), read from docs/architecture.md."""
    m = re.search(
        r"a module holds at most \*\*(\d+)\*\*\s+lines of code "
        r"and a function at most \*\*(\d+)\*\*",
        DOC.read_text(),
    )
    assert m, "docs/architecture.md no longer states the module and function limits"
    return int(m.group(1)), int(m.group(2))


def code_line_numbers(source: str) -> set[int]:
    """Numbers of the lines that hold code: not blank, not only a comment, not part of a
    docstring (module, class or function)."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = body[0] if body else None
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
                if isinstance(doc.value.value, str):
                    docstrings.update(range(doc.lineno, (doc.end_lineno or doc.lineno) + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in skip or tok.type == tokenize.ENDMARKER:
            continue
        lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docstrings)
    return lines


#: Modules allowed past the stated module limit: each is one cohesive job that is simply long
#: (a size limit is a prompt to look, not a reason to split), held to its own limit (its lines of
#: code when it was allowed: growing it is another prompt to look), with the reason. An allowance
#: a module no longer needs fails the test after the limit check, so none goes stale.
ALLOWANCES: dict[str, tuple[int, str]] = {
    "course_grading.submissions": (
        263,
        "one walk over a submissions folder, whatever layout it holds (nbgrader's, a flat "
        "folder, Canvas's and Moodle's downloads: their names read in lms/download_names.py), "
        "every entry a submission or a row saying why not, no link followed, one submission "
        "per student and lesson (an LMS's latest file), ids made safe and distinct",
    ),
    "course_grading.judge.items.lesson_02": (
        343,
        "one lesson's trusted checks, one module per lesson: its two function items each need "
        "an answer form (PackedRow, Logits) and a reference beside their registration, its "
        "prediction its plausibility rule, and question 3 its class edition's numbers",
    ),
    "course_grading.judge.items.lesson_05": (
        266,
        "one lesson's trusted checks, one module per lesson: two function items drawn on cards "
        "with the memory model beside them, the plans read off real cards, and the class "
        "edition's numbers beside the three questions that read them",
    ),
    "course_grading.judge.items.lesson_03": (
        310,
        "one lesson's trusted checks, one module per lesson: the two graded loops share windows, "
        "a reference model and full-batch gradients; the noise target re-measures the lesson "
        "and says which side of the target a wrong answer is on; the prediction declares a "
        "plausibility rule per value; question 2 reads its class edition's accumulation",
    ),
}


def module_limit_of(name: str, stated: int) -> int:
    """The module limit ``name`` is held to: its allowance's, else the stated one."""
    return ALLOWANCES[name][0] if name in ALLOWANCES else stated


def over_the_limits(source: str, name: str, module_limit: int, function_limit: int) -> list[str]:
    found, lines = [], code_line_numbers(source)
    if len(lines) > module_limit:
        found.append(f"{name}: {len(lines)} lines of code (limit {module_limit}): split it by job")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = sum(node.lineno <= line <= (node.end_lineno or node.lineno) for line in lines)
            if n > function_limit:
                found.append(f"{name}.{node.name}: {n} lines of code (limit {function_limit})")
    return found


def test_modules_and_functions_stay_within_the_stated_limits():
    module_limit, function_limit = stated_limits()
    found = [
        problem
        for name, path in modules(*BOTH).items()
        for problem in over_the_limits(
            path.read_text(), name, module_limit_of(name, module_limit), function_limit
        )
    ]
    assert not found, found


def stale_allowances(allowances: dict[str, tuple[int, str]], module_limit: int) -> list[str]:
    """Allowances that must go: for no module, without a reason, no higher than the stated
    limit, or for a module that fits the stated limit now."""
    found, tree = [], modules(*BOTH)
    for name, (limit, why) in allowances.items():
        if name not in tree:
            found.append(f"{name}: no such module: drop its allowance")
        elif not why.strip() or limit <= module_limit:
            found.append(f"{name}: an allowance needs a reason and a limit above {module_limit}")
        elif (n := len(code_line_numbers(tree[name].read_text()))) <= module_limit:
            found.append(f"{name}: {n} lines of code fit the limit ({module_limit}): drop it")
    return found


def test_every_allowance_is_still_needed():
    module_limit, _ = stated_limits()
    assert not (stale := stale_allowances(ALLOWANCES, module_limit)), stale


def test_the_allowance_check_sees_a_stale_one():
    module_limit, _ = stated_limits()
    assert "fit the limit" in stale_allowances({"course_lib.units": (999, "long")}, module_limit)[0]
    assert "no such module" in stale_allowances({"course_lib.gone": (999, "x")}, module_limit)[0]
    assert "a reason" in stale_allowances({"course_lib.units": (999, " ")}, module_limit)[0]
    name = next(iter(ALLOWANCES))
    assert over_the_limits("x = 1\n" * 1000, name, module_limit_of(name, module_limit), 50)


def test_the_limit_check_sees_a_long_module_and_a_long_function():
    module_limit, function_limit = stated_limits()
    body = "".join(f"    x{i} = {i}\n" for i in range(function_limit + 1))
    long_function = f'def f():\n    """Docstrings do not count."""\n{body}    return 0\n'
    assert over_the_limits(long_function, "m", module_limit, function_limit) == [
        f"m.f: {function_limit + 3} lines of code (limit {function_limit})"
    ]
    long_module = "".join(f"y{i} = {i}  # a comment\n\n" for i in range(module_limit + 1))
    assert "m: " in over_the_limits(long_module, "m", module_limit, function_limit)[0]
    # ... while documentation alone never pushes a module over.
    documented = '"""' + "words\n" * (3 * module_limit) + '"""\nx = 1\n'
    assert over_the_limits(documented, "m", module_limit, function_limit) == []


# --- typed, and what raises says so -------------------------------------------------------------


def public_functions(path: Path):
    """(qualified name, function node, docstrings that document it) of every public function and
    public method (``__init__`` is documented by its class)."""
    tree = ast.parse(path.read_text())

    def walk(body, prefix, cls):
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                yield from walk(node.body, f"{prefix}{node.name}.", node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name.startswith("_") and node.name not in ("__init__", "__call__"):
                    continue
                docs = [ast.get_docstring(node) or ""]
                if node.name == "__init__" and cls is not None:
                    docs.append(ast.get_docstring(cls) or "")
                yield f"{prefix}{node.name}", node, docs

    yield from walk(tree.body, "", None)


def untyped(node: ast.FunctionDef, is_method: bool) -> list[str]:
    args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    if is_method and args and args[0].arg in ("self", "cls"):
        args = args[1:]
    missing = [a.arg for a in args if a.annotation is None]
    missing += [f"*{a.arg}" for a in (node.args.vararg,) if a and a.annotation is None]
    missing += [f"**{a.arg}" for a in (node.args.kwarg,) if a and a.annotation is None]
    return missing + (["return"] if node.returns is None and node.name != "__init__" else [])


def raises_undocumented(node: ast.FunctionDef, docs: list[str]) -> bool:
    raises = any(isinstance(n, ast.Raise) for n in ast.walk(node))
    return raises and not any("Raises:" in d for d in docs)


def section(doc: str, title: str) -> list[str] | None:
    """The lines under a Google-style ``title:`` heading, up to the next line indented no deeper
    than the heading; None when the docstring has no such heading."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == f"{title}:":
            indent = len(line) - len(line.lstrip())
            body = []
            for after in lines[i + 1 :]:
                if after.strip() and len(after) - len(after.lstrip()) <= indent:
                    break
                body.append(after)
            return body
    return None


def described(doc: str) -> set[str]:
    """Names an ``Args:`` section describes: ``name:`` or ``name (type):`` at its first indent
    (``*args`` and ``**kwargs`` by their names, stars optional)."""
    body = [line for line in section(doc, "Args") or [] if line.strip()]
    indent = min((len(line) - len(line.lstrip()) for line in body), default=0)
    entry = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?:")
    return {
        m.group(1)
        for line in body
        if len(line) - len(line.lstrip()) == indent and (m := entry.match(line.strip()))
    }


def parameters(node: ast.FunctionDef, is_method: bool) -> list[str]:
    args = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
    if is_method and args and args[0] in ("self", "cls"):
        args = args[1:]
    return args + [a.arg for a in (node.args.vararg, node.args.kwarg) if a]


def returns_value(node: ast.FunctionDef) -> bool:
    none = isinstance(node.returns, ast.Constant) and node.returns.value is None
    return node.name != "__init__" and not none


def is_property(node: ast.FunctionDef) -> bool:
    return any(
        (isinstance(d, ast.Name) and d.id in ("property", "cached_property"))
        or (isinstance(d, ast.Attribute) and d.attr in ("setter", "cached_property"))
        for d in node.decorator_list
    )


def sections_missing(node: ast.FunctionDef, docs: list[str], is_method: bool) -> list[str]:
    """What the Google-style sections get wrong: an ``Args:`` entry for every parameter and for
    nothing else, and a ``Returns:`` (or ``Yields:``) unless the function returns None. A
    property is documented like an attribute (Google style), so it needs neither."""
    if is_property(node):
        return []
    found = []
    if params := parameters(node, is_method):
        if not any(section(d, "Args") is not None for d in docs):
            found.append("has no Args: section")
        elif left := [p for p in params if not any(p in described(d) for d in docs)]:
            found.append(f"has an Args: section that leaves out {left}")
    if stale := sorted(set().union(*(described(d) for d in docs)) - set(params)):
        found.append(f"has an Args: section that describes {stale}, which it does not take")
    if returns_value(node) and not any(
        section(d, t) is not None for d in docs for t in ("Returns", "Yields")
    ):
        found.append("has no Returns: section")
    return found


def sections_apply(rel: str) -> bool:
    """The Args:/Returns: rule covers public modules (a private ``_name.py`` is exempt; a
    package's ``__init__.py`` is its public face)."""
    stem = Path(rel).stem
    private = stem.startswith("_") and not stem.startswith("__")
    return not private


def boundary_problems(path: Path, root: Path = ROOT) -> list[str]:
    rel = path.relative_to(root).as_posix()
    found = []
    for name, node, docs in public_functions(path):
        if missing := untyped(node, "." in name):
            found.append(f"{rel}:{node.lineno} {name} has no type for {missing}")
        if not any(docs) and not is_property(node):
            found.append(f"{rel}:{node.lineno} {name} has no docstring")
        if raises_undocumented(node, docs):
            found.append(f"{rel}:{node.lineno} {name} raises but has no Raises: section")
        if sections_apply(rel):
            found += [
                f"{rel}:{node.lineno} {name} {p}" for p in sections_missing(node, docs, "." in name)
            ]
    return found


def test_public_functions_are_typed_and_document_args_returns_and_raises():
    found = [p for path in modules(*BOTH).values() for p in boundary_problems(path)]
    assert not found, found


def test_the_boundary_check_sees_a_missing_type_and_a_missing_raises(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        'def f(x, y: int) -> int:\n    """Y.\n\n    Args:\n        x: X.\n        y: Y.\n\n'
        '    Returns:\n        Y.\n    """\n    return y\n\n'
        "def h() -> None:\n    pass\n\n"
        'def g(n: int) -> None:\n    """Half of n.\n\n    Args:\n        n: N.\n    """\n'
        '    if n % 2:\n        raise ValueError("odd")\n'
    )
    assert boundary_problems(bad, root=tmp_path) == [
        "bad.py:1 f has no type for ['x']",
        "bad.py:13 h has no docstring",
        "bad.py:16 g raises but has no Raises: section",
    ]


def test_the_sections_check_sees_no_args_a_left_out_or_stale_entry_and_no_returns(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        'def f(n: int) -> int:\n    """Twice n."""\n    return 2 * n\n\n'
        "def g(n: int, *rest: int, **named: int) -> None:\n"
        '    """Print n.\n\n    Args:\n        n: what to print.\n        *rest: more.\n    """\n\n'
        "class C:\n"
        '    """A thing.\n\n    Args:\n        size (int): bytes.\n'
        '        colour: gone.\n    """\n\n'
        '    def __init__(self, size: int, name: str) -> None:\n        """Build it."""\n\n'
        "    @property\n    def twice(self) -> int:\n        return 2\n\n"
        '    def more(self) -> int:\n        """More.\n\n'
        '        Yields:\n            1.\n        """\n'
        "        return 1\n"
    )
    assert boundary_problems(bad, root=tmp_path) == [
        "bad.py:1 f has no Args: section",
        "bad.py:1 f has no Returns: section",
        "bad.py:5 g has an Args: section that leaves out ['named']",
        "bad.py:21 C.__init__ has an Args: section that leaves out ['name']",
        "bad.py:21 C.__init__ has an Args: section that describes ['colour'], which it does not "
        "take",
    ]
    # A private module is exempt; a package's __init__.py is not.
    assert sections_apply("course_lib/budget.py") and sections_apply(
        "course_lib/hf_configs/__init__.py"
    )
    assert not sections_apply("course_lib/_checks.py")


# --- imports -------------------------------------------------------------------------------------


OURS = ("course_lib", "course_grading")


def imports_of(name: str, path: Path) -> set[str]:
    """Modules of ours that ``name`` imports anywhere (top level, inside a function, or only
    for type checking: a cycle hidden behind ``TYPE_CHECKING`` is still a cycle)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(OURS)}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith(OURS):
                found.add(target)
                found |= {f"{target}.{a.name}" for a in node.names}
    return found


def test_imports_form_no_cycle():
    """No cycle within or across the two packages (course_grading imports course_lib)."""
    mods = modules(*BOTH)
    graph = {n: {m for m in imports_of(n, p) if m in mods and m != n} for n, p in mods.items()}
    # A package's __init__ re-exporting its own modules is not a cycle through them.
    graph = {n: {m for m in deps if not n.startswith(m + ".")} for n, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(n: str, trail: list[str]) -> None:
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                pytest.fail("import cycle: " + " -> ".join(trail[trail.index(m) :] + [m]))
            if m not in state:
                visit(m, trail + [m])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])


def test_the_cycle_check_can_fail(monkeypatch):
    fake = {"course_lib.a": PACKAGE / "a.py", "course_lib.b": PACKAGE / "b.py"}
    sources = {"a.py": "from course_lib import b\n", "b.py": "from . import a\n"}
    monkeypatch.setattr(sys.modules[__name__], "modules", lambda *packages: fake)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: sources[self.name])
    with pytest.raises(pytest.fail.Exception, match="import cycle"):
        test_imports_form_no_cycle()


def test_the_student_package_never_imports_the_grader():
    found = [
        n for n, p in modules().items() if any(m.startswith("course_grading") for m in
        re.findall(r"^\s*(?:from|import)\s+([\w.]+)", p.read_text(), re.M))
    ]  # fmt: skip
    assert found == [], f"course_lib must not import course_grading: {found}"


def lazy_getattr(source: str) -> bool:
    return bool(re.search(r"^def __getattr__\(", source, re.M))


def test_no_lazy_module_getattr():
    lazy = [n for n, p in modules(*BOTH).items() if lazy_getattr(p.read_text())]
    assert lazy == [], f"lazy re-exports hide import cycles: {lazy}"
    assert lazy_getattr("def __getattr__(name):\n    return name\n")  # the check can fail


def test_nothing_reads_outside_the_repository():
    pattern = re.compile(r"\.\./shared|parents\[\d\]\s*/\s*[\"']shared|/work/shared")
    offenders = [
        str(p.relative_to(ROOT))
        for folder in ("course_lib", "course_grading", "tests", "benchmarks", "scripts")
        for p in (ROOT / folder).rglob("*.py")
        if p != Path(__file__) and pattern.search(p.read_text())
    ]
    assert offenders == [], f"a user's clone has no shared folder beside it: {offenders}"


def test_grading_help_needs_no_dev_extra():
    # nbstripout is a dev extra: the grading command must not import it to print its help.
    code = "import sys, course_grading.cli; print('nbstripout' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
