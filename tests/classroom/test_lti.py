"""Students log in from Canvas or Moodle through LTI 1.3 (issues 28 and 42), end to end.

A real JupyterHub runs with the classroom's LTI login (``classroom/lti.py``, as
``classroom/jupyterhub_config.py`` turns it on from ``STATE/lti.json``), on 127.0.0.1 only.
The test is the LMS platform: it holds an RSA key pair, serves its public key as a JWKS on
127.0.0.1, sends the login initiation, reads the hub's redirect to its authorisation URL (state,
nonce, callback) and posts back an ``id_token`` it signed, as Canvas (the login in a custom
field) and Moodle (its ``ext`` claim's username) send them. Each launch makes a hub user and a
Unix account named from the platform's issuer and ``sub`` (``lti.hub_name``), in the classroom's
own uid range; the LMS login becomes the student's nbgrader id (``student_id``). A token signed
by another key, for another client, replayed, expired, or from another course logs nobody in.

Issue 42's attacks, each a test that logged someone in as someone else before: a login naming a
system account (``postgres``), a login shaped like a classmate's made-up name, a custom field
sent unsubstituted (two people, one account), two logins a 24-bit digest confused, a learner
whose login is the instructor's account name, a second person on one login, and an account of
the name made outside the classroom's range. Needs root (it makes Unix accounts, removed
afterwards).
"""

from __future__ import annotations

import base64
import html
import http.server
import importlib.util
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.parse
from pathlib import Path

import pytest

from course_grading.lms.accounts import student_id as grader_student_id

ROOT = Path(__file__).resolve().parents[2]
ISSUER = "https://lms.example.edu"
CLIENT = "10000000000042"
COURSE = "4dde05e8ca1973bcca9bffc13e1548820eee93a3"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _why_not() -> str:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "needs root on Linux: each launch makes a Unix account"
    if not shutil.which("useradd"):
        return "needs useradd"
    for module in ("jupyterhub", "ltiauthenticator", "jwt", "cryptography", "requests"):
        if importlib.util.find_spec(module) is None:
            return f"needs {module} (pip install -e '.[classroom]')"
    return ""


WHY_NOT = _why_not()
lti = None if WHY_NOT else _load("classroom_lti", ROOT / "classroom" / "lti.py")


def test_the_hub_and_the_export_name_an_lms_login_alike():
    """The classroom's copy of student_id (the hub cannot import course_grading) is the
    grader's: the export matches an LTI student's grades by the same rule."""
    if lti is None:
        pytest.skip(WHY_NOT)
    logins = ["zmuller", "Zoë.Müller@uni.example", "12345", "a" * 70, "-dash", "ann.lee", "x"]
    logins += ["$Canvas.user.loginId", "zo_m_ller_uni_example-31fcbc", "", "李雷", "a+b"]
    logins += [secrets.token_urlsafe(n) for n in range(1, 40)]
    logins += [lti.student_id(x) for x in logins]  # a made-up id typed as a login
    assert [lti.student_id(x) for x in logins] == [grader_student_id(x) for x in logins]
    assert lti.student_id("ann.lee") == "ann.lee"  # a safe login is the id, as it is
    assert lti.student_id("Zoë.Müller@uni.example") == "zoe.muller@uni.example--gh6lyj5c6ovwx4oh"


def test_no_login_is_another_ones_id_and_no_launch_a_system_account():
    """The attacks on names, without a hub: the login shaped like Zoë's made-up name, the pair a
    24-bit digest cut at 25 characters confused (found in 0.3 s), a made-up id typed as a
    login, and every id from a set of logins that differ where an old cut dropped them: all
    distinct. Hub users are ``lti-`` and a digest of issuer and sub, 32 characters, never a
    login."""
    if lti is None:
        pytest.skip(WHY_NOT)
    zoe = "Zoë.Müller@uni.example"
    attacks = [
        ("zo_m_ller_uni_example-31fcbc", zoe),  # the old rule's name for Zoë, as a login
        (lti.student_id(zoe), zoe),  # the new rule's, as a login
        (lti.student_id(zoe).upper(), zoe),  # and in capitals (the LMSs ignore case)
        ("Student.With.A.Long.Name.9596@uni.example",  # equal under the old rule
         "Student.With.A.Long.Name.13502@uni.example"),
    ]  # fmt: skip
    for one, other in attacks:
        assert lti.student_id(one).casefold() != lti.student_id(other).casefold(), (one, other)
    many = [f"Student.With.A.Long.Name.{i}@uni.example" for i in range(20000)]
    assert len({lti.student_id(x) for x in many}) == len(many)
    names = {lti.hub_name(ISSUER, sub) for sub in ["postgres", "root", *map(str, range(5000))]}
    assert len(names) == 5002
    assert all(n.startswith("lti-") and len(n) == 32 and n == n.lower() for n in names)
    assert lti.hub_name(ISSUER, "1") != lti.hub_name("https://other.example", "1")


