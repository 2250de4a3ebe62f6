"""The course's stylesheet (``course.css``) in every page built from a submission.

nbgrader's ``formgrade`` and ``feedback`` templates load Bootstrap 3 but not the notebook
stylesheet, and Bootstrap's ``td, th { padding: 0 }`` runs a markdown table's cells together
(``| 2 × 8192 | 4.29e9 |`` reads ``2 × 81924.29e9``). The styles the templates inline come
from ``resources["inlining"]``, which nbconvert's ``CSSHTMLHeaderPreprocessor`` (listed by the
template itself, so run after every configured step) starts afresh: a preprocessor cannot add
to it. So the page itself gets ``course.css`` as a ``<style>`` element at the start of its
``<head>``, where every later stylesheet still overrides it: the feedback page by
``safe_pages.FeedbackExporter``, formgrader's by its server extension (``formgrader_csp.py``).
Both pages' Content-Security-Policy allow inline styles (``style-src 'unsafe-inline'``);
nothing a student wrote is needed.
"""

from __future__ import annotations

import re
from importlib import resources as package_files

#: The stylesheet, shipped beside this module.
COURSE_CSS = package_files.files("course_grading.pages").joinpath("course.css").read_text("utf-8")
#: Marks the element, so a page is styled once.
STYLE_ID = "shapes-course-style"
_HEAD = re.compile(r"<head\b[^>]*>", re.I)
#: How far into a page its template's ``<head>`` may be (nothing of a notebook comes before it).
HEAD_WITHIN = 4096


def with_course_style(page: str) -> str:
    """``page`` with ``COURSE_CSS`` in a ``<style>`` right after its ``<head>`` (once).

    Args:
        page: a whole HTML page, as a template wrote it.

    Returns:
        The page with the stylesheet; unchanged when it has no ``<head>`` near its start (a
        fragment, or a file of the student's) or has the stylesheet already.
    """
    head = _HEAD.search(page, 0, HEAD_WITHIN)
    if head is None or f'id="{STYLE_ID}"' in page[: head.end() + 200]:
        return page
    style = f'\n<style id="{STYLE_ID}">\n{COURSE_CSS}</style>'
    return page[: head.end()] + style + page[head.end() :]
