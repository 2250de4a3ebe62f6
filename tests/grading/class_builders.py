"""Building simulated students' submissions from a lesson's student and instructor versions.

Shared by the grading tests (``test_grading.py``, ``test_hostile_class.py``,
``test_feedback_withheld.py``) and ``benchmarks/grading.py``; imported as a sibling module, like
``tests/strategies.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from hashlib import sha256
from pathlib import Path

import nbformat

from course_grading.errors import GradingError
from course_grading.nbgrader import course as wc
from course_grading.sandbox.bwrap import check_available

REPO = Path(__file__).resolve().parents[2]
FIXTURE_ROOT = Path(__file__).resolve().parent / "fixtures"
FIXTURE = "99_fixture"  # the fast fixture lesson: no torch, about a second of kernel time


def sandbox_problem(attempts: int = 3) -> str:
    """Why bubblewrap cannot sandbox here (``check_available``'s one line), or ``""``.

    A check that fails once on a busy machine is tried again (up to ``attempts`` times, a
    second apart): one transient failure at import time once skipped the hostile and cheating
    classes whole, silently passing what they prove."""
    for attempt in range(attempts):
        try:
            check_available()
        except GradingError as err:
            if attempt == attempts - 1:
                return str(err)
            time.sleep(1.0)
        else:
            return ""
    return ""


def fixture_course(tmp: Path) -> tuple[Path, wc.WorkCourse]:
    """``tmp/root``: a course holding the fixture lesson only, with the repository's nbgrader
    settings; and a work course in ``tmp/release`` with its student version generated."""
    root = tmp / "root"
    shutil.copytree(FIXTURE_ROOT / wc.SOURCE_DIR / FIXTURE, root / wc.SOURCE_DIR / FIXTURE)
    shutil.copy(REPO / wc.CONFIG_FILE, root / wc.CONFIG_FILE)
    work = wc.make_work_course(root, tmp / "release")
    wc.generate_assignments(work)
    return root, work


def _solution_code(source: str) -> str:
    """The student's correct answer: the instructor cell without the solution delimiters."""
    return "\n".join(
        line
        for line in source.split("\n")
        if "BEGIN SOLUTION" not in line and "END SOLUTION" not in line
    )


def find(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def filled(release: Path, source: Path) -> nbformat.NotebookNode:
    """The student version with every answer cell answered as the solution does."""
    nb = nbformat.read(str(release), as_version=4)
    src = nbformat.read(str(source), as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            if cell.cell_type == "code":
                cell.source = _solution_code(find(src, meta["grade_id"]).source)
            else:
                cell.source = "Attention scores grow with seq², linear activations with seq."
    return nb


def write(path: Path, nb_or_text) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb_or_text, (str, bytes)):
        data = nb_or_text.encode() if isinstance(nb_or_text, str) else nb_or_text
        path.write_bytes(data)
    else:
        path.write_text(nbformat.writes(nb_or_text) + "\n", encoding="utf-8")


def drop(nb, grade_id):
    nb.cells.remove(find(nb, grade_id))
    return nb


def set_source(nb, grade_id, source):
    find(nb, grade_id).source = source
    return nb


def digest(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``folder``: its SHA-256 and modification time (to prove nothing changed)."""
    return {
        str(p.relative_to(folder)): (
            sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# --- the grader as an ordinary account ------------------------------------------------------

#: The uid (and gid) an ordinary-account grader runs as in the tests: no account, no capability.
ORDINARY_UID = 42421  # not 4242: other checks on a shared machine use that one


def _enterable(folder: Path) -> bool:
    """Whether a uid that is neither the owner nor in the group may pass through ``folder``."""
    return bool(folder.stat().st_mode & 0o001)


def _blocked_ancestor(path: Path) -> Path | None:
    """The highest folder from ``/`` down to ``path`` itself that other users cannot enter (root's
    home, a ``mktemp -d`` folder, a clone made with umask 077), or ``None``."""
    for folder in [*reversed(path.parents), path]:
        if folder != Path("/") and folder.is_dir() and not _enterable(folder):
            return folder
    return None


def _entries_to_show(path: Path) -> list[Path]:
    """What to bind so that ``path`` is reachable: ``path`` itself (the folders above it are then
    made by bwrap, open to all), or, where ``path`` itself is closed, everything in it."""
    return sorted(path.iterdir()) if not _enterable(path) else [path]


def needed_by_the_grader() -> list[Path]:
    """The folders an ordinary-uid run of this checkout reads: the Python installation the venv
    links to, the venv, and the checkout itself (the editable install's sources)."""
    return [Path(p).resolve() for p in (sys.base_prefix, sys.prefix, REPO)]


def unreachable(paths: list[Path] | None = None) -> str:
    """Why another uid cannot be shown ``paths`` (default: :func:`needed_by_the_grader`), or ``""``.

    bwrap can open a closed folder above what is shown, and a closed folder whose entries are
    open; it cannot open files and folders that are closed themselves (a clone made with umask
    077): then the tests that run as another uid are skipped with this reason."""
    for path in paths or needed_by_the_grader():
        for entry in _entries_to_show(path):
            if entry.is_dir() and not _enterable(entry):
                return f"{entry} is closed to other users (umask 077?): no ordinary uid can read it"
    source = REPO / "course_grading" / "__init__.py"
    if not source.stat().st_mode & 0o004:
        return (
            f"{source} is not readable by other users (umask 077?): no ordinary uid can import it"
        )
    return ""


def as_ordinary_user(command: list[str], paths: list[Path] | None = None) -> list[str]:
    """``command`` run as ``ORDINARY_UID``, without capabilities (only as root).

    Where one of ``paths`` (default: :func:`needed_by_the_grader`) lies under a folder other users
    cannot enter (pyenv in root's home, a checkout in a mode-700 folder such as ``/root`` or a
    ``mktemp -d``), a root-started bwrap covers each such folder with an empty tmpfs and shows in
    it, read-only, just the paths needed (the folders between are made open), in a mount
    namespace of the command's own; nothing else changes, and everything the grader then does
    it does as the ordinary uid. Call :func:`unreachable` first: a closed path cannot be opened.
    """
    drop = ["setpriv", f"--reuid={ORDINARY_UID}", f"--regid={ORDINARY_UID}", "--clear-groups"]
    # (path's parts, 0 = tmpfs / 1 = an open folder on the way / 2 = bind)
    mounts: set[tuple[tuple[str, ...], int]] = set()
    for path in paths or needed_by_the_grader():
        blocked = _blocked_ancestor(path)
        if blocked is None:
            continue
        mounts.add((blocked.parts, 0))
        for entry in _entries_to_show(path):
            mounts.add((entry.parts, 2))
            # bwrap makes the folders on the way to a bind closed (0700): make them open first
            between = entry.parent
            while between != blocked and blocked in between.parents:
                mounts.add((between.parts, 1))
                between = between.parent
    if not mounts:
        return [*drop, *command]
    view = ["bwrap", "--dev-bind", "/", "/"]
    # A folder's mount before anything below it (a tuple sorts before its extensions), a tmpfs
    # before a bind at the same place: nothing mounted later covers what is shown.
    for parts, kind in sorted(mounts):
        where = str(Path(*parts))
        view += [["--tmpfs", where], ["--perms", "0755", "--dir", where]][kind] if kind < 2 else []
        view += ["--ro-bind", where, where] if kind == 2 else []
    return [*view, "--", *drop, *command]


def hand_to_ordinary_user(folder: Path) -> None:
    """Make ``folder`` and everything in it the ordinary uid's (``folder`` must lie where
    others may enter, as ``tempfile.mkdtemp()`` makes it: root's own temporary folders do not)."""
    subprocess.run(["chown", "-R", f"{ORDINARY_UID}:{ORDINARY_UID}", str(folder)], check=True)
