"""The cheating class (issue 19, points 2 and 7): every snippet that scored, graded again.

Each cheat is a submission of the fast fixture lesson (``test_tokens``: the function
``tokens_per_batch``, 2 points; ``test_ratio``: the value ``attention_ratio``, 1 point, worked
out without ``course_lib``) that leaves the answers blank or wrong and attacks the grading
instead. Before, the hidden tests ran in the student's kernel and its cell status decided the
grade: an AST transformer, an always-equal object, ``setattr(math, "isclose", ...)`` and the
rest scored full marks. Now no hidden test, expected value or checking code enters the kernel,
values come out as plain data and functions are re-created from the submitted file's source in
a fresh sandbox, so each cheat scores 0 on what it attacked and the report names why. The class
is graded ``--jobs 2`` with the real sandbox; the honest rows must equal their rows graded alone.

A second test runs plain ``nbgrader autograde`` (the course's configuration) in a scratch course:
the cheat scores 0 and the solution full marks, and a configuration that brings back nbgrader's
own ``Execute`` cannot record a grade at all. A third looks from inside a sandboxed kernel and
inside the function sandbox: ``course_grading`` can be neither imported nor read there.
"""

from __future__ import annotations

import base64
import copy
import csv
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from class_builders import (
    FIXTURE,
    digest,
    filled,
    find,
    fixture_course,
    sandbox_problem,
    set_source,
    write,
)

import course_grading
from course_grading.nbgrader import course as wc

pytestmark = pytest.mark.skipif(bool(sandbox_problem()), reason=sandbox_problem() or "-")

STUDENT_TIMEOUT = 30
GRADER = str(Path(course_grading.__file__).resolve().parent)
BOTH = ("test_tokens", "test_ratio")
CHEATS = (
    "ast_transformer",
    "always_equal",
    "int_float_subclasses",
    "float_trick",
    "setattr_isclose",
    "aliases",
    "user_ns",
    "input_transformer",
    "thread",
    "cell_before",
    "library_and_clean_log",
    "leaker",
)

AST_TRANSFORMER = """import ast

class Shield(ast.NodeTransformer):
    def visit_Module(self, node):
        catch = ast.ExceptHandler(type=ast.Name("BaseException", ast.Load()), name=None,
                                  body=[ast.Pass()])
        node.body = [ast.Try(body=node.body or [ast.Pass()], handlers=[catch], orelse=[],
                             finalbody=[])]
        return ast.fix_missing_locations(node)

get_ipython().ast_transformers.append(Shield())"""

ALWAYS = """class Always:
    def __eq__(self, other):
        return True
    def __float__(self):
        return 8.0
    __hash__ = object.__hash__"""

LEAKER = """import base64, glob, json
seen = "\\n".join(In)
files = "".join(open(p, encoding="utf-8").read() for p in glob.glob("**/*.ipynb", recursive=True))
print("B64", base64.b64encode((seen + files).encode()).decode())
print("ZW", "\\u200b".join(seen + files))
from IPython.display import HTML, display
display(HTML("<span hidden>" + seen + files + "</span>"))"""


def _cell(nb, code: str, at: int | None = None):
    cell = nbformat.v4.new_code_cell(code)
    nb.cells.insert(len(nb.cells) if at is None else at, cell)
    return nb


def _index(nb, grade_id: str) -> int:
    return nb.cells.index(find(nb, grade_id))


