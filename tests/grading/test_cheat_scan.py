"""The static reading of student code (``course_grading.review.cheats``), on the fixture lesson.

It is a pointer for review, never a judge: a finding names the code and the later test cells it
could have aimed at, and changes no grade (``tests/grading/test_cheating_class.py`` grades the
same snippets). The fixture's visible tests: ``test_tokens`` calls ``tokens_per_batch``;
``test_ratio`` uses ``isinstance``, ``int``, ``float`` and ``attention_ratio``. A cell added at
the end of the notebook comes after both tests; one added after the first answer cell comes
before both.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from class_builders import FIXTURE, FIXTURE_ROOT, filled, set_source

from course_grading.judge.lesson import LessonSpec
from course_grading.nbgrader import course as wc
from course_grading.review.cheats import scan

REPO = Path(__file__).resolve().parents[2]
SOURCE = FIXTURE_ROOT / wc.SOURCE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
RELEASE = FIXTURE_ROOT / wc.RELEASE_DIR / FIXTURE / f"{FIXTURE}.ipynb"
BOTH = ("test_tokens", "test_ratio")


@pytest.fixture(scope="module")
def spec():
    return LessonSpec.from_notebooks(FIXTURE, SOURCE, RELEASE)


def _with_cell(code: str, *, early: bool = True) -> nbformat.NotebookNode:
    """The full-marks notebook with ``code`` added before the tests (or at the end)."""
    nb = filled(RELEASE, SOURCE)
    cell = nbformat.v4.new_code_cell(code)
    nb.cells.insert(2, cell) if early else nb.cells.append(cell)
    return nb


@pytest.mark.parametrize(
    ("code", "what", "aimed"),
    [
        ("get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)", "swallows", BOTH),
        ("import sys\nsys.excepthook = print", "swallows exceptions", BOTH),
        ("ip = get_ipython()\nip.showtraceback = lambda *a, **k: None", "swallows", BOTH),
        ("import os\nos._exit(0)", "exits the kernel (os._exit)", BOTH),
        ("import sys as s\ns.exit()", "exits the kernel (sys.exit)", BOTH),
        ("raise SystemExit", "exits the kernel (raise SystemExit)", BOTH),
        ("get_ipython().events.register('post_run_cell', print)", "tampers with the kernel", BOTH),
        ("exec('x = 1')", "tampers with the namespace (exec)", BOTH),
        ("isinstance = lambda *a: True", "redefines 'isinstance'", ("test_ratio",)),
        ("def float(x):\n    return x", "redefines 'float'", ("test_ratio",)),
        ("import course_lib.data as d\nd.VOCAB_SIZE = 1", "monkeypatches course_lib", BOTH),
        (
            "from unittest import mock\nmock.patch('course_lib.data.PAD_ID', 1)",
            "course_lib",
            BOTH,
        ),
    ],
)
def test_each_tampering_is_named_with_the_tests_it_aimed_at(spec, code, what, aimed):
    cheats = [f for f in scan(_with_cell(code), spec) if f.cheat]
    assert cheats, f"no tampering found in {code!r}"
    assert what in cheats[0].what
    assert set(cheats[0].tests) == set(aimed)


def test_tampering_after_the_tests_aims_at_none(spec):
    (found,) = [f for f in scan(_with_cell("import os\nos._exit(0)", early=False), spec)]
    assert found.cheat and found.tests == ()


@pytest.mark.parametrize(
    ("code", "what"),
    [
        ("import shutil\nshutil.rmtree('..')", "deletes files (shutil.rmtree)"),
        ("import os\nfor _ in os.walk('/'):\n    pass", "looks through folders (os.walk)"),
        ("open('/tmp/x', 'w').write('x')", "writes files"),
        ("import subprocess\nsubprocess.run(['ls'])", "starts processes"),
        ("!ls ..", "starts processes"),
        ("import socket\nsocket.create_connection(('1.2.3.4', 80))", "uses the network"),
    ],
)
def test_reaching_outside_is_flagged_not_penalised(spec, code, what):
    (found,) = scan(_with_cell(code), spec)
    assert not found.cheat and what in found.what and found.tests == ()


@pytest.mark.parametrize(
    "code",
    [
        "import math",  # the lesson's own import, again
        "tokens_per_batch = lambda b, s: b * s",  # the answer's own name
        "values = [1, 2, 3]\nvalues.remove(2)\nratio = max(values)",
        "import numpy as np\nx = np.ones(3)\nx.sum()",
        # issue 19: this honest import was flagged as a cheat and zeroed every later test
        "from IPython.display import display, Markdown\ndisplay(Markdown('**8** times'))",
        "import IPython.display\nIPython.display.display(3)",
    ],
)
def test_honest_code_is_not_a_cheat(spec, code):
    assert scan(_with_cell(code), spec) == []


def test_the_kernel_itself_is_still_named(spec):
    """The display exception is narrow: the rest of IPython and ipykernel are still named."""
    for code in (
        "import IPython\nIPython.get_ipython().kernel",
        "from ipykernel import kernelapp\nkernelapp.IPKernelApp",
    ):
        found = [f for f in scan(_with_cell(code), spec) if f.cheat]
        assert found and "tampers with the kernel" in found[0].what, code


def test_only_the_students_cells_are_read(spec):
    nb = filled(RELEASE, SOURCE)
    set_source(nb, "test_ratio", "import os\nos._exit(0)")  # restored by nbgrader anyway
    assert scan(nb, spec) == []


@pytest.mark.parametrize("lesson", wc.find_lessons(REPO))
def test_no_solution_of_the_course_looks_like_a_cheat(lesson):
    source = REPO / wc.SOURCE_DIR / lesson / f"{lesson}.ipynb"
    release = REPO / wc.RELEASE_DIR / lesson / f"{lesson}.ipynb"
    found = scan(filled(release, source), LessonSpec.from_notebooks(lesson, source, release))
    assert found == []
