"""Submissions downloaded from Canvas or Moodle, read by the names each LMS gives them.

**Canvas** (*Assignments > Download Submissions*; ``lib/content_zipper.rb`` in
instructure/canvas-lms, ``get_filename``, ``get_user_name``, ``add_upload_submission``): one
flat zip, every file of a student's current submission named

    <name>[_LATE]_<user id>_<attachment id>_<the student's file name>

``<name>`` is the student's sortable name ("Lee, Alice") lower-cased with every character that
is not a letter, digit or ``_`` removed and any ``_<digits>_`` run collapsed (``leealice``):
it never holds ``_<digits>_``, so the first such run starts the ids. ``LATE`` (``late`` before
Canvas moved the lower-casing into the name) marks a submission Canvas counts late; under
anonymous grading there is no name and the user id is ``anon_<id>``. The student's own file
name has ``\\x00/\\:*?"<>|`` runs turned into ``_``, and a file uploaded again under a name the
student already used gets ``-1``, ``-2``, ... before its extension
(``Attachment.make_unique_filename``; a browser's own copy marks, `` (1)``, are read the same
way). A text entry is ``<name>_<user id>_text.html``, a URL ``..._link.html``. Canvas's user id
is the *ID* column of its gradebook export, which the Canvas export (``canvas_upload.py``)
matches first: that is the student id given, or, with the gradebook export as ``--roster``,
the student's *SIS Login ID*.

**Moodle** (*Assignment > View all submissions > Download all submissions*;
``mod/assign/locallib.php`` in moodle/moodle, ``download_submissions``): each student's
latest attempt, under the prefix ``clean_filename(<full name with _ as space>_<participant
id>)`` and ``_assignsubmission_<plugin>_``: in a folder per student and plugin (``Alice
Lee_1234_assignsubmission_file_/lesson.ipynb``, the default since Moodle 3.1) or flat
(``Alice Lee_1234_assignsubmission_file_lesson.ipynb``). Blind marking names everyone
``Participant``. The participant id is ``assign_user_mapping``'s, not the Moodle user id, and no
gradebook import knows it: the assignment's grading worksheet (*Download grading worksheet*:
``Identifier`` = ``Participant 1234``, then the user's identity fields) maps it to the
username or e-mail address the Moodle export writes (``--roster``). Without it a student is
``participant-1234`` and the row asks for the worksheet.

Each file is *placed* (a student, a lesson, and what makes it later than another of theirs:
the attachment id, then the copy number) or *not placed* with the reason: not a notebook, a
notebook that names no lesson. ``submissions.collect`` keeps the latest file per student and
lesson and lists the others. A zip is unpacked first (:func:`unpack`), safely.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath

from course_grading.errors import GradingError
from course_grading.lms.csv_files import read_table
from course_grading.lms.download_names import NotPlaced, Roster
from course_grading.notebook_file import MAX_NOTEBOOK_BYTES
from course_grading.submissions import Skipped

#: At most this much is unpacked from one archive, in at most this many files.
MAX_ARCHIVE_BYTES = 4 * 2**30
MAX_ARCHIVE_FILES = 100_000


def read_roster(path: Path) -> Roster:
    """The student id of each user a download names, from the LMS's own file.

    Canvas's gradebook export maps each *ID* to the *SIS Login ID* (the *ID* itself where that
    is empty); Moodle's grading worksheet maps each *Identifier* (``Participant 1234``) to the
    *Username*, else the *Email address*, else the *ID number* it shows.

    Args:
        path: the CSV file.

    Returns:
        The roster.

    Raises:
        GradingError: the file cannot be read as CSV, or is neither of the two.
    """
    table = read_table(path, "LMS roster")
    header = [h.strip().casefold() for h in table.header]
    rows = table.rows[1:]
    if "id" in header and "sis login id" in header:
        user, login = header.index("id"), header.index("sis login id")
        ids = {r[user].strip(): r[login].strip() or r[user].strip() for r in rows}
        return Roster("Canvas", {k: v for k, v in ids.items() if k.isdigit()}, str(path))
    if "identifier" in header:
        key = header.index("identifier")
        given = [header.index(h) for h in ("username", "email address", "id number") if h in header]
        if not given:
            raise GradingError(
                f"{path}: Moodle's grading worksheet shows no Username, Email address or ID "
                "number column: ask for the identity fields in the download (or give none)"
            )
        found = {
            re.sub(r"\D", "", r[key]): r[given[0]].strip() for r in rows if r[given[0]].strip()
        }
        return Roster("Moodle", {k: v for k, v in found.items() if k}, str(path))
    raise GradingError(
        f"{path} is neither Canvas's gradebook export (ID, SIS Login ID) nor Moodle's grading "
        "worksheet (Identifier): give one of them with --roster"
    )


def _safe_name(info: zipfile.ZipInfo) -> str:
    """Why an archive member is not unpacked, or ``""``."""
    parts = PurePosixPath(info.filename.replace("\\", "/")).parts
    if stat.S_ISLNK(info.external_attr >> 16):
        return "a symbolic link in the archive; links are never followed"
    if not parts or parts[0] == "/" or ".." in parts or any(":" in p for p in parts[:1]):
        return "its path leaves the archive's folder; not unpacked"
    if info.file_size > MAX_NOTEBOOK_BYTES:
        return f"over {MAX_NOTEBOOK_BYTES // 2**20} MiB in the archive; not unpacked"
    return ""


def unpack(archive: Path, dest: Path) -> list[NotPlaced]:
    """Unpack a downloaded zip into the new folder ``dest``, each member checked first.

    Only regular files are written, at their path inside ``dest``; a link, a path leaving the
    folder, or a member over the notebook size limit is not, and is listed instead.

    Args:
        archive: the zip (only read).
        dest: a folder that does not exist yet.

    Returns:
        The members not unpacked, with why.

    Raises:
        GradingError: ``archive`` is not a zip, holds more than ``MAX_ARCHIVE_FILES`` members,
            or unpacks to more than ``MAX_ARCHIVE_BYTES``.
    """
    try:
        opened = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as err:
        raise GradingError(f"{archive} is a file but not a zip archive ({err})") from None
    skipped, total = [], 0
    with opened as zf:
        members = [i for i in zf.infolist() if not i.is_dir()]
        if len(members) > MAX_ARCHIVE_FILES:
            raise GradingError(
                f"{archive} holds {len(members)} files, more than {MAX_ARCHIVE_FILES}"
            )
        for info in members:
            target = dest / PurePosixPath(info.filename.replace("\\", "/"))
            if why := _safe_name(info):
                skipped.append(NotPlaced(Path(archive.name) / info.filename, why))
                continue
            total += info.file_size
            if total > MAX_ARCHIVE_BYTES:
                raise GradingError(
                    f"{archive} unpacks to more than {MAX_ARCHIVE_BYTES // 2**30} GiB"
                )
            try:
                with zf.open(info) as src:
                    data = src.read(MAX_NOTEBOOK_BYTES + 1)  # never more than the limit
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            except (OSError, zipfile.BadZipFile, EOFError) as err:
                skipped.append(
                    NotPlaced(Path(archive.name) / info.filename, f"cannot be unpacked ({err})")
                )
                continue
            when = datetime.datetime(*info.date_time).timestamp()
            os.utime(target, (when, when))
    return skipped


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--roster``, the grading command's one option about a download.

    Args:
        parser: the command's parser.
    """
    parser.add_argument(
        "--roster",
        type=Path,
        default=None,
        help="an LMS download's students by the ids its grade import takes: Canvas's gradebook "
        "export (by SIS Login ID), Moodle's grading worksheet (by username or e-mail); "
        "without one Canvas's students are its user ids, Moodle's participant numbers",
    )