def cheats(blank, good) -> dict[str, tuple[object, float, list[str]]]:
    """name -> (notebook, autograded points it must score, what the report must say)."""
    b = lambda: copy.deepcopy(blank)  # noqa: E731
    tokens_at = lambda nb: _index(nb, "answer_tokens")  # noqa: E731
    fails_both = [r"test_tokens \(0/2", r"test_ratio \(0/1"]
    found = {}

    nb = _cell(b(), AST_TRANSFORMER, at=2)
    found["ast_transformer"] = (nb, 0, [*fails_both, r"for review: cell 3 .*tampers"])

    nb = set_source(
        b(), "answer_tokens", ALWAYS + "\ndef tokens_per_batch(b, s):\n    return Always()"
    )
    nb = set_source(nb, "answer_ratio", ALWAYS + "\nattention_ratio = Always()")
    found["always_equal"] = (
        nb,
        0,
        [
            r"returned something that is not a plain value: .*Always",
            r"attention_ratio: not a plain value: .*Always",
        ],
    )

    subclasses = (
        "class Yes(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n"
        "class Near(float):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = float.__hash__\n"
    )
    nb = set_source(
        b(), "answer_tokens", subclasses + "def tokens_per_batch(b, s):\n    return Yes(1)"
    )
    nb = set_source(nb, "answer_ratio", subclasses + "attention_ratio = Near(3.0)")
    found["int_float_subclasses"] = (
        nb,
        0,
        [r"not a plain value: .*Yes", r"not a plain value: .*Near"],
    )

    reads_the_test = (
        "class FromTheTest:\n"
        "    def __float__(self):  # the expected constant, read from the test cell's own code\n"
        "        import re\n"
        "        for source in In:\n"
        "            found = re.findall(r'isclose\\(attention_ratio, ([0-9.]+)', source)\n"
        "            if found:\n"
        "                return float(found[0])\n"
        "        return 0.0\n"
        "attention_ratio = FromTheTest()"
    )
    found["float_trick"] = (
        set_source(b(), "answer_ratio", reads_the_test),
        0,
        [r"attention_ratio: not a plain value: .*FromTheTest"],
    )

    nb = set_source(
        b(),
        "answer_ratio",
        'import math\nsetattr(math, "isclose", lambda *a, **k: True)\nattention_ratio = 3.0',
    )
    found["setattr_isclose"] = (nb, 0, [r"attention_ratio: your value 3"])

    aliases = (
        "import builtins as b\nsetattr(b, 'abs', lambda x: 0)  # every abs(x - want) < tol\n"
        "import numpy as math\nimport torch as t\nt.equal = lambda *a: True\n"
        "from course_lib import answers as a\na.check = lambda *x, **k: None\n"
        "attention_ratio = 3.0"
    )
    found["aliases"] = (
        set_source(b(), "answer_ratio", aliases),
        0,
        [*fails_both, r"for review: .*(tampers|monkeypatches)"],
    )

    user_ns = (
        ALWAYS + "\nip = get_ipython()\nip.user_ns['attention_ratio'] = Always()\n"
        "ip.user_ns['tokens_per_batch'] = lambda b, s: b * s"
    )
    found["user_ns"] = (
        _cell(b(), user_ns),
        0,
        [*fails_both, r"not a plain value", r"for review: .*tampers with the kernel"],
    )

    transformer = "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])"
    found["input_transformer"] = (
        _cell(b(), transformer, at=2),
        0,
        [*fails_both, r"for review: .*tampers with the kernel"],
    )

    thread = (
        "import threading, time\nfrom course_lib.budget import tokens_per_step\n"
        "def keep():\n    for _ in range(600):\n"
        "        get_ipython().user_ns['tokens_per_batch'] = tokens_per_step\n"
        "        time.sleep(0.01)\n"
        "threading.Thread(target=keep, daemon=True).start()\ntime.sleep(0.1)"
    )
    nb = b()
    found["thread"] = (
        _cell(nb, thread, at=tokens_at(nb)),
        0,
        [
            r"test_tokens \(0/2",
            r"uses course_lib in cell \d+ \(added by the student\)"
            r": .*tokens_per_step",
        ],
    )

    nb = b()
    nb = _cell(
        nb,
        "from course_lib.budget import tokens_per_step\n"
        "def _mine(b, s):\n    return tokens_per_step(b, s)",
        at=tokens_at(nb),
    )
    nb = set_source(nb, "answer_tokens", "def tokens_per_batch(b, s):\n    return _mine(b, s)")
    found["cell_before"] = (nb, 0, [r"uses `_mine`, which is defined in another cell"])

    library = (
        "from course_lib.budget import tokens_per_step\n"
        "def tokens_per_batch(b, s):\n    return tokens_per_step(b, s)"
    )
    nb = set_source(b(), "answer_tokens", library)
    nb = set_source(
        nb,
        "answer_ratio",
        "from course_lib.memory import attention_elements as ae\n"
        "attention_ratio = ae(2, 1, 8192) / ae(16, 1, 1024)",
    )
    clean = "def tokens_per_batch(b, s):\\n    return b * s\\n"
    nb = _cell(
        nb, f"get_ipython().history_manager.input_hist_raw.append('{clean}')\nIn.append('{clean}')"
    )
    found["library_and_clean_log"] = (
        nb,
        0,
        [
            r"course_lib\.budget.*which this item does not allow",
            r"test_ratio \(0/1: your answer cell uses .*attention_elements.*without course_lib",
        ],
    )

    found["leaker"] = (_cell(b(), LEAKER), 0, fails_both)
    return found


def honest(blank, good) -> dict[str, tuple[object, float]]:
    half = set_source(copy.deepcopy(blank), "answer_tokens", find(good, "answer_tokens").source)
    return {
        "honest": (copy.deepcopy(good), 3),
        "half": (half, 2),
        "blank": (copy.deepcopy(blank), 0),
    }


