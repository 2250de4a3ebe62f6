"""Students log in from the LMS: the classroom's hub as an LTI 1.3 tool (Canvas, Moodle).

Off unless ``STATE/lti.json`` exists (root-only, like the rest of the state folder); then
``classroom/jupyterhub_config.py`` calls :func:`configure`, which replaces the PAM login with
:class:`ClassroomLTI13Authenticator`: ``jupyterhub-ltiauthenticator``'s LTI 1.3 tool (the
OpenID Connect third-party login: the LMS posts a login initiation to ``/hub/lti13/oauth_login``,
the hub sends the browser to the platform's authorisation URL with a fresh state and nonce, and
the platform posts back a signed ``id_token`` to ``/hub/lti13/oauth_callback``; its signature is
checked against the platform's JWKS, and its issuer, audience, nonce, age and LTI claims too),
made *local*: each launched user gets a Unix account of the same name at first login, because the
classroom's LocalProcessSpawner runs every server as its user (docs/classroom.md).

``lti.json``::

    {"issuer": "https://canvas.instructure.com",
     "client_id": ["10000000000042"],
     "authorize_url": "https://canvas.example.edu/api/lti/authorize_redirect",
     "jwks_endpoint": "https://canvas.example.edu/api/lti/security/jwks",
     "contexts": ["4dde05e8ca1973bcca9bffc13e1548820eee93a3"],
     "login_claims": ["custom:login_id", "ext:user_username", "email"]}

The student's name on the hub, and so their nbgrader id, comes from the launch: the first of
``login_claims`` present (``custom:NAME``: the tool's custom field ``NAME``, which Canvas fills
from a variable such as ``$Canvas.user.loginId``; ``ext:user_username``: Moodle's username;
any other: a top-level claim such as ``email``), else ``sub``, made an account name by
:func:`account_name`. It is ``course_grading.lms.accounts.account_name`` (which the grade export
applies to the LMS's ids, so such a student's grades find their row), written out here because
the hub runs in the classroom's view, where ``course_grading`` is hidden (private_view.py);
``tests/classroom/test_lti.py`` keeps the two equal. A launch from a course (``context``) not
in ``contexts`` is refused, when ``contexts`` is given: any course on the same LMS could
otherwise send its students to this hub.
"""

from __future__ import annotations

import json
import re
from hashlib import sha256
from pathlib import Path
from typing import Any

from jupyterhub.auth import LocalAuthenticator
from ltiauthenticator.lti13.auth import LTI13Authenticator
from ltiauthenticator.lti13.error import LoginError
from traitlets import List, Set, Unicode

CUSTOM = "https://purl.imsglobal.org/spec/lti/claim/custom"
EXT = "https://purl.imsglobal.org/spec/lti/claim/ext"
CONTEXT = "https://purl.imsglobal.org/spec/lti/claim/context"
#: What lti.json must give.
REQUIRED = ("issuer", "client_id", "authorize_url", "jwks_endpoint")
_VALID = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_OTHER = re.compile(r"[^a-z0-9_-]+")


def account_name(login: str) -> str:
    """The hub (and nbgrader) name of the LMS login ``login`` (see the module docstring).

    Args:
        login: the id the LMS gives the student.

    Returns:
        ``login`` itself when it is a valid account name (``[a-z][a-z0-9_-]``, at most 32);
        otherwise its letters and digits (lower case, other runs as ``_``, a leading ``u`` if
        it does not start with a letter), at most 25 characters, then ``-`` and the first six
        hex digits of SHA-256(login).
    """
    if _VALID.fullmatch(login):
        return login
    stem = _OTHER.sub("_", login.strip().lower()).strip("_")
    stem = stem if stem[:1].isalpha() else f"u{stem}"
    return f"{stem[:25]}-{sha256(login.encode()).hexdigest()[:6]}"


