"""The student's path through every lesson: the *student* notebook (``notebooks/``), answered as
an honest student answers it, then validated, run headless and graded.

"Answered" is the released student notebook with each answer cell's source replaced by the
solution's answer (written answers in a student's own words: ``helpers.answered``), plus the
cells the lessons themselves invite a student to edit or add (:data:`INVITED`): lesson 1's
explorer set to the target's budget, lesson 4's scratch cell used, a cell of the student's own
in lesson 5's section 9.

1. **Validate** (nbgrader's ``Validator``, the class behind both ``nbgrader validate`` and the
   Lab toolbar's button, with the course's ``nbgrader_config.py`` as the button reads it from the
   server's folder): the answered notebook passes; the blank one reports every graded cell as
   unanswered and does not crash. ``nbgrader validate`` exits 0 whatever it finds, so its result
   is read, never its exit status. A graded cell must not end in a value: nbgrader reads a
   test cell's result (``Out: 16``) as a partial-credit score and stops with ``ValueError:
   partial credit cannot be greater than maximum points for cell``; a static check below catches
   such a cell without running anything.
2. **Headless, without ``CI``** (:func:`run_headless`): the answered notebook runs top to bottom
   in a fresh kernel with nbclient, with neither ``CI`` nor ``NBGRADER_EXECUTION`` in its
   environment (the widgets take their interactive path, as on a student's machine), under a
   per-cell timeout and a wall-clock limit that ends a hang. Each lesson's time is printed.
3. **Graded** with ``python -m course_grading``: full autograded marks, no cell of the lesson
   reported as "added by the student", though the honest student edits or adds every cell the
   lesson invites (INVITED: lessons 1, 4 and 5; each was flagged so before issue 39, item 3).
4. **Installed as a student installs it**: ``pyproject.toml``'s base dependencies are what
   ``course_lib`` imports, the grader names its extra when it is missing, and (slow, marked
   ``fresh_venv``) a fresh venv with a hosted notebook's Jupyter and the student install runs a
   lesson.

These run every lesson several times: about 1 to 3 minutes per lesson and step on a 2-core CPU.
"""

from __future__ import annotations

import ast
import csv
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import typing
from pathlib import Path

import nbformat
import pytest
from helpers import answered
from nbgrader.validator import Validator
from packaging.requirements import Requirement
from traitlets.config.loader import PyFileConfigLoader

import course_lib.answers
from course_grading.errors import GradingError
from course_grading.nbgrader import course as wc
from course_grading.sandbox.bwrap import check_available

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (a dev extra there)
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
LESSONS = wc.find_lessons(REPO)
#: Seconds one cell may run headless, and a whole lesson (a hang ends at the latter).
CELL_TIMEOUT, LESSON_TIMEOUT = 300, 600
#: Environment variables that make the course's widgets draw one static frame.
HEADLESS_FLAGS = ("CI", "NBGRADER_EXECUTION", "NBGRADER_VALIDATING")

# What an honest student types where a lesson invites it, found by the text the lesson holds:
# (lesson prefix, text that finds the cell, replacement source, or None to insert a new cell after
# the (markdown) cell holding the text).
INVITED = [
    (
        "01",
        "budget_split_explorer(config, token_budget=token_budget",
        "# My explorer for the target: 4,096 tokens per step.\n"
        "budget_split_explorer(config, token_budget=4096, device=device)",
    ),
    (
        "04",
        "# Scratch (not graded)",
        "# Scratch (not graded): 8 blocks, every second one checkpointed, 640 tokens\n"
        "deep = replace(config, n_layers=8, max_seq_len=8192)\n"
        'mine = replace(deep, checkpointing="blocks", checkpoint_every=2)\n'
        "print(activation_bytes(mine, 1, 640).total / 2**20, 'MiB')",
    ),
    (
        "05",
        "cell of your own",
        None,  # a new cell after the lesson's invitation
    ),
]
OWN_CELL = 'print(card_plan("Qwen2.5-7B", "A10G", "qlora", seq_len=1024).verdict())'