def _grade(subs: Path, out: Path, root: Path, jobs: int) -> dict[str, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "course_grading", str(subs), "--out", str(out), "--root",
         str(root), "--jobs", str(jobs), "--timeout", str(STUDENT_TIMEOUT)],
        capture_output=True, text=True, timeout=1200, env=wc.nbgrader_env(), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "report.csv", newline="", encoding="utf-8") as fh:
        return {r["student"]: r for r in csv.DictReader(fh)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cheating")
    root, work = fixture_course(tmp)
    blank = nbformat.read(str(work.release_notebook(FIXTURE)), as_version=4)
    good = filled(work.release_notebook(FIXTURE), work.source_notebook(FIXTURE))
    assert set(cheats(blank, good)) == set(CHEATS)  # every cheat built is graded and tested
    everyone = {**{k: v[0] for k, v in cheats(blank, good).items()},
                **{k: v[0] for k, v in honest(blank, good).items()},
                "looker": looker(good)}  # fmt: skip
    subs, alone = tmp / "subs", tmp / "alone"
    for name, nb in everyone.items():
        write(subs / f"{name}_{FIXTURE}.ipynb", nb)
        if name in honest(blank, good):
            write(alone / f"{name}_{FIXTURE}.ipynb", nb)
    before = digest(subs)
    # two grading processes, each with its own output and sandbox uids: run at once
    with ThreadPoolExecutor(max_workers=2) as pool:
        class_run = pool.submit(_grade, subs, tmp / "out", root, jobs=2)
        alone_run = pool.submit(_grade, alone, tmp / "out-alone", root, jobs=1)
        rows, rows_alone = class_run.result(), alone_run.result()
    return {"rows": rows, "alone": rows_alone, "blank": blank, "good": good, "out": tmp / "out",
            "subs": subs, "before": before, "work": work}  # fmt: skip


@pytest.mark.parametrize("name", CHEATS)
def test_each_cheat_scores_zero_on_what_it_attacked_and_is_named(graded, name):
    _, points, named = cheats(graded["blank"], graded["good"])[name]
    row = graded["rows"][name]
    assert row["status"] in ("ok", "flagged"), row
    assert float(row["auto_score"]) == points, row
    said = f"{row['failed_tests']} || {row['reasons']}"
    for pattern in named:
        assert re.search(pattern, said), f"{name}: {pattern!r} not in the report: {said}"


def test_honest_rows_equal_their_rows_graded_alone(graded):
    keep = ("status", "score", "max_score", "auto_score", "failed_tests", "reasons")
    for name, (_, points) in honest(graded["blank"], graded["good"]).items():
        row, alone = graded["rows"][name], graded["alone"][name]
        assert float(row["auto_score"]) == points, row
        assert {k: row[k] for k in keep} == {k: alone[k] for k in keep}, (row, alone)


def test_no_hidden_test_ever_reached_a_kernel(graded):
    """What the leaker printed, decoded, holds no hidden region, declaration or solution."""
    work = graded["work"]
    graded_nb = graded["out"] / "course" / "autograded" / "leaker" / FIXTURE / f"{FIXTURE}.ipynb"
    nb = nbformat.read(str(graded_nb), as_version=4)
    printed = "".join(
        o.get("text", "") + json.dumps(o.get("data", {})) for c in nb.cells
        for o in c.get("outputs", []) if c.cell_type == "code"
    )  # fmt: skip
    b64 = re.search(r"B64 (\S+)", printed)
    assert b64, "the leaker printed nothing: the test cannot tell"
    seen = base64.b64decode(b64.group(1)).decode()
    assert "tokens_per_batch(16, 1024)" in seen  # it did see the visible tests
    secrets = ["BEGIN HIDDEN", "# ITEM:", "return batch_size * seq_len",
               "(2 * 8192**2) / (16 * 1024**2)"]  # fmt: skip
    source = work.source_notebook(FIXTURE).read_text()
    assert all(s in source for s in secrets)  # what it would have found
    for secret in secrets:
        assert secret not in seen and secret not in printed.replace("\u200b", ""), secret
    page = graded["out"] / "feedback" / "leaker" / f"{FIXTURE}.html"
    assert page.is_file()  # nothing to withhold
    assert "# ITEM:" not in page.read_text()


def test_feedback_carries_the_checks_messages(graded):
    page = (graded["out"] / "feedback" / "always_equal" / f"{FIXTURE}.html").read_text()
    assert "Graded outside your notebook: 0 of 1 point(s): attention_ratio: not a plain value" in (
        page.replace("&#39;", "'")
    )


def test_the_originals_are_untouched(graded):
    assert digest(graded["subs"]) == graded["before"]


# --- plain nbgrader autograde ---------------------------------------------------------------


def _autograde(work: wc.WorkCourse, students: dict[str, object], extra: str = "") -> dict:
    from nbgrader.api import Gradebook, MissingEntry

    for student, nb in students.items():
        write(work.submitted / student / FIXTURE / f"{FIXTURE}.ipynb", nb)
    if extra:
        with open(work.root / wc.CONFIG_FILE, "a", encoding="utf-8") as fh:
            fh.write(extra)
    proc = work.run("autograde", FIXTURE, "--force")
    scores = {}
    with Gradebook(work.db_url) as gb:
        for student in students:
            try:
                sub = gb.find_submission_notebook(FIXTURE, FIXTURE, student)
            except MissingEntry:
                scores[student] = None
                continue
            scores[student] = {g.name: g.auto_score for g in sub.grades if g.name in BOTH}
    return {"scores": scores, "log": proc.stdout}


def test_plain_nbgrader_autograde_uses_the_trusted_checks(tmp_path):
    root, work = fixture_course(tmp_path)
    blank = nbformat.read(str(work.release_notebook(FIXTURE)), as_version=4)
    cheat = _cell(copy.deepcopy(blank), AST_TRANSFORMER, at=2)
    source = nbformat.read(str(work.source_notebook(FIXTURE)), as_version=4)
    got = _autograde(work, {"cheater": cheat, "solution": source})
    assert got["scores"]["cheater"] == {"test_tokens": 0, "test_ratio": 0}, got["log"][-3000:]
    assert got["scores"]["solution"] == {"test_tokens": 2, "test_ratio": 1}, got["log"][-3000:]
    graded = work.autograded / "cheater" / FIXTURE / f"{FIXTURE}.ipynb"
    assert "Graded outside your notebook: 0 of 2" in graded.read_text()


def test_the_old_cell_status_verdicts_need_nbgraders_own_steps(tmp_path):
    """The test can fail: nbgrader's stock steps give the cheater full marks, and bringing back
    only its ``Execute`` (no values from a sandbox) makes the trusted step refuse to record."""
    stock = (
        "\nc.Autograde.autograde_preprocessors = ['nbgrader.preprocessors.Execute', "
        "'nbgrader.preprocessors.SaveAutoGrades']\n"
    )
    mixed = (
        "\nc.Autograde.autograde_preprocessors = ['nbgrader.preprocessors.Execute', "
        "'course_grading.judge.verdicts.SaveTrustedGrades']\n"
    )
    for config, expected in ((stock, {"test_tokens": 2, "test_ratio": 1}), (mixed, None)):
        folder = tmp_path / ("stock" if config is stock else "mixed")
        _, work = fixture_course(folder)
        blank = nbformat.read(str(work.release_notebook(FIXTURE)), as_version=4)
        cheat = _cell(copy.deepcopy(blank), AST_TRANSFORMER, at=2)
        got = _autograde(work, {"cheater": cheat}, extra=config)
        recorded = got["scores"]["cheater"]
        if expected is None:
            assert not recorded or not any(recorded.values()), got["log"][-2000:]
            assert "no values from a sandboxed run" in got["log"], got["log"][-2000:]
        else:
            assert recorded == expected, got["log"][-2000:]


# --- from inside the sandboxes ------------------------------------------------------------------

LOOKS_FOR_THE_GRADER = f"""import importlib.util, json, os
found = {{
    "import": importlib.util.find_spec("course_grading") is not None,
    "folder": os.path.exists({GRADER!r}),
    "items": os.path.exists({GRADER + "/judge/items/lesson_99.py"!r}),
}}
try:
    import course_grading
    found["imported"] = True
except ImportError:
    found["imported"] = False
print("GRADER", json.dumps(found))"""

FUNCTION_LOOKS = f"""def tokens_per_batch(b, s):
    import importlib.util, os
    names = ["_".join(["course", part]) for part in ("grading", "lib")]  # a probe, not a use
    if any(importlib.util.find_spec(name) for name in names):
        return -1
    if os.path.exists({GRADER!r}):
        return -2
    return b * s"""


def looker(good) -> nbformat.NotebookNode:
    """A full-marks notebook that looks for the grader from its kernel and from its function."""
    nb = _cell(copy.deepcopy(good), LOOKS_FOR_THE_GRADER)
    return set_source(nb, "answer_tokens", FUNCTION_LOOKS)


def test_the_grader_cannot_be_imported_or_read_inside_either_sandbox(graded):
    folder = graded["out"] / "course" / "autograded" / "looker" / FIXTURE
    printed = "".join(
        o.get("text", "")
        for c in nbformat.read(str(folder / f"{FIXTURE}.ipynb"), as_version=4).cells
        for o in c.get("outputs", [])
        if c.cell_type == "code"
    )
    found = json.loads(re.search(r"GRADER (\{.*\})", printed).group(1))
    assert found == {"import": False, "folder": False, "items": False, "imported": False}
    assert Path(GRADER, "judge", "items", "lesson_99.py").is_file()  # it is there, outside
    # inside the function sandbox: -1 or -2 would have cost the item its points
    assert float(graded["rows"]["looker"]["auto_score"]) == 3, graded["rows"]["looker"]
