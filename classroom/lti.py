"""Students log in from the LMS: the classroom's hub as an LTI 1.3 tool (Canvas, Moodle).

Off unless ``STATE/lti.json`` exists (root-only, like the rest of the state folder); then
``classroom/jupyterhub_config.py`` calls :func:`configure_from_state`, which replaces the PAM
login with :class:`ClassroomLTI13Authenticator`: ``jupyterhub-ltiauthenticator``'s LTI 1.3 tool
(the OpenID Connect third-party login: the LMS posts a login initiation to
``/hub/lti13/oauth_login``, the hub sends the browser to the platform's authorisation URL with a
fresh state and nonce, and the platform posts back a signed ``id_token`` to
``/hub/lti13/oauth_callback``; its signature is checked against the platform's JWKS, and its
issuer, audience, nonce, age and LTI claims too), made *local*: LocalProcessSpawner runs every
server as its user's Unix account (docs/classroom.md).

``lti.json``::

    {"issuer": "https://canvas.instructure.com",
     "client_id": ["10000000000042"],
     "authorize_url": "https://canvas.example.edu/api/lti/authorize_redirect",
     "jwks_endpoint": "https://canvas.example.edu/api/lti/security/jwks",
     "contexts": ["4dde05e8ca1973bcca9bffc13e1548820eee93a3"],
     "login_claims": ["custom:login_id", "ext:user_username", "email"]}

**Who a launch is** comes from what the platform signs and no student or misconfiguration can
choose: its issuer and ``sub``. The hub user and the Unix account are :func:`hub_name` of the
two, ``lti-`` and 28 base-32 digits of their SHA-256 (140 bits, the 32 characters an account
name may have), made by the hub in a range of uids of its own (``accounts.LTI_UIDS``); an
existing account of that name outside the range is never used. So no login (``postgres``,
``root``, a classmate's id) names an account, and two people never share one.

**What the student is called** comes from the launch's LMS login: the first of ``login_claims``
present (``custom:NAME``: the tool's custom field ``NAME``, which Canvas fills from a variable
such as ``$Canvas.user.loginId``; ``ext:user_username``: Moodle's username; any other: a
top-level claim such as ``email``), else ``sub``. :func:`student_id` of it is the student's
nbgrader id, set in their server's environment (``SHAPES_STUDENT_ID``), shown in reports and
matched by the grade export. It is ``course_grading.lms.accounts.student_id``, written out here
because the hub runs in the classroom's view, where ``course_grading`` is hidden
(private_view.py); ``tests/classroom/test_lti.py`` keeps the two equal. The registry
(``STATE/secrets/lti_users.json``) binds each nbgrader id to one issuer and ``sub``: a second
person whose login gives the same id (ignoring case, as the LMSs compare logins) is refused
with a message saying so, and nothing of the first is touched.

**Refused launches**: from a course (``context``) not in ``contexts`` (required: any course on
the same LMS could otherwise send its students, or its teachers, here); with a custom field the
LMS sent unsubstituted (``$Canvas.user.loginId``: the variable was not available, and every
launch would carry the same text); with neither a learner's nor an instructor's role.

**The instructor** is whoever the launch's roles claim calls an instructor of the course
(``http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor``; ``instructor_roles`` in
lti.json to change): they log in as the classroom's instructor account (``run.py start
--instructor``, which owns the course folder), never as an account of their own, and a name can
never make anyone an instructor.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import time
import unicodedata
from base64 import b32encode
from hashlib import sha256
from pathlib import Path
from typing import Any

from jupyterhub.auth import LocalAuthenticator
from ltiauthenticator.lti13.auth import LTI13Authenticator
from ltiauthenticator.lti13.error import LoginError
from traitlets import List, Set, Tuple, Unicode

# A sibling module, loaded by its path as the hub loads this file (classroom/ is no package).
_spec = importlib.util.spec_from_file_location(
    "classroom_accounts", Path(__file__).parent / "accounts.py"
)
accounts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(accounts)

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
CUSTOM, EXT, CONTEXT, ROLES = CLAIM + "custom", CLAIM + "ext", CLAIM + "context", CLAIM + "roles"
#: Where a launch names the course's grade service (LTI Advantage's AGS): its line items URL.
AGS_ENDPOINT = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
INSTRUCTOR, LEARNER = MEMBERSHIP + "Instructor", MEMBERSHIP + "Learner"
#: What lti.json must give.
REQUIRED = ("issuer", "client_id", "authorize_url", "jwks_endpoint", "contexts")
#: Every hub user (and Unix account) a launch makes starts so; see :func:`hub_name`.
PREFIX = "lti-"
#: A custom field's value that is an LTI substitution variable left as it was sent
#: (``$Canvas.user.loginId``, ``$User.username``, ``$Person.name.given``).
UNSUBSTITUTED = re.compile(r"\$[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+")
_KEPT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_MADE_UP = re.compile(r".*--[a-z2-7]{16}", re.IGNORECASE)
_OTHER = re.compile(r"[^a-z0-9._@-]+")


def hub_name(issuer: str, sub: str) -> str:
    """The hub user and Unix account of the platform user ``sub`` of ``issuer``.

    Args:
        issuer: the platform's issuer (``iss``), as the launch signs it.
        sub: the platform's id of the user (``sub``).

    Returns:
        ``lti-`` and the first 28 base-32 digits (lower case) of SHA-256(issuer NUL sub).
    """
    digest = b32encode(sha256(f"{issuer}\0{sub}".encode()).digest()).decode().lower()
    return PREFIX + digest[: 32 - len(PREFIX)]


def student_id(login: str) -> str:
    """The nbgrader id of the LMS login ``login``: ``course_grading.lms.accounts.student_id``.

    Args:
        login: the id the LMS gives the student.

    Returns:
        ``login`` itself when it is a safe id not shaped like a made-up one; otherwise its
        letters and digits (lower case, accents dropped, other runs as ``_``, at most 32), ``--``
        and 16 base-32 digits of SHA-256(login).
    """
    if _KEPT.fullmatch(login) and not _MADE_UP.fullmatch(login):
        return login
    plain = unicodedata.normalize("NFKD", login.strip().lower()).encode("ascii", "ignore")
    stem = _OTHER.sub("_", plain.decode()).strip("._@-")[:32].strip("._@-") or "u"
    digest = b32encode(sha256(login.encode("utf-8", "surrogatepass")).digest()).decode()
    return f"{stem}--{digest[:16].lower()}"


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


def lineitems_of(id_token: dict[str, Any]) -> str:
    """The course's line items URL a launch names (``""``: none, or not an https URL).

    Args:
        id_token: the launch's verified claims.

    Returns:
        The AGS endpoint claim's ``lineitems``.
    """
    endpoint = id_token.get(AGS_ENDPOINT)
    url = endpoint.get("lineitems") if isinstance(endpoint, dict) else None
    return url if isinstance(url, str) and url.startswith(("https://", "http://127.0.0.1")) else ""


def unsubstituted(id_token: dict[str, Any]) -> list[str]:
    """The custom fields a launch carries as the variable they should have been replaced by.

    Args:
        id_token: the launch's verified claims.

    Returns:
        ``name=value`` for each such field (empty: none).
    """
    custom = id_token.get(CUSTOM)
    if not isinstance(custom, dict):
        return []
    return [f"{name}={value}" for name, value in sorted(custom.items())
            if isinstance(value, str) and UNSUBSTITUTED.fullmatch(value.strip())]  # fmt: skip


class Registry:
    """``lti_users.json``: each hub user a launch made, with its issuer, ``sub`` and nbgrader id.

    Written by the hub (root) only, replaced whole on each change; ``ids_file``, beside it for
    the instructor's collect step (``course_grading/nbgrader/collect.py``), maps each account to
    its nbgrader id.
    """

    def __init__(self, path: Path, ids_file: Path | None = None, group: int | None = None) -> None:
        self.path, self.ids_file, self.group = Path(path), ids_file, group

    def users(self) -> dict[str, dict[str, Any]]:
        """Hub user -> its record (empty when nobody launched yet)."""
        if not self.path.is_file():
            return {}
        return dict(json.loads(self.path.read_text(encoding="utf-8")).get("users", {}))

    def claim(self, name: str, issuer: str, sub: str, login: str, lineitems: str = "") -> str:
        """Bind ``name`` to the platform user, and their nbgrader id to ``name``; that id.

        A returning user keeps the id they were first given (their submissions are under it),
        whatever login they launch with now. ``sub`` is what the grade passback posts to
        (``course_grading/lms/passback.py``), and ``lineitems``, the course's line items URL
        the launch named (its AGS endpoint claim), where.

        Raises:
            LoginError: ``name`` is another platform user's (a digest collision), or the id is
                already another person's, ignoring case.
        """
        users = self.users()
        mine = users.get(name)
        if mine is not None:
            if (mine["issuer"], mine["sub"]) != (issuer, sub):
                raise LoginError(f"hub user {name} belongs to another platform user: refused")
            mine["last"] = _now()
            if lineitems:
                mine["lineitems"] = lineitems
            self._write(users)
            return str(mine["student_id"])
        wanted = student_id(login)
        for record in users.values():
            if str(record["student_id"]).casefold() == wanted.casefold():
                raise LoginError(
                    f"the LMS login {login!r} gives the nbgrader id {wanted!r}, which another "
                    f"person on this hub already has (since {record['first']}): the LMS sends "
                    "one login for two people, so neither could be graded apart. Nobody was "
                    "logged in; ask the course's instructor (docs/classroom.md, LTI)."
                )
        users[name] = {"issuer": issuer, "sub": sub, "login": login, "student_id": wanted,
                       "first": _now(), "last": _now()}  # fmt: skip
        if lineitems:
            users[name]["lineitems"] = lineitems
        self._write(users)
        return wanted

    def _write(self, users: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _replace(self.path, json.dumps({"users": users}, indent=2), 0o600)
        if self.ids_file is not None:
            self.ids_file.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            ids = {name: record["student_id"] for name, record in users.items()}
            _replace(self.ids_file, json.dumps(ids, indent=2), 0o640, self.group)


def _replace(path: Path, text: str, mode: int, group: int | None = None) -> None:
    """Write ``path`` anew through a temporary file beside it (never half-written)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(text)
    if group is not None:
        os.chown(temporary, 0, group)
    os.replace(temporary, path)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ClassroomLTI13Authenticator(LocalAuthenticator, LTI13Authenticator):
    """LTI 1.3 login, each launch its own account by issuer and ``sub`` (module docstring)."""

    login_claims = List(
        Unicode(), ["custom:login_id", "ext:user_username", "email"], config=True,
        help="claims naming the user, in order: custom:NAME, ext:NAME or a top-level claim",
    )  # fmt: skip
    contexts = Set(Unicode(), config=True, help="LMS course (context) ids allowed (required)")
    instructor = Unicode("", config=True, help="the Unix account instructors log in as")
    instructor_roles = Set(Unicode(), {INSTRUCTOR}, config=True, help="roles that teach")
    student_roles = Set(Unicode(), {LEARNER}, config=True, help="roles that learn")
    registry_file = Unicode("", config=True, help="lti_users.json (module docstring)")
    ids_file = Unicode("", config=True, help="account -> nbgrader id, for the instructor")
    home_root = Unicode("/home", config=True, help="where launched users' homes are made")
    uids = Tuple((0, 0), config=True, help="the uid range of launched users' accounts")

    def registry(self) -> Registry:
        """The registry this hub keeps (``registry_file``)."""
        group = pwd.getpwnam(self.instructor).pw_gid if self.ids_file else None
        ids = Path(self.ids_file) if self.ids_file else None
        return Registry(Path(self.registry_file), ids, group)

    def get_username(self, token: dict[str, Any]) -> str:
        """The hub user of a launch: :func:`hub_name` of its issuer and ``sub``.

        Args:
            token: the launch's verified ``id_token`` claims.

        Returns:
            The hub user's name.
        """
        return hub_name(str(token.get("iss", "")), str(token.get("sub", "")))

    async def authenticate(self, handler: Any, data: dict[str, Any] | None = None) -> dict:
        """Who a verified launch is, or why it is refused (module docstring).

        Args:
            handler: the callback handler.
            data: the verified ``id_token`` claims.

        Returns:
            The authentication model: the hub user, and the launch as ``auth_state``.

        Raises:
            LoginError: another course's launch, an unsubstituted custom field, no learner's or
                instructor's role, no ``sub``, an account of the name outside the classroom's
                range, or an nbgrader id another person has.
        """
        token = dict(data or {})
        context = token.get(CONTEXT)
        context = context.get("id") if isinstance(context, dict) else None
        if context not in self.contexts:
            raise LoginError(f"launches from course {context!r} are not for this hub")
        if fields := unsubstituted(token):
            raise LoginError(
                f"the LMS sent custom field(s) {', '.join(fields)} unsubstituted: it could not "
                "fill the variable (Canvas: the tool's privacy level must be Public), and every "
                "launch would carry the same text. Fix the tool's custom fields in the LMS."
            )
        claimed = token.get(ROLES)
        roles = {r for r in claimed if isinstance(r, str)} if isinstance(claimed, list) else set()
        if roles & self.instructor_roles:
            self.log.info("instructor launch: %s of %s", token.get("sub"), token.get("iss"))
            return {"name": self.instructor, "auth_state": token}
        if not roles & self.student_roles:
            raise LoginError(f"the launch's roles ({', '.join(sorted(roles)) or 'none'}) are "
                             "neither a learner's nor an instructor's of this course")  # fmt: skip
        issuer, sub = str(token.get("iss", "")), str(token.get("sub", "")).strip()
        if not sub:
            raise LoginError("the launch has no sub: it names no platform user")
        name = hub_name(issuer, sub)
        if accounts.exists(name) and not accounts.in_range(name, tuple(self.uids)):
            raise LoginError(f"a Unix account {name} exists outside the classroom's uids: unused")
        login = login_of(token, list(self.login_claims))
        self.registry().claim(name, issuer, sub, login, lineitems_of(token))
        return {"name": name, "auth_state": token}

    def student_id_of(self, name: str) -> str | None:
        """The nbgrader id of hub user ``name`` (``None``: not a launched student).

        Args:
            name: a hub user.

        Returns:
            Its id from the registry, or ``None`` for a name outside the ``lti-`` namespace.

        Raises:
            KeyError: an ``lti-`` user the registry does not know (its server must not start).
        """
        if not name.startswith(PREFIX):
            return None
        return str(self.registry().users()[name]["student_id"])

    def system_user_exists(self, user: Any) -> bool:
        """Whether the hub user's account exists; a launched user's only in the range.

        Args:
            user: the hub user.

        Returns:
            True for an existing account (a launched user's: with its uid in ``uids``).
        """
        if user.name.startswith(PREFIX):
            return accounts.in_range(user.name, tuple(self.uids))
        return accounts.exists(user.name)

    def add_system_user(self, user: Any) -> None:
        """Make a launched user's account: uid and gid in ``uids``, a private home.

        Args:
            user: the hub user (an ``lti-`` name; the instructor's account is never made here).

        Raises:
            RuntimeError: not a launched user's name, or ``useradd`` failed.
        """
        if not user.name.startswith(PREFIX):
            raise RuntimeError(f"{user.name}: the classroom makes accounts for launches only")
        home = Path(self.home_root) / user.name
        accounts.create_in_range(user.name, home, tuple(self.uids), "Shapes LTI student")


