"""An LTI 1.3 platform's grade service on 127.0.0.1, run as Canvas or as Moodle runs theirs.

For the passback tests (``test_passback.py``); each behaviour below is read from the platform's
own code or documentation:

- **token** (``POST``, form-encoded: Moodle's ``mod/lti/token.php``, Canvas's
  ``/login/oauth2/token``): ``grant_type=client_credentials``, ``client_assertion_type`` the
  JWT bearer type, and a ``client_assertion`` whose RS256 signature is checked against the
  tool's public JWK (picked by its ``kid``), with ``iss`` = ``sub`` = the client id, ``aud`` the
  token URL, ``exp`` to come, ``iat`` not ahead, a ``jti`` never seen; the scopes granted are
  those asked for that the platform offers (Moodle: none left is ``invalid_scope``);
- **line items** (``GET`` filtered by ``resource_id`` and ``tag``, ``limit`` per page, and a
  ``Link`` header to the next page: Canvas's ``rel="next"``, Moodle's with the curly quotes its
  ``lineitems.php`` writes, ``rel=“next”``; ``POST`` needs ``label`` and ``scoreMaximum``);
- **scores** (``POST``, ``application/vnd.ims.lis.v1.score+json``): Canvas's
  ``scores_controller.rb`` answers 422 for a user not a student of the course and for
  ``scoreGiven`` without ``scoreMaximum``, 400 for a timestamp before the result's; Moodle's
  ``scores.php`` answers 400 for a user it cannot grade, 409 for a timestamp not after the
  grade's, and keeps ``scoreGiven`` only when ``FullyGraded``;
- **results** (``GET``, paged): Canvas gives ``userId``, ``resultScore``, ``resultMaximum`` and
  ``comment``; Moodle (``result_for_json``) gives its numeric ``userId`` and leaves out
  ``resultScore``, ``resultMaximum`` and ``comment`` when the grade is empty or zero.

Every request is logged (``log``: method, path, status), so a test counts what changed.
"""

from __future__ import annotations

import datetime
import http.server
import itertools
import json
import secrets
import threading
import urllib.parse

import jwt

from course_grading.lms.ags import ASSERTION_TYPE, SCOPES


