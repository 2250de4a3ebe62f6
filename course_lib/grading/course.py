"""Drive nbgrader on a private copy of the course, and keep notebooks in one normal form.

The course root (the repository) holds the instructor notebooks in ``solutions/<lesson>/`` and
the generated student notebooks in ``notebooks/<lesson>/``; the lesson folder name is nbgrader's
assignment id. Nothing here runs nbgrader inside the repository: every run happens in a work
course, a throwaway folder with nbgrader's standard layout (``source/``, ``release/``,
``submitted/``, ``autograded/``, ``feedback/``) and its own SQLite gradebook, configured by the
repository's ``nbgrader_config.py`` with only the paths overridden. That keeps ``gradebook.db``
and nbgrader's working folders out of the repository and makes every run start from nothing.

The normal form of a notebook is what the repository's pre-commit hook writes (``nbstripout
--keep-id --extra-keys "metadata.celltoolbar metadata.widgets"``): no outputs, no execution
counts, cell ids and nbgrader metadata kept, ``nbformat``'s JSON layout (indent 1, sorted keys,
final newline). Keeping ids keeps the release deterministic: nbgrader copies them from the
source notebook.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbstripout import strip_output

SOURCE_DIR = "solutions"
RELEASE_DIR = "notebooks"
CONFIG_FILE = "nbgrader_config.py"

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

#: Files that are never part of a lesson (nbgrader's own default ignore list, roughly).
IGNORED = (".ipynb_checkpoints", "__pycache__", "*.pyc", "feedback", ".DS_Store")


# --- lessons and notebooks ----------------------------------------------------------------------


def find_lessons(course_root: Path) -> list[str]:
    """Return the lesson ids found as ``solutions/<lesson>/<lesson>.ipynb``, sorted.

    A lesson folder whose notebook is named differently is an error: nbgrader would treat the
    notebook as a different notebook id, and the student version would get another name.
    """
    solutions = Path(course_root) / SOURCE_DIR
    lessons = []
    for folder in sorted(p for p in solutions.glob("*") if p.is_dir()):
        if folder.name.startswith((".", "_")):
            continue
        notebooks = sorted(p.name for p in folder.glob("*.ipynb"))
        if not notebooks:
            continue
        if notebooks != [f"{folder.name}.ipynb"]:
            raise ValueError(
                f"{folder} holds {notebooks}; a lesson folder must hold exactly one notebook "
                f"named after the folder ({folder.name}.ipynb)"
            )
        lessons.append(folder.name)
    return lessons


def normalise(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Strip outputs, execution counts and volatile metadata in place, as ``nbstripout`` does.

    nbgrader metadata (``metadata.nbgrader``, ``editable``, ``deletable``) and cell ids are kept.
    """
    return strip_output(
        nb, keep_output=False, keep_count=False, keep_id=True, extra_keys=STRIP_KEYS
    )


