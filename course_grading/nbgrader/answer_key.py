"""The answer key of one's own class edition: ``python -m course_grading key``.

    python -m course_grading key --secret-file S --out class-key [--lessons L ...]
    make key SECRET_FILE=S [KEY_OUT=class-key]

A class released with the course secret is asked its own numbers (``judge/editions.py``), so
``solutions/`` (the self-study edition's answers) is not its key. The key is written into a new
folder, private to its owner (mode 700; the answers are as secret as the solutions):

- ``<lesson>/<lesson>.ipynb``: each lesson's instructor notebook rendered with the class's
  numbers, as the class's release and the grader render it (``steps.render_lesson``): the
  solutions, the written answers' rubrics and the questions as the class reads them;
- ``answers.md``: the edition-bound answers in one table per lesson (item, value, this
  edition's answer as its form reads it, how it is compared, the self-study answer beside it),
  with the numbers the edition asks them with.

The grader, given the same secret file, expects exactly these answers
(``tests/grading/test_class_key.py`` grades the key's answers to full marks). Without a secret
there is nothing to render: the self-study edition's key is ``solutions/`` itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import nbformat

from course_grading.errors import GradingError
from course_grading.judge import secret as course_secret
from course_grading.judge.items.model import Lesson, lesson_of
from course_grading.nbgrader.course import IGNORED, SOURCE_DIR, find_lessons
from course_grading.nbgrader.steps import render_lesson
from course_lib.forms import Form, Sig

ANSWERS = "answers.md"


@dataclass(frozen=True)
class Answer:
    """One edition-bound value: its item, this edition's answer and the self-study one."""

    lesson: str
    item: str  # the test cell's grade id
    value: str  # the value's name, as the answer cell sets it
    answer: str  # this edition's right answer, as a student would type it
    compared: str  # how an answer is compared ("exact", "right to 3 significant figures")
    self_study: str  # the self-study edition's answer, written the same way


def _shown(value: object, form: Form | None = None) -> str:
    """A right answer as a student would type it: a value compared to significant figures at
    those figures, other floats to 12 (what ``Exact`` compares), members of a set sorted."""
    if isinstance(form, Sig):
        return form.canonical(value)
    if type(value) is float:
        return f"{value:.12g}"
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}" if value.denominator != 1 else str(value)
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_shown(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_shown(v) for v in value)) + "}"
    return repr(value).replace("|", "\\|")


def edition_answers(lesson: str, key: bytes) -> list[Answer]:
    """The answers of ``lesson``'s edition-bound items in the edition ``key`` draws.

    Args:
        lesson: the lesson's folder name.
        key: the class's key (``secret.load``).

    Returns:
        One row per value of each edition-bound item (none for a lesson without an edition).
    """
    registry: Lesson | None = lesson_of(lesson)
    if registry is None or registry.edition is None:
        return []
    numbers = registry.edition.draw(key)
    rows = []
    for grade_id, item in sorted(registry.items.items()):
        if item.edition is None:
            continue
        drawn, public = item.expected_values(numbers), item.expected_values()
        for name, form in item.forms.items():
            answer, public_answer = _shown(drawn[name], form), _shown(public[name], form)
            rows.append(Answer(lesson, grade_id, name, answer, form.needs, public_answer))
    return rows


def answers_page(lessons: list[str], key: course_secret.ClassKey, secret_file: Path) -> str:
    """``answers.md``: the edition-bound answers of ``lessons`` (module docstring).

    Args:
        lessons: the lessons of the key.
        key: the class's key.
        secret_file: the secret's file, named on the page.

    Returns:
        The page's Markdown.
    """
    term = f" (term {key.term})" if key.term else " (no term)"
    lines = [
        "# Answer key of your class edition",
        "",
        f"Made by `python -m course_grading key` from the course secret `{secret_file}`{term}. "
        "Keep it from students. Each lesson's notebook beside this page is the instructor's "
        "version with your class's numbers; the grader, given the same secret file, expects "
        "these answers. The table lists the answers an edition changes.",
    ]
    for lesson in lessons:
        registry = lesson_of(lesson)
        rows = edition_answers(lesson, key)
        if registry is None or registry.edition is None or not rows:
            continue
        numbers = registry.edition.draw(key)
        asked = ", ".join(f"`{name}` = {value}" for name, value in sorted(numbers.items()))
        lines += [
            "",
            f"## {lesson}: {registry.edition.label(key)}",
            "",
            f"Asked with {asked}.",
            "",
            "| item | value | your class's answer | compared | self-study answer |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{r.item}` | `{r.value}` | **{r.answer}** | {r.compared} | {r.self_study} |"
            for r in rows
        ]
    return "\n".join(lines) + "\n"