def _paths(lesson: str) -> tuple[Path, Path]:
    return (
        REPO / wc.RELEASE_DIR / lesson / f"{lesson}.ipynb",
        REPO / wc.SOURCE_DIR / lesson / f"{lesson}.ipynb",
    )


def student_notebook(lesson: str, *, blank: bool = False) -> nbformat.NotebookNode:
    """The student notebook of ``lesson``: as released (``blank``), or answered as an honest
    student answers it (module docstring)."""
    release, solution = _paths(lesson)
    if blank:
        return nbformat.read(str(release), as_version=4)
    nb = answered(release, solution)
    for prefix, text, source in INVITED:
        if not lesson.startswith(prefix):
            continue
        where = [i for i, c in enumerate(nb.cells) if text in c.source]
        assert where, f"{lesson}: no cell holds {text!r} any more; update INVITED in {__file__}"
        if source is None:
            nb.cells.insert(where[0] + 1, nbformat.v4.new_code_cell(OWN_CELL))
        else:
            nb.cells[where[0]].source = source
    return nb


def write_lesson(folder: Path, lesson: str, nb: nbformat.NotebookNode) -> Path:
    """``nb`` written as ``folder/<lesson>/<lesson>.ipynb``, beside the lesson's other files."""
    release, _ = _paths(lesson)
    dest = folder / lesson
    shutil.copytree(release.parent, dest, dirs_exist_ok=True)
    path = dest / f"{lesson}.ipynb"
    nbformat.write(nb, str(path))
    return path


# --- 1. Validate ------------------------------------------------------------------------------


def validate(path: Path) -> dict:
    """What the toolbar's Validate (and ``nbgrader validate``) finds in ``path``.

    nbgrader's handler makes a ``Validator`` from the configuration in the server's folder and
    calls ``validate``; ``make lab`` serves the course from the repository, whose
    ``nbgrader_config.py`` gives every cell 60 s. An exception here is what the button shows
    as a crash (the issue's ``ValueError: partial credit ...``).
    """
    config = PyFileConfigLoader(wc.CONFIG_FILE, path=str(REPO)).load_config()
    return Validator(config=config).validate(str(path))


def graded_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


def _returns_none(name: str) -> bool:
    """Whether ``name`` is ``print`` or a ``course_lib.answers`` function typed to return None."""
    if name == "print":
        return True
    fn = getattr(course_lib.answers, name, None)
    return callable(fn) and typing.get_type_hints(fn).get("return") is type(None)


