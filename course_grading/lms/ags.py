"""The tool's side of LTI Advantage's Assignment and Grade Services (AGS 2.0), on urllib.

What ``passback.py`` asks of the platform (Canvas, Moodle, any LTI 1.3 platform):

- **a token**: OAuth 2 client credentials with a signed JWT as the client's proof (RFC 7523, the
  LTI security framework): ``grant_type=client_credentials``,
  ``client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer``, the
  assertion signed RS256 by the tool's private key (``iss`` and ``sub`` the client id, ``aud``
  the token URL, ``iat``, ``exp`` five minutes on, a random ``jti``; the header's ``kid`` is
  the key's RFC 7638 thumbprint), and the scopes ``lineitem``, ``score`` and
  ``result.readonly``. The platform holds the tool's public key (``lti-key`` prints it);
- **line items** of the course (``GET`` the line items URL, filtered by ``resource_id`` and
  ``tag``, every page read through the ``Link: <...>; rel="next"`` headers both LMSs send; a
  ``POST`` makes one);
- **results** of a line item (``GET <line item>/results``), to skip a score already there;
- **scores** (``POST <line item>/scores``, ``application/vnd.ims.lis.v1.score+json``).

A service URL is the line item's URL with ``/scores`` or ``/results`` added to its path, its
query kept (Moodle's carry ``?type_id=N``). The token and every request go only to ``https``
URLs (or ``http`` on the loopback address, for a test): the bearer token is a credential. A
``next`` link to another origin is refused for the same reason, and a platform's answer is read
up to 8 MiB and 1,000 pages.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_grading.errors import GradingError

AGS = "https://purl.imsglobal.org/spec/lti-ags/scope/"
SCOPES = (AGS + "lineitem", AGS + "score", AGS + "result.readonly")
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
LINEITEM = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEMS = "application/vnd.ims.lis.v2.lineitemcontainer+json"
SCORE = "application/vnd.ims.lis.v1.score+json"
RESULTS = "application/vnd.ims.lis.v2.resultcontainer+json"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_BYTES, MAX_PAGES, TIMEOUT = 8 << 20, 1000, 30
_LINK = re.compile(r"<([^>]*)>\s*((?:;[^,<]*)*)")
_REL = re.compile(r"rel\s*=\s*([^;,]+)")


class PlatformError(GradingError):
    """The platform answered with an error status; ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        """An error the platform answered.

        Args:
            status: the HTTP status (502 for an answer that is not what the spec says).
            message: one line naming the request and the platform's reason.
        """
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Platform:
    """Where and who the tool is on one platform (``passback.load_platform``)."""

    issuer: str
    client_id: str
    token_url: str
    audience: str  # the assertion's aud: the token URL, unless the platform says otherwise
    lineitems: str  # the course's line items URL
    key: Any  # the tool's RSA private key (cryptography)


