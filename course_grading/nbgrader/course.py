"""Drive nbgrader on a private copy of the course: the work course.

The course root (the repository) holds the instructor notebooks in ``solutions/<lesson>/`` and
the generated student notebooks in ``notebooks/<lesson>/``; the lesson folder name is nbgrader's
assignment id. Nothing here runs nbgrader inside the repository: every run happens in a work
course, a throwaway folder with nbgrader's standard layout (``source/``, ``release/``,
``submitted/``, ``autograded/``, ``feedback/``) and its own SQLite gradebook, configured by the
repository's ``nbgrader_config.py`` with only the paths overridden. That keeps ``gradebook.db``
and nbgrader's working folders out of the repository and makes every run start from nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from nbgrader.coursedir import CourseDirectory

from course_grading.errors import GradingError

SOURCE_DIR = "solutions"
RELEASE_DIR = "notebooks"
CONFIG_FILE = "nbgrader_config.py"

_EXCEPTION = re.compile(r"[\w.]*(?:Error|Exception): \S")
#: Files that are never part of a lesson (nbgrader's own default ignore list, roughly).
IGNORED = (".ipynb_checkpoints", "__pycache__", "*.pyc", "feedback", ".DS_Store")


# --- lessons -----------------------------------------------------------------------------------


def find_lessons(course_root: Path) -> list[str]:
    """Return the lesson ids found as ``solutions/<lesson>/<lesson>.ipynb``, sorted.

    A lesson folder whose notebook is named differently is an error: nbgrader would treat the
    notebook as a different notebook id, and the student version would get another name.
    Folders starting with ``.`` or ``_`` and folders without a notebook are not lessons.

    Args:
        course_root: the course's root folder (the repository), holding ``solutions/``.

    Returns:
        The lesson ids (folder names, nbgrader's assignment ids), sorted by name.

    Raises:
        GradingError: a lesson folder holds another notebook, or ``solutions/`` cannot be read.
    """
    solutions = Path(course_root) / SOURCE_DIR
    lessons = []
    try:
        folders = sorted(p for p in solutions.glob("*") if p.is_dir())
    except OSError as err:
        raise GradingError(f"cannot read the lessons in {solutions}: {err.strerror}") from None
    for folder in folders:
        if folder.name.startswith((".", "_")):
            continue
        notebooks = sorted(p.name for p in folder.glob("*.ipynb"))
        if not notebooks:
            continue
        if notebooks != [f"{folder.name}.ipynb"]:
            raise GradingError(
                f"{folder} holds {notebooks}; a lesson folder must hold exactly one notebook "
                f"named after the folder ({folder.name}.ipynb): rename or move the others"
            )
        lessons.append(folder.name)
    return lessons


def nbgrader_cells(nb: nbformat.NotebookNode) -> list[dict]:
    """Return the nbgrader metadata of every marked cell, with its index and source.

    Args:
        nb: a notebook (instructor, student or submitted version).

    Returns:
        One dict per cell whose ``metadata.nbgrader`` has a ``grade_id``, in notebook order:
        nbgrader's keys (``grade_id``, ``grade``, ``solution``, ``locked``, ``points``, ...)
        plus ``index`` (its position in ``nb.cells``), ``cell_type`` and ``source``.
    """
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

    Returns:
        A copy of this process's environment with this interpreter's folder first on ``PATH``
        and ``PYTHONUNBUFFERED`` set unless already given (so the log keeps nbgrader's order).
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

    Args:
        args: nbgrader's command line after ``nbgrader`` (``["autograde", "01_shapes"]``).
        cwd: the course folder whose ``nbgrader_config.py`` nbgrader reads.
        log_path: a log file to append the command, its exit status and output to.
        timeout: seconds before the process is killed; ``None`` waits for ever.

    Returns:
        The finished process, stdout and stderr combined in ``stdout`` as text.
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
        """The student version of ``lesson``'s notebook in this course.

        Args:
            lesson: the lesson id (folder name).

        Returns:
            ``release/<lesson>/<lesson>.ipynb`` under the work course, whether or not it exists
            yet (``generate_assignments`` makes it).
        """
        return self.release / lesson / f"{lesson}.ipynb"

    def source_notebook(self, lesson: str) -> Path:
        """The instructor version of ``lesson``'s notebook in this course.

        Args:
            lesson: the lesson id (folder name).

        Returns:
            ``source/<lesson>/<lesson>.ipynb`` under the work course.
        """
        return self.source / lesson / f"{lesson}.ipynb"

    def run(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run one nbgrader command in this course (logged to ``nbgrader.log``).

        Args:
            *args: nbgrader's command line after ``nbgrader``.
            timeout: seconds before the process is killed; ``None`` waits for ever.

        Returns:
            The finished process (``run_nbgrader``); its exit status is not a verdict.
        """
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

    Args:
        course_root: the course's root folder (the repository).
        work_dir: where to build the work course; made if missing.
        lessons: the lesson ids to copy; every lesson ``find_lessons`` sees when ``None``.
        cell_timeout: seconds per cell for nbgrader's ``Execute.timeout``; nbgrader's own
            default (or the course config's) when ``None``.
        extra_config: Python lines appended to the work course's ``nbgrader_config.py``.

    Returns:
        The work course, with ``source/`` filled and its config written; nothing is
        generated yet (``steps.render_editions`` renders a class's edition).

    Raises:
        GradingError: ``work_dir`` is not empty, or a lesson folder cannot be copied.
    """
    course_root = Path(course_root).resolve()
    work_dir = Path(work_dir).resolve()
    if lessons is None:
        lessons = find_lessons(course_root)
    if work_dir.exists() and any(work_dir.iterdir()):
        raise GradingError(f"work course folder {work_dir} is not empty; give an empty folder")
    work = WorkCourse(work_dir, tuple(lessons))
    work.source.mkdir(parents=True)
    for lesson in lessons:
        try:
            shutil.copytree(
                course_root / SOURCE_DIR / lesson,
                work.source / lesson,
                ignore=shutil.ignore_patterns(*IGNORED),
            )
        except (OSError, shutil.Error) as err:
            raise GradingError(f"cannot copy lesson {lesson} into {work.source}: {err}") from None

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

    Success is judged by the student versions on disk as well as by the exit status.

    Args:
        work: the work course whose ``source/`` lessons are released into ``release/``.

    Raises:
        GradingError: there are no lessons, or a student version is missing afterwards (with
            the first exception nbgrader names, else its last error line; its whole output is
            in ``nbgrader.log``).
    """
    if not work.lessons:
        raise GradingError(f"no lessons to release in {work.source}")
    proc = work.run("generate_assignment", "*", "--force")
    missing = [lesson for lesson in work.lessons if not work.release_notebook(lesson).exists()]
    if proc.returncode != 0 or missing:
        raise GradingError(
            f"nbgrader generate_assignment failed (exit {proc.returncode}; no student version "
            f"for {', '.join(missing) or 'none'}): {_first_error(proc.stdout)[:300]}. Fix the "
            f"lesson's notebook in {SOURCE_DIR}/; nbgrader's whole output is in {work.log}"
        )


def _first_error(output: str) -> str:
    """The first exception nbgrader's output names (``ValidationError: Duplicate grade id``),
    else its last error line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    raised = [line for line in lines if _EXCEPTION.match(line)]
    errors = [line for line in lines if "ERROR" in line]
    return (raised or errors or lines or ["(no output)"])[0 if raised else -1]


def ignored(relpath: Path) -> bool:
    """Whether a path relative to a course folder is one nbgrader never copies (``IGNORED``).

    Args:
        relpath: a path relative to a lesson or course folder.

    Returns:
        ``True`` when any part of it is an ignored name or a ``.pyc`` file.
    """
    return any(part in IGNORED or part.endswith(".pyc") for part in relpath.parts)


# --- nbgrader's course folder, seen from a preprocessor --------------------------------------


def course_directory(preprocessor: Preprocessor) -> CourseDirectory:
    """The course folder of the converter running ``preprocessor``.

    nbgrader's exporter is the converter's child, so the folder is found up the parent chain;
    without one, the preprocessor's own configuration says where it is.

    Args:
        preprocessor: an nbconvert preprocessor nbgrader runs.

    Returns:
        The course folder.
    """
    owner = preprocessor.parent
    while owner is not None:
        coursedir = getattr(owner, "coursedir", None)
        if isinstance(coursedir, CourseDirectory):
            return coursedir
        owner = getattr(owner, "parent", None)
    return CourseDirectory(config=preprocessor.config)


def lesson_paths(
    coursedir: CourseDirectory, lesson: str, notebook: str, student: str
) -> tuple[Path, Path, Path]:
    """The source, release and submitted notebooks of one submission, in a course folder.

    Args:
        coursedir: the course folder.
        lesson: the assignment.
        notebook: the notebook's name, without ``.ipynb``.
        student: the student.

    Returns:
        ``(source, release, submitted)`` paths.
    """

    def path(step: str, who: str) -> Path:
        return Path(coursedir.format_path(step, who, lesson)) / f"{notebook}.ipynb"

    return (
        path(coursedir.source_directory, "."),
        path(coursedir.release_directory, "."),
        path(coursedir.submitted_directory, student),
    )