def test_the_registry_keeps_where_each_launch_says_grades_go(tmp_path):
    """The grade passback posts to the line items URL a launch named (its AGS endpoint claim)
    for the ``sub`` the registry bound: a returning student's newer URL replaces the old one, a
    launch without the claim keeps it, and a URL that is not https is never recorded (the
    passback would send the bearer token there)."""
    if lti is None:
        pytest.skip(WHY_NOT)
    course = "https://lms.example.edu/api/lti/courses/7/line_items"
    claim = {lti.AGS_ENDPOINT: {"lineitems": course, "scope": []}}
    assert lti.lineitems_of(claim) == course
    for bad in ("http://lms.example.edu/line_items", "file:///etc/passwd", 7, None):
        assert lti.lineitems_of({lti.AGS_ENDPOINT: {"lineitems": bad}}) == ""
    assert lti.lineitems_of({}) == "" and lti.lineitems_of({lti.AGS_ENDPOINT: "x"}) == ""
    registry = lti.Registry(tmp_path / "secrets" / "lti_users.json")
    registry.claim("lti-a", ISSUER, "sub-a", "ann", lti.lineitems_of(claim))
    registry.claim("lti-b", ISSUER, "sub-b", "bob", "")
    users = registry.users()
    assert users["lti-a"]["lineitems"] == course and "lineitems" not in users["lti-b"]
    moved = course.replace("/7/", "/8/")
    registry.claim("lti-a", ISSUER, "sub-a", "ann", moved)
    registry.claim("lti-a", ISSUER, "sub-a", "ann", "")
    assert registry.users()["lti-a"]["lineitems"] == moved
    assert registry.path.stat().st_mode & 0o777 == 0o600


def test_the_classroom_turns_lti_on_from_its_state_folder(tmp_path):
    if lti is None:
        pytest.skip(WHY_NOT)
    from traitlets.config import Config

    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "gradebook_url").write_text("postgresql://x")
    settings = {"venv": "/v", "ip": "127.0.0.1", "port": 1, "hub_api_port": 2}
    settings |= {"proxy_api_port": 3, "proxy": "p", "instructor": "root", "students": ["s"]}
    settings |= {"etc": {"student": "/s", "instructor": "/i"}, "course_id": "c"}
    settings |= {"exchange": "/x", "course_root": "/r", "grader": "/g", "course_secret": "/k"}
    (tmp_path / "classroom.json").write_text(json.dumps(settings))

    def load() -> Config:
        c = Config()
        os.environ["SHAPES_CLASSROOM_STATE"] = str(tmp_path)
        code = (ROOT / "classroom" / "jupyterhub_config.py").read_text()
        path = str(ROOT / "classroom" / "jupyterhub_config.py")
        exec(compile(code, path, "exec"), {"get_config": lambda: c, "__file__": path})
        return c

    assert load().JupyterHub.authenticator_class == "pam"  # no lti.json: the PAM login
    (tmp_path / "lti.json").write_text(json.dumps({"issuer": ISSUER, "client_id": CLIENT}))
    with pytest.raises(ValueError, match="lti.json has no authorize_url, jwks_endpoint, contexts"):
        load()
    full = {"issuer": ISSUER, "client_id": [CLIENT], "authorize_url": "https://a/b",
            "jwks_endpoint": "https://a/jwks", "contexts": [COURSE]}  # fmt: skip
    (tmp_path / "lti.json").write_text(json.dumps({**full, "uids": [1000, 70000]}))
    with pytest.raises(ValueError, match="overlaps regular users"):
        load()
    (tmp_path / "lti.json").write_text(json.dumps(full))
    c = load()
    assert c.JupyterHub.authenticator_class.__name__ == "ClassroomLTI13Authenticator"
    auth = c.ClassroomLTI13Authenticator
    assert auth.contexts == {COURSE} and auth.instructor == "root"
    assert auth.create_system_users is True and tuple(auth.uids) == (70000, 99999)
    assert auth.registry_file == str(tmp_path / "secrets" / "lti_users.json")

    # Each server's environment: a launched student's nbgrader id, from the registry
    authenticator = c.JupyterHub.authenticator_class(config=c)
    name = lti.hub_name(ISSUER, "sub-of-ann")
    authenticator.registry().claim(name, ISSUER, "sub-of-ann", "Ann.Lee@uni.example")

    def environment(user: str) -> dict:
        spawner = types.SimpleNamespace(user=types.SimpleNamespace(name=user),
                                        authenticator=authenticator)  # fmt: skip
        c.Spawner.pre_spawn_hook(spawner)
        return spawner.environment

    assert environment(name)["SHAPES_STUDENT_ID"] == "Ann.Lee@uni.example"
    teacher = environment("root")
    assert "SHAPES_STUDENT_ID" not in teacher and "SHAPES_GRADEBOOK_URL" in teacher
    ids = json.loads(Path(teacher["SHAPES_STUDENT_IDS"]).read_text())
    assert ids == {name: "Ann.Lee@uni.example"}
    with pytest.raises(KeyError):  # a launched user the registry does not know: no server
        environment(lti.hub_name(ISSUER, "nobody"))
    (tmp_path / "classroom.json").write_text(json.dumps({**settings, "instructor": name}))
    with pytest.raises(ValueError, match="must not start with lti-"):
        load()