def trailing_value(source: str) -> str:
    """The last statement of a cell when it makes a value Jupyter would show as the cell's
    result, else ``""``. A call counts as a value unless it is ``print`` or a
    ``course_lib.answers`` function that returns nothing."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return ""
    last = body[-1] if body else None
    if not isinstance(last, ast.Expr):
        return ""
    call = last.value
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
        if _returns_none(call.func.id):
            return ""
    return ast.unparse(last)[:80]


def test_the_trailing_value_check_can_fail():
    """The static check flags a cell ending in a value, including a call returning one."""
    assert trailing_value("x = 1\nx") == "x"
    assert trailing_value("read_answer('q', q, Exact())")  # read_answer returns the value
    assert trailing_value("len([1])")
    assert not trailing_value("plausible('q', 'checked')")
    assert not trailing_value("assert q > 0")
    assert not trailing_value("print(q)")


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_graded_cell_ends_in_a_value(lesson):
    """A graded code cell shows no result: nbgrader would read it as a partial-credit score."""
    release, _ = _paths(lesson)
    nb = nbformat.read(str(release), as_version=4)
    echo = {
        c.metadata["nbgrader"]["grade_id"]: found
        for c in graded_cells(nb)
        if c.cell_type == "code" and (found := trailing_value(c.source))
    }
    assert not echo, f"graded cells ending in a value Jupyter shows as Out[...]: {echo}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_validate_passes_the_answered_student_notebook(lesson, tmp_path):
    path = write_lesson(tmp_path, lesson, student_notebook(lesson))
    start = time.perf_counter()
    result = validate(path)
    print(f"{lesson}: validated answered in {time.perf_counter() - start:.0f} s")
    problems = {
        k: [c.get("raw_error", c.get("source", ""))[-600:] for c in v] for k, v in result.items()
    }
    assert not result, f"Validate found problems in an honest answered notebook: {problems}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_validate_reports_every_graded_cell_of_the_blank_notebook(lesson, tmp_path):
    nb = student_notebook(lesson, blank=True)
    path = write_lesson(tmp_path, lesson, nb)
    start = time.perf_counter()
    result = validate(path)
    print(f"{lesson}: validated blank in {time.perf_counter() - start:.0f} s")
    assert set(result) == {"failed"}, f"expected only failed cells: {sorted(result)}"
    failed = {c["source"]: c["raw_error"] for c in result["failed"]}
    graded = {c.source.strip(): c for c in graded_cells(nb)}
    assert set(failed) == set(graded), (
        f"not reported: {[graded[s].metadata.nbgrader.grade_id for s in set(graded) - set(failed)]}"
    )
    for source, error in failed.items():
        cell = graded[source]
        expected = "You did not provide a response" if cell.cell_type == "markdown" else "NotImpl"
        assert expected in error, f"{cell.metadata.nbgrader.grade_id}: {error[-400:]}"


# --- 2. Headless, without CI ------------------------------------------------------------------

_RUNNER = textwrap.dedent(
    """
    import pathlib, sys, time, nbformat
    from nbclient import NotebookClient
    path, cell_timeout = sys.argv[1], int(sys.argv[2])
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    folder = str(pathlib.Path(path).parent)
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": folder}})
    try:
        client.execute()
    finally:
        nb.metadata["shapes_seconds"] = time.perf_counter() - start
        nbformat.write(nb, path)
    """
)


def run_headless(
    path: Path,
    cell_timeout: int = CELL_TIMEOUT,
    wall_timeout: int = LESSON_TIMEOUT,
    python: str = sys.executable,
) -> tuple[nbformat.NotebookNode, float]:
    """Execute the notebook at ``path`` in place, headless, as a student's ``nbconvert
    --execute`` would: nbclient and a fresh ``python3`` kernel, with none of
    :data:`HEADLESS_FLAGS` in the environment, so every widget takes its interactive path.

    Kept apart so that it can be parametrised (several runs per lesson; issue 39, item 2).
    A cell over ``cell_timeout`` s is an error in the notebook; a run over ``wall_timeout`` s in
    all (a hang nbclient does not notice) kills the runner and its kernel and fails the test.
    ``python`` runs nbclient, and its environment's ``python3`` kernel runs the notebook.

    Returns:
        The executed notebook and its time top to bottom, in seconds.
    """
    env = {k: v for k, v in os.environ.items() if k not in HEADLESS_FLAGS}
    env["PATH"] = f"{Path(python).parent}:{env.get('PATH', '')}"  # its own jupyter, its kernel
    proc = subprocess.Popen(
        [python, "-c", _RUNNER, str(path), str(cell_timeout)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its kernel too: a hang is ended by its process group
    )
    try:
        out, _ = proc.communicate(timeout=wall_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{path.name} did not finish within {wall_timeout} s headless (a hang?)")
    nb = nbformat.read(str(path), as_version=4)
    assert proc.returncode == 0, f"the runner failed:\n{out[-3000:]}"
    return nb, float(nb.metadata.get("shapes_seconds", 0.0))


def errors_in(nb: nbformat.NotebookNode) -> list[str]:
    """Every error output: ``"cell N: Name: message"``."""
    return [
        f"cell {i}: {o.get('ename')}: {str(o.get('evalue'))[:300]}"
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_answered_student_notebook_runs_headless_without_ci(lesson, tmp_path):
    path = write_lesson(tmp_path, lesson, student_notebook(lesson))
    nb, seconds = run_headless(path)
    print(f"{lesson}: {seconds:.0f} s top to bottom, headless without CI, load {_load()}")
    assert not errors_in(nb), errors_in(nb)


def test_the_headless_runner_reports_an_error_and_a_hang(tmp_path):
    """The runner can fail: an error in a cell is seen, and a cell that never ends is stopped."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")])
    nbformat.write(nb, str(tmp_path / "error.ipynb"))
    ran, _ = run_headless(tmp_path / "error.ipynb")
    assert errors_in(ran) == ["cell 0: ZeroDivisionError: division by zero"]
    hang = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(60)")]
    )
    nbformat.write(hang, str(tmp_path / "hang.ipynb"))
    with pytest.raises(pytest.fail.Exception, match="did not finish within 5 s"):
        run_headless(tmp_path / "hang.ipynb", cell_timeout=30, wall_timeout=5)


