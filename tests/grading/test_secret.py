"""The course secret (``course_grading/judge/secret.py``): hidden inputs no public file predicts.

The attack it answers: the practice seed is a hash of the lesson, the item and the student, so
anyone holding the repository can compute a student's hidden inputs, and a submission that
returns a table for exactly those inputs scores. With a secret it gets new inputs, because the
seed depends on the secret and on the answer cell as submitted.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from class_builders import FIXTURE, REPO, sandbox_problem

from course_grading.cli import main
from course_grading.errors import GradingError
from course_grading.judge import functions, items
from course_grading.judge import secret as course_secret
from course_grading.judge.items import Evidence

SANDBOX = not sandbox_problem()
SECRET = b"0123456789abcdef0123456789abcdef"


def test_the_same_submission_gets_the_same_inputs_and_any_change_new_ones():
    one = course_secret.seed(SECRET, "l", "i", "ann", "def f(): ...")
    assert one == course_secret.seed(SECRET, "l", "i", "ann", "def f(): ...")
    others = {
        course_secret.seed(SECRET, "l", "i", "ann", "def f():  ..."),  # one space more
        course_secret.seed(SECRET, "l", "i", "bob", "def f(): ..."),
        course_secret.seed(SECRET, "l", "j", "ann", "def f(): ..."),
        course_secret.seed(SECRET[::-1], "l", "i", "ann", "def f(): ..."),
        course_secret.seed(None, "l", "i", "ann", "def f(): ..."),
    }
    assert one not in others and len(others) == 5
    # practice grading: public facts only, whatever the cell says
    assert course_secret.seed(None, "l", "i", "ann", "x") == items.seed_for("l", "i", "ann")
    assert course_secret.seed(None, "l", "i", "ann", "y") == items.seed_for("l", "i", "ann")


def _table_cell(student: str) -> str:
    """A function that knows nothing but a table of the practice inputs of ``student``, built as
    a student holding the repository would (``judge/items/lesson_99.py``'s draws)."""
    rng = random.Random(items.seed_for(FIXTURE, "test_tokens", student))
    cases = [(2, 8192), (3, 5)]
    cases += [(rng.randint(1, 64), rng.randint(1, 4096)) for _ in range(4)]
    table = {case: case[0] * case[1] for case in cases}
    return f"TABLE = {table!r}\ndef tokens_per_batch(b, s):\n    return TABLE[(b, s)]\n"


@pytest.fixture(scope="module")
def sandbox():
    return functions.FunctionSandbox.default(sandboxed=SANDBOX)


def test_a_table_of_last_times_inputs_scores_only_in_practice(sandbox):
    item = items.items_of(FIXTURE)["test_tokens"]
    cell = _table_cell("ann")
    practice = items.verdict(item, Evidence(item, "ann", answer_source=cell, sandbox=sandbox), [])
    assert practice.points == 2  # the attack works where the seed is public...
    ev = Evidence(item, "ann", answer_source=cell, sandbox=sandbox, secret=SECRET)
    graded = items.verdict(item, ev, [])
    assert graded.points == 0 and "KeyError" in graded.message  # ...and not with a secret
    honest = "def tokens_per_batch(b, s):\n    return b * s\n"
    ev = Evidence(item, "ann", answer_source=honest, sandbox=sandbox, secret=SECRET)
    assert items.verdict(item, ev, []).points == 2


def test_a_secret_is_made_private_and_never_overwritten(tmp_path):
    path = tmp_path / "keys" / "course_secret"
    assert main(["secret", str(path)]) == 0
    assert path.stat().st_mode & 0o777 == 0o600
    secret = course_secret.load(path)
    assert secret is not None and len(secret) == 64
    before = path.read_bytes()
    with pytest.raises(GradingError, match="never overwritten"):
        course_secret.create(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "mode", "words"),
    [(b"short\n", 0o600, "fewer than 16"), (SECRET, 0o644, "can be read by others")],
)
def test_a_weak_or_readable_secret_is_refused(tmp_path, content, mode, words):
    path = tmp_path / "secret"
    path.write_bytes(content)
    path.chmod(mode)
    with pytest.raises(GradingError, match=words):
        course_secret.load(path)
    with pytest.raises(GradingError, match="cannot read the course secret"):
        course_secret.load(tmp_path / "absent")


def test_the_command_line_says_what_is_wrong_with_a_secret_file(tmp_path):
    absent = tmp_path / "absent"
    argv = [sys.executable, "-m", "course_grading", str(tmp_path), "--secret-file", str(absent)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("python -m course_grading: cannot read the course")
    env = dict(os.environ, SHAPES_COURSE_SECRET_FILE=str(absent))
    proc = subprocess.run(argv[:4], capture_output=True, text=True, cwd=REPO, env=env)
    assert proc.returncode == 2 and "cannot read the course secret" in proc.stderr