# --- the platform: a key pair and its JWKS on 127.0.0.1 ------------------------------------------


def _b64(number: int) -> str:
    data = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Platform:
    """An LTI 1.3 platform's side: signs id_tokens, serves its JWKS on 127.0.0.1."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.key, self.other = (rsa.generate_private_key(public_exponent=65537, key_size=2048)
                                for _ in range(2))  # fmt: skip
        numbers = self.key.public_key().public_numbers()
        jwks = {"keys": [{"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256",
                          "n": _b64(numbers.n), "e": _b64(numbers.e)}]}  # fmt: skip
        body = json.dumps(jwks).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200 if self.path == "/jwks" else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body if self.path == "/jwks" else b"{}")

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def id_token(self, nonce: str, key=None, **claims) -> str:
        import jwt

        now = int(time.time())
        lti_claim = "https://purl.imsglobal.org/spec/lti/claim/"
        payload = {
            "iss": ISSUER, "aud": CLIENT, "sub": "a6d5c443-1f51-4783-ba1a-7686ffe3b54a",
            "iat": now, "exp": now + 300, "nonce": nonce,
            lti_claim + "version": "1.3.0",
            lti_claim + "deployment_id": "1:abc",
            lti_claim + "message_type": "LtiResourceLinkRequest",
            lti_claim + "target_link_uri": "http://127.0.0.1/hub/",
            lti_claim + "resource_link": {"id": "lesson-05"},
            lti_claim + "roles": ["http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"],
            lti_claim + "context": {"id": COURSE, "label": "SHAPES", "title": "Shapes"},
        }  # fmt: skip
        payload.update(claims)
        private = key or self.key
        return jwt.encode(payload, private, algorithm="RS256", headers={"kid": "k1"})


# --- the hub ------------------------------------------------------------------------------------

HUB_CONFIG = """
import importlib.util
from jupyterhub.proxy import Proxy

class NoProxy(Proxy):  # the test talks to the hub directly; nothing to route
    should_start = False
    async def add_route(self, *args, **kwargs): pass
    async def delete_route(self, *args, **kwargs): pass
    async def get_all_routes(self): return {{}}

c = get_config()
spec = importlib.util.spec_from_file_location("classroom_lti", {lti!r})
lti = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lti)
lti.configure(c, {settings!r}, instructor={instructor!r}, registry={registry!r},
              ids_file={ids!r}, home_root={home!r})
c.JupyterHub.proxy_class = NoProxy
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.JupyterHub.db_url = "sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{state}/cookie_secret"
c.JupyterHub.pid_file = "{state}/jupyterhub.pid"
c.JupyterHub.services = [{{"name": "lti-test", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "lti-test", "scopes": ["admin:users"],
                             "services": ["lti-test"]}}]
