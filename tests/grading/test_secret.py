"""The course secret (``course_grading/judge/secret.py``): hidden inputs no public file predicts.

The attack it answers: the practice seed is a hash of the lesson, the item and the student, so
anyone holding the repository can compute a student's hidden inputs, and a submission that
returns a table for exactly those inputs scores. With a secret it gets new inputs, because the
seed depends on the secret and on the answer cell as submitted.

Issue 42's attacks on the secret itself: the grader took any 16 bytes (``Shapes-Fall-2026``),
and the 8-hex edition label in every student's notebook checked a guess of it offline (found in
0.01 s); one secret asked every term the same numbers. Now a secret must be a generator's
(``judge/strength.py``), the label comes from the file's public random id, and the file's term
enters every draw.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import random
import secrets
import subprocess
import sys
import time

import pytest
from class_builders import FIXTURE, REPO, sandbox_problem

from course_grading.cli import main
from course_grading.errors import GradingError
from course_grading.judge import functions, items, strength
from course_grading.judge import secret as course_secret
from course_grading.judge.items import Evidence
from course_grading.judge.items.model import lesson_of
from course_grading.nbgrader import course as wc

SANDBOX = not sandbox_problem()
LESSONS = wc.find_lessons(REPO)
SECRET = b"64ffdf59b2673fe2ec0b47f2902ea031a0a0f181c8c845d41908e783158d131b"
#: What people type as a secret: each guessable, each taken by the grader before issue 42.
GUESSABLE = [
    "Shapes-Fall-2026",
    "shapes-course-secret-fall-2026",
    "correct-horse-battery-staple-shapes-course",
    "CorrectHorseBatteryStapleShapesCourse2026",
    "MySuperSecretPasswordForTheShapesCourseFall",
    "0123456789abcdef0123456789abcdef",
    "deadbeef" * 4,
    "a" * 64,
    "12345678901234567890123456789012345678901234",
    "Shapes_Fall_2026_Shapes_Fall_2026_Shapes",
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS",
    "the course secret of Shapes, fall 2026",
    base64.b64encode(b"correct horse battery staple shapes!!").decode(),  # text, encoded
    b"Shapes-Fall-2026-course-secret!!".hex(),
]


def _file(tmp_path, text: str, name: str = "secret"):
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o600)
    return path


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
    [
        (b"short\n", 0o600, "5 characters from 26 hold at most 24 bits, not 128"),
        (SECRET, 0o644, "can be read by others"),
    ],
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


@pytest.mark.parametrize("guess", GUESSABLE)
def test_a_secret_a_person_made_up_is_refused(tmp_path, guess):
    """The attack: the grader took ``Shapes-Fall-2026``, found offline in 0.01 s."""
    for text in (guess, f"secret: {guess}\nterm: Fall-2026\n"):
        with pytest.raises(GradingError, match="could be guessed: .*course_grading secret PATH"):
            course_secret.load(_file(tmp_path, text))


def test_what_generators_write_is_taken(tmp_path):
    """Both sides: 300 secrets each of the generators the docs name (hex of 16 and 32 bytes,
    base64 of 24 and 32), and files the command writes, load; each test of ``strength.py``
    refuses a uniform draw with a chance under one in a million."""
    rng = random.Random(42)  # fixed draws: the test says the same thing every run
    made = {
        "hex16": lambda: rng.randbytes(16).hex(),
        "hex32": lambda: rng.randbytes(32).hex(),
        "base64url32": lambda: base64.urlsafe_b64encode(rng.randbytes(32)).decode().rstrip("="),
        "base64_24": lambda: base64.b64encode(rng.randbytes(24)).decode(),
        "base64_32": lambda: base64.b64encode(rng.randbytes(32)).decode(),
    }
    refused = {name: [s for s in (make() for _ in range(300)) if strength.problems(s)]
               for name, make in made.items()}  # fmt: skip
    assert not any(refused.values()), refused
    for n in range(20):
        assert course_secret.load(course_secret.create(tmp_path / f"s{n}", term="T"))
    assert course_secret.load(_file(tmp_path, secrets.token_hex(32)))  # the one-line format


def test_an_edition_label_checks_no_guess_of_the_secret(tmp_path):
    """The attack: with ``label = HMAC(secret, "label" NUL lesson)[:8]`` in every notebook, a
    list of likely secrets was checked offline. Now the label comes from the file's public
    random edition id: two files that differ only in their secret label alike, so the label
    says nothing of it, and a search over guesses, the true secret among them, finds nothing."""
    strong = secrets.token_hex(32)
    text = "secret: {}\nterm: Fall-2026\nedition: 0a1b2c3d4e5f6071\n"
    one = course_secret.load(_file(tmp_path, text.format(strong), "one"))
    other = course_secret.load(_file(tmp_path, text.format(secrets.token_hex(32)), "other"))
    for lesson in LESSONS:
        if (edition := lesson_of(lesson).edition) is not None:
            assert edition.label(one) == edition.label(other), lesson
    edition = lesson_of("05_choosing_the_numbers").edition
    seen = edition.label(one).split()[2]  # "class edition XXXXXXXX (Fall-2026)"
    guesses = [*GUESSABLE, strong, *(secrets.token_hex(32) for _ in range(1000))]
    key = "label\0" + edition.lesson
    start = time.perf_counter()
    found = [
        g for g in guesses if hmac.new(g.encode(), key.encode(), "sha256").hexdigest()[:8] == seen
    ]
    assert not found and time.perf_counter() - start < 5
    assert edition.label(one) != edition.label(
        course_secret.load(course_secret.create(tmp_path / "third", term="Fall-2026"))
    )  # another file, another id: another label (a notebook on another edition is flagged)
    # a one-line secret file (written before terms) keeps its label: its class regrades unflagged
    legacy = course_secret.load(_file(tmp_path, strong, "legacy"))
    old = hmac.new(strong.encode(), key.encode(), hashlib.sha256).hexdigest()[:8]
    assert edition.label(legacy) == f"class edition {old}" and legacy == strong.encode()


def test_a_term_asks_new_numbers_with_the_same_secret(tmp_path):
    """The attack: a secret reused next term asked the same numbers (last term's answers
    circulate). The term enters every draw: the same secret with another term draws other
    numbers for the lessons together and other hidden inputs; without a term, the old draw."""
    strong = secrets.token_hex(32)
    keys = {term: course_secret.load(_file(tmp_path, f"secret: {strong}\nterm: {term}\n", term))
            for term in ("Fall-2026", "Spring-2027")}  # fmt: skip
    fall, spring = keys["Fall-2026"], keys["Spring-2027"]
    # lesson 1's draw measures target practice's card (a minute on a busy machine): the others
    lessons = [lesson_of(x).edition for x in LESSONS[1:] if lesson_of(x).edition is not None]
    assert [e.draw(fall) for e in lessons] != [e.draw(spring) for e in lessons]
    assert course_secret.seed(fall, "l", "i", "ann", "x") != course_secret.seed(
        spring, "l", "i", "ann", "x"
    )
    assert [e.draw(fall) for e in lessons] == [e.draw(keys["Fall-2026"]) for e in lessons]
    plain = course_secret.load(_file(tmp_path, f"secret: {strong}\n", "plain"))
    assert [e.draw(plain) for e in lessons] == [e.draw(strong.encode()) for e in lessons]
    assert fall.term == "Fall-2026" and lessons[0].label(fall).endswith(" (Fall-2026)")


def test_a_workers_lesson_keys_label_and_draw_as_the_secret_file(tmp_path):
    """A Dask worker holds a lesson's key, never the secret file: its notebooks' label (from the
    file's public edition id and its term), numbers and hidden inputs are the file's own. Before
    lesson keys carried the label, a worker labelled from the lesson's key, and every notebook it
    graded read as another edition's."""
    key = course_secret.load(course_secret.create(tmp_path / "secret", term="Fall-2026"))
    lesson = "05_choosing_the_numbers"
    edition = lesson_of(lesson).edition
    keys = course_secret.LessonKeys.of(key, [lesson])
    assert edition.label(keys) == edition.label(key) and edition.label(key).endswith("(Fall-2026)")
    assert edition.draw(keys) == edition.draw(key)
    assert course_secret.seed(keys, lesson, "q1", "ann", "x") == course_secret.seed(
        key, lesson, "q1", "ann", "x"
    )
    with pytest.raises(GradingError, match=f"no key of lesson {lesson}"):
        edition.label(course_secret.LessonKeys.of(key, ["02_padding_and_packing"]))


def test_the_command_writes_a_term_and_refuses_what_it_cannot_use(tmp_path, capsys):
    path = tmp_path / "keys" / "course_secret"
    assert main(["secret", str(path), "--term", "Fall-2026"]) == 0
    key = course_secret.load(path)
    assert key.term == "Fall-2026" and len(key.edition_id) == 16 and len(key) == 32
    assert path.stat().st_mode & 0o777 == 0o600
    assert main(["secret", str(path), "--term", "Fall-2026"]) == 2  # never overwritten
    assert main(["secret", str(tmp_path / "x"), "--term", "Fall/2026"]) == 2
    assert "--term 'Fall/2026'" in capsys.readouterr().err
    bad = {
        "secret: 1\nsecret: 2\n": "each once",
        "password: x\n": "is not one of secret: ..., term: ..., edition: ...",
        "term: Fall-2026\n": "has no `secret: ...` line",
        f"secret: {SECRET.decode()}\nterm: ../x\n": "term '../x' is not",
        f"secret: {SECRET.decode()}\nedition: 12\n": "edition is not 16 hex digits",
    }
    for text, words in bad.items():
        with pytest.raises(GradingError, match=words.replace("(", r"\(").replace("`", "`")):
            course_secret.load(_file(tmp_path, text))
