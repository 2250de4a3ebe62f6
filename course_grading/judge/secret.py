"""The course secret: hidden inputs and class editions that no public file predicts.

A graded function is called on inputs drawn for each student (``items.Evidence.rng``). Drawn
from public facts alone (the lesson, the item, the student's name), anyone holding the
repository can compute them, and a second submission can return a table for exactly those
inputs. With a course secret, the seed is

    HMAC-SHA256(lesson key, item NUL student NUL SHA-256(answer cell as submitted))
    lesson key = HMAC-SHA256(key, "lesson" NUL lesson)

where the key is the class's (below: the secret, or the secret and the term)

so the same submission always gets the same inputs (a re-grade stays byte-identical), a
different answer cell gets different ones (a table of last time's inputs answers nothing), and
nobody without the secret can compute them. The class's edition numbers are drawn with the same
key (``editions.py``).

Everything one lesson draws from the secret (these seeds, and its class edition's numbers:
``editions.py``) is derived from that lesson's key alone, so a Dask worker grading a lesson is
sent its key (:class:`LessonKeys`, with the lesson's public edition label), never the secret
(``cluster.py``).

**The secret file** (``python -m course_grading secret PATH [--term NAME]`` writes one, mode 600,
never over an existing file)::

    # A Shapes course secret: ...
    secret: <64 hex digits: 256 random bits>
    term: Fall-2026
    edition: <16 hex digits: public, random>

``secret`` must be what a generator writes, 128 bits at least (``strength.py``: a secret a
person made up is found by trying likely ones, and students see a function of it, their
edition's numbers). ``term`` (optional: a term or class name) enters every draw, so one secret
serves several terms with new numbers each: the **key** is HMAC-SHA256(secret, "term" NUL
term), or the secret itself without a term. ``edition`` names the file's class editions to
students (``Edition.label``): it is random and says nothing of the secret, so the label in a
student's notebook checks no guess of it. A file of one line is the secret alone (the format
this command wrote before terms), read as a secret without term and edition.

The file lives outside the repository, readable by its owner only: ``python -m course_grading
... --secret-file PATH``, or ``SHAPES_COURSE_SECRET_FILE`` for ``nbgrader autograde`` (the
course's ``nbgrader_config.py`` and ``make classroom`` set it). Without a secret the grader
still works ("practice grading"): the seed is SHA-256 of the public facts, and the report's
first line says so.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.judge import strength

ENVIRONMENT = "SHAPES_COURSE_SECRET_FILE"
PRACTICE = (
    "practice grading: no course secret was given, so the hidden inputs follow from public "
    "files (the lesson, the item and the student's name); pass --secret-file for real grades"
)
FIELDS = ("secret", "term", "edition")
TERM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,39}")
_EDITION = re.compile(r"[0-9a-f]{16}")
HEADER = (
    "# A Shapes course secret (python -m course_grading secret): class editions and hidden\n"
    "# inputs are drawn with it. Keep it private (mode 600), never in a repository; release and\n"
    "# grade with --secret-file THIS_FILE. For another term, copy it and change the term line.\n"
)


class ClassKey(bytes):
    """The key one class's draws use (bytes, as HMAC takes them), with its file's public fields.

    ``term`` is the term the key was made for (``""``: none); ``edition_id`` the file's public
    random name of its editions (``""``: a file without one, or a key made in code).
    """

    term: str
    edition_id: str

    def __new__(cls, key: bytes, term: str = "", edition_id: str = "") -> ClassKey:
        """A key with its public fields.

        Args:
            key: the key's bytes.
            term: the term it was made for.
            edition_id: the public name of its editions.

        Returns:
            The key.
        """
        made = super().__new__(cls, key)
        made.term, made.edition_id = term, edition_id
        return made

    def __reduce__(self) -> tuple:
        """Pickled with its fields (a job sent to a cluster worker keeps them)."""
        return (ClassKey, (bytes(self), self.term, self.edition_id))


def class_key(secret: bytes, term: str = "", edition_id: str = "") -> ClassKey:
    """The key a secret and a term give (module docstring).

    Args:
        secret: the secret as its file holds it.
        term: the term or class name (``""``: none, the secret is the key).
        edition_id: the file's public name of its editions.

    Returns:
        HMAC-SHA256(secret, "term" NUL term), or the secret itself without a term.
    """
    if not term:
        return ClassKey(secret, "", edition_id)
    key = hmac.new(secret, b"term\0" + term.encode(), hashlib.sha256).digest()
    return ClassKey(key, term, edition_id)


@dataclass(frozen=True)
class LessonKeys:
    """The keys of some lessons (:func:`lesson_key`), in place of the class's key: what a Dask
    worker grading those lessons is given. Wherever a key is taken, these are too. Beside each
    key, its lesson's public edition label (:func:`label_digest`, which an old one-line secret
    file draws from the whole key) and the term: what a student's notebook shows anyway."""

    keys: tuple[tuple[str, bytes], ...] = field(repr=False)
    labels: tuple[tuple[str, str], ...] = ()
    term: str = ""

    @classmethod
    def of(cls, secret: bytes, lessons: Iterable[str]) -> LessonKeys:
        """The keys of ``lessons``.

        Args:
            secret: the class's key (:func:`load`).
            lessons: the lessons.

        Returns:
            Their keys and labels, and nothing else of the secret.
        """
        names = sorted(set(lessons))
        return cls(
            tuple((lesson, lesson_key(secret, lesson)) for lesson in names),
            tuple((lesson, label_digest(secret, lesson)) for lesson in names),
            getattr(secret, "term", ""),
        )

    def key(self, lesson: str) -> bytes:
        """``lesson``'s key.

        Args:
            lesson: a lesson.

        Returns:
            Its key.

        Raises:
            GradingError: no key of ``lesson`` is held (a job sent with another lesson's keys).
        """
        for name, key in self.keys:
            if name == lesson:
                return key
        raise GradingError(f"no key of lesson {lesson} was sent with this job")


