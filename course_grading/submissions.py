"""Find student submissions without following a link or dropping anyone, and hold what is
found out about each one.

nbgrader grades what it is given and stays quiet about several kinds of damage: a deleted test
cell is simply not graded (no warning), copied cells lose their grade id silently, a file that
is not a notebook stops that student's whole assignment. This module finds the submissions in
either layout an instructor is likely to have and holds what is found out about each one
(``inspection.py`` compares every notebook with its lesson), so that each problem ends up in
the report in plain words.

Layouts accepted (both may be mixed in one folder):

* nbgrader's ``<dir>/<student>/<lesson>/<lesson>.ipynb``, also ``<dir>/<student>/<lesson>.ipynb``;
* a flat folder of ``<dir>/<student>_<lesson>.ipynb`` files;
* Canvas's and Moodle's submission downloads, by the names each gives its files (the rules:
  ``lms/downloads.py``; ``leealice_LATE_501_98765_<lesson>-1.ipynb``, ``Alice
  Lee_1234_assignsubmission_file_/<lesson>.ipynb``): the latest file per student and lesson is
  graded under the id the grade export matches back, every other file gets a row.

Rules (each is a reason in the report):

* A symbolic link is never followed (a notebook, a folder or a ``timestamp.txt``): entries are
  read with ``os.lstat``, and a link in a submission's place makes it ``not graded``.
* Nothing is dropped: every entry that is not part of a submission gets its own row
  (``Skipped``) with the reason: names starting with ``.``, files or folders of no lesson,
  files beside a lesson's notebook, a second copy of a submission, links, special files.
  nbgrader's own files beside a collected notebook (``timestamp.txt``, read for late
  penalties, and ``submission_secret.txt``) are part of the submission, not rows.
* ``<dir>/submitted/`` is nbgrader's folder of submissions only when the layout says so: it
  sits among nbgrader's own course files and nothing else, and holds no entry named after a
  lesson. Otherwise it is a student called ``submitted``.
* Student ids keep letters, digits and ``._@+-``; other characters become ``_``. Two different
  ids that would become the same one (``josé`` and ``jos_``) both keep their row: a changed id
  that collides gets ``-`` and the first hex digits of its SHA-256.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.lms import download_names

_SAFE_ID = re.compile(r"[^A-Za-z0-9._@+-]")
#: What an nbgrader course folder holds besides ``submitted/``.
COURSE_FILES = frozenset(
    "source release autograded feedback withheld_feedback gradebook.db nbgrader_config.py "
    "nbgrader.log".split()
)
#: Read beside a lesson's notebook in nbgrader's layout (for late penalties).
TIMESTAMP = "timestamp.txt"
#: What ``nbgrader collect`` puts beside a notebook besides the timestamp (the hash that
#: ``release_feedback`` checks): nbgrader's own, so never a report row as a plain file.
NBGRADER_FILES = frozenset({TIMESTAMP, "submission_secret.txt"})


@dataclass(frozen=True)
class Skipped:
    """An entry under the submissions folder that is not graded, and why (a report row)."""

    path: str
    reason: str


@dataclass
class Submission:
    """One student's notebook for one lesson, and everything found out about it."""

    student: str
    lesson: str
    original: Path | None  # the file as found; read, never written
    problems: list[str] = field(default_factory=list)  # reasons to look at it (flagged)
    info: list[str] = field(default_factory=list)  # worth knowing, not a problem
    gradable: bool = True
    deleted: list[str] = field(default_factory=list)  # grade ids missing from the notebook
    verdicts: dict = field(default_factory=dict)  # test grade id -> items.Verdict
    unchanged_answers: list[str] = field(default_factory=list)
    graded: bool = False
    auto_score: float = 0.0
    score: float = 0.0
    max_score: float = 0.0
    manual_pending: float = 0.0
    failed_tests: list[str] = field(default_factory=list)

    def flag(self, reason: str, *, gradable: bool = True) -> None:
        """Add ``reason`` to the problems (the row is flagged); ``gradable=False``: not graded.

        Args:
            reason: the problem in plain words, as the report shows it.
            gradable: ``False`` when the problem keeps the notebook from being graded at all;
                once not gradable, a later ``True`` does not make it gradable again.
        """
        self.problems.append(reason)
        self.gradable = self.gradable and gradable

    @property
    def status(self) -> str:
        if self.original is None:
            return "missing"
        if not self.graded:
            return "not graded"
        return "flagged" if self.problems else "ok"


