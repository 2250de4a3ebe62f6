"""The release: ``solutions/`` -> ``notebooks/``, and the one normal form of a notebook file.

``scripts/release.py`` builds the student versions in a work course (``course.py``), compares
them with the committed ``notebooks/`` or writes them there.

The normal form of a notebook is what the repository's pre-commit hook writes (``nbstripout
--keep-id --extra-keys "metadata.celltoolbar metadata.widgets"``): no outputs, no execution
counts, cell ids and nbgrader metadata kept, ``nbformat``'s JSON layout (indent 1, sorted keys,
final newline). Keeping ids keeps the release deterministic: nbgrader copies them from the
source notebook. ``nbstripout`` is a dev extra, so it is imported only when a notebook is
normalised (the grading command never needs it).
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from course_grading.nbgrader.course import (
    RELEASE_DIR,
    SOURCE_DIR,
    WorkCourse,
    generate_assignments,
    ignored,
    make_work_course,
)
from course_grading.nbgrader.steps import render_editions

#: Metadata removed: ``nbstripout``'s built-in list plus the pre-commit hook's extra keys.
STRIP_KEYS = [
    "metadata.celltoolbar",
    "metadata.signature",
    "metadata.widgets",
    "cell.metadata.collapsed",
    "cell.metadata.ExecuteTime",
    "cell.metadata.execution",
    "cell.metadata.heading_collapsed",
    "cell.metadata.hidden",
    "cell.metadata.scrolled",
]


# --- the normal form ----------------------------------------------------------------------------


def normalise_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Strip outputs, execution counts and volatile metadata in place, as ``nbstripout`` does.

    nbgrader metadata (``metadata.nbgrader``, ``editable``, ``deletable``) and cell ids are kept.
    Needs the dev extra (``nbstripout``).

    Args:
        nb: the notebook to strip; changed in place.

    Returns:
        ``nb`` itself, stripped (what ``nbstripout.strip_output`` returns).
    """
    from nbstripout import strip_output  # dev extra: only the release normalises notebooks

    return strip_output(
        nb, keep_output=False, keep_count=False, keep_id=True, extra_keys=STRIP_KEYS
    )


def notebook_text(nb: nbformat.NotebookNode) -> str:
    """Serialise a notebook the way ``nbformat.write`` does (indent 1, sorted keys, final LF).

    Args:
        nb: the notebook to serialise (not changed).

    Returns:
        Its JSON text, ending in a newline as a file written by ``nbformat.write`` does.
    """
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def normalised_text(path: Path) -> str:
    """Read a notebook file and return its normal form as text.

    The notebook is read without converting its nbformat version, so normalising never
    upgrades a file.

    Args:
        path: a ``.ipynb`` file.

    Returns:
        The text the file would hold in its normal form (``notebook_text`` of the stripped
        notebook).
    """
    nb = nbformat.read(str(path), as_version=nbformat.NO_CONVERT)
    return notebook_text(normalise_notebook(nb))


def normalise_file(path: Path, *, check: bool = False) -> bool:
    """Bring one notebook file to its normal form; return whether it was (or would be) changed.

    Args:
        path: a ``.ipynb`` file, rewritten in place (UTF-8, LF line ends) unless ``check``.
        check: only report whether the file is out of its normal form; write nothing.

    Returns:
        ``True`` when the file's text differs from its normal form.
    """
    path = Path(path)
    old = path.read_text(encoding="utf-8")
    new = normalised_text(path)
    if old == new:
        return False
    if not check:
        path.write_text(new, encoding="utf-8", newline="\n")
    return True


# --- build, compare, write ----------------------------------------------------------------------


def release_files(work: WorkCourse) -> dict[str, str | bytes]:
    """Collect the generated student versions of ``work`` in their normal form.

    Keys are paths relative to the release folder (``<lesson>/<file>``); notebooks are
    normalised text, any other file nbgrader copied along is raw bytes.

    Args:
        work: a work course after ``generate_assignments``.

    Returns:
        ``<lesson>/<file>`` -> content, for every file of every lesson's release folder but
        the ignored ones (``course.IGNORED``), in sorted path order per lesson.
    """
    files: dict[str, str | bytes] = {}
    for lesson in work.lessons:
        for path in sorted((work.release / lesson).rglob("*")):
            if not path.is_file() or ignored(path.relative_to(work.release)):
                continue
            key = path.relative_to(work.release).as_posix()
            files[key] = normalised_text(path) if path.suffix == ".ipynb" else path.read_bytes()
    return files