def _when(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


class Platform:
    """One course on a simulated LMS (module docstring)."""

    def __init__(
        self,
        flavour: str,
        tool_jwk: dict,
        client_id: str,
        roster: set[str],
        *,
        page_size: int = 2,
        filters: bool = True,
        offered=SCOPES,
    ) -> None:
        assert flavour in ("canvas", "moodle")
        self.flavour, self.client_id, self.roster = flavour, client_id, set(roster)
        self.tool_key = jwt.PyJWK(tool_jwk).key
        self.kid, self.page_size, self.filters, self.offered = (
            tool_jwk["kid"],
            page_size,
            filters,
            set(offered),
        )
        self.items: dict[int, dict] = {}
        self.results: dict[int, dict[str, dict]] = {}
        self.tokens: dict[str, set[str]] = {}
        self.jtis: set[str] = set()
        self.log: list[tuple[str, str, int]] = []
        self.ids = itertools.count(1)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        if flavour == "canvas":
            self.token_url = f"{self.url}/login/oauth2/token"
            self.lineitems = f"{self.url}/api/lti/courses/7/line_items"
        else:
            self.token_url = f"{self.url}/mod/lti/token.php"
            self.lineitems = f"{self.url}/mod/lti/services.php/7/lineitems?type_id=3"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def changes(self) -> list[tuple[str, str, int]]:
        """Every request that changed something: a POST other than the token's that succeeded."""
        return [e for e in self.log if e[0] == "POST" and "token" not in e[1] and e[2] < 300]

    # --- URLs -----------------------------------------------------------------------------------
    def item_url(self, item_id: int) -> str:
        if self.flavour == "canvas":
            return f"{self.url}/api/lti/courses/7/line_items/{item_id}"
        return f"{self.url}/mod/lti/services.php/7/lineitems/{item_id}/lineitem?type_id=3"

    def route(self, path: str) -> tuple[str, int | None]:
        """(what, line item id) of a request's path."""
        parts = path.strip("/").split("/")
        if path in ("/login/oauth2/token", "/mod/lti/token.php"):
            return "token", None
        base = (
            ["api", "lti", "courses", "7", "line_items"]
            if self.flavour == "canvas"
            else ["mod", "lti", "services.php", "7", "lineitems"]
        )
        if parts[: len(base)] != base:
            return "", None
        rest = parts[len(base) :]
        if self.flavour == "moodle" and len(rest) >= 2 and rest[1] == "lineitem":
            rest = [rest[0], *rest[2:]]
        if not rest:
            return "lineitems", None
        if not rest[0].isdigit() or int(rest[0]) not in self.items:
            return "missing", None
        kind = {(): "lineitem", ("scores",): "scores", ("results",): "results"}.get(
            tuple(rest[1:]), ""
        )
        return kind, int(rest[0])

    # --- the service ----------------------------------------------------------------------------
    def token(self, form: dict[str, str]) -> tuple[int, dict]:
        if (
            form.get("grant_type") != "client_credentials"
            or form.get("client_assertion_type") != ASSERTION_TYPE
        ):
            return 400, {"error": "unsupported_grant_type"}
        assertion = form.get("client_assertion", "")
        try:
            if jwt.get_unverified_header(assertion).get("kid") != self.kid:
                return 400, {"error": "invalid_client"}
            claims = jwt.decode(
                assertion,
                self.tool_key,
                algorithms=["RS256"],
                audience=self.token_url,
                options={"require": ["exp", "iat", "iss", "sub", "jti"]},
                leeway=5,
            )
        except jwt.PyJWTError as err:
            return 400, {"error": "invalid_client", "why": str(err)}
        if (
            claims["iss"] != self.client_id
            or claims["sub"] != self.client_id
            or claims["jti"] in self.jtis
        ):
            return 400, {"error": "invalid_client"}
        self.jtis.add(claims["jti"])
        granted = set(form.get("scope", "").split()) & self.offered
        if not granted:
            return 400, {"error": "invalid_scope"}
        token = secrets.token_hex(16)
        self.tokens[token] = granted
        return 200, {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": 3600,
            "scope": " ".join(sorted(granted)),
        }

    def scope_ok(self, header: str | None, needed: str) -> bool:
        token = (header or "").removeprefix("Bearer ")
        return needed in self.tokens.get(token, set())

    def page(self, items: list[dict], query: dict, base: str) -> tuple[list[dict], str | None]:
        limit = int(query.get("limit", self.page_size))
        start = int(
            query.get(
                "from" if self.flavour == "moodle" else "page", 0 if self.flavour == "moodle" else 1
            )
        )
        offset = start if self.flavour == "moodle" else (start - 1) * limit
        chunk = items[offset : offset + limit]
        if offset + limit >= len(items):
            return chunk, None
        parts = urllib.parse.urlsplit(base)
        params = [
            (k, v)
            for k, v in urllib.parse.parse_qsl(parts.query)
            if k not in ("from", "page", "limit")
        ]
        params += (
            [("limit", str(limit)), ("from", str(offset + limit))]
            if self.flavour == "moodle"
            else [("limit", str(limit)), ("page", str(start + 1))]
        )
        following = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(params)))
        first = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(params[:-1])))
        if self.flavour == "canvas":
            return (
                chunk,
                f'<{base}>; rel="current",<{following}>; rel="next",<{first}>; rel="first"',
            )
        return (
            chunk,
            f"<{first}>; rel=“first”, <{base}>; rel=“canonical”, <{following}>; rel=“next”",
        )

    def list_items(self, query: dict) -> list[dict]:
        found = []
        for item_id, item in sorted(self.items.items()):
            if self.filters and any(
                query.get(k) not in (None, item.get(f))
                for k, f in (("resource_id", "resourceId"), ("tag", "tag"))
            ):
                continue
            found.append({"id": self.item_url(item_id), **item})
        return found

    def add_item(self, body: dict) -> tuple[int, dict]:
        if not isinstance(body, dict) or "label" not in body or "scoreMaximum" not in body:
            return 400, {"error": "No label or Score Maximum"}
        item_id = next(self.ids)
        self.items[item_id] = {
            k: body[k] for k in ("label", "scoreMaximum", "resourceId", "tag") if k in body
        }
        self.results[item_id] = {}
        return 201, {"id": self.item_url(item_id), **self.items[item_id]}

    def score(self, item_id: int, body: dict) -> tuple[int, dict]:
        required = ("userId", "activityProgress", "gradingProgress", "timestamp")
        if not isinstance(body, dict) or any(k not in body for k in required):
            return 400, {"error": "missing a required field"}
        user, when = str(body["userId"]), _when(body["timestamp"])
        if user not in self.roster:
            return (
                (422, {"error": "User not found in course or is not a student"})
                if self.flavour == "canvas"
                else (400, {"error": "Incorrect score received"})
            )
        if "scoreGiven" in body and "scoreMaximum" not in body:
            return 422, {"error": "ScoreMaximum not supplied when ScoreGiven present."}
        before = self.results[item_id].get(user)
        if before and (
            before["updated"] > when if self.flavour == "canvas" else before["updated"] >= when
        ):
            return (
                (400, {"error": "timestamp before last updated"})
                if self.flavour == "canvas"
                else (409, {"error": "Refusing score with an earlier timestamp"})
            )
        given = body.get("scoreGiven")
        if self.flavour == "moodle" and body["gradingProgress"] != "FullyGraded":
            given = None  # Moodle keeps a score only when fully graded
        self.results[item_id][user] = {
            "score": given,
            "maximum": body.get("scoreMaximum", 1),
            "comment": body.get("comment"),
            "updated": when,
            "progress": body["gradingProgress"],
        }
        return 200, {"resultUrl": f"{self.item_url(item_id)}/results/{user}"}

    def result_list(self, item_id: int) -> list[dict]:
        shown = []
        for user, r in sorted(self.results[item_id].items()):
            if self.flavour == "canvas":
                entry = {
                    "id": f"{self.item_url(item_id)}/results/{user}",
                    "userId": user,
                    "resultScore": r["score"],
                    "resultMaximum": r["maximum"],
                    "comment": r["comment"],
                }
                shown.append({k: v for k, v in entry.items() if v is not None})
                continue
            entry = {"id": f"{self.item_url(item_id)}/results?user_id={user}", "userId": int(user)}
            if r["score"]:  # PHP's !empty(): neither null nor zero
                grade_max = self.items[item_id]["scoreMaximum"]
                entry |= {
                    "resultScore": r["score"] / r["maximum"] * grade_max,
                    "resultMaximum": grade_max,
                    "scoreOf": self.item_url(item_id),
                    "timestamp": r["updated"].isoformat(),
                }
                entry |= {"comment": r["comment"]} if r["comment"] else {}
            shown.append(entry)
        return shown

    # --- HTTP -----------------------------------------------------------------------------------
    def _handler(self):
        platform = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def answer(self, status: int, body, content_type="application/json", link=None):
                data = json.dumps(body).encode()
                # logged before the answer leaves: the client reads the log once it has it
                platform.log.append((self.command, urllib.parse.urlsplit(self.path).path, status))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                if link:  # written as bytes: Moodle's curly quotes are no latin-1
                    self._headers_buffer.append(f"Link: {link}\r\n".encode())
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parts.query))
                kind, item_id = platform.route(parts.path)
                auth = self.headers.get("Authorization")
                base = f"{platform.url}{self.path}"
                if kind == "lineitems":
                    if not platform.scope_ok(auth, SCOPES[0]):
                        return self.answer(401, {"error": "unauthorized"})
                    chunk, link = platform.page(platform.list_items(query), query, base)
                    return self.answer(
                        200, chunk, "application/vnd.ims.lis.v2.lineitemcontainer+json", link
                    )
                if kind == "results":
                    if not platform.scope_ok(auth, SCOPES[2]):
                        return self.answer(401, {"error": "unauthorized"})
                    chunk, link = platform.page(platform.result_list(item_id), query, base)
                    return self.answer(
                        200, chunk, "application/vnd.ims.lis.v2.resultcontainer+json", link
                    )
                self.answer(404, {"error": "not found"})

            def do_POST(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                kind, item_id = platform.route(parts.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                content_type = (self.headers.get("Content-Type") or "").split(";")[0]
                auth = self.headers.get("Authorization")
                if kind == "token":
                    if content_type != "application/x-www-form-urlencoded":
                        return self.answer(400, {"error": "invalid_request"})
                    return self.answer(*platform.token(dict(urllib.parse.parse_qsl(raw.decode()))))
                try:
                    body = json.loads(raw)
                except ValueError:
                    return self.answer(400, {"error": "not JSON"})
                if kind == "lineitems":
                    if not platform.scope_ok(auth, SCOPES[0]):
                        return self.answer(401, {"error": "unauthorized"})
                    if content_type != "application/vnd.ims.lis.v2.lineitem+json":
                        return self.answer(400, {"error": "unsupported content type"})
                    status, made = platform.add_item(body)
                    return self.answer(status, made, "application/vnd.ims.lis.v2.lineitem+json")
                if kind == "scores":
                    if not platform.scope_ok(auth, SCOPES[1]):
                        return self.answer(401, {"error": "unauthorized"})
                    if content_type != "application/vnd.ims.lis.v1.score+json":
                        return self.answer(400, {"error": "unsupported content type"})
                    return self.answer(*platform.score(item_id, body))
                self.answer(404, {"error": "not found"})

        return Handler