# --- finding submissions ---------------------------------------------------------------------


def safe_student_id(raw: str) -> str:
    """A student id usable as a folder name: letters, digits and ``._@+-``; others become ``_``.

    Leading dots are dropped too, so an id can never be ``..`` or a hidden folder.

    Args:
        raw: the id as the submission's folder or file name gives it.

    Returns:
        The safe id, surrounding spaces stripped; ``"_"`` when nothing is left.
    """
    return _SAFE_ID.sub("_", raw.strip()).lstrip(".") or "_"


def student_ids(raws: set[str]) -> dict[str, str]:
    """A distinct safe id for each raw id: ``safe_student_id``, and where two raw ids give the
    same one, the changed ids get ``-`` and the first hex digits of their SHA-256.

    An id that is already safe keeps its name even when another id collides with it; the
    digest grows 6 hex digits at a time (up to 60) until no made-up id equals another.

    Args:
        raws: the student ids as found.

    Returns:
        Raw id -> its safe id, distinct for distinct raw ids.
    """
    groups: dict[str, list[str]] = {}
    for raw in sorted(raws):
        groups.setdefault(safe_student_id(raw), []).append(raw)
    ids: dict[str, str] = {}
    for length in range(6, 65, 6):  # longer digests until no made-up id equals another id
        for safe, group in groups.items():
            for raw in group:
                digest = sha256(raw.encode()).hexdigest()[:length]
                ids[raw] = f"{safe}-{digest}" if raw != safe and len(group) > 1 else safe
        if len(set(ids.values())) == len(ids):
            break
    return ids


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a folder" if stat.S_ISDIR(mode) else "not a regular file"


def _link(path: Path) -> str:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    target = target if len(target) <= 80 else target[:79] + "…"
    return f"{path.name} is a symbolic link (to {target}); links are never followed"


@dataclass(frozen=True)
class _Item:
    """A submission as found: whose, which lesson, where, and what to say about it."""

    raw: str
    lesson: str
    path: Path | None
    note: str = ""  # why it cannot be graded
    placed: download_names.Placed | None = None  # read by an LMS download's naming rule


@dataclass
class _Found:
    """Submissions and skipped entries as they are found; ``collect`` turns them into rows."""

    lessons: list[str]
    roster: download_names.Roster | None = None
    found: list[_Item] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def submission(self, raw: str, lesson: str, path: Path | None, note: str = "") -> None:
        self.found.append(_Item(raw, lesson, path, note))

    def download(self, read: download_names.Placed | download_names.NotPlaced) -> None:
        """A file an LMS's naming rule placed, or a row saying why it did not."""
        if isinstance(read, download_names.NotPlaced):
            self.skip(read.path, read.reason)
        else:
            self.found.append(_Item(read.student, read.lesson, read.path, placed=read))

    def skip(self, path: Path, reason: str) -> None:
        self.skipped.append(Skipped(str(path), reason))

    def entry(self, path: Path) -> os.stat_result | None:
        """``lstat`` of ``path``, or ``None`` after a row for a hidden or unreadable entry."""
        if path.name.startswith("."):
            what = "Jupyter's checkpoints" if path.name == ".ipynb_checkpoints" else "hidden"
            self.skip(path, f"{what} (the name starts with '.'); not read")
            return None
        try:
            return path.lstat()
        except OSError as err:
            self.skip(path, f"cannot be read ({err.strerror}); not graded")
            return None


def _listing(folder: Path, found: _Found | None = None) -> list[Path]:
    """The entries of ``folder``, sorted; a row (or, for the top folder, an error) if it
    cannot be listed."""
    try:
        return sorted(Path(entry.path) for entry in os.scandir(folder))
    except OSError as err:
        if found is None:
            raise GradingError(f"cannot list {folder}: {err.strerror}") from None
        found.skip(folder, f"cannot be listed ({err.strerror}); not graded")
        return []