def test_headless_means_without_the_ci_flags(tmp_path, monkeypatch):
    """The kernel sees none of the flags that make widgets draw a static frame."""
    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    code = f"import os\nprint(sorted(k for k in os.environ if k in {HEADLESS_FLAGS!r}))"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbformat.write(nb, str(tmp_path / "env.ipynb"))
    ran, _ = run_headless(tmp_path / "env.ipynb")
    assert ran.cells[0].outputs[0]["text"].strip() == "[]"


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- 3. Graded --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graded_honest_class(tmp_path_factory):
    """Every lesson answered by one honest student (``honest``), graded by the grading command
    as an instructor runs it (sandboxed where bubblewrap works)."""
    tmp = tmp_path_factory.mktemp("student-path-grading")
    subs = tmp / "submitted"
    for lesson in LESSONS:
        (subs / "honest" / lesson).mkdir(parents=True)
        nbformat.write(student_notebook(lesson), str(subs / "honest" / lesson / f"{lesson}.ipynb"))
    out = tmp / "grading"
    try:
        check_available()
        sandbox = []
    except GradingError:  # no bubblewrap here: the student's own notebooks, trusted
        sandbox = ["--no-sandbox"]
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_grading",
            str(subs),
            "--out",
            str(out),
            "--root",
            str(REPO),
            "--lesson-timeout",
            "900",
            *sandbox,
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        env=wc.nbgrader_env(),
        check=False,
    )
    print(f"graded {len(LESSONS)} lessons in {time.perf_counter() - start:.0f} s, load {_load()}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "report.csv", newline="", encoding="utf-8") as fh:
        rows = {row["lesson"]: row for row in csv.DictReader(fh)}
    for lesson, row in rows.items():
        print(f"{lesson}: {row['status']}, {row['auto_score']}/{row['auto_max']}: {row['reasons']}")
    return rows, out


@pytest.mark.parametrize("lesson", LESSONS)
def test_an_honest_answered_notebook_gets_full_autograded_marks(graded_honest_class, lesson):
    rows, _ = graded_honest_class
    row = rows[lesson]
    assert row["failed_tests"] == "", row
    assert float(row["auto_score"]) == float(row["auto_max"]) > 0, row


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_cell_the_lesson_invites_is_added_by_the_student(graded_honest_class, lesson):
    rows, _ = graded_honest_class
    assert "added by the student" not in rows[lesson]["reasons"], rows[lesson]["reasons"]


# --- 4. Installed as a student installs it ----------------------------------------------------

#: What a hosted notebook (Colab) already has, installed first in the fresh environment: its
#: Jupyter (notebook 6 with ipywidgets 7.7.1, which needs it), its kernel, and nbclient to run a
#: lesson. Colab draws no ipywidgets 8 widget without opting in to custom widgets.
HOSTED = ("notebook<7", "ipykernel>=6.29,<7", "ipywidgets==7.7.1", "nbclient")
#: What the student install must not bring: the server and nbgrader (``lab``), the grader's needs.
NOT_FOR_STUDENTS = ("jupyterlab", "nbgrader", "nh3", "latex2mathml")
#: What ``pip install .`` needs of the repository (the rest, solutions/ and tests/, stays out).
PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE", "course_lib", "course_grading",
                 "jupyter-config")  # fmt: skip