def label_digest(secret: bytes | LessonKeys, lesson: str) -> str:
    """The 8 hex digits that name ``lesson``'s class edition to students (``Edition.label``).

    Args:
        secret: the class's key, or lesson keys holding ``lesson``'s.
        lesson: the lesson.

    Returns:
        From the file's public random edition id, the term and the lesson, never from the
        secret, so a student's label checks no guess of it; for a key without an id (a one-line
        secret file, a key made in code), HMAC-SHA256(key, "label" NUL lesson), as before ids.

    Raises:
        GradingError: ``secret`` is lesson keys without ``lesson``'s.
    """
    if isinstance(secret, LessonKeys):
        secret.key(lesson)  # the same error for a lesson not sent
        return dict(secret.labels)[lesson]
    edition_id, term = getattr(secret, "edition_id", ""), getattr(secret, "term", "")
    if edition_id:
        digest = hashlib.sha256(f"label\0{edition_id}\0{term}\0{lesson}".encode()).hexdigest()
    else:
        digest = hmac.new(secret, f"label\0{lesson}".encode(), hashlib.sha256).hexdigest()
    return digest[:8]


def lesson_key(secret: bytes | LessonKeys, lesson: str) -> bytes:
    """The key everything ``lesson`` draws from the secret is derived from (module docstring).

    Args:
        secret: the class's key (:func:`load`), or lesson keys holding ``lesson``'s.
        lesson: the lesson.

    Returns:
        ``HMAC-SHA256(key, "lesson" NUL lesson)``.

    Raises:
        GradingError: ``secret`` is lesson keys without ``lesson``'s.
    """
    if isinstance(secret, LessonKeys):
        return secret.key(lesson)
    return hmac.new(secret, b"lesson\0" + lesson.encode(), hashlib.sha256).digest()


def answer_digest(source: str | None) -> str:
    """SHA-256 of the answer cell's source as submitted.

    Args:
        source: the answer cell's source; ``None`` when the notebook has no such cell.

    Returns:
        The digest in hex (that of ``""`` when there is no cell).
    """
    return hashlib.sha256((source or "").encode("utf-8", "surrogatepass")).hexdigest()


def seed(
    secret: bytes | LessonKeys | None, lesson: str, grade_id: str, student: str, answer: str | None
) -> int:
    """The 32-bit seed of one item's hidden inputs for one submission (module docstring).

    Args:
        secret: the class's key (:func:`load`; or the lesson's key: :class:`LessonKeys`), or
            ``None`` for practice grading (public facts only).
        lesson: the lesson.
        grade_id: the item.
        student: the student.
        answer: the answer cell's source as submitted (not used without a secret).

    Returns:
        The seed.
    """
    if secret is None:
        digest = hashlib.sha256(f"{lesson}\0{grade_id}\0{student}".encode()).digest()
    else:
        message = f"{grade_id}\0{student}\0{answer_digest(answer)}".encode()
        digest = hmac.new(lesson_key(secret, lesson), message, hashlib.sha256).digest()
    return int.from_bytes(digest[:4], "big")