def check_submissions(submissions: Path) -> None:
    """Refuse what is neither a folder nor a zip.

    Args:
        submissions: the path given as the submissions.

    Raises:
        GradingError: it is neither.
    """
    if not submissions.is_dir() and not zipfile.is_zipfile(submissions):
        raise GradingError(
            f"submissions folder {submissions} does not exist (give a folder, or the zip Canvas "
            "or Moodle downloaded)"
        )


def open_submissions(
    submissions: Path, out: Path, roster: Path | str | None
) -> tuple[Path, Roster | None, list[Skipped]]:
    """The folder to read (a downloaded zip unpacked into ``out/download``), the LMS's roster,
    and a row for each archive member not unpacked.

    Args:
        submissions: the submissions folder, or a zip an LMS downloaded.
        out: the workspace (outside ``submissions``).
        roster: the LMS's roster file (``--roster``), if given.

    Returns:
        The folder, the roster read, and the rows.

    Raises:
        GradingError: ``submissions`` is neither a folder nor a zip, or the roster or the zip
            cannot be read.
    """
    check_submissions(submissions)
    read = read_roster(Path(roster)) if roster else None
    if submissions.is_dir():
        return submissions, read, []
    dest = out / "download"
    if dest.is_dir() and not dest.is_symlink():  # the last run's, made again
        shutil.rmtree(dest)
    return dest, read, [Skipped(str(n.path), n.reason) for n in unpack(submissions, dest)]