"""
TEACHER = "ltitest-teacher"  # the classroom's instructor account, made for the test


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _remove(name: str) -> None:
    subprocess.run(["userdel", "--remove", name], capture_output=True)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    if WHY_NOT:
        pytest.skip(WHY_NOT)
    import requests

    platform, state = Platform(), tmp_path_factory.mktemp("lti-hub")
    state.chmod(0o755)
    _remove(TEACHER)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", TEACHER],
                   check=True, capture_output=True)  # fmt: skip
    settings = {"issuer": ISSUER, "client_id": [CLIENT], "authorize_url": f"{platform.url}/auth",
                "jwks_endpoint": f"{platform.url}/jwks", "contexts": [COURSE]}  # fmt: skip
    token, hub_port = secrets.token_hex(16), _port()
    registry, ids = state / "secrets" / "lti_users.json", state / "lti" / "student_ids.json"
    config = state / "jupyterhub_config.py"
    config.write_text(HUB_CONFIG.format(lti=str(ROOT / "classroom" / "lti.py"), port=_port(),
                                        settings=settings, hub_port=hub_port, state=state,
                                        token=token, instructor=TEACHER, registry=str(registry),
                                        ids=str(ids), home=str(state / "home")))  # fmt: skip
    log = open(state / "jupyterhub.log", "w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("jupyterhub")), "-f", str(config)],
        cwd=state, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url, made = f"http://127.0.0.1:{hub_port}", []
    api = {"Authorization": f"token {token}"}
    deadline = time.monotonic() + 90
    while True:
        try:
            if requests.get(f"{url}/hub/api/", timeout=2).ok:
                break
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            _remove(TEACHER)
            pytest.fail(f"the hub did not start:\n{(state / 'jupyterhub.log').read_text()[-3000:]}")
        time.sleep(0.3)
    yield {
        "url": url,
        "platform": platform,
        "api": api,
        "made": made,
        "log": state / "jupyterhub.log",
        "registry": registry,
        "ids": ids,
        "home": state / "home",
    }
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    platform.server.shutdown()
    known = json.loads(registry.read_text())["users"] if registry.is_file() else {}
    for name in [*made, *known, TEACHER]:
        _remove(name)


def launch(hub, make_token) -> tuple[int, str, str]:
    """One launch, as a browser goes through it; (the callback's status, where it redirects,
    the page it shows)."""
    import requests

    browser = requests.Session()
    start = browser.post(
        f"{hub['url']}/hub/lti13/oauth_login",
        data={"iss": ISSUER, "login_hint": "42", "target_link_uri": f"{hub['url']}/hub/",
              "client_id": CLIENT, "lti_deployment_id": "1:abc"},
        allow_redirects=False,
    )  # fmt: skip
    assert start.status_code == 302, start.text
    sent = urllib.parse.urlparse(start.headers["Location"])
    assert sent.netloc == urllib.parse.urlparse(hub["platform"].url).netloc
    query = dict(urllib.parse.parse_qsl(sent.query))
    assert query["client_id"] == CLIENT and query["response_mode"] == "form_post"
    back = browser.post(
        query["redirect_uri"],
        data={"id_token": make_token(query["nonce"]), "state": query["state"]},
        allow_redirects=False,
    )
    return back.status_code, back.headers.get("Location", ""), html.unescape(back.text)


def _user(hub, name: str) -> int:
    import requests

    return requests.get(f"{hub['url']}/hub/api/users/{name}", headers=hub["api"]).status_code


def _users(hub) -> set[str]:
    import requests

    found = requests.get(f"{hub['url']}/hub/api/users", headers=hub["api"]).json()
    return {u["name"] for u in (found["items"] if isinstance(found, dict) else found)}


def _account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _in_range(name: str) -> bool:
    entry = pwd.getpwnam(name)
    return all(70000 <= n <= 99999 for n in (entry.pw_uid, entry.pw_gid))


def _student(hub, name: str) -> str | None:
    """The nbgrader id the registry gives hub user ``name``."""
    users = json.loads(hub["registry"].read_text())["users"]
    return users[name]["student_id"] if name in users else None


def _as(platform, sub: str, login: str | None = None, **claims):
    """A launch by the platform user ``sub`` (the login, if given, in Canvas's custom field)."""
    custom = {"https://purl.imsglobal.org/spec/lti/claim/custom": {"login_id": login}}
    extra = {**(custom if login is not None else {}), **claims}
    return lambda nonce: platform.id_token(nonce, sub=sub, **extra)


def _sub() -> str:
    return f"sub-{secrets.token_hex(8)}"


@pytest.mark.classroom
def test_canvas_and_moodle_launches_log_students_in_by_their_lms_login(hub):
    platform, tag = hub["platform"], secrets.token_hex(3)
    canvas_login, moodle_login = f"lti{tag}-ann", f"Zoë.Müller{tag}@uni.example"
    custom = {"https://purl.imsglobal.org/spec/lti/claim/custom": {"login_id": canvas_login}}
    ext = {"https://purl.imsglobal.org/spec/lti/claim/ext": {"user_username": moodle_login,
                                                             "lms": "moodle-2"}}  # fmt: skip
    for login, claims in ((canvas_login, custom), (moodle_login, ext)):
        sub = _sub()
        name = lti.hub_name(ISSUER, sub)
        status, where, _ = launch(
            hub, lambda nonce, c=claims, s=sub: platform.id_token(nonce, sub=s, **c)
        )
        assert status == 302 and where.startswith("/hub/"), (status, where)
        assert _user(hub, name) == 200 and _account(name), (name, hub["log"].read_text()[-2000:])
        assert _in_range(name) and _student(hub, name) == lti.student_id(login)
        home = Path(pwd.getpwnam(name).pw_dir)
        assert home == hub["home"] / name and home.stat().st_mode & 0o777 == 0o700
        assert _user(hub, lti.student_id(login)) == 404  # the login names no hub user
        # the same person again: the same account, the same nbgrader id
        assert (
            launch(hub, lambda nonce, c=claims, s=sub: platform.id_token(nonce, sub=s, **c))[0]
            == 302
        )
        assert _student(hub, name) == lti.student_id(login)
    assert lti.student_id(canvas_login) == canvas_login  # a safe login is the id, as it is
    ids = json.loads(hub["ids"].read_text())  # the instructor's collect step reads it
    assert hub["ids"].stat().st_mode & 0o777 == 0o640
    assert hub["ids"].stat().st_gid == pwd.getpwnam(TEACHER).pw_gid
    assert canvas_login in ids.values()


@pytest.mark.classroom
@pytest.mark.parametrize(
    ("case", "status"),
    [("another key", 400), ("another client", 401), ("replayed", 400), ("expired", 400),
     ("another course", 400)],
)  # fmt: skip
def test_a_bad_launch_logs_nobody_in(hub, case, status):
    platform, login, sub = hub["platform"], f"lti{secrets.token_hex(3)}-eve", _sub()
    name = lti.hub_name(ISSUER, sub)
    custom = {"https://purl.imsglobal.org/spec/lti/claim/custom": {"login_id": login}, "sub": sub}
    stale = platform.id_token("a nonce of another launch", **custom)
    make = {
        "another key": lambda nonce: platform.id_token(nonce, key=platform.other, **custom),
        "another client": lambda nonce: platform.id_token(nonce, aud="999", **custom),
        "replayed": lambda nonce: stale,
        "expired": lambda nonce: platform.id_token(
            nonce, iat=int(time.time()) - 7200, exp=int(time.time()) - 3600, **custom),
        "another course": lambda nonce: platform.id_token(
            nonce, **custom, **{"https://purl.imsglobal.org/spec/lti/claim/context":
                                {"id": "another-course", "label": "X"}}),
    }[case]  # fmt: skip
    assert launch(hub, make)[0] == status
    assert _user(hub, name) == 404 and not _account(name)
    # the check can fail: the same launch, signed and addressed right, logs in
    assert launch(hub, lambda nonce: platform.id_token(nonce, **custom))[0] == 302
    assert _user(hub, name) == 200 and _account(name)


# --- issue 42, item 3: no launch takes over an account ------------------------------------------


@pytest.mark.classroom
@pytest.mark.parametrize("login", ["postgres", "root", TEACHER])
def test_a_login_naming_an_account_gets_an_account_of_its_own(hub, login):
    """The attack: the login ``postgres`` became hub user ``postgres``, its server running as the
    gradebook database's owner (and ``TEACHER``, the instructor's account, the instructor)."""
    sub, before = _sub(), _users(hub)
    assert launch(hub, _as(hub["platform"], sub, login))[0] == 302
    name = lti.hub_name(ISSUER, sub)
    assert _users(hub) - before == {name} and login not in _users(hub) - {TEACHER}
    assert _in_range(name) and pwd.getpwnam(login).pw_uid not in range(70000, 100000)
    assert _student(hub, name) == login  # the login is kept: the student's nbgrader id


@pytest.mark.classroom
def test_a_login_shaped_like_a_classmates_name_takes_nothing_of_theirs(hub):
    """The attack: the login ``zo_m_ller_uni_example-31fcbc`` was Zoë's account, a name the old
    rule made up from her login. Now it is a login like any other; so is her new made-up id."""
    zoe, platform = f"Zoë.Müller.{secrets.token_hex(2)}@uni.example", hub["platform"]
    zoe_sub = _sub()
    assert launch(hub, _as(platform, zoe_sub, zoe))[0] == 302
    for shaped in (lti.student_id(zoe), "zo_m_ller_uni_example-31fcbc"):
        sub = _sub()
        assert launch(hub, _as(platform, sub, shaped))[0] == 302
        assert lti.hub_name(ISSUER, sub) != lti.hub_name(ISSUER, zoe_sub)
        assert _student(hub, lti.hub_name(ISSUER, sub)) != lti.student_id(zoe)
    assert _student(hub, lti.hub_name(ISSUER, zoe_sub)) == lti.student_id(zoe)


@pytest.mark.classroom
def test_an_unsubstituted_custom_field_is_refused_at_launch(hub):
    """The attack: Canvas sent ``$Canvas.user.loginId`` as it was (the variable unavailable), and
    two people shared one account. Now each such launch is refused, saying why."""
    platform, subs = hub["platform"], [_sub(), _sub()]
    for sub in subs:
        status, _, page = launch(hub, _as(platform, sub, "$Canvas.user.loginId"))
        assert status == 400 and "unsubstituted" in page, (status, page[-500:])
        assert "login_id=$Canvas.user.loginId" in page
        assert _user(hub, lti.hub_name(ISSUER, sub)) == 404
    other = {
        "https://purl.imsglobal.org/spec/lti/claim/custom": {
            "login_id": "ok",
            "name": "$Person.name.full",
        }
    }
    assert launch(hub, lambda nonce: platform.id_token(nonce, sub=subs[0], **other))[0] == 400
    # the check can fail: the field filled in, the same people log in, each to their own
    for n, sub in enumerate(subs):
        assert launch(hub, _as(platform, sub, f"filled{secrets.token_hex(3)}{n}"))[0] == 302
    assert _student(hub, lti.hub_name(ISSUER, subs[0])) != _student(
        hub, lti.hub_name(ISSUER, subs[1])
    )


@pytest.mark.classroom
def test_two_logins_an_old_short_digest_confused_are_two_students(hub):
    """The attack: names cut at 25 characters with 24 bits of digest; these two collided."""
    pair = ["Student.With.A.Long.Name.9596@uni.example",
            "Student.With.A.Long.Name.13502@uni.example"]  # fmt: skip
    names = []
    for login in pair:
        sub = _sub()
        assert launch(hub, _as(hub["platform"], sub, login))[0] == 302
        names.append(lti.hub_name(ISSUER, sub))
    assert len(set(names)) == 2 and [_student(hub, n) for n in names] == [
        lti.student_id(x) for x in pair
    ]
    assert len({lti.student_id(x) for x in pair}) == 2


@pytest.mark.classroom
def test_a_second_person_on_one_login_is_refused_with_a_clear_error(hub):
    platform, login = hub["platform"], f"Dup.{secrets.token_hex(3)}"
    first, second = _sub(), _sub()
    assert launch(hub, _as(platform, first, login))[0] == 302
    for again in (login, login.lower(), login.upper()):  # the LMSs compare logins without case
        status, _, page = launch(hub, _as(platform, second, again))
        assert status == 400 and "another person on this hub already has" in page, page[-500:]
    assert _user(hub, lti.hub_name(ISSUER, second)) == 404
    assert _student(hub, lti.hub_name(ISSUER, first)) == login  # the first keeps theirs
    assert launch(hub, _as(platform, first, login))[0] == 302  # and still logs in


@pytest.mark.classroom
def test_the_instructor_is_whom_the_roles_claim_names(hub):
    """A learner whose login is the instructor's account gets an account of their own (above);
    an instructor's launch, whatever its login, logs in as the instructor's account; a launch
    with neither role logs nobody in."""
    platform, role = hub["platform"], "https://purl.imsglobal.org/spec/lti/claim/roles"
    teacher = {role: ["http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"]}
    before, sub = _users(hub), _sub()
    status, where, _ = launch(hub, _as(platform, sub, "anyone", **teacher))
    assert status == 302 and where.startswith("/hub/")
    assert _user(hub, TEACHER) == 200 and _users(hub) - before <= {TEACHER}
    assert _user(hub, lti.hub_name(ISSUER, sub)) == 404
    mentor = {role: ["http://purl.imsglobal.org/vocab/lis/v2/membership#Mentor"]}
    sub = _sub()
    status, _, page = launch(hub, _as(platform, sub, "parent", **mentor))
    assert status == 400 and "neither a learner's nor an instructor's" in page
    assert _user(hub, lti.hub_name(ISSUER, sub)) == 404


@pytest.mark.classroom
def test_an_account_of_the_name_outside_the_range_is_never_used(hub):
    """Should someone have made an account with a launch's name (outside the classroom's uids),
    the launch is refused: the hub never runs a student's server as an account it did not make."""
    sub = _sub()
    name = lti.hub_name(ISSUER, sub)
    hub["made"].append(name)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)  # fmt: skip
    status, _, page = launch(hub, _as(hub["platform"], sub, f"x{secrets.token_hex(3)}"))
    assert status == 400 and "outside the classroom's uids" in page
    assert _user(hub, name) == 404


