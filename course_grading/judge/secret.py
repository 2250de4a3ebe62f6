"""The course secret: hidden inputs that no public file predicts.

A graded function is called on inputs drawn for each student (``items.Evidence.rng``). Drawn
from public facts alone (the lesson, the item, the student's name), anyone holding the
repository can compute them, and a second submission can return a table for exactly those
inputs. With a course secret, the seed is

    HMAC-SHA256(lesson key, item NUL student NUL SHA-256(answer cell as submitted))
    lesson key = HMAC-SHA256(secret, "lesson" NUL lesson)

so the same submission always gets the same inputs (a re-grade stays byte-identical), a
different answer cell gets different ones (a table of last time's inputs answers nothing), and
nobody without the secret can compute them. The secret lives outside the repository, in a file
only the grader can read: ``python -m course_grading ... --secret-file PATH``, or
``SHAPES_COURSE_SECRET_FILE`` for ``nbgrader autograde`` (the course's ``nbgrader_config.py``
and ``make classroom`` set it). ``python -m course_grading secret PATH`` makes one.

Everything one lesson draws from the secret (these seeds, and its class edition's numbers and
label: ``editions.py``) is derived from that lesson's key alone, so a Dask worker grading a
lesson is sent its key (:class:`LessonKeys`), never the secret (``cluster.py``).

Without a secret the grader still works ("practice grading"): the seed is SHA-256 of the public
facts, and the report's first line says so.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from course_grading.errors import GradingError

ENVIRONMENT = "SHAPES_COURSE_SECRET_FILE"
MIN_BYTES = 16  # a secret shorter than this is refused: it could be guessed
PRACTICE = (
    "practice grading: no course secret was given, so the hidden inputs follow from public "
    "files (the lesson, the item and the student's name); pass --secret-file for real grades"
)


@dataclass(frozen=True)
class LessonKeys:
    """The keys of some lessons (:func:`lesson_key`), in place of the course secret: what a Dask
    worker grading those lessons is given. Wherever a secret is taken, these are too."""

    keys: tuple[tuple[str, bytes], ...] = field(repr=False)

    @classmethod
    def of(cls, secret: bytes, lessons: Iterable[str]) -> LessonKeys:
        """The keys of ``lessons``.

        Args:
            secret: the course secret.
            lessons: the lessons.

        Returns:
            Their keys, and nothing else of the secret.
        """
        return cls(tuple((lesson, lesson_key(secret, lesson)) for lesson in sorted(set(lessons))))

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


def lesson_key(secret: bytes | LessonKeys, lesson: str) -> bytes:
    """The key everything ``lesson`` draws from the secret is derived from (module docstring).

    Args:
        secret: the course secret, or lesson keys holding ``lesson``'s.
        lesson: the lesson.

    Returns:
        ``HMAC-SHA256(secret, "lesson" NUL lesson)``.

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
        secret: the course secret (or the lesson's key: :class:`LessonKeys`), or ``None`` for
            practice grading (public facts only).
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


def load(path: str | os.PathLike | None) -> bytes | None:
    """The secret in ``path`` (surrounding whitespace dropped).

    Args:
        path: the secret's file (``--secret-file``); ``None``: no secret.

    Returns:
        The secret's bytes, or ``None`` when ``path`` is.

    Raises:
        GradingError: the file cannot be read, is shorter than ``MIN_BYTES``, or others can
            read it (its mode lets the group or everyone read).
    """
    if path is None:
        return None
    file = Path(path)
    try:
        data = file.read_bytes().strip()
        mode = file.stat().st_mode
    except OSError as err:
        raise GradingError(f"cannot read the course secret {file}: {err.strerror}") from None
    if len(data) < MIN_BYTES:
        raise GradingError(
            f"the course secret {file} holds {len(data)} bytes, fewer than {MIN_BYTES}: make "
            "one with `python -m course_grading secret PATH`"
        )
    if mode & 0o044:
        raise GradingError(
            f"the course secret {file} can be read by others (mode {mode & 0o777:o}): "
            f"chmod 600 {file}"
        )
    return data


def from_environment() -> bytes | None:
    """The secret named by ``SHAPES_COURSE_SECRET_FILE``.

    Returns:
        The secret's bytes, or ``None`` when the variable is unset or empty.

    Raises:
        GradingError: as :func:`load`, for the file it names.
    """
    return load(os.environ.get(ENVIRONMENT) or None)


def create(path: str | os.PathLike) -> Path:
    """Write a new 32-byte secret (hex) to ``path``, readable by its owner only.

    Args:
        path: where to write it; its folder is made if needed.

    Returns:
        The file written (mode 600).

    Raises:
        GradingError: ``path`` exists already (a secret is never overwritten: the grades it
            gave would no longer re-grade the same).
    """
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise GradingError(f"{file} exists already: a course secret is never overwritten") from None
    with os.fdopen(descriptor, "w") as out:
        out.write(secrets.token_hex(32) + "\n")
    return file
