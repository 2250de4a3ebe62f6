"""Students log in from Canvas or Moodle through LTI 1.3 (issue 28, item 5), end to end.

A real JupyterHub runs with the classroom's LTI login (``classroom/lti.py``, as
``classroom/jupyterhub_config.py`` turns it on from ``STATE/lti.json``), on 127.0.0.1 only.
The test is the LMS platform: it holds an RSA key pair, serves its public key as a JWKS on
127.0.0.1, sends the login initiation, reads the hub's redirect to its authorisation URL (state,
nonce, callback) and posts back an ``id_token`` it signed, as Canvas (the login in a custom
field) and Moodle (its ``ext`` claim's username) send them. Each launch makes a hub user and a
Unix account named from the LMS login (``account_name``: the student's nbgrader id). A token
signed by another key, for another client, replayed (another launch's nonce), expired, or from
another course logs nobody in. Needs root (it makes Unix accounts, removed afterwards).
"""

from __future__ import annotations

import base64
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
import urllib.parse
from pathlib import Path

import pytest

from course_grading.lms.accounts import account_name as grader_account_name

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
    """The classroom's copy of account_name (the hub cannot import course_grading) is the
    grader's: the export matches an LTI student's grades by the same rule."""
    if lti is None:
        pytest.skip(WHY_NOT)
    logins = ["zmuller", "Zoë.Müller@uni.example", "12345", "a" * 40, "-dash", "ann.lee", "x"]
    logins += [secrets.token_urlsafe(n) for n in range(1, 40)]
    assert [lti.account_name(x) for x in logins] == [grader_account_name(x) for x in logins]
    assert lti.account_name("zmuller") == "zmuller"
    assert lti.account_name("Zoë.Müller@uni.example") == "zo_m_ller_uni_example-31fcbc"
    assert len({lti.account_name(x) for x in ("ann.lee", "ann_lee", "Ann.Lee")}) == 3


def test_the_classroom_turns_lti_on_from_its_state_folder(tmp_path):
    if lti is None:
        pytest.skip(WHY_NOT)
    from traitlets.config import Config

    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "gradebook_url").write_text("postgresql://x")
    settings = {"venv": "/v", "ip": "127.0.0.1", "port": 1, "hub_api_port": 2}
    settings |= {"proxy_api_port": 3, "proxy": "p", "instructor": "i", "students": ["s"]}
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
    with pytest.raises(ValueError, match="lti.json has no authorize_url, jwks_endpoint"):
        load()
    full = {"issuer": ISSUER, "client_id": [CLIENT], "authorize_url": "https://a/b",
            "jwks_endpoint": "https://a/jwks", "contexts": [COURSE]}  # fmt: skip
    (tmp_path / "lti.json").write_text(json.dumps(full))
    c = load()
    assert c.JupyterHub.authenticator_class.__name__ == "ClassroomLTI13Authenticator"
    assert c.ClassroomLTI13Authenticator.contexts == {COURSE}
    assert c.ClassroomLTI13Authenticator.create_system_users is True


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
lti.configure(c, {settings!r})
c.ClassroomLTI13Authenticator.add_user_cmd = ["useradd", "--no-create-home", "--shell",
                                              "/usr/sbin/nologin"]
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


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    if WHY_NOT:
        pytest.skip(WHY_NOT)
    import requests

    platform, state = Platform(), tmp_path_factory.mktemp("lti-hub")
    settings = {"issuer": ISSUER, "client_id": [CLIENT], "authorize_url": f"{platform.url}/auth",
                "jwks_endpoint": f"{platform.url}/jwks", "contexts": [COURSE]}  # fmt: skip
    token, hub_port = secrets.token_hex(16), _port()
    config = state / "jupyterhub_config.py"
    config.write_text(HUB_CONFIG.format(lti=str(ROOT / "classroom" / "lti.py"), port=_port(),
                                        settings=settings, hub_port=hub_port, state=state,
                                        token=token))  # fmt: skip
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
            pytest.fail(f"the hub did not start:\n{(state / 'jupyterhub.log').read_text()[-3000:]}")
        time.sleep(0.3)
    yield {
        "url": url,
        "platform": platform,
        "api": api,
        "made": made,
        "log": state / "jupyterhub.log",
    }
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    platform.server.shutdown()
    for name in made:
        subprocess.run(["userdel", name], capture_output=True)


def launch(hub, make_token) -> tuple[int, str]:
    """One launch, as a browser goes through it; (the callback's status, where it redirects)."""
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
    return back.status_code, back.headers.get("Location", "")


def _user(hub, name: str) -> int:
    import requests

    return requests.get(f"{hub['url']}/hub/api/users/{name}", headers=hub["api"]).status_code


def _account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.mark.classroom
def test_canvas_and_moodle_launches_log_students_in_by_their_lms_login(hub):
    platform, tag = hub["platform"], secrets.token_hex(3)
    canvas_login, moodle_login = f"lti{tag}-ann", f"Zoë.Müller{tag}@uni.example"
    custom = {"https://purl.imsglobal.org/spec/lti/claim/custom": {"login_id": canvas_login}}
    ext = {"https://purl.imsglobal.org/spec/lti/claim/ext": {"user_username": moodle_login,
                                                             "lms": "moodle-2"}}  # fmt: skip
    for login, claims in ((canvas_login, custom), (moodle_login, ext)):
        name = lti.account_name(login)
        hub["made"].append(name)
        status, where = launch(hub, lambda nonce, c=claims: platform.id_token(nonce, **c))
        assert status == 302 and where.startswith("/hub/"), (status, where)
        assert _user(hub, name) == 200 and _account(name), (name, hub["log"].read_text()[-2000:])
    assert lti.account_name(canvas_login) == canvas_login  # a valid name is kept as it is


@pytest.mark.classroom
@pytest.mark.parametrize(
    ("case", "status"),
    [("another key", 400), ("another client", 401), ("replayed", 400), ("expired", 400),
     ("another course", 400)],
)  # fmt: skip
def test_a_bad_launch_logs_nobody_in(hub, case, status):
    platform, login = hub["platform"], f"lti{secrets.token_hex(3)}-eve"
    custom = {"https://purl.imsglobal.org/spec/lti/claim/custom": {"login_id": login}}
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
    hub["made"].append(login)  # removed afterwards, should the check fail
    assert launch(hub, make)[0] == status
    assert _user(hub, login) == 404 and not _account(login)
    # the check can fail: the same launch, signed and addressed right, logs in
    assert launch(hub, lambda nonce: platform.id_token(nonce, **custom))[0] == 302
    assert _user(hub, login) == 200 and _account(login)