def login_of(id_token: dict[str, Any], claims: list[str]) -> str:
    """The LMS login a launch names, from the first of ``claims`` it holds, else ``sub``.

    Args:
        id_token: the launch's verified ``id_token`` claims.
        claims: where to look, in order: ``custom:NAME``, ``ext:NAME`` or a top-level claim.

    Returns:
        The login (stripped).

    Raises:
        LoginError: the launch names nobody (no such claim and no ``sub``).
    """
    for claim in claims:
        where, _, name = claim.rpartition(":")
        holder = {"custom": id_token.get(CUSTOM), "ext": id_token.get(EXT)}.get(where, id_token)
        value = holder.get(name) if isinstance(holder, dict) else None
        if isinstance(value, str) and value.strip():
            return value.strip()
    if isinstance(id_token.get("sub"), str) and id_token["sub"].strip():
        return id_token["sub"].strip()
    raise LoginError(f"the launch names no user (none of {claims} or sub)")


class ClassroomLTI13Authenticator(LocalAuthenticator, LTI13Authenticator):
    """LTI 1.3 login with a local account per user, named from the launch (module docstring)."""

    login_claims = List(
        Unicode(), ["custom:login_id", "ext:user_username", "email"], config=True,
        help="claims naming the user, in order: custom:NAME, ext:NAME or a top-level claim",
    )  # fmt: skip
    contexts = Set(Unicode(), config=True, help="LMS course (context) ids allowed; all if empty")

    def get_username(self, token: dict[str, Any]) -> str:
        """The hub user (and nbgrader id) of a launch: its login as an account name.

        Args:
            token: the launch's verified ``id_token`` claims.

        Returns:
            ``account_name(login_of(token, login_claims))``.
        """
        return account_name(login_of(token, list(self.login_claims)))

    async def authenticate(self, handler: Any, data: dict[str, Any] | None = None) -> dict:
        """Refuse a launch from another course, then log in as the LTI authenticator does.

        Args:
            handler: the callback handler.
            data: the verified ``id_token`` claims.

        Returns:
            The authentication model: the name, and the launch as ``auth_state``.

        Raises:
            LoginError: the launch's course is not one of ``contexts``.
        """
        context = ((data or {}).get(CONTEXT) or {}).get("id")
        if self.contexts and context not in self.contexts:
            raise LoginError(f"launches from course {context!r} are not for this hub")
        return await super().authenticate(handler, data)


def configure(c: Any, settings: dict[str, Any]) -> None:
    """Make ``c`` (a JupyterHub configuration) log users in by LTI 1.3 with ``settings``.

    Args:
        c: the hub's configuration (``get_config()``).
        settings: ``lti.json``'s contents (module docstring).

    Raises:
        ValueError: a required setting is missing or empty.
    """
    missing = [key for key in REQUIRED if not settings.get(key)]
    if missing:
        raise ValueError(f"lti.json has no {', '.join(missing)}")
    client_ids = settings["client_id"]
    c.JupyterHub.authenticator_class = ClassroomLTI13Authenticator
    auth = c.ClassroomLTI13Authenticator
    auth.issuer = settings["issuer"]
    auth.client_id = {client_ids} if isinstance(client_ids, str) else set(client_ids)
    auth.authorize_url = settings["authorize_url"]
    auth.jwks_endpoint = settings["jwks_endpoint"]
    auth.contexts = set(settings.get("contexts", []))
    if "login_claims" in settings:
        auth.login_claims = list(settings["login_claims"])
    auth.create_system_users = True  # LocalProcessSpawner: an account per launched user
    auth.allow_all = True  # who may launch is the LMS's course roster (and ``contexts``)


def configure_from_state(c: Any, state: Path) -> bool:
    """:func:`configure` from ``state/lti.json`` when it exists; the classroom's hook.

    Args:
        c: the hub's configuration.
        state: the classroom's state folder.

    Returns:
        Whether LTI login was configured.
    """
    path = Path(state) / "lti.json"
    if not path.is_file():
        return False
    configure(c, json.loads(path.read_text(encoding="utf-8")))
    return True