def _new_private_folder(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise GradingError(
            f"{out} is not an empty folder: the key is written only into a new one (nothing "
            "there is overwritten)"
        )
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    out.chmod(0o700)


def write_key(
    root: Path, secret_file: Path, out: Path, lessons: list[str] | None = None
) -> list[Path]:
    """Write the class edition's answer key into the new folder ``out`` (module docstring).

    Args:
        root: the course root (``solutions/``).
        secret_file: the course secret's file.
        out: a missing or empty folder.
        lessons: only these lessons (all when ``None`` or empty).

    Returns:
        The files written.

    Raises:
        GradingError: the secret cannot be used, a lesson is unknown, ``out`` holds anything, or
            a template does not render.
    """
    key = course_secret.load(secret_file)
    assert key is not None
    found = find_lessons(root)
    if unknown := sorted(set(lessons or []) - set(found)):
        raise GradingError(f"no lesson {', '.join(unknown)} in {root / SOURCE_DIR}")
    chosen = [lesson for lesson in found if not lessons or lesson in lessons]
    _new_private_folder(out)
    written = []
    for lesson in chosen:
        source = root / SOURCE_DIR / lesson
        shutil.copytree(source, out / lesson, ignore=shutil.ignore_patterns(*IGNORED))
        notebook = out / lesson / f"{lesson}.ipynb"
        nb = nbformat.read(str(notebook), as_version=nbformat.NO_CONVERT)
        render_lesson(nb, lesson, key)
        nbformat.write(nb, str(notebook))
        written += sorted(p for p in (out / lesson).rglob("*") if p.is_file())
    (out / ANSWERS).write_text(answers_page(chosen, key, secret_file), encoding="utf-8")
    written.append(out / ANSWERS)
    for path in [*written, *(p for p in out.rglob("*") if p.is_dir())]:
        path.chmod(0o700 if path.is_dir() else 0o600)
    return written


def build_parser(root: Path) -> argparse.ArgumentParser:
    """The ``key`` command's options.

    Args:
        root: the default course root.

    Returns:
        The parser.
    """
    parser = argparse.ArgumentParser(
        prog="python -m course_grading key",
        description="Write the answer key of your class's edition (the numbers your course "
        "secret draws): each lesson's solutions rendered with them, and a table of the answers "
        "an edition changes. Into a new folder, readable by you only.",
    )
    parser.add_argument(
        "--secret-file",
        type=Path,
        default=os.environ.get(course_secret.ENVIRONMENT) or None,
        help="the course secret you release and grade with (default: "
        f"${course_secret.ENVIRONMENT})",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("class-key"), help="a new folder (class-key)"
    )
    parser.add_argument("--lessons", nargs="+", help="only these lessons (default: all)")
    parser.add_argument("--root", type=Path, default=root, help="course root (this checkout)")
    return parser


def key_main(argv: list[str], root: Path) -> int:
    """``python -m course_grading key``: :func:`write_key`, and say where.

    Args:
        argv: the arguments after ``key``.
        root: the default course root.

    Returns:
        0 once the key is written.

    Raises:
        GradingError: as :func:`write_key`; no secret given.
    """
    args = build_parser(root).parse_args(argv)
    if args.secret_file is None:
        raise GradingError(
            "give --secret-file (or SECRET_FILE= to make): a key is for a class edition; the "
            "self-study edition's key is solutions/ itself"
        )
    written = write_key(args.root, args.secret_file, args.out, args.lessons)
    print(
        f"wrote the answer key of your class edition into {args.out} ({len(written)} files, "
        f"mode 600): the table is {args.out / ANSWERS}"
    )
    return 0
