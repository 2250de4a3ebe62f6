"""The course secret in the classroom: the instructor's own file, never one of its own.

The class's edition numbers and the hidden inputs are drawn from the course secret
(``course_grading/judge/secret.py``). A class is released in one place and may be graded in
another (the hub's formgrader, ``run.py autograde``, ``make grade`` on a copy of the
submissions, a regrade next month), and every one of them must draw with the same secret, or
the class is graded on numbers it was never asked. So the classroom takes the instructor's
secret file, the one ``make release`` and ``make grade`` take (``run.py start --secret-file``),
and makes none of its own: without one it refuses to start and says how to make one.

The instructor's server runs as the instructor's account, which may not read the file (root's,
in root's home), so ``start`` copies it, byte for byte, to ``~instructor/.shapes-secret/
course_secret`` (mode 600 in a 700 folder, the instructor's), the file the hub and ``run.py
autograde`` name in ``SHAPES_COURSE_SECRET_FILE``. The copy is only ever a copy:

- the instructor's file must live outside the state folder, which ``clean`` removes;
- a start whose file differs from the copy already there is refused: the lessons were released
  with that one (a classroom from before ``--secret-file`` made its own, and this is the only
  place it is);
- ``clean`` removes a copy only when the instructor's file still holds the same secret, and
  otherwise stops before removing anything, saying where the only copy is.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.judge import secret

#: Where the instructor's account finds its copy, below its home.
COPY = Path(".shapes-secret") / "course_secret"
ENVIRONMENT = "SHAPES_COURSE_SECRET_FILE"
HOW_TO_MAKE = (
    "make one once a term and keep it outside the repository and the state folder: "
    "`.venv/bin/python -m course_grading secret ~/shapes-secret --term Fall-2026` (= make secret "
    "SECRET_FILE=~/shapes-secret COURSE_TERM=Fall-2026), then release, grade and start the "
    "classroom with it: `make classroom SECRET_FILE=~/shapes-secret`"
)


def copy_path(instructor: str) -> Path:
    """The instructor's copy of the secret: ``~instructor/.shapes-secret/course_secret``."""
    return Path(pwd.getpwnam(instructor).pw_dir) / COPY


def _fields(path: Path) -> dict[str, str]:
    return secret.parse(path.read_bytes().decode("utf-8", "replace"), str(path))


def check(secret_file: Path | None, state: Path, instructor: str) -> str:
    """Why ``secret_file`` cannot be this classroom's secret (``""``: it can).

    Args:
        secret_file: ``--secret-file`` (or ``$SHAPES_COURSE_SECRET_FILE``); ``None``: not given.
        state: the classroom's state folder.
        instructor: the instructor's account (its copy, if one exists, is compared).
    """
    if secret_file is None:
        return f"the classroom needs your course secret (--secret-file PATH): {HOW_TO_MAKE}"
    path = Path(secret_file).expanduser().resolve()
    if path == state.resolve() or state.resolve() in path.parents:
        return (
            f"the course secret {path} is inside the state folder {state}, which `clean` "
            "removes: keep it outside (mv it, chmod 600, and give the new path)"
        )
    try:
        secret.load(path)  # readable, private, well formed, strong: what the grader requires
        mine = _fields(path)
    except GradingError as err:
        return str(err)
    try:
        copy = copy_path(instructor)
    except KeyError:
        return ""  # a demo instructor not made yet: no copy either
    if copy.is_file() and not copy.is_symlink():
        try:
            theirs = _fields(copy)
        except (OSError, GradingError):
            theirs = {}
        if theirs != mine:
            return (
                f"this classroom's lessons were released with another course secret, "
                f"{copy}: start with that one (copy it out first: cp {copy} ~/shapes-secret), "
                f"or, to change the secret anyway (the released lessons' numbers no longer "
                f"grade), delete {copy} first"
            )
    return ""


def install(secret_file: Path, instructor: str) -> Path:
    """Copy the instructor's secret to their account's copy (module docstring); the copy.

    Args:
        secret_file: the instructor's file (:func:`check` passed it).
        instructor: the account whose servers and commands grade.

    Returns:
        ``~instructor/.shapes-secret/course_secret``, the instructor's, mode 600.
    """
    account = pwd.getpwnam(instructor)
    folder = Path(account.pw_dir) / COPY.parent
    if folder.is_symlink():
        folder.unlink()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chown(folder, account.pw_uid, account.pw_gid, follow_symlinks=False)
    folder.chmod(0o700)
    text = Path(secret_file).expanduser().read_bytes()
    path, temporary = folder / COPY.name, folder / f".{COPY.name}.{os.getpid()}"
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(text)
    os.chown(temporary, account.pw_uid, account.pw_gid, follow_symlinks=False)
    os.replace(temporary, path)
    return path


def only_copy(settings: dict) -> str:
    """Why ``clean`` must keep the instructor's home (``""``: the secret is safe elsewhere).

    Args:
        settings: ``classroom.json``.

    Returns:
        A message naming the copy and what to do, when the copy in the instructor's home is the
        only one: a classroom from before ``--secret-file`` (it made its own secret), or the
        instructor's file gone or changed since.
    """
    try:
        copy = copy_path(settings["instructor"])
    except KeyError:
        return ""
    if not copy.is_file():
        return ""
    original = settings.get("secret_file")
    try:
        same = bool(original) and _fields(Path(original)) == _fields(copy)
    except (OSError, GradingError):  # gone, unreadable or malformed: it is not the same
        same = False
    if same:
        return ""
    return (
        f"{copy} is the only copy of the course secret this class was released and graded "
        f"with, and `clean` would remove it with the instructor's home: copy it out first "
        f"(cp {copy} ~/shapes-secret), or delete it yourself if the class is over"
    )