def _lesson_folder(found: _Found, raw: str, lesson: str, folder: Path) -> None:
    """``<student>/<lesson>/``: its notebook is a submission; every other entry gets a row."""
    notebook, names = folder / f"{lesson}.ipynb", []
    for path in _listing(folder, found):
        info = found.entry(path)
        if info is None or path == notebook:
            continue
        nbgraders = path.name in NBGRADER_FILES and stat.S_ISREG(info.st_mode)
        if path.name != TIMESTAMP and not nbgraders:  # a linked timestamp: _timestamp says so
            names.append(path.name)
            found.skip(path, f"in the folder of {lesson}; only {notebook.name} is graded")
    try:
        mode = notebook.lstat().st_mode
    except FileNotFoundError:
        seen = (
            f" (found: {', '.join(n for n in names if n.endswith('.ipynb'))})"
            if any(n.endswith(".ipynb") for n in names)
            else " (no notebook in it)"
        )
        found.submission(
            raw, lesson, None, f"no {notebook.name} in {folder}{seen}; rename the file"
        )
        return
    except OSError as err:
        found.submission(raw, lesson, notebook, f"{notebook.name} cannot be read ({err.strerror})")
        return
    note = "" if stat.S_ISREG(mode) else f"{notebook.name} is {_kind(mode)}; not read"
    found.submission(raw, lesson, notebook, _link(notebook) if stat.S_ISLNK(mode) else note)


def _student_folder(found: _Found, folder: Path) -> None:
    """``<student>/<lesson>/<lesson>.ipynb`` or ``<student>/<lesson>.ipynb`` under ``folder``."""
    for path in _listing(folder, found):
        info = found.entry(path)
        if info is None:
            continue
        mode, stem = info.st_mode, path.name.removesuffix(".ipynb")
        if stem not in found.lessons:
            found.skip(path, "matches no lesson (<lesson>.ipynb or a <lesson>/ folder); not graded")
        elif stat.S_ISLNK(mode):
            found.submission(folder.name, stem, path, _link(path))
        elif stat.S_ISDIR(mode) and path.name == stem:
            _lesson_folder(found, folder.name, stem, path)
        elif stat.S_ISREG(mode) and path.name != stem:
            found.submission(folder.name, stem, path)
        else:
            note = f"{path.name} is {_kind(mode)}, not {stem}.ipynb or a {stem}/ folder"
            found.submission(folder.name, stem, path, note)


def _flat_file(found: _Found, path: Path, mode: int) -> None:
    """``<student>_<lesson>.ipynb`` at the top, or a file an LMS's download names: a
    submission; anything else gets a row."""
    by_length = sorted(found.lessons, key=len, reverse=True)
    lesson = next((x for x in by_length if path.name.endswith(f"_{x}.ipynb")), None)
    plain = bool(lesson) and len(path.name) > len(lesson or "") + len("_.ipynb")
    read = (
        download_names.read_file(path, found.lessons, found.roster) if stat.S_ISREG(mode) else None
    )
    if read is not None and (isinstance(read, download_names.Placed) or not plain):
        found.download(read)
        return
    if not lesson or not plain:
        found.skip(path, "file name matches no student/lesson pattern; not graded")
        return
    raw = path.name[: -len(lesson) - len("_.ipynb")]
    if stat.S_ISLNK(mode):
        found.submission(raw, lesson, path, _link(path))
    elif not stat.S_ISREG(mode):
        found.submission(raw, lesson, path, f"{path.name} is {_kind(mode)}; not read")
    else:
        found.submission(raw, lesson, path)


def submissions_root(folder: Path, lessons: list[str]) -> Path:
    """``folder/submitted`` when ``folder`` is plainly an nbgrader course folder (module
    docstring), else ``folder``: a folder named ``submitted`` is otherwise a student's.

    Args:
        folder: the folder the instructor named.
        lessons: the course's lesson ids.

    Returns:
        ``folder / "submitted"`` when it is a real folder (not a link), ``folder`` holds
        nothing else but nbgrader's course files (``COURSE_FILES``) and hidden entries, and
        ``submitted/`` holds no entry named after a lesson; ``folder`` otherwise.

    Raises:
        GradingError: ``folder`` or its ``submitted/`` exists but cannot be listed.
    """
    inner = folder / "submitted"
    if not inner.is_dir() or inner.is_symlink():
        return folder
    others = {p.name for p in _listing(folder) if not p.name.startswith(".")} - {"submitted"}
    if others - COURSE_FILES:
        return folder
    names = {p.name.removesuffix(".ipynb") for p in _listing(inner)}
    return folder if names & set(lessons) else inner


