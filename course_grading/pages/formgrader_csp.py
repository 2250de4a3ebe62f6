"""Formgrader's pages under a strict Content-Security-Policy: a Jupyter server extension.

Formgrader (nbgrader's server extension) shows each submission as a page of the instructor's
own Jupyter origin, where a script could use the instructor's session: write files through the
contents API, change any student's grade through formgrader's API, open a terminal. Every
submission is cleaned before it is rendered (``safe_pages.py``); this is the second wall, so
that whatever a sanitiser missed still cannot run. jupyter_server's own default policy is
only ``frame-ancestors 'self'``. This extension sets, on formgrader's handlers only (JupyterLab
and every other page keep theirs):

- pages: ``script-src 'self' 'nonce-…' 'unsafe-hashes' 'sha256-…'``. Formgrader's JavaScript is
  static files under ``/formgrader/static/`` (``'self'``); its templates also hold inline
  ``<script>`` blocks (page variables such as the submission id, tooltips): those get a fresh
  nonce per response, but only when they come before the notebook's own markup, so nothing a
  notebook holds ever carries one. The five inline ``onclick`` handlers of its templates (show
  or hide student names, "Add new student…", "Add new assignment…") are allowed by the hashes
  of their exact text alone (``'unsafe-hashes'``): a submission's markup can run nothing but
  those five calls, each of which only opens formgrader's own dialog or toggles names.
  MathJax 2 (nbconvert's templates load it, formgrader's script calls it) from its folder on
  cdnjs only; where there is no network it fails to load, as it would without this policy.
  No ``'unsafe-inline'`` and no ``'unsafe-eval'`` for scripts (formgrader needs neither).
  ``style-src 'self' 'unsafe-inline'``: its templates and nbconvert's pages style inline.
  ``img-src``, ``font-src``: ``'self' data:`` (plots are data: images); ``connect-src
  'self'`` (its API); ``frame-ancestors 'self'`` (JupyterLab's Formgrader tab frames it);
  ``base-uri 'none'``, ``object-src 'none'``, ``form-action 'self'``; violations are reported
  to jupyter_server's CSP report handler, which logs them.
- a submission's own files (``/formgrader/submissions/<id>/files/…``: whatever the student put
  beside the notebook, an ``.html`` file included): no script at all, and ``sandbox``, as
  jupyter_server serves ``/files/``;
- the API: ``default-src 'none'``.

A page also gets the course's stylesheet at the start of its ``<head>`` (``course_style.py``:
formgrader's template, like the feedback's, leaves a markdown table's cells unspaced).

It is enabled for every server of the environment by the package's
``etc/jupyter/jupyter_server_config.d/course_grading.json`` and explicitly for the classroom's
instructor (``classroom/course_folder.py``); a server without nbgrader's formgrader loads it
harmlessly.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from typing import Any

from jupyter_server.utils import url_path_join
from tornado import web

from course_grading.pages.course_style import with_course_style

#: nbconvert's templates load MathJax 2 from this CDN folder, and formgrader's script needs it
#: (``formgrade.js`` calls ``MathJax.Hub`` while it sets up its keyboard navigation).
MATHJAX = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/"
#: The inline event handlers of formgrader's templates (nbgrader 0.9), allowed by hash: each
#: attribute's exact text, which calls a function of formgrader's own static scripts.
INLINE_HANDLERS = (
    "toggle_name(true);",  # formgrade/formgrade_macros.html.j2: show or hide a student's name
    "toggle_name(false);",
    "toggleAllNames()",  # gradebook_notebook_submissions.tpl
    "createStudentModal();",  # manage_students.tpl: "Add new student..."
    "createAssignmentModal();",  # manage_assignments.tpl: "Add new assignment..."
)
#: Where a submission page's notebook begins (``formgrade/index.html.j2``): no nonce after it.
NOTEBOOK_START = 'id="notebook-container"'
API_POLICY = "default-src 'none'; frame-ancestors 'self'"
FILES_POLICY = (
    "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox; "
    "frame-ancestors 'self'"
)
_INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc\s*=)", re.I)
_PAGE_START = ("<!doctype html", "<html")


def _hash(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def page_policy(nonce: str, report_uri: str) -> str:
    """The policy of one formgrader page whose own inline scripts carry ``nonce``.

    Args:
        nonce: this response's fresh nonce (URL-safe base64, never reused).
        report_uri: where browsers post violations (jupyter_server's CSP report handler
            under the server's base URL).

    Returns:
        The ``Content-Security-Policy`` header's value (module docstring, "pages").
    """
    handlers = " ".join(_hash(h) for h in INLINE_HANDLERS)
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src 'self' 'nonce-{nonce}' 'unsafe-hashes' {handlers} {MATHJAX}",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            f"font-src 'self' data: {MATHJAX}",
            "connect-src 'self'",
            "frame-ancestors 'self'",
            "base-uri 'none'",
            "object-src 'none'",
            "form-action 'self'",
            f"report-uri {report_uri}",
        ]
    )


def with_nonces(page: str, nonce: str) -> str:
    """``page`` with ``nonce`` on each inline ``<script>`` before the notebook's markup.

    Formgrader's templates put their own scripts before ``NOTEBOOK_START``; everything after
    it may come from the submission, so nothing there gets the nonce, whatever it holds.

    Args:
        page: a formgrader page's HTML, as its handler writes it.
        nonce: the nonce the response's policy names.

    Returns:
        The page, each ``<script`` tag without a ``src`` before the notebook's start opened as
        ``<script nonce="..."``; the whole page when it has no notebook.
    """
    end = page.find(NOTEBOOK_START)
    own, rest = (page, "") if end < 0 else (page[:end], page[end:])
    return _INLINE_SCRIPT.sub(f'<script nonce="{nonce}"', own) + rest


def _is_page(chunk: Any) -> bool:
    return isinstance(chunk, str) and chunk.lstrip()[:20].lower().startswith(_PAGE_START)


def install(handler_class: type | None = None) -> type:
    """Give ``handler_class`` (formgrader's ``BaseHandler``) and its subclasses the policies.

    Idempotent; returns the class.

    ``content_security_policy`` (which jupyter_server's handlers send) becomes the API's policy,
    or the files' policy on a static-file handler; ``write`` sets the page policy with a fresh
    nonce when the chunk written is a whole HTML page.

    Args:
        handler_class: the class to patch; formgrader's ``BaseHandler`` when ``None`` (imported
            only then, so the module loads without nbgrader).

    Returns:
        ``handler_class``, patched (once: a second call changes nothing).
    """
    if handler_class is None:
        from nbgrader.server_extensions.formgrader.base import BaseHandler

        handler_class = BaseHandler
    if getattr(handler_class, "_shapes_csp", False):
        return handler_class
    write = handler_class.write  # tornado's RequestHandler.write

    def content_security_policy(self: web.RequestHandler) -> str:
        return FILES_POLICY if isinstance(self, web.StaticFileHandler) else API_POLICY

    def write_with_policy(self: web.RequestHandler, chunk: Any) -> None:
        if _is_page(chunk) and not isinstance(self, web.StaticFileHandler):
            nonce = secrets.token_urlsafe(18)
            chunk = with_nonces(with_course_style(chunk), nonce)
            report = url_path_join(self.settings.get("base_url", "/"), "api/security/csp-report")
            self.set_header("Content-Security-Policy", page_policy(nonce, report))
        write(self, chunk)

    handler_class.content_security_policy = property(content_security_policy)  # type: ignore[attr-defined]
    handler_class.write = write_with_policy  # type: ignore[method-assign]
    handler_class._shapes_csp = True  # type: ignore[attr-defined]
    return handler_class


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "course_grading.pages.formgrader_csp"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    install()
    serverapp.log.info("course_grading.pages.formgrader_csp: formgrader's pages carry a strict CSP")
