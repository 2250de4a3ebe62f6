"""The nbconvert steps that make every page built from a submission inert (``active.py``).

The course's ``nbgrader_config.py`` names them, so they hold wherever nbgrader builds a page
from a submission with that configuration: ``nbgrader generate_feedback`` (by hand, from
``python -m course_grading``, or formgrader's *Generate Feedback* button) and formgrader's
manual-grading view, which renders the autograded notebook with an ``HTMLExporter`` made from
the course configuration:

- ``NeutraliseActiveContent`` (a preprocessor, in ``HTMLExporter.preprocessors``,
  ``GenerateFeedback.preprocessors`` and the autograde steps, so the stored autograded copy
  holds inert outputs too): outputs, raw cells, attachments and metadata, as ``active.py`` says;
- ``SafeMarkdown`` (the ``markdown2html`` filter): markdown, the student's and the lesson's
  alike, rendered as nbconvert renders it, its TeX as MathML (``mathml.py``: no page needs
  MathJax for it), and then cleaned by the allow-list (formgrader's and
  the feedback's templates render markdown cells themselves and ignore
  ``HTMLExporter.sanitize_html``, so a setting alone would not do);
- ``FeedbackExporter`` (``GenerateFeedback.exporter_class``): nbconvert's HTML with a
  ``Content-Security-Policy`` meta element first in ``<head>`` (``FEEDBACK_CSP``): a feedback
  page is static, so it may run no script and load nothing but its own inline styles and
  ``data:`` images, wherever it is opened (a file, Jupyter's ``/files/``, a web server); then
  the course's stylesheet (``course_style.py``: tables spaced, formulas drawn).

Formgrader's own pages get their policy from the server extension ``formgrader_csp.py``.
"""

from __future__ import annotations

import re
from typing import Any

from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.exporters.exporter import ResourcesDict
from nbconvert.preprocessors import Preprocessor
from nbformat.notebooknode import NotebookNode
from traitlets import Bool
from traitlets.config import LoggingConfigurable

from course_grading.pages.active import clean_html, neutralise_notebook
from course_grading.pages.course_style import with_course_style
from course_grading.pages.mathml import markdown_to_html

#: A feedback page runs nothing and loads nothing; ``frame-ancestors`` has no effect in a meta.
FEEDBACK_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)
_HEAD = re.compile(r"<head\b[^>]*>", re.I)
#: How far into a page its template's ``<head>`` may be (nothing of a notebook comes before it).
HEAD_WITHIN = 4096


class NeutraliseActiveContent(Preprocessor):
    """Preprocessor: make every output, raw cell and attachment of a notebook inert.

    Idempotent (what it leaves is inert already), so it may run at more than one step.
    """

    enabled = Bool(True).tag(config=True)  # nbconvert's preprocessors are off unless enabled

    def preprocess(
        self, nb: NotebookNode, resources: ResourcesDict
    ) -> tuple[NotebookNode, ResourcesDict]:
        """Every output, raw cell and attachment of ``nb`` made inert (``neutralise_notebook``).

        Args:
            nb: the notebook.
            resources: nbconvert's resources, passed on.

        Returns:
            The inert notebook and ``resources``.
        """
        return neutralise_notebook(nb), resources


class SafeMarkdown(LoggingConfigurable):
    """The ``markdown2html`` filter: the exporter's own rendering, then the allow-list.

    Registered through ``HTMLExporter.filters``; nbconvert makes it with the exporter as its
    parent, whose ``markdown2html`` (attachments, ``embed_images``, anchors) does the rendering.
    """

    # Jinja hands the template context to a filter that carries this marker (as
    # ``pass_context`` sets it on a function); the context holds the cell's attachments.
    jinja_pass_arg = pass_context(lambda: None).jinja_pass_arg  # type: ignore[attr-defined]

    def __call__(self, context: Any, source: str) -> str:
        """Markdown rendered by the exporter (its TeX as MathML), then cleaned by the allow-list.

        Args:
            context: the Jinja context (the cell's attachments).
            source: the Markdown cell's source.

        Returns:
            The HTML, holding only what ``active.clean_html`` allows.

        Raises:
            TypeError: the filter's parent is not an ``HTMLExporter`` (no ``markdown2html``).
        """
        if getattr(self.parent, "markdown2html", None) is None:
            raise TypeError("SafeMarkdown must be registered by an HTMLExporter")
        return clean_html(markdown_to_html(self.parent, context, source))


def with_policy(page: str, policy: str) -> str:
    """``page`` with a ``Content-Security-Policy`` meta element right after its ``<head>``.

    Args:
        page: a whole HTML page.
        policy: the policy's text (``FEEDBACK_CSP``).

    Returns:
        The page with the meta element inserted.

    Raises:
        ValueError: the page has no ``<head>`` in its first ``HEAD_WITHIN`` characters: it is
            never written without its policy.
    """
    head = _HEAD.search(page, 0, HEAD_WITHIN)
    if head is None:
        raise ValueError(
            f"no <head> in the first {HEAD_WITHIN} characters of the page: cannot give it a "
            "Content-Security-Policy, so it is not written (check HTMLExporter.template_name)"
        )
    meta = f'\n<meta http-equiv="Content-Security-Policy" content="{policy}">'
    return page[: head.end()] + meta + page[head.end() :]


class FeedbackExporter(HTMLExporter):
    """nbconvert's ``HTMLExporter`` whose pages carry ``FEEDBACK_CSP`` and the course's
    stylesheet (``course_style.py``; module docstring)."""

    def from_notebook_node(  # type: ignore[override]
        self, nb: NotebookNode, resources: dict | None = None, **kw: Any
    ) -> tuple[str, dict]:
        """The exporter's page, carrying ``FEEDBACK_CSP``.

        Args:
            nb: the feedback notebook.
            resources: nbconvert's resources.
            **kw: passed on to ``HTMLExporter.from_notebook_node``.

        Returns:
            The page with its policy, and the resources.
        """
        page, resources = super().from_notebook_node(nb, resources, **kw)
        return with_policy(with_course_style(page), FEEDBACK_CSP), resources
