"""Whether a course secret could have come from a generator: 128 bits, and no human pattern.

A secret's worth is what an attacker must try to find it. The course's secret draws each
class's numbers and every student's hidden inputs, and students see a function of it (their
edition's numbers), so a secret a person made up (``Shapes-Fall-2026``) is found offline by
trying a list of likely ones. The grader therefore accepts only what a generator writes: hex
(``secrets.token_hex``, ``openssl rand -hex``) or base64 (``secrets.token_urlsafe``,
``openssl rand -base64``), and estimates its entropy conservatively:

* **bits**: its length times log2 of the smallest alphabet that holds it (10 for digits only,
  16 for hex, else the classes it uses: 26 lower, 26 upper, 10 digits, each symbol pair 2), at
  least :data:`MIN_BITS`;
* **no pattern a generator makes only by a fluke**, each tested as the chance that a uniform
  draw from that alphabet shows it, refused below :data:`FLUKE` (one in a million per test, a
  union bound, so a generator's output is refused less often still): a run of one character,
  a run counting up or down (``0123456``), a stretch written twice (``deadbeefdeadbeef``),
  letter pairs common in English words (``th``, ``er``, ``an``, ...: a passphrase, however
  long, reads like words), and text written in hex or base64 (``Y29ycmVjdCBob3JzZQ==``: random
  bytes are all printable with a chance of (98/256) to the power of their number).

What no test can see is a secret *derived* from a guessable one (the hex SHA-256 of a
password): make it with ``python -m course_grading secret PATH``, which writes 256 random bits.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import string

import numpy as np

MIN_BITS = 128
FLUKE = 1e-6
#: Fifty of the commonest letter pairs in English text (a cryptanalyst's table).
COMMON_PAIRS = frozenset(
    "th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io le "
    "ve co me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur".split()
)
_GENERATED = re.compile(r"[A-Za-z0-9+/_-]+=*")
_SYMBOL_PAIRS = ("+/", "-_")


def alphabet_size(text: str) -> int:
    """The size of the smallest alphabet a generator could have drawn ``text`` from.

    Args:
        text: the secret, without base64 padding.

    Returns:
        10 (digits), 16 (hex in one case), 22 (hex in both), else the sum of the classes used.
    """
    chars = set(text)
    if chars <= set(string.digits):
        return 10
    if chars <= set(string.digits + "abcdef") or chars <= set(string.digits + "ABCDEF"):
        return 16
    if chars <= set(string.hexdigits):
        return 22
    classes = [string.ascii_lowercase, string.ascii_uppercase, string.digits, *_SYMBOL_PAIRS]
    return sum(len(c) for c in classes if chars & set(c))


def _longest_run(text: str, step: int) -> int:
    """The longest stretch where each character is the one before plus ``step`` (code points)."""
    best = run = 1
    for a, b in zip(text, text[1:]):
        run = run + 1 if ord(b) - ord(a) == step else 1
        best = max(best, run)
    return best


def _longest_repeat(text: str) -> int:
    """The length of the longest stretch that occurs at two places (0: none)."""
    for k in range(len(text) - 1, 0, -1):
        seen = set()
        for i in range(len(text) - k + 1):
            if text[i : i + k] in seen:
                return k
            seen.add(text[i : i + k])
    return 0


def alphabet(text: str) -> str:
    """The characters of the smallest alphabet a generator could have drawn ``text`` from.

    Args:
        text: the secret, without base64 padding.

    Returns:
        :func:`alphabet_size` characters: digits, hex of the case(s) used, or the classes used.
    """
    size = alphabet_size(text)
    if size == 10:
        return string.digits
    if size in (16, 22):
        ordered = string.digits + "abcdef" + "ABCDEF"
        return "".join(
            c for c in ordered if size == 22 or (c.lower() == c) == (text.lower() == text)
        )
    classes = [string.ascii_lowercase, string.ascii_uppercase, string.digits, *_SYMBOL_PAIRS]
    return "".join(c for c in classes if set(text) & set(c))


def english_pairs(text: str) -> tuple[int, float]:
    """How many adjacent pairs of ``text`` are two letters of one case forming a pair common in
    English (``th``, ``ER``), and the chance that a generator's draw of the same length from
    the same alphabet (:func:`alphabet`) has as many: exact, by dynamic programming over the
    last character, so overlapping pairs (``ere``: two) count as they fall.

    Args:
        text: the secret, without base64 padding.

    Returns:
        (the pairs found, P(a uniform draw has at least as many)).
    """
    chars = alphabet(text)
    found = sum(_common(a, b) for a, b in zip(text, text[1:]))
    letters = [c for c in chars if c.isalpha()]
    # follows[i, j]: letter j after letter i makes a common pair (row and column len(letters):
    # the state "the last character was no letter", after which nothing is common)
    follows = np.zeros((len(letters) + 1, len(letters) + 1))
    for i, p in enumerate(letters):
        for j, c in enumerate(letters):
            follows[i, j] = _common(p, c)
    others = (len(chars) - len(letters)) / len(chars)
    dist = np.zeros((len(letters) + 1, found + 1))  # last character -> P(count = k)
    dist[-1, 0] = 1.0
    for _ in text:
        total = dist.sum(axis=0)
        common = follows.T[:-1] @ dist  # each letter: P(count = k and it makes a pair now)
        shifted = np.concatenate([np.zeros((len(letters), 1)), common[:, :-1]], axis=1)
        shifted[:, -1] += common[:, -1]  # counts at ``found`` or more are kept together
        new = np.empty_like(dist)
        new[:-1] = (total - common + shifted) / len(chars)
        new[-1] = total * others
        dist = new
    return found, float(dist[:, -1].sum())


def _common(a: str, b: str) -> bool:
    """Two letters of one case whose pair is common in English."""
    same_case = a.isalpha() and b.isalpha() and a.islower() == b.islower()
    return same_case and (a + b).lower() in COMMON_PAIRS


def encoded_text(text: str) -> tuple[str, int]:
    """What ``text`` decodes to as printable text, if it does: hex, or base64 (either alphabet).

    Args:
        text: the secret, base64 padding included.

    Returns:
        (the encoding, the number of printable bytes it decodes to), or ``("", 0)``.
    """
    decoders = [("hex", bytes.fromhex)]
    padded = text + "=" * (-len(text.rstrip("=")) % 4 if "=" not in text else 0)
    decoders += [("base64", lambda t: base64.b64decode(padded, validate=True)),
                 ("base64", lambda t: base64.urlsafe_b64decode(padded))]  # fmt: skip
    for name, decode in decoders:
        try:
            raw = decode(text)
        except (ValueError, binascii.Error):
            continue
        if raw and all(32 <= b < 127 or b in (9, 10, 13) for b in raw):
            return name, len(raw)
    return "", 0


def problems(secret: str) -> list[str]:
    """Why ``secret`` is not one a generator wrote (module docstring); empty when it could be.

    Args:
        secret: the secret as its file holds it (surrounding whitespace dropped).

    Returns:
        One sentence per failed test, each naming what it found.
    """
    if not _GENERATED.fullmatch(secret):
        odd = sorted({c for c in secret if not re.fullmatch(r"[A-Za-z0-9+/_=-]", c)})[:5]
        return [f"it holds characters no hex or base64 generator writes ({odd!r})"]
    text = secret.rstrip("=")
    n, size = len(text), alphabet_size(text)
    found = []
    if (bits := n * math.log2(size)) < MIN_BITS:
        found.append(f"{n} characters from {size} hold at most {bits:.0f} bits, not {MIN_BITS}")
    if n * size ** -(_longest_run(text, 0) - 1) < FLUKE:
        found.append(f"it repeats one character {_longest_run(text, 0)} times in a row")
    counting = max(_longest_run(text, 1), _longest_run(text, -1))
    if 2 * n * size ** -(counting - 1) < FLUKE:
        found.append(f"it counts up or down for {counting} characters")
    repeat = _longest_repeat(text)
    if repeat and math.comb(n, 2) * size**-repeat < FLUKE:
        found.append(f"it holds a stretch of {repeat} characters twice")
    encoding, printable = encoded_text(secret)
    if printable and (98 / 256) ** printable < FLUKE:
        found.append(f"it is text written in {encoding} ({printable} printable characters)")
    common, chance = english_pairs(text)
    if common and chance < FLUKE:
        found.append(f"it reads like words ({common} pairs of letters common in English)")
    return found
