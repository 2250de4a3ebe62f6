"""The nbgrader id a learning-management system's login becomes on the course's hub.

The classroom logs students in through LTI 1.3 (``classroom/lti.py``). Their hub user and Unix
account are named from the platform's issuer and ``sub`` (``lti-`` and a digest), never from a
login; the LMS login the launch names (Canvas's login id, Moodle's username, an e-mail address)
becomes the student's **nbgrader id**, what reports, formgrader and the grade export show. Kept
as it is whenever it is a safe id (``ann.lee``, ``zoe@uni.example``): letters, digits and
``._@-``, starting with a letter or digit, at most 64 characters, and not shaped like a made-up
id. Any other login (``Zoë.Müller@uni.example``, ``$Canvas.user.loginId``) becomes its letters
and digits, ``--`` and 16 base-32 digits of its SHA-256 (80 bits).

The rule is one-to-one. A kept login never has the made-up shape (a login that has it is made
up in turn, from its own digest), so a login can never be another one's made-up id; two made-up
ids are equal only when 80 bits of SHA-256 are, which no one can arrange for a given login. The
hub refuses a second person on an id anyway (``classroom/lti.py``). The export (``matching.py``)
applies the same rule to an LMS file's ids, so the grades of a student whose login was made up
find their row again.
"""

from __future__ import annotations

import re
import unicodedata
from base64 import b32encode
from hashlib import sha256

MAX_LENGTH = 64
DIGITS = 16  # base-32 digits of the digest: 80 bits
_KEPT = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._@-]{{0,{MAX_LENGTH - 1}}}")
_MADE_UP = re.compile(rf".*--[a-z2-7]{{{DIGITS}}}", re.IGNORECASE)
_OTHER = re.compile(r"[^a-z0-9._@-]+")


def student_id(login: str) -> str:
    """The nbgrader id of the LMS login ``login`` (see the module docstring).

    Args:
        login: the id the LMS gives the student.

    Returns:
        ``login`` itself when it is a safe id not shaped like a made-up one; otherwise its
        letters and digits (lower case, accents dropped, other runs as ``_``, at most 32), ``--``
        and 16 base-32 digits of SHA-256(login).

    >>> student_id("ann.lee"), student_id("Zoë.Müller@uni.example")
    ('ann.lee', 'zoe.muller@uni.example--gh6lyj5c6ovwx4oh')
    """
    if _KEPT.fullmatch(login) and not _MADE_UP.fullmatch(login):
        return login
    plain = unicodedata.normalize("NFKD", login.strip().lower()).encode("ascii", "ignore")
    stem = _OTHER.sub("_", plain.decode()).strip("._@-")[:32].strip("._@-") or "u"
    digest = b32encode(sha256(login.encode("utf-8", "surrogatepass")).digest()).decode()
    return f"{stem}--{digest[:DIGITS].lower()}"