def collect(
    folder: Path, lessons: list[str], roster: download_names.Roster | None = None
) -> tuple[list[Submission], list[Skipped]]:
    """Find every submission under ``folder``; return them and every entry not graded.

    Submissions are sorted by (student, lesson). A student/lesson pair found twice keeps the
    first path in sorted order; the others get a row and the kept one is flagged. Nothing is
    opened beyond listing, and no link is followed.

    Args:
        folder: the submissions folder, in either layout (module docstring), or an nbgrader
            course folder holding ``submitted/``.
        lessons: the course's lesson ids; anything named after no lesson is skipped.
        roster: the LMS's roster (``--roster``): the ids a download's students are graded
            under (``downloads.read_roster``).

    Returns:
        The submissions (a row with ``original`` set, possibly flagged not gradable), and one
        ``Skipped`` row, with its reason, for every entry that is not graded.

    Raises:
        GradingError: ``folder`` (or the ``submitted/`` it holds) cannot be listed; a
            folder below that cannot be listed is a ``Skipped`` row instead.
    """
    folder = Path(folder)
    root = submissions_root(folder, lessons)
    found = _Found(lessons, roster)
    if root != folder:
        for path in _listing(folder):
            if path != root and not path.name.startswith("."):
                found.skip(path, "part of the nbgrader course folder; only submitted/ is graded")
    for path in _listing(root):
        info = found.entry(path)
        if info is None:
            continue
        if stat.S_ISDIR(info.st_mode):
            moodle = download_names.read_moodle_folder(path, lessons, roster)
            for read in moodle or []:
                found.download(read)
            if moodle is None:
                _student_folder(found, path)
        elif stat.S_ISLNK(info.st_mode) and not path.name.endswith(".ipynb"):
            found.skip(path, _link(path))
        else:
            _flat_file(found, path, info.st_mode)
    return _rows(found), found.skipped


def _later_first(item: _Item) -> tuple:
    """Sort key: a readable notebook before a link, a missing file or a folder in its place;
    of an LMS's files, the latest first."""
    order = item.placed.order if item.placed else ()
    return (bool(item.note) or item.path is None, tuple(-n for n in order))


def _second(found: _Found, kept: Submission, item: _Item) -> None:
    """A second submission of a student for a lesson: a row of its own, and a word on the
    graded one (an LMS's earlier file is expected; any other second copy is flagged)."""
    where = str(item.path) if item.path else f"{item.raw}/{item.lesson}/"
    if item.placed is not None and kept.original is not None and not item.note:
        latest = kept.original.name
        why = f"an earlier file of {item.raw} for {item.lesson}; the latest ({latest}) is graded"
        found.skipped.append(Skipped(where, why))
        if (note := "the latest of several files for this lesson is graded") not in kept.info:
            kept.info.append(note)
        return
    kept.flag(f"a second submission for this lesson was not graded: {where}")
    why = f" ({item.note})" if item.note else ""
    found.skipped.append(
        Skipped(
            where,
            f"a second submission of {item.raw} for {item.lesson}{why}; {kept.original} is graded",
        )
    )


def _rows(found: _Found) -> list[Submission]:
    """One ``Submission`` per (student, lesson); a second one found gets a row of its own."""
    ids = student_ids({item.raw for item in found.found})
    subs: dict[tuple[str, str], Submission] = {}
    for item in sorted(found.found, key=_later_first):
        key = (ids[item.raw], item.lesson)
        if key in subs:
            _second(found, subs[key], item)
            continue
        sub = Submission(ids[item.raw], item.lesson, item.path)
        if item.placed is not None:
            sub.info.extend(item.placed.info)
            for problem in item.placed.problems:
                sub.flag(f"for review: {problem}")
        if ids[item.raw] != item.raw:
            why = (
                " (another id reads the same)" if ids[item.raw] != safe_student_id(item.raw) else ""
            )
            sub.info.append(f"student id {item.raw!r} is used as {ids[item.raw]!r}{why}")
        if item.note:
            sub.flag(item.note, gradable=False)
        subs[key] = sub
    return [subs[key] for key in sorted(subs)]


def add_missing(subs: list[Submission], lessons: list[str]) -> list[Submission]:
    """Add a ``missing`` row for every student without a submission for one of ``lessons``.

    A student is anyone with at least one submission; someone who submitted nothing at all
    is not known here.

    Args:
        subs: the submissions found (``collect``).
        lessons: the lessons every student should have submitted.

    Returns:
        ``subs`` and the new not-gradable rows (``original`` ``None``), sorted by
        (student, lesson); ``subs`` itself is not changed.
    """
    have = {(s.student, s.lesson) for s in subs}
    students = sorted({s.student for s in subs})
    extra = [
        Submission(st, le, None, problems=["no notebook submitted for this lesson"], gradable=False)
        for st in students
        for le in lessons
        if (st, le) not in have
    ]
    return sorted(subs + extra, key=lambda s: (s.student, s.lesson))