def notebook_text(nb: nbformat.NotebookNode) -> str:
    """Serialise a notebook the way ``nbformat.write`` does (indent 1, sorted keys, final LF)."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def normalised_text(path: Path) -> str:
    """Read a notebook file and return its normal form as text."""
    nb = nbformat.read(str(path), as_version=nbformat.NO_CONVERT)
    return notebook_text(normalise(nb))


def normalise_file(path: Path, *, check: bool = False) -> bool:
    """Bring one notebook file to its normal form; return whether it was (or would be) changed."""
    path = Path(path)
    old = path.read_text(encoding="utf-8")
    new = normalised_text(path)
    if old == new:
        return False
    if not check:
        path.write_text(new, encoding="utf-8", newline="\n")
    return True


def nbgrader_cells(nb: nbformat.NotebookNode) -> list[dict]:
    """Return the nbgrader metadata of every marked cell, with its index and source."""
    cells = []
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta and meta.get("grade_id"):
            cells.append(
                {**meta, "index": index, "cell_type": cell.cell_type, "source": cell.source}
            )
    return cells


# --- running nbgrader ---------------------------------------------------------------------------


def nbgrader_env() -> dict[str, str]:
    """Environment for an nbgrader child process.

    nbgrader runs the ``alembic`` executable by name when it creates a gradebook, so the
    folder of this interpreter (a virtual environment's ``bin/``) must be on ``PATH`` even when
    the environment was never activated.
    """
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_nbgrader(
    args: list[str], cwd: Path, log_path: Path | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m nbgrader ARGS`` in ``cwd`` (which holds the config); never raises on rc.

    The combined output is returned (and appended to ``log_path`` when given). nbgrader's exit
    status is not a verdict: it is 1 when any one submission failed, and ``validate`` returns 0
    even on failure, so callers inspect the files and the gradebook instead.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=cwd,
        env=nbgrader_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    if log_path is not None:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"$ nbgrader {' '.join(args)}  (exit {proc.returncode})\n{proc.stdout}\n")
    return proc


@dataclass(frozen=True)
class WorkCourse:
    """A throwaway nbgrader course folder built from the course root's ``solutions/``."""

    root: Path
    lessons: tuple[str, ...]

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def release(self) -> Path:
        return self.root / "release"

    @property
    def submitted(self) -> Path:
        return self.root / "submitted"

    @property
    def autograded(self) -> Path:
        return self.root / "autograded"

    @property
    def feedback(self) -> Path:
        return self.root / "feedback"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.root / 'gradebook.db'}"

    @property
    def log(self) -> Path:
        return self.root / "nbgrader.log"

    def release_notebook(self, lesson: str) -> Path:
        return self.release / lesson / f"{lesson}.ipynb"

    def source_notebook(self, lesson: str) -> Path:
        return self.source / lesson / f"{lesson}.ipynb"

    def run(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run one nbgrader command in this course (logged to ``nbgrader.log``)."""
        return run_nbgrader(list(args), cwd=self.root, log_path=self.log, timeout=timeout)


def make_work_course(
    course_root: Path,
    work_dir: Path,
    lessons: list[str] | None = None,
    *,
    cell_timeout: int | None = None,
    extra_config: list[str] | None = None,
) -> WorkCourse:
    """Create a work course in ``work_dir`` (which must not exist or be empty).

    The lesson folders are copied from ``course_root/solutions`` into ``source/``; the config
    loads ``course_root/nbgrader_config.py`` (when there is one) and then points nbgrader at
    ``work_dir``. ``cell_timeout`` overrides ``Execute.timeout`` (seconds per cell);
    ``extra_config`` lines are appended to the config file as they are.
    """
    course_root = Path(course_root).resolve()
    work_dir = Path(work_dir).resolve()
    if lessons is None:
        lessons = find_lessons(course_root)
    if work_dir.exists() and any(work_dir.iterdir()):
        raise ValueError(f"work course folder {work_dir} is not empty; give an empty folder")
    work = WorkCourse(work_dir, tuple(lessons))
    work.source.mkdir(parents=True)
    for lesson in lessons:
        shutil.copytree(
            course_root / SOURCE_DIR / lesson,
            work.source / lesson,
            ignore=shutil.ignore_patterns(*IGNORED),
        )

    lines = ["c = get_config()  # noqa: F821", ""]
    base_config = course_root / CONFIG_FILE
    if base_config.exists():
        lines.append(f"load_subconfig({str(base_config)!r})  # noqa: F821")
    lines += [
        f"c.CourseDirectory.root = {str(work_dir)!r}",
        'c.CourseDirectory.source_directory = "source"',
        'c.CourseDirectory.release_directory = "release"',
        f"c.CourseDirectory.db_url = {work.db_url!r}",
    ]
    if cell_timeout is not None:
        lines.append(f"c.Execute.timeout = {int(cell_timeout)}")
    lines += extra_config or []
    (work_dir / CONFIG_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return work


def generate_assignments(work: WorkCourse) -> None:
    """Run ``nbgrader generate_assignment`` for every lesson of ``work`` in one process.

    Raises ``RuntimeError`` with nbgrader's log when a student version is missing afterwards.
    """
    if not work.lessons:
        raise ValueError(f"no lessons to release in {work.source}")
    proc = work.run("generate_assignment", "*", "--force")
    missing = [lesson for lesson in work.lessons if not work.release_notebook(lesson).exists()]
    if proc.returncode != 0 or missing:
        raise RuntimeError(
            f"nbgrader generate_assignment failed (exit {proc.returncode}; no student version "
            f"for {missing or 'none'}):\n{proc.stdout[-4000:]}"
        )


# --- the release: solutions -> notebooks ---------------------------------------------------


def release_files(work: WorkCourse) -> dict[str, str | bytes]:
    """Collect the generated student versions of ``work`` in their normal form.

    Keys are paths relative to the release folder (``<lesson>/<file>``); notebooks are
    normalised text, any other file nbgrader copied along is raw bytes.
    """
    files: dict[str, str | bytes] = {}
    for lesson in work.lessons:
        for path in sorted((work.release / lesson).rglob("*")):
            if not path.is_file() or _ignored(path.relative_to(work.release)):
                continue
            key = path.relative_to(work.release).as_posix()
            files[key] = normalised_text(path) if path.suffix == ".ipynb" else path.read_bytes()
    return files


def build_release(course_root: Path, work_dir: Path) -> tuple[WorkCourse, dict[str, str | bytes]]:
    """Generate every lesson's student version from ``course_root/solutions`` in ``work_dir``."""
    work = make_work_course(course_root, work_dir)
    generate_assignments(work)
    return work, release_files(work)


def _ignored(relpath: Path) -> bool:
    return any(part in IGNORED or part.endswith(".pyc") for part in relpath.parts)


def _existing_files(release_dir: Path, lessons: list[str]) -> dict[str, bytes]:
    files = {}
    for lesson in lessons:
        for path in sorted((release_dir / lesson).rglob("*")):
            rel = path.relative_to(release_dir)
            if path.is_file() and not _ignored(rel):
                files[rel.as_posix()] = path.read_bytes()
    return files


def compare_release(expected: dict[str, str | bytes], course_root: Path) -> list[str]:
    """List how ``course_root/notebooks`` differs from ``expected``; empty means in sync.

    Lesson folders in ``notebooks/`` without a source in ``solutions/`` count as differences.
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
            if folder.name not in lessons and not _ignored(Path(folder.name)):
                problems.append(
                    f"{RELEASE_DIR}/{folder.name}/: no lesson of that name in {SOURCE_DIR}/"
                )
    return problems


def write_release(expected: dict[str, str | bytes], course_root: Path) -> list[str]:
    """Write ``expected`` into ``course_root/notebooks``; return the paths that changed.

    Files inside a released lesson folder that the release no longer produces are removed;
    folders of other names are left alone (``compare_release`` reports them).
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
