"""Withheld feedback is the feedback step working, not failing: listed, and exit status 0.

``feedback.WithholdInstructorMaterial`` finds instructor material in what a student's page
would show. nbgrader's converter takes any exception from a preprocessor for a failed
conversion: a traceback, ``nbgrader generate_feedback`` exiting 1 and formgrader's *Generate
Feedback* button showing an error whenever one student's feedback is rightly held back. So no
exception is raised for it:

1. the notebook to render is replaced by :func:`notice`, which holds nothing of the
   submission (were the page ever kept, it would show nothing it should not);
2. the page nbgrader is about to write is noted (:func:`hold_back`), and one warning line names
   the student, the lesson and the record of what was found;
3. nbgrader's ``post_convert_hook``, :func:`remove_withheld_pages` (set in the course's
   ``nbgrader_config.py``), deletes that page as soon as nbgrader has written it, before
   ``release_feedback`` could send it.

What cannot be checked (a missing source, release or submitted notebook) is still a failure,
with a non-zero exit status: that is generation failing, not a page held back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
from nbformat.notebooknode import NotebookNode

#: What a held-back page would say, were it ever kept (it is removed once written).
NOTICE = (
    "**Feedback held back.** Your instructor will look at this lesson's feedback before it is "
    "released. Your grade is not affected by this note."
)
#: Pages written in this process that must not stay: removed by the post-convert hook.
PENDING: list[Path] = []


def notice() -> NotebookNode:
    """The notebook rendered in place of a withheld one: the notice and nothing else.

    Returns:
        A new notebook with one markdown cell (``NOTICE``) and no nbgrader metadata.
    """
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(NOTICE)])


def hold_back(page: Path) -> None:
    """Note that ``page``, about to be written by nbgrader, must be removed once it is.

    Args:
        page: the feedback page's path (``feedback/<student>/<lesson>/<notebook>.html``).
    """
    PENDING.append(Path(page))


def remove_withheld_pages(**hook: Any) -> list[Path]:
    """nbgrader's ``GenerateFeedback.post_convert_hook``: remove every page held back so far.

    nbgrader calls it after each student's lesson is converted (with ``assignment``,
    ``student`` and ``notebooks``, which are not needed: the pages were noted by path).

    Args:
        **hook: nbgrader's keywords, unused.

    Returns:
        The pages removed (a page already gone counts too).
    """
    removed = []
    while PENDING:
        page = PENDING.pop()
        page.unlink(missing_ok=True)
        removed.append(page)
    return removed