def configure(
    c: Any,
    settings: dict[str, Any],
    *,
    instructor: str,
    registry: Path,
    ids_file: Path | None,
    home_root: Path,
) -> None:
    """Make ``c`` (a JupyterHub configuration) log users in by LTI 1.3 with ``settings``.

    Args:
        c: the hub's configuration (``get_config()``).
        settings: ``lti.json``'s contents (module docstring).
        instructor: the Unix account instructors log in as.
        registry: ``lti_users.json``, root's only.
        ids_file: account -> nbgrader id, readable by the instructor (``None``: not written).
        home_root: where launched users' homes are made.

    Raises:
        ValueError: a required setting is missing or empty, the instructor's account is in the
            launches' namespace, or the uid range overlaps the machine's own.
    """
    missing = [key for key in REQUIRED if not settings.get(key)]
    if missing:
        raise ValueError(f"lti.json has no {', '.join(missing)}")
    if instructor.startswith(PREFIX) or not instructor:
        raise ValueError(f"the instructor's account ({instructor!r}) must not start with {PREFIX}")
    uids = tuple(settings.get("uids", accounts.LTI_UIDS))
    if problems := accounts.range_problems(uids):
        raise ValueError(f"lti.json's uids: {'; '.join(problems)}")
    client_ids = settings["client_id"]
    c.JupyterHub.authenticator_class = ClassroomLTI13Authenticator
    auth = c.ClassroomLTI13Authenticator
    auth.issuer = settings["issuer"]
    auth.client_id = {client_ids} if isinstance(client_ids, str) else set(client_ids)
    auth.authorize_url = settings["authorize_url"]
    auth.jwks_endpoint = settings["jwks_endpoint"]
    auth.contexts = set(settings["contexts"])
    if "login_claims" in settings:
        auth.login_claims = list(settings["login_claims"])
    if "instructor_roles" in settings:
        auth.instructor_roles = set(settings["instructor_roles"])
    if "student_roles" in settings:
        auth.student_roles = set(settings["student_roles"])
    auth.instructor = instructor
    auth.registry_file = str(registry)
    auth.ids_file = str(ids_file or "")
    auth.home_root = str(home_root)
    auth.uids = uids
    auth.create_system_users = True  # LocalProcessSpawner: an account per launched user
    auth.allow_all = True  # who may launch is the LMS's course roster (and ``contexts``)


def configure_from_state(c: Any, state: Path) -> bool:
    """:func:`configure` from ``state/lti.json`` when it exists; the classroom's hook.

    Args:
        c: the hub's configuration.
        state: the classroom's state folder (its ``classroom.json`` names the instructor).

    Returns:
        Whether LTI login was configured.
    """
    path = Path(state) / "lti.json"
    if not path.is_file():
        return False
    state = Path(state)
    instructor = json.loads((state / "classroom.json").read_text())["instructor"]
    configure(c, json.loads(path.read_text(encoding="utf-8")), instructor=instructor,
              registry=state / "secrets" / "lti_users.json", ids_file=ids_file(state),
              home_root=state / "home")  # fmt: skip
    return True


def ids_file(state: Path) -> Path:
    """Where the hub writes account -> nbgrader id for the instructor (``STATE/lti/``).

    Args:
        state: the classroom's state folder.

    Returns:
        ``STATE/lti/student_ids.json``.
    """
    return Path(state) / "lti" / "student_ids.json"
