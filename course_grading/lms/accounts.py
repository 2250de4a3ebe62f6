"""The account name a learning-management system's login becomes on the course's hub.

The classroom logs students in through LTI 1.3 (``classroom/lti.py``): the launch names the
student by their LMS login (Canvas's login id, Moodle's username, or an e-mail address), and
each hub user needs a Unix account of the same name, which is also their nbgrader student id.
Debian's ``adduser`` takes ``[a-z][a-z0-9_-]*`` up to 32 characters; most logins are already
such a name and keep it. Any other login (``Zoë.Müller@uni.example``) becomes a name of those
characters followed by ``-`` and six hex digits of its SHA-256, so two logins never share an
account. The export (``matching.py``) applies the same rule to an LMS file's ids, so the grades
of such a student find their row again.
"""

from __future__ import annotations

import re
from hashlib import sha256

MAX_LENGTH = 32
_VALID = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_OTHER = re.compile(r"[^a-z0-9_-]+")


def account_name(login: str) -> str:
    """The hub (and nbgrader) name of the LMS login ``login``.

    Args:
        login: the id the LMS gives the student.

    Returns:
        ``login`` itself when it is a valid account name; otherwise its letters and digits
        (lower case, other runs as ``_``, a leading ``u`` if it does not start with a letter),
        at most 25 characters, then ``-`` and the first six hex digits of SHA-256(login).
    """
    if _VALID.fullmatch(login):
        return login
    stem = _OTHER.sub("_", login.strip().lower()).strip("_")
    stem = stem if stem[:1].isalpha() else f"u{stem}"
    return f"{stem[:25]}-{sha256(login.encode()).hexdigest()[:6]}"
