"""The layout keeps its promises: the architecture table matches the tree, modules stay small,
imports form no cycle, nothing lazily re-exports, and nothing reads outside the repository."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "course_lib"
MAX_LINES = 340  # "about 300": a guard against a module quietly growing a second job
# Listed as one row each in the table:
SUBPACKAGES_LISTED_WHOLE = ("figures", "hf", "hf_configs")


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module in course_lib."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def table_names() -> set[str]:
    """Every `name.py` or `folder/` written in the first column of the architecture table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## Modules") :]
    names = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names |= set(re.findall(r"`([^`]+)`", first))
    return names


def test_the_architecture_table_matches_the_tree():
    listed = table_names()
    on_disk = set()
    for path in modules().values():
        rel = path.relative_to(PACKAGE).as_posix()
        top = rel.split("/")[0]
        if top in SUBPACKAGES_LISTED_WHOLE:
            on_disk.add(top + "/")
        elif not rel.endswith("__init__.py") or rel == "__init__.py":
            on_disk.add(rel)
    on_disk.discard("__init__.py")
    assert listed == on_disk, (
        f"in docs/architecture.md but not in course_lib: {sorted(listed - on_disk)}; "
        f"in course_lib but not in the table: {sorted(on_disk - listed)}"
    )


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_grows_past_the_limit(name):
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (limit {MAX_LINES}): split it by job"


def imports_of(name: str, path: Path) -> set[str]:
    """course_lib modules that ``name`` imports anywhere (top level or inside a function)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("course_lib")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("course_lib"):
                found.add(target)
                found |= {f"{target}.{a.name}" for a in node.names}
    return found


def test_imports_form_no_cycle():
    mods = modules()
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
    monkeypatch.setattr(sys.modules[__name__], "modules", lambda: fake)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: sources[self.name])
    with pytest.raises(pytest.fail.Exception, match="import cycle"):
        test_imports_form_no_cycle()


def test_no_lazy_module_getattr():
    lazy = [
        n for n, p in modules().items() if re.search(r"^def __getattr__\(", p.read_text(), re.M)
    ]
    assert lazy == [], f"lazy re-exports hide import cycles: {lazy}"


def test_nothing_reads_outside_the_repository():
    pattern = re.compile(r"\.\./shared|parents\[\d\]\s*/\s*[\"']shared|/work/shared")
    offenders = [
        str(p.relative_to(ROOT))
        for folder in ("course_lib", "tests", "benchmarks", "scripts")
        for p in (ROOT / folder).rglob("*.py")
        if p != Path(__file__) and pattern.search(p.read_text())
    ]
    assert offenders == [], f"a user's clone has no shared folder beside it: {offenders}"


def test_grading_help_needs_no_dev_extra():
    # nbstripout is a dev extra: the grading command must not import it to print its help.
    code = "import sys, course_grading.cli; print('nbstripout' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