def _collect(tmp: Path, collector: str | None, ids: dict[str, str]) -> tuple[dict, str]:
    """``nbgrader collect L1`` over an exchange of four submissions made by two accounts (root,
    which the map calls bob, and nobody, which it calls ann.lee); what each collected student's
    folder holds, and the log."""
    exchange, course = tmp / "exchange", tmp / "course"
    inbound = exchange / "c" / "inbound"
    inbound.mkdir(parents=True)
    course.mkdir()
    nobody = pwd.getpwnam("nobody")
    made = [("bob", 9, 0, "bob's own"), ("ann.lee", 10, nobody.pw_uid, "ann's own"),
            ("bob", 11, nobody.pw_uid, "ann, as bob"),
            ("nobody", 12, nobody.pw_uid, "ann, as her account")]  # fmt: skip
    for student, hour, uid, text in made:
        stamp = f"2026-12-01 {hour:02d}:00:00.000000 UTC"
        folder = inbound / f"{student}+L1+{stamp}+{secrets.token_hex(4)}"
        folder.mkdir()
        (folder / "L1.ipynb").write_text(text)
        (folder / "timestamp.txt").write_text(stamp)
        for path in (folder, *folder.iterdir()):
            os.chown(path, uid, uid if uid else 0)
    (tmp / "ids.json").write_text(json.dumps(ids))
    command = [str(Path(sys.executable).with_name("nbgrader")), "collect", "L1",
               f"--Exchange.root={exchange}", f"--CourseDirectory.root={course}",
               "--CourseDirectory.course_id=c",
               f"--CourseDirectory.db_url=sqlite:///{tmp}/gb.db"]  # fmt: skip
    if collector:
        command.append(f"--ExchangeFactory.collect={collector}")
    env = dict(os.environ, SHAPES_STUDENT_IDS=str(tmp / "ids.json"), PYTHONPATH=str(ROOT))
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # nbgrader runs alembic
    proc = subprocess.run(command, capture_output=True, text=True, cwd=course, env=env)
    assert proc.returncode == 0, proc.stderr
    got = {p.parent.parent.name: p.read_text() for p in course.glob("submitted/*/L1/L1.ipynb")}
    return got, proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: submissions owned by two accounts")
def test_collect_takes_a_submission_only_from_the_student_it_names(tmp_path):
    """A submission says whose it is in its folder's name, which the submitting student writes
    (``nbgrader submit --student bob``); its owner says who made it. Under the LTI login the
    owner is an ``lti-`` account, whose nbgrader id the hub's map gives."""
    if importlib.util.find_spec("nbgrader") is None:
        pytest.skip("needs nbgrader")
    ids = {"root": "bob", "nobody": "ann.lee"}
    checked = "course_grading.nbgrader.collect.OwnerCheckedCollect"
    got, log = _collect(tmp_path / "checked", checked, ids)
    assert got == {"bob": "bob's own", "ann.lee": "ann's own"}
    assert "says it is bob's submission, but nobody (ann.lee) made it" in log
    assert "says it is nobody's submission, but nobody (ann.lee) made it" in log
    # the check can fail: nbgrader's own collect takes ann's forgery as bob's newest
    got, log = _collect(tmp_path / "plain", None, ids)
    assert got["bob"] == "ann, as bob" and "cheating attempt?" in log