def parse(text: str, where: str) -> dict[str, str]:
    """A secret file's fields (module docstring): ``secret``, ``term`` and ``edition``.

    Args:
        text: the file's text.
        where: the file, for messages.

    Returns:
        Each field's value (``""`` when absent).

    Raises:
        GradingError: a line that is no ``name: value`` of a known field, a field given twice,
            no secret, a term or edition id of the wrong form.
    """
    lines = [ln for ln in (raw.strip() for raw in text.splitlines()) if ln and ln[0] != "#"]
    if len(lines) == 1 and ":" not in lines[0]:
        return {"secret": lines[0], "term": "", "edition": ""}  # the one-line format
    fields: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or name.strip() not in FIELDS or name.strip() in fields:
            raise GradingError(
                f"the course secret {where}: {line[:40]!r} is not one of "
                f"{', '.join(n + ': ...' for n in FIELDS)} (each once)"
            )
        fields[name.strip()] = value.strip()
    if not fields.get("secret"):
        raise GradingError(f"the course secret {where} has no `secret: ...` line")
    if fields.get("term") and not TERM.fullmatch(fields["term"]):
        raise GradingError(f"the course secret {where}: term {fields['term'][:50]!r} is not "
                           "letters, digits, ' ._-', at most 40 (e.g. Fall-2026)")  # fmt: skip
    if fields.get("edition") and not _EDITION.fullmatch(fields["edition"]):
        raise GradingError(f"the course secret {where}: edition is not 16 hex digits")
    return {name: fields.get(name, "") for name in FIELDS}


def load(path: str | os.PathLike | None) -> ClassKey | None:
    """The class's key from the secret file ``path`` (module docstring).

    Args:
        path: the secret's file (``--secret-file``); ``None``: no secret.

    Returns:
        The key (its term and edition id beside it), or ``None`` when ``path`` is.

    Raises:
        GradingError: the file cannot be read, others can read it (its mode lets the group or
            everyone read), it is malformed, or its secret is weak (fewer than 128 bits by a
            conservative estimate, or a pattern only a person writes).
    """
    if path is None:
        return None
    file = Path(path)
    try:
        text = file.read_bytes().decode("utf-8", "replace")
        mode = file.stat().st_mode
    except OSError as err:
        raise GradingError(f"cannot read the course secret {file}: {err.strerror}") from None
    if mode & 0o044:
        raise GradingError(
            f"the course secret {file} can be read by others (mode {mode & 0o777:o}): "
            f"chmod 600 {file}"
        )
    fields = parse(text, str(file))
    if weak := strength.problems(fields["secret"]):
        raise GradingError(
            f"the course secret {file} could be guessed: {'; '.join(weak)}. Make one with "
            "`python -m course_grading secret PATH` (256 random bits)"
        )
    return class_key(fields["secret"].encode(), fields["term"], fields["edition"])


def from_environment() -> ClassKey | None:
    """The key from the file ``SHAPES_COURSE_SECRET_FILE`` names.

    Returns:
        The key, or ``None`` when the variable is unset or empty.

    Raises:
        GradingError: as :func:`load`, for the file it names.
    """
    return load(os.environ.get(ENVIRONMENT) or None)


def create(path: str | os.PathLike, term: str = "") -> Path:
    """Write a new secret file to ``path``: 256 random bits, ``term``, a random edition id.

    Args:
        path: where to write it; its folder is made if needed.
        term: the term or class name the draws are for (``""``: none).

    Returns:
        The file written (mode 600).

    Raises:
        GradingError: ``path`` exists already (a secret is never overwritten: the grades it
            gave would no longer re-grade the same), or ``term`` is not of the allowed form.
    """
    if term and not TERM.fullmatch(term):
        raise GradingError(f"--term {term[:50]!r}: letters, digits, ' ._-', at most 40")
    value = secrets.token_hex(32)
    while strength.problems(value):  # a fluke no generator should keep (under 1e-6)
        value = secrets.token_hex(32)
    text = f"{HEADER}secret: {value}\nterm: {term}\nedition: {secrets.token_hex(8)}\n"
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise GradingError(f"{file} exists already: a course secret is never overwritten") from None
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
    return file


def secret_main(argv: list[str]) -> int:
    """``python -m course_grading secret PATH [--term NAME]``: :func:`create`, and say so.

    Args:
        argv: the arguments after ``secret``.

    Returns:
        0, once the secret is written.

    Raises:
        GradingError: ``PATH`` exists already, or the term is not of the allowed form.
    """
    parser = argparse.ArgumentParser(
        prog="python -m course_grading secret",
        description="Make a course secret (256 random bits): class editions and hidden inputs "
        "drawn with it follow from no public file. Keep it where students cannot read it, and "
        f"release and grade with --secret-file PATH (or ${ENVIRONMENT}=PATH for nbgrader).",
    )
    parser.add_argument("path", type=Path, help="where to write it (must not exist)")
    parser.add_argument(
        "--term",
        default="",
        help="the term or class name (e.g. Fall-2026): it enters every draw, so a copy of the "
        "file with another term asks new numbers",
    )
    args = parser.parse_args(argv)
    made = create(args.path, term=args.term)
    print(
        f"wrote a course secret to {made} (mode 600); release and grade with --secret-file {made}"
    )
    return 0