def checked_url(url: str, what: str) -> str:
    """``url`` when a credential may go there: ``https``, or ``http`` on the loopback address.

    Args:
        url: the URL.
        what: what it is, for the message.

    Returns:
        The URL.

    Raises:
        GradingError: any other scheme, or no host.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.hostname and (
        parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK)
    ):
        return url
    raise GradingError(f"{what} {url!r} is not an https URL: the token would travel in clear")


def service_url(lineitem: str, service: str) -> str:
    """The line item's ``scores`` or ``results`` URL: its path extended, its query kept.

    Args:
        lineitem: the line item's URL (its ``id``).
        service: ``"scores"`` or ``"results"``.

    Returns:
        The service's URL.
    """
    parts = urllib.parse.urlsplit(lineitem)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + service))


def next_link(header: str | None) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header (Canvas's; Moodle's with curly quotes too).

    Args:
        header: the header's value, or ``None``.

    Returns:
        The next page's URL, or ``None``.
    """
    for url, params in _LINK.findall(header or ""):
        # the relation's words, whatever quotes it is in: Moodle's curly ones arrive as UTF-8
        # bytes read as Latin-1 (http.client), so letters are taken and the rest dropped
        if any("next" in re.findall(r"[a-z][a-z.-]*", rel.lower()) for rel in _REL.findall(params)):
            return url
    return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def public_jwk(key: Any) -> dict[str, str]:
    """The tool's public key as the JWK a platform is given, its ``kid`` the thumbprint.

    Args:
        key: the tool's RSA private key.

    Returns:
        ``{"kty", "e", "n", "kid", "alg": "RS256", "use": "sig"}``.
    """
    numbers = key.public_key().public_numbers()
    e, n = (_b64(x.to_bytes((x.bit_length() + 7) // 8, "big")) for x in (numbers.e, numbers.n))
    canonical = json.dumps({"e": e, "kty": "RSA", "n": n}, separators=(",", ":"))
    kid = _b64(hashlib.sha256(canonical.encode()).digest())  # RFC 7638
    return {"kty": "RSA", "e": e, "n": n, "kid": kid, "alg": "RS256", "use": "sig"}


def client_assertion(platform: Platform, now: float | None = None) -> str:
    """The signed JWT that proves the tool to the token endpoint (module docstring).

    Args:
        platform: the platform.
        now: the time it is made (``time.time()``).

    Returns:
        The compact JWT.
    """
    import jwt  # PyJWT, with cryptography: the grader extra

    issued = int(time.time() if now is None else now)
    claims = {
        "iss": platform.client_id,
        "sub": platform.client_id,
        "aud": platform.audience,
        "iat": issued,
        "exp": issued + 300,
        "jti": secrets.token_hex(16),
    }
    kid = public_jwk(platform.key)["kid"]
    return jwt.encode(claims, platform.key, algorithm="RS256", headers={"kid": kid})


class AgsClient:
    """Requests to one platform's AGS endpoints with a token it granted (module docstring)."""

    def __init__(self, platform: Platform) -> None:
        """A client for ``platform``; the token is asked for on first use.

        Args:
            platform: the platform.
        """
        self.platform = platform
        self._token: tuple[str, float] | None = None
        self.granted: set[str] = set()

    def token(self) -> str:
        """A bearer token for the AGS scopes (fetched once, again when it expires).

        Returns:
            The access token.

        Raises:
            PlatformError: the token endpoint refused, or granted too few scopes.
        """
        if self._token is not None and self._token[1] > time.monotonic():
            return self._token[0]
        form = {
            "grant_type": "client_credentials",
            "client_assertion_type": ASSERTION_TYPE,
            "client_assertion": client_assertion(self.platform),
            "scope": " ".join(SCOPES),
        }
        body = urllib.parse.urlencode(form).encode()
        url = checked_url(self.platform.token_url, "the token URL")
        _, _, answer = self._send(
            "POST", url, body, "application/x-www-form-urlencoded", "application/json", bearer=None
        )
        if not isinstance(answer, dict) or not isinstance(answer.get("access_token"), str):
            raise PlatformError(502, f"the token endpoint {url} gave no access_token")
        self.granted = set(str(answer.get("scope") or " ".join(SCOPES)).split())
        if missing := [s.rsplit("/", 1)[1] for s in SCOPES if s not in self.granted]:
            raise PlatformError(
                403,
                f"the platform did not grant the scope(s) {', '.join(missing)}:"
                " enable grade services for the tool (docs/classroom.md)",
            )
        life = float(answer.get("expires_in") or 3600)
        self._token = (answer["access_token"], time.monotonic() + max(30.0, life - 60))
        return self._token[0]

    def _send(
        self,
        method: str,
        url: str,
        body: bytes | None,
        content_type: str | None,
        accept: str,
        bearer: str | None = "",
    ) -> tuple[int, Any, Any]:
        request = urllib.request.Request(url, data=body, method=method)
        request.add_header("Accept", accept)
        if content_type:
            request.add_header("Content-Type", content_type)
        if bearer is not None:
            request.add_header("Authorization", f"Bearer {bearer or self.token()}")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
                data = answer.read(MAX_BYTES + 1)
                status, headers = answer.status, answer.headers
        except urllib.error.HTTPError as err:
            detail = err.read(2000).decode("utf-8", "replace").strip()
            raise PlatformError(
                err.code, f"{method} {url}: HTTP {err.code} {detail[:300]}"
            ) from None
        except OSError as err:
            raise PlatformError(0, f"{method} {url}: {err}") from None
        if len(data) > MAX_BYTES:
            raise PlatformError(502, f"{method} {url}: an answer over {MAX_BYTES >> 20} MiB")
        try:
            return status, headers, json.loads(data) if data.strip() else None
        except ValueError:
            raise PlatformError(502, f"{method} {url}: the answer is not JSON") from None

    def pages(self, url: str, accept: str) -> list[dict]:
        """Every item of a paged AGS list, following ``rel="next"`` (same origin only).

        Args:
            url: the first page.
            accept: the list's media type.

        Returns:
            The items of every page, in order.

        Raises:
            PlatformError: a page failed, is no JSON list, or the pages do not end.
        """
        items, seen, origin = [], set(), urllib.parse.urlsplit(url)[:2]
        while url:
            if url in seen or len(seen) >= MAX_PAGES or urllib.parse.urlsplit(url)[:2] != origin:
                raise PlatformError(502, f"the pages of {url} do not end on this platform")
            seen.add(url)
            _, headers, page = self._send("GET", checked_url(url, "a page"), None, None, accept)
            if not isinstance(page, list):
                raise PlatformError(502, f"GET {url}: not a list")
            items += [item for item in page if isinstance(item, dict)]
            found = next_link(headers.get("Link"))
            url = urllib.parse.urljoin(url, found) if found else ""
        return items

    def line_items(self, resource_id: str, tag: str) -> list[dict]:
        """The course's line items of ``resource_id`` and ``tag`` (filtered here too).

        Args:
            resource_id: the tool's id of the line item (the lesson).
            tag: the tool's tag.

        Returns:
            The matching line items.
        """
        base = checked_url(self.platform.lineitems, "the line items URL")
        parts = urllib.parse.urlsplit(base)
        query = urllib.parse.parse_qsl(parts.query) + [("resource_id", resource_id), ("tag", tag)]
        url = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
        return [
            item
            for item in self.pages(url, LINEITEMS)
            if item.get("resourceId") == resource_id and item.get("tag") == tag
        ]

    def create_line_item(self, label: str, maximum: float, resource_id: str, tag: str) -> dict:
        """A new line item in the course.

        Args:
            label: its column's name in the LMS.
            maximum: its points.
            resource_id: the tool's id (the lesson).
            tag: the tool's tag.

        Returns:
            The line item as the platform made it (its ``id`` is its URL).

        Raises:
            PlatformError: the platform refused it, or answered a line item without an id.
        """
        item = {"label": label, "scoreMaximum": maximum, "resourceId": resource_id, "tag": tag}
        url = checked_url(self.platform.lineitems, "the line items URL")
        _, _, made = self._send("POST", url, json.dumps(item).encode(), LINEITEM, LINEITEM)
        if not isinstance(made, dict) or not isinstance(made.get("id"), str):
            raise PlatformError(502, f"POST {url}: the new line item has no id")
        return made

    def results(self, lineitem: str) -> list[dict]:
        """The line item's results (every page).

        Args:
            lineitem: the line item's URL.

        Returns:
            Its results.
        """
        return self.pages(service_url(checked_url(lineitem, "a line item"), "results"), RESULTS)

    def post_score(self, lineitem: str, score: dict) -> None:
        """Post one score to the line item.

        Args:
            lineitem: the line item's URL.
            score: the score (``passback.score_body``).
        """
        url = service_url(checked_url(lineitem, "a line item"), "scores")
        self._send("POST", url, json.dumps(score).encode(), SCORE, "application/json")


def read_tool_key(path: Path) -> Any:
    """The tool's RSA private key from a PEM file only its owner can read.

    Args:
        path: the key's file (``lti-key`` writes one).

    Returns:
        The key.

    Raises:
        GradingError: unreadable, readable by others, or not an RSA key of 2048 bits or more.
    """
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        data, mode = path.read_bytes(), path.stat().st_mode
    except OSError as err:
        raise GradingError(f"cannot read the tool's key {path}: {err.strerror}") from None
    if mode & 0o077:
        raise GradingError(f"the tool's key {path} can be read by others: chmod 600 {path}")
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise GradingError(f"{path} holds no unencrypted PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey) or key.key_size < 2048:
        raise GradingError(f"{path}: the tool's key must be RSA of 2048 bits or more (RS256)")
    return key
