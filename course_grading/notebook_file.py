"""Read a submitted notebook file: never through a link, its size bounded before it is parsed.

What a student submits is read once, here, and nothing else opens the original: the grader
works on the copy ``run.py`` writes from what this returns.

Limits (each refusal is a reason in the report, and the submission is ``not graded``): the
file is at most ``MAX_NOTEBOOK_BYTES`` (its size is taken with ``fstat`` on the file opened
with ``O_NOFOLLOW``, before a byte is read), holds at most ``MAX_CELLS`` cells, no cell's
source is over ``MAX_CELL_SOURCE_BYTES`` and all of them together at most ``MAX_SOURCE_BYTES``
(measured on the parsed JSON, before nbformat, the cheat scan, nbgrader or a kernel sees the
notebook). Saved outputs are cleared before grading; over ``HUGE_OUTPUT_BYTES`` they are
reported, with the cell holding the most. An nbformat 3 notebook is upgraded to nbformat 4.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import nbformat

from course_grading.submissions import Submission

#: A notebook file larger than this is not read (the course's notebooks, figures saved, are
#: a few MiB at most).
MAX_NOTEBOOK_BYTES = 32 * 2**20
#: More cells than this is not a lesson's notebook (the longest lesson has 64).
MAX_CELLS = 1000
#: Source of one cell: the course's longest is 3.3 KB.
MAX_CELL_SOURCE_BYTES = 64 * 2**10
#: Source of all cells together: the course's longest notebook holds 42 KB.
MAX_SOURCE_BYTES = 512 * 2**10
#: Saved outputs above this size are reported (nbgrader clears them before grading anyway).
HUGE_OUTPUT_BYTES = 5 * 2**20


class NotRead(Exception):
    """A file the grader will not read; the message says why."""


def _size(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def read_no_follow(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, never through a link, at most ``limit`` of them.

    The file is opened with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a FIFO cannot hang the
    grader) and judged by ``fstat`` of what was opened, so a link or a swapped file between
    a check and the open is not read; a file that grows past ``limit`` while it is read is
    refused too.

    Args:
        path: the file as found (``Submission.original``).
        limit: the most bytes to accept.

    Returns:
        The file's whole content.

    Raises:
        NotRead: ``path`` is a link, not a regular file, unreadable, or over ``limit`` bytes.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotRead(f"{path.name} is a symbolic link; links are never followed") from None
        raise NotRead(f"{path.name} cannot be read ({err.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRead(f"{path.name} is not a regular file")
        over = f"{path.name} is over the {_size(limit)} limit"
        if info.st_size > limit:
            raise NotRead(f"{path.name} is {_size(info.st_size)}, over the {_size(limit)} limit")
        data = fh.read(limit + 1)
    if len(data) > limit:  # it grew while we read it
        raise NotRead(over)
    return data


def _parse(sub: Submission, data: bytes) -> dict | None:
    """The JSON of a notebook file, or ``None`` after flagging why it is not one."""
    if not data.strip():
        sub.flag("the file is empty: not a notebook", gradable=False)
        return None
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        sub.flag("the file is not text (binary data): not a notebook", gradable=False)
        return None
    except json.JSONDecodeError as err:
        sub.flag(
            f"the file is not valid JSON (line {err.lineno}, column {err.colno}: "
            f"{err.msg}): damaged or not a notebook",
            gradable=False,
        )
        return None
    except RecursionError:
        sub.flag("the file is JSON nested too deeply to be a notebook", gradable=False)
        return None
    if not isinstance(raw, dict) or not isinstance(_raw_cells(raw), list):
        sub.flag("the file is JSON but not a Jupyter notebook (no list of cells)", gradable=False)
        return None
    return raw


def _raw_cells(raw: dict) -> list | None:
    """The cells of a notebook's JSON: nbformat 4's ``cells``, nbformat 3's worksheets'."""
    if raw.get("nbformat") == 3 and isinstance(raw.get("worksheets"), list):
        sheets = [w.get("cells") for w in raw["worksheets"] if isinstance(w, dict)]
        return [c for cells in sheets if isinstance(cells, list) for c in cells]
    cells = raw.get("cells")
    return cells if isinstance(cells, list) else None


def _text_bytes(value: object) -> int:
    parts = value if isinstance(value, list) else [value]
    return sum(len(p.encode("utf-8", "surrogatepass")) for p in parts if isinstance(p, str))


def _within_limits(sub: Submission, cells: list, file_bytes: int) -> bool:
    """Flag (not gradable) a notebook over the cell and source limits; report huge outputs."""
    if len(cells) > MAX_CELLS:
        sub.flag(f"{len(cells)} cells, over the limit of {MAX_CELLS}: not graded", gradable=False)
        return False
    cells = [c if isinstance(c, dict) else {} for c in cells]
    sources = [_text_bytes(c.get("source", c.get("input", ""))) for c in cells]  # v3: "input"
    big = [(i, n) for i, n in enumerate(sources) if n > MAX_CELL_SOURCE_BYTES]
    if big:
        where = ", ".join(f"cell {i + 1} ({_size(n)})" for i, n in big[:3])
        sub.flag(
            f"source over the {_size(MAX_CELL_SOURCE_BYTES)} limit for one cell: {where}; "
            "not graded, look at it by hand",
            gradable=False,
        )
        return False
    if sum(sources) > MAX_SOURCE_BYTES:
        sub.flag(
            f"its cells hold {_size(sum(sources))} of source, over the "
            f"{_size(MAX_SOURCE_BYTES)} limit for a notebook; not graded, look at it by hand",
            gradable=False,
        )
        return False
    outputs = [len(json.dumps(c.get("outputs", []))) for c in cells]
    if sum(outputs) > HUGE_OUTPUT_BYTES:
        most = max(range(len(outputs)), key=outputs.__getitem__)
        sub.flag(
            f"huge saved output ({_size(sum(outputs))}, {_size(outputs[most])} of it in cell "
            f"{most + 1}; file {_size(file_bytes)}); outputs were cleared before grading"
        )
    return True


def read_notebook(sub: Submission) -> nbformat.NotebookNode | None:
    """``sub.original`` read as a notebook within the limits (an nbformat 3 notebook upgraded,
    and the report says so); ``None`` after flagging it not gradable with the reason.

    The limits (module docstring) are checked on the raw JSON before nbformat parses it;
    a huge saved output is reported but does not stop grading.

    Args:
        sub: the submission to read; every refusal or note goes into it.

    Returns:
        The notebook as nbformat 4, or ``None`` when there is no file, it cannot be read,
        is not a notebook, or is over a limit.
    """
    if sub.original is None:
        return None
    try:
        data = read_no_follow(sub.original, MAX_NOTEBOOK_BYTES)
    except NotRead as err:
        sub.flag(f"{err}: not graded", gradable=False)
        return None
    raw = _parse(sub, data)
    if raw is None or not _within_limits(sub, _raw_cells(raw) or [], len(data)):
        return None
    version, raw = raw.get("nbformat"), None
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as err:  # nbformat raises several types for malformed notebooks
        sub.flag(f"nbformat cannot read the notebook ({type(err).__name__}: {err})", gradable=False)
        return None
    if version != 4:
        sub.info.append(f"an nbformat {version} notebook: upgraded to nbformat 4 to grade it")
    return nb