def _course_lib_imports() -> set[str]:
    """The top-level third-party modules course_lib imports, anywhere in its code."""
    found = set()
    for path in (REPO / "course_lib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "course_lib"}


def _requirement_names(specs: list[str]) -> set[str]:
    return {Requirement(s).name.lower().replace("_", "-") for s in specs}


def _student_needs(imports: set[str], project: dict) -> tuple[set[str], set[str]]:
    """(what a student's install lacks, what it has that course_lib never imports), in
    distribution names: course_lib's imports against pyproject's base dependencies, the ``hf``
    extra's packages (imported only where a lesson asks for Hugging Face) and what a base
    dependency brings itself (IPython, with ipywidgets)."""
    base = _requirement_names(project["dependencies"])
    optional = _requirement_names(project["optional-dependencies"]["hf"])
    owners = importlib.metadata.packages_distributions()
    needed = {owners.get(m, [m])[0].lower().replace("_", "-") for m in imports}
    brought = {r for d in base for r in _requirement_names(_requires(d))}
    return needed - base - optional - brought, base - needed


def _requires(dist: str) -> list[str]:
    return [r for r in importlib.metadata.requires(dist) or [] if "extra ==" not in r]


def test_the_student_install_is_what_course_lib_imports():
    """pyproject's base dependencies are exactly course_lib's imports (module docstring of
    section 4); the check fails both ways: an import left out, or a tool put back in."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    missing, unused = _student_needs(_course_lib_imports(), project)
    assert not missing and not unused, f"missing {missing}, never imported {unused}"
    assert _student_needs(_course_lib_imports() | {"nh3"}, project)[0] == {"nh3"}
    wider = {**project, "dependencies": [*project["dependencies"], "nbgrader>=0.9.5,<0.10"]}
    assert _student_needs(_course_lib_imports(), wider)[1] == {"nbgrader"}


def test_the_grader_says_which_extra_it_needs():
    """Without one of the grader's packages, ``import course_grading`` names the extra."""
    blocked = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['nh3'] = None; import course_grading"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert blocked.returncode != 0
    assert "needs the `grader` extra (nh3 not installed)" in blocked.stderr, blocked.stderr[-800:]
    assert "pip install 'course_lib[grader]'" in blocked.stderr


def _pip(python: Path, *args: str) -> str:
    proc = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stderr[-3000:]}"
    return proc.stdout


def _installed(python: Path) -> dict[str, str]:
    listed = json.loads(_pip(python, "list", "--format", "json"))
    return {p["name"].lower().replace("_", "-"): p["version"] for p in listed}


@pytest.mark.fresh_venv
def test_the_student_install_runs_a_lesson_in_a_hosted_notebooks_jupyter(tmp_path):
    """A fresh venv set up as a hosted notebook is (torch, then its Jupyter: :data:`HOSTED`), then
    ``pip install`` of the course with no extra: nothing already there changes version, none of
    :data:`NOT_FOR_STUDENTS` arrives, ``import course_grading`` names the extra it needs, and
    lesson 1's answered student notebook runs to the end headless, without ``CI``.

    Slow on purpose (a real install: about 3 to 6 minutes on a loaded 2-core machine).
    """
    venv, src = tmp_path / "venv", tmp_path / "src"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    src.mkdir()
    for name in PACKAGE_FILES:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, src / name)
    _pip(python, "install", "--quiet", "torch==2.13.0")
    _pip(python, "install", "--quiet", *HOSTED)
    before = _installed(python)
    _pip(python, "install", "--quiet", str(src))
    after = _installed(python)
    changed = {n: (v, after.get(n)) for n, v in before.items() if after.get(n) != v}
    assert not changed, f"the student install replaced what the notebook had: {changed}"
    assert "course-lib" in after
    brought = sorted(set(NOT_FOR_STUDENTS) & set(after))
    assert not brought, f"the student install brought instructor tools: {brought}"

    probe = subprocess.run(
        [str(python), "-c", "import course_lib.widgets, course_lib.lessons.attention\n"
         "import course_grading"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert probe.returncode != 0 and "pip install 'course_lib[grader]'" in probe.stderr, (
        probe.stderr[-2000:]
    )

    lesson = LESSONS[0]
    path = write_lesson(tmp_path / "lessons", lesson, student_notebook(lesson))
    nb, seconds = run_headless(path, python=str(python))
    print(f"{lesson} in the student install: {seconds:.0f} s, load {_load()}")
    assert not errors_in(nb), errors_in(nb)
