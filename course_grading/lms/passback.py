"""``python -m course_grading passback``: each student's score into the LMS through LTI Advantage.

    python -m course_grading lti-key ~/shapes-lti-key.pem       # once: the tool's key pair
    python -m course_grading passback GRADING_OUT --platform lti.json --registry lti_users.json
    python -m course_grading passback GRADING_OUT ... --post    # after reading the dry run

The scores are the export's (``scores.py``: a grading workspace, manual grades entered after
the run included, or with ``--gradebook URL`` an nbgrader gradebook such as the classroom's).
For each lesson the course's **line item** is found by its ``resourceId`` (the lesson) and
``tag`` (``shapes``), or made (its label the lesson, or ``--label LESSON=TEXT``, out of the
lesson's points). For each student a **score** goes to it: ``scoreGiven`` out of
``scoreMaximum`` (points less any late penalty, as every export), ``activityProgress``
``Completed``, ``gradingProgress`` ``FullyGraded``, or ``PendingManual`` while written answers
are still to grade, a timestamp, a one-line comment with the points, and ``userId`` the
platform's own id of the student, the ``sub`` their LTI launch recorded in the classroom's
registry (``STATE/secrets/lti_users.json``, ``classroom/lti.py``).

**Nothing is guessed.** A student without a recorded ``sub`` (never launched the tool from the
LMS), a submission that is missing or could not be graded, and a score the platform refuses
(a 4xx: not a student of that course) are listed with the reason, and nothing is posted for
them. **A dry run first**: without ``--post`` the command reads the platform (a token, the line
items, the results) and prints what it would create and post, changing nothing. **Idempotent**:
a score whose result the platform already shows (the same points out of the same maximum,
and the same comment where the platform returns one) is not posted again, so a second run
changes nothing; a line item is found again by ``resourceId`` and ``tag``, never made twice.
Moodle lists a zero, and the score it drops for ``PendingManual`` (it keeps a score only when
fully graded), as a result without ``resultScore``: that counts as already there for a zero or
a pending score.

The platform file is the classroom's ``lti.json`` (``issuer``, ``client_id``) with what the
service needs beside it: ``token_url``, ``tool_key`` (the private key's file, mode 600;
relative to the platform file's folder) and ``lineitems`` (the course's line items URL;
optional when every launch recorded the same one). ``token_audience`` overrides the
assertion's ``aud`` (the token URL) for a platform that asks for another.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.lms import ags
from course_grading.lms.scores import MISSING, NOT_GRADED, ClassScores, Score

TAG = "shapes"
POSTED, WOULD_POST, ALREADY, NOT_SENT = "posted", "would post", "already there", "not sent"
NO_SUB = (
    "no LTI launch recorded for this id (no sub): the platform's id of the student is "
    "unknown, nothing guessed"
)


@dataclass(frozen=True)
class Outcome:
    """What happened to one student's score, or to a lesson's line item (``student`` empty)."""

    lesson: str
    student: str
    action: str
    detail: str = ""

    def line(self) -> str:
        """The outcome on one line of the command's output.

        Returns:
            ``"  posted      ann: 13 of 15.5, FullyGraded"`` or ``"LESSON: line item ..."``.
        """
        if not self.student:
            return f"{self.lesson}: {self.action}" + (f" {self.detail}" if self.detail else "")
        return f"  {self.action:<13} {self.student}" + (f": {self.detail}" if self.detail else "")


def registry_users(path: Path) -> dict[str, dict]:
    """The hub's registry of launched users (``classroom/lti.py``), hub user -> record.

    Args:
        path: ``lti_users.json``.

    Returns:
        Each record (``issuer``, ``sub``, ``student_id``, ``lineitems`` when launches carried it).

    Raises:
        GradingError: the file cannot be read or is not a registry.
    """
    try:
        users = json.loads(path.read_text(encoding="utf-8"))["users"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise GradingError(f"cannot read the LTI registry {path} ({err})") from None
    return {str(name): record for name, record in users.items() if isinstance(record, dict)}


def load_platform(path: Path, users: dict[str, dict]) -> ags.Platform:
    """The platform of the file ``path`` (module docstring), its line items URL from the
    launches when the file gives none.

    Args:
        path: the platform file (the classroom's ``lti.json``).
        users: the registry's records.

    Returns:
        The platform, its key read.

    Raises:
        GradingError: a missing field, several client ids, no line items URL (or launches that
            recorded several), or a key that cannot be used.
    """
    try:
        conf = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise GradingError(f"cannot read the platform file {path} ({err})") from None
    if missing := [k for k in ("issuer", "client_id", "token_url", "tool_key") if not conf.get(k)]:
        raise GradingError(f"{path} has no {', '.join(missing)} (docs/classroom.md, passback)")
    clients = [conf["client_id"]] if isinstance(conf["client_id"], str) else conf["client_id"]
    if len(clients) != 1:
        raise GradingError(
            f"{path}: client_id names {len(clients)} clients; give the one to post with"
        )
    issuer = conf["issuer"]
    seen = {
        r["lineitems"] for r in users.values() if r.get("issuer") == issuer and r.get("lineitems")
    }
    lineitems = conf.get("lineitems") or (seen.pop() if len(seen) == 1 else "")
    if not lineitems:
        why = "launches recorded several" if seen else "no launch recorded one"
        raise GradingError(f"{path} has no lineitems (the course's line items URL) and {why}")
    key = ags.read_tool_key((path.parent / Path(conf["tool_key"]).expanduser()).resolve())
    token_url = ags.checked_url(conf["token_url"], "the token URL")
    return ags.Platform(
        issuer,
        str(clients[0]),
        token_url,
        conf.get("token_audience") or token_url,
        ags.checked_url(lineitems, "the line items URL"),
        key,
    )


def subs_of(users: dict[str, dict], issuer: str, students: list[str]) -> dict[str, str]:
    """Each graded student's ``sub`` on ``issuer``, by their nbgrader id (exact, else the one
    record that matches ignoring case: the hub refuses two ids that differ only in case).

    Args:
        users: the registry's records.
        issuer: the platform's issuer.
        students: the graded students' ids.

    Returns:
        Student id -> sub, for those the registry knows.
    """
    ids = {
        str(r["student_id"]): str(r["sub"])
        for r in users.values()
        if r.get("issuer") == issuer and r.get("sub") and r.get("student_id")
    }
    folded: dict[str, list[str]] = {}
    for student_id, sub in ids.items():
        folded.setdefault(student_id.casefold(), []).append(sub)
    found = {}
    for student in students:
        near = folded.get(student.casefold(), [])
        if student in ids or len(near) == 1:
            found[student] = ids.get(student) or near[0]
    return found


def _points(x: float) -> str:
    return f"{x:g}"


def score_body(score: Score, sub: str, when: str) -> dict:
    """The AGS score of ``score`` for the platform user ``sub`` (module docstring).

    Args:
        score: the student's score in one lesson.
        sub: the platform's id of the student.
        when: the timestamp (ISO 8601, UTC, milliseconds).

    Returns:
        The score's JSON object.
    """
    pending = score.pending > 0
    comment = f"Shapes grader: {_points(score.points)} of {_points(score.max_points)} points."
    if pending:
        comment += f" Written answers worth {_points(score.pending)} points are still to grade."
    return {
        "userId": sub,
        "scoreGiven": score.points,
        "scoreMaximum": score.max_points,
        "activityProgress": "Completed",
        "gradingProgress": "PendingManual" if pending else "FullyGraded",
        "timestamp": when,
        "comment": comment,
    }


def already_there(result: dict | None, body: dict) -> bool:
    """Whether the platform's ``result`` already holds the score ``body`` (module docstring).

    Args:
        result: the platform's result for the student (``None``: none).
        body: the score that would be posted.

    Returns:
        True when posting it again would change nothing.
    """
    if result is None:
        return False
    given, maximum = body["scoreGiven"], body["scoreMaximum"]
    shown = result.get("resultScore")
    if not isinstance(shown, (int, float)):  # Moodle: a zero, or a score it keeps none of
        return given == 0 or body["gradingProgress"] != "FullyGraded"
    top = result.get("resultMaximum", 1)  # AGS: 1 when the platform gives none
    if not isinstance(top, (int, float)) or not top or not maximum:
        return False
    if not math.isclose(shown / top, given / maximum, rel_tol=1e-9, abs_tol=1e-9):
        return False
    comment = result.get("comment")
    return not isinstance(comment, str) or comment == body["comment"]


def _line_item(
    client: ags.AgsClient, lesson: str, scores: ClassScores, label: str, post: bool
) -> tuple[dict | None, Outcome]:
    top = max(s.max_points for (_, one), s in scores.scores.items() if one == lesson)
    found = client.line_items(lesson, TAG)
    if len(found) > 1:
        urls = ", ".join(str(item.get("id")) for item in found)
        raise GradingError(
            f"{lesson}: {len(found)} line items have resourceId {lesson} and tag "
            f"{TAG} ({urls}): delete the extra ones in the LMS"
        )
    if found:
        return found[0], Outcome(lesson, "", "line item found", str(found[0]["id"]))
    what = f"'{label}' (resourceId {lesson}, tag {TAG}, out of {_points(top)})"
    if not post:
        return None, Outcome(lesson, "", "would create line item", what)
    made = client.create_line_item(label, top, lesson, TAG)
    return made, Outcome(lesson, "", "line item created", f"{what}: {made['id']}")


def passback(
    client: ags.AgsClient,
    scores: ClassScores,
    subs: dict[str, str],
    *,
    post: bool,
    labels: dict[str, str] | None = None,
) -> Iterator[Outcome]:
    """Each lesson's line item and each student's score, as they are done (module docstring).

    Args:
        client: the platform's client.
        scores: the graded class.
        subs: student id -> the platform's id of the student (:func:`subs_of`).
        post: change the platform; ``False``: a dry run, only read.
        labels: lesson -> its line item's label (default: the lesson).

    Yields:
        One outcome per line item and per student score.

    Raises:
        GradingError: several line items for one lesson; the platform's failure that is not a
            refusal of one score (the token, a 5xx, the network), after what was done.
    """
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
    for lesson in scores.lessons:
        item, outcome = _line_item(client, lesson, scores, (labels or {}).get(lesson, lesson), post)
        yield outcome
        results = {str(r.get("userId")): r for r in client.results(item["id"])} if item else {}
        for student in sorted(s for s, one in scores.scores if one == lesson):
            score, sub = scores.scores[(student, lesson)], subs.get(student)
            if score.status in (MISSING, NOT_GRADED):
                why = "no submission" if score.status == MISSING else "not graded (see report.md)"
                yield Outcome(lesson, student, NOT_SENT, why)
                continue
            if sub is None:
                yield Outcome(lesson, student, NOT_SENT, NO_SUB)
                continue
            body = score_body(score, sub, when)
            shown = (
                f"{_points(score.points)} of {_points(score.max_points)}, {body['gradingProgress']}"
            )
            if item is not None and already_there(results.get(sub), body):
                yield Outcome(lesson, student, ALREADY, shown)
            elif not post or item is None:
                yield Outcome(lesson, student, WOULD_POST, shown)
            else:
                try:
                    client.post_score(item["id"], body)
                except ags.PlatformError as err:
                    if err.status in (0, 401) or err.status >= 500:
                        raise
                    yield Outcome(lesson, student, NOT_SENT, f"the platform refused it: {err}")
                    continue
                yield Outcome(lesson, student, POSTED, shown)
