"""The commands ``python -m course_grading passback`` and ``python -m course_grading lti-key``.

``passback`` reads the scores, the registry and the platform file and prints every outcome of
``passback.passback`` as it happens (a failure stops it with what was done printed above);
``lti-key PATH`` makes the tool's RSA key pair (the private key into ``PATH``, mode 600, never
over a file) and prints the public key in the two forms the LMSs take: the JWK Canvas's
developer key asks for, and the PEM Moodle's tool settings ask for.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.lms import ags
from course_grading.lms.passback import (
    ALREADY,
    NOT_SENT,
    POSTED,
    WOULD_POST,
    load_platform,
    passback,
    registry_users,
    subs_of,
)
from course_grading.lms.scores import ClassScores, from_gradebook, from_workspace


def build_parser() -> argparse.ArgumentParser:
    """The ``passback`` command's options.

    Returns:
        The parser.
    """
    parser = argparse.ArgumentParser(
        prog="python -m course_grading passback",
        description="Post each student's score to the LMS through LTI Advantage's grade "
        "service: a line item per lesson (found, or made), a score per student whose LTI launch "
        "recorded their platform id. A dry run unless --post; a second run changes nothing.",
    )
    add = parser.add_argument
    add("grading_out", nargs="*", type=Path, help="grading workspace(s): --out of a grading run")
    add("--gradebook", help="or an nbgrader gradebook's URL (the classroom's: run.py passback)")
    add("--course-id", default="shapes", help="the gradebook's course id (shapes)")
    add("--platform", required=True, type=Path, help="the platform file (the classroom's lti.json)")
    add("--registry", required=True, type=Path, help="the hub's lti_users.json (who is which sub)")
    add("--lessons", nargs="+", help="only these lessons (default: all graded)")
    add(
        "--label",
        action="append",
        default=[],
        metavar="LESSON=TEXT",
        help="a new line item's label (default: the lesson)",
    )
    add("--post", action="store_true", help="change the platform (without it: a dry run)")
    return parser


def _scores(args: argparse.Namespace) -> ClassScores:
    if bool(args.grading_out) == bool(args.gradebook):
        raise GradingError("give grading workspace(s) or --gradebook URL, one of them")
    if args.gradebook:
        from nbgrader.api import Gradebook

        with Gradebook(args.gradebook, course_id=args.course_id) as gb:
            table = from_gradebook(gb, args.lessons)
    else:
        table = ClassScores()
        for folder in args.grading_out:
            from_workspace(folder, table)
    if args.lessons:
        if unknown := sorted(set(args.lessons) - set(table.lessons)):
            raise GradingError(f"no scores for {', '.join(unknown)}")
        table.scores = {k: s for k, s in table.scores.items() if k[1] in args.lessons}
    if not table.scores:
        raise GradingError("the grading output holds no scores")
    return table


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        lesson, sep, text = pair.partition("=")
        if not sep or not text.strip():
            raise GradingError(f"--label {pair!r}: give LESSON=TEXT")
        labels[lesson] = text.strip()
    return labels


def passback_main(argv: list[str]) -> int:
    """``passback ...``: print each outcome, then a summary.

    Args:
        argv: the arguments after ``passback``.

    Returns:
        0 once every lesson is done (students not sent are listed, with why).

    Raises:
        GradingError: bad options, unreadable scores, registry or platform file, or a failure of
            the platform that stops the run (after what was done is printed).
    """
    args = build_parser().parse_args(argv)
    scores, users = _scores(args), registry_users(args.registry)
    platform = load_platform(args.platform, users)
    client = ags.AgsClient(platform)
    mode = "posting" if args.post else "dry run: nothing is changed (add --post to post)"
    print(
        f"passback to {platform.issuer} (client {platform.client_id}), line items at "
        f"{platform.lineitems}; {mode}"
    )
    subs = subs_of(users, platform.issuer, scores.students)
    counts: Counter[str] = Counter()
    for outcome in passback(client, scores, subs, post=args.post, labels=_labels(args.label)):
        print(outcome.line(), flush=True)
        counts[outcome.action if outcome.student else "line item: " + outcome.action] += 1
    made = counts["line item: line item created"] + counts["line item: would create line item"]
    verb = "created" if args.post else "to create"
    print(
        f"{made} line item(s) {verb}, {counts[POSTED] or counts[WOULD_POST]} score(s) "
        f"{'posted' if args.post else 'to post'}, {counts[ALREADY]} already there, "
        f"{counts[NOT_SENT]} not sent (listed above, with why)"
    )
    return 0


def key_parser() -> argparse.ArgumentParser:
    """The ``lti-key`` command's options.

    Returns:
        The parser.
    """
    parser = argparse.ArgumentParser(
        prog="python -m course_grading lti-key",
        description="Make the tool's RSA key pair for LTI Advantage's grade service: the "
        "private key into PATH (mode 600, never over a file); the public key printed for the LMS.",
    )
    parser.add_argument("path", type=Path, help="where to write the private key (must not exist)")
    return parser


def key_main(argv: list[str]) -> int:
    """``lti-key PATH``: a new RSA key pair for the tool (module docstring).

    Args:
        argv: the arguments after ``lti-key``.

    Returns:
        0 once the key is written and the public key printed.

    Raises:
        GradingError: ``PATH`` exists already.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    path = key_parser().parse_args(argv).path.expanduser()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise GradingError(f"{path} exists already: a key is never overwritten") from None
    with os.fdopen(descriptor, "wb") as out:
        out.write(pem)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    print(
        f"wrote the tool's private key to {path} (mode 600); name it as tool_key in the "
        "platform file.\n\nCanvas (Developer Key > Public JWK):\n"
        f"{json.dumps(ags.public_jwk(key), indent=2)}\n\n"
        f"Moodle (tool settings > Public key type: RSA key > Public key):\n{public.decode()}"
    )
    return 0