def build_release(
    course_root: Path, work_dir: Path, secret: bytes | None = None
) -> tuple[WorkCourse, dict[str, str | bytes]]:
    """Generate every lesson's student version from ``course_root/solutions`` in ``work_dir``.

    Args:
        course_root: the course's root folder (the repository).
        work_dir: an empty or missing folder for the work course.
        secret: the course secret: the class's edition (``judge/editions.py``); ``None``: the
            self-study edition, the one ``notebooks/`` holds.

    Returns:
        The work course, and its release files as ``release_files`` gives them.

    Raises:
        GradingError: from ``make_work_course`` or ``generate_assignments`` (a folder that is
            not empty, a lesson that cannot be copied or released).
    """
    work = make_work_course(course_root, work_dir)
    render_editions(work, secret)
    generate_assignments(work)
    return work, release_files(work)


def _existing_files(release_dir: Path, lessons: list[str]) -> dict[str, bytes]:
    files = {}
    for lesson in lessons:
        for path in sorted((release_dir / lesson).rglob("*")):
            rel = path.relative_to(release_dir)
            if path.is_file() and not ignored(rel):
                files[rel.as_posix()] = path.read_bytes()
    return files


def compare_release(expected: dict[str, str | bytes], course_root: Path) -> list[str]:
    """List how ``course_root/notebooks`` differs from ``expected``; empty means in sync.

    Lesson folders in ``notebooks/`` without a source in ``solutions/`` count as differences.
    Files are compared byte for byte (a notebook as its normal form's UTF-8 text).

    Args:
        expected: the release, as ``build_release`` returns it.
        course_root: the course's root folder, holding the committed ``notebooks/``.

    Returns:
        One line per difference, naming the path under ``notebooks/`` and what to do: a stale
        file, a missing one, one that differs, or a lesson folder with no source.
    """
    release_dir = Path(course_root) / RELEASE_DIR
    lessons = sorted({key.split("/", 1)[0] for key in expected})
    present = _existing_files(release_dir, lessons)
    problems = []
    for key in sorted(set(expected) | set(present)):
        want = expected.get(key)
        want_bytes = want.encode("utf-8") if isinstance(want, str) else want
        if want is None:
            problems.append(f"{RELEASE_DIR}/{key}: not produced by the release (stale file)")
        elif key not in present:
            problems.append(f"{RELEASE_DIR}/{key}: missing (run `make release`)")
        elif present[key] != want_bytes:
            problems.append(f"{RELEASE_DIR}/{key}: differs from the release of {SOURCE_DIR}/")
    if release_dir.is_dir():
        for folder in sorted(p for p in release_dir.iterdir() if p.is_dir()):
            if folder.name not in lessons and not ignored(Path(folder.name)):
                problems.append(
                    f"{RELEASE_DIR}/{folder.name}/: no lesson of that name in {SOURCE_DIR}/"
                )
    return problems


def write_release(expected: dict[str, str | bytes], course_root: Path) -> list[str]:
    """Write ``expected`` into ``course_root/notebooks``; return the paths that changed.

    Files inside a released lesson folder that the release no longer produces are removed;
    folders of other names are left alone (``compare_release`` reports them).
    A file whose bytes already match is not rewritten, so its modification time stays.

    Args:
        expected: the release, as ``build_release`` returns it.
        course_root: the course's root folder; its ``notebooks/`` is written.

    Returns:
        The paths under ``notebooks/`` written, then those removed (marked ``(removed)``).
    """
    release_dir = Path(course_root) / RELEASE_DIR
    lessons = sorted({key.split("/", 1)[0] for key in expected})
    changed = []
    for key, content in expected.items():
        path = release_dir / key
        data = content.encode("utf-8") if isinstance(content, str) else content
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        changed.append(f"{RELEASE_DIR}/{key}")
    for key in _existing_files(release_dir, lessons):
        if key not in expected:
            (release_dir / key).unlink()
            changed.append(f"{RELEASE_DIR}/{key} (removed)")
    return changed


def write_class_release(expected: dict[str, str | bytes], out: Path) -> list[Path]:
    """Write a class edition's student versions into ``out``, a new folder.

    A class edition never goes into ``notebooks/`` (the self-study edition, public), and never
    over anything: ``out`` must be missing or empty.

    Args:
        expected: the release, as ``build_release`` returns it with the course secret.
        out: the folder to make (``<out>/<lesson>/<lesson>.ipynb``).

    Returns:
        The files written.

    Raises:
        GradingError: ``out`` holds anything already.
    """
    from course_grading.errors import GradingError

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise GradingError(
            f"{out} is not an empty folder: a class release is written only into "
            "a new one (nothing there is overwritten)"
        )
    written = []
    for key, content in expected.items():
        path = out / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        written.append(path)
    return written
