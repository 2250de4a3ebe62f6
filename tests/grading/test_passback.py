"""Grades back to the LMS through LTI Advantage's grade service (``python -m course_grading
passback``), against a platform simulated on 127.0.0.1 as Canvas and as Moodle run theirs
(``lti_platform.py``).

The round trip each platform is put through: a dry run changes nothing and says what it would
do; ``--post`` makes one line item per lesson (found again by ``resourceId`` and ``tag``) and
posts each known student's score (``PendingManual`` while written answers are to grade); a
second run posts nothing; a manual grade entered afterwards posts exactly that student's new
score; a student without a recorded ``sub``, one the platform refuses, a missing and an
ungraded submission are listed, never posted. The token is asked for with a signed assertion
the simulator verifies; a forged one, or too few scopes, stops the run in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from lms_builders import make_workspace
from lti_platform import Platform
from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning

from course_grading import cli
from course_grading.errors import GradingError
from course_grading.lms import ags
from course_grading.lms.passback import already_there, load_platform
from course_grading.nbgrader import course as wc

ROOT = Path(__file__).resolve().parents[2]
ISSUER, CLIENT = "https://lms.example.edu", "10000000000042"
#: nbgrader id -> (issuer, sub) as the hub's registry records launches
LAUNCHED = {
    "sobrien": (ISSUER, "sub-sob"),
    "zmuller@uni.example": (ISSUER, "sub-zm"),
    "jos_": (ISSUER, "sub-jos"),
    "nobody-in-canvas": (ISSUER, "sub-gone"),  # launched once, since dropped from the course
    "-dash": ("https://another-lms.example", "sub-dash"),  # another platform's: not this one's
}
ROSTER = {"sub-sob", "sub-zm", "sub-jos"}


def _registry(path: Path, launched: dict, lineitems: str = "") -> Path:
    users = {f"lti-{n}": {"issuer": iss, "sub": sub, "login": sid, "student_id": sid,
                          **({"lineitems": lineitems} if lineitems else {})}
             for n, (sid, (iss, sub)) in enumerate(launched.items())}  # fmt: skip
    path.write_text(json.dumps({"users": users}))
    return path


def _tool_key(folder: Path, capsys) -> tuple[Path, dict]:
    """``lti-key``: the key file, and the JWK it printed for the LMS."""
    path = folder / "tool-key.pem"
    assert cli.main(["lti-key", str(path)]) == 0
    printed = capsys.readouterr().out
    jwk = json.loads(printed[printed.index("{") : printed.index("}") + 1])
    return path, jwk


def _setup(tmp_path, capsys, flavour: str, roster: set[str], launched: dict, **options):
    key, jwk = _tool_key(tmp_path, capsys)
    platform = Platform(flavour, jwk, CLIENT, roster, **options)
    conf = {"issuer": ISSUER, "client_id": [CLIENT], "token_url": platform.token_url,
            "lineitems": platform.lineitems, "tool_key": key.name}  # fmt: skip
    (tmp_path / "lti.json").write_text(json.dumps(conf))
    return platform, _registry(tmp_path / "lti_users.json", launched)


def _passback(tmp_path, capsys, source: list[str], *, post: bool) -> tuple[int, str]:
    args = ["passback", *source, "--platform", str(tmp_path / "lti.json")]
    args += ["--registry", str(tmp_path / "lti_users.json"), *(["--post"] if post else [])]
    status = cli.main(args)
    out = capsys.readouterr()
    return status, out.out + out.err


def _results(platform: Platform, lesson: str) -> dict[str, dict]:
    """The platform's results of ``lesson``'s line item, by user."""
    (item_id,) = [i for i, item in platform.items.items() if item.get("resourceId") == lesson
                  and item.get("tag") == "shapes"]  # fmt: skip
    return platform.results[item_id]


def _lines(out: str, action: str) -> list[str]:
    return sorted(ln.split(action, 1)[1].split(":")[0].strip() for ln in out.splitlines()
                  if ln.startswith(f"  {action} "))  # fmt: skip


@pytest.fixture
def canvas(tmp_path, capsys):
    platform, _ = _setup(tmp_path, capsys, "canvas", ROSTER, LAUNCHED)
    yield platform, make_workspace(tmp_path / "grading")
    platform.close()


def test_canvas_round_trip_dry_run_post_rerun_and_a_late_manual_grade(tmp_path, capsys, canvas):
    platform, workspace = canvas
    status, out = _passback(tmp_path, capsys, [str(workspace)], post=False)
    assert status == 0, out
    assert "dry run: nothing is changed" in out and platform.changes() == [] and not platform.items
    assert _lines(out, "would post") == [
        "jos_",
        "nobody-in-canvas",
        "sobrien",
        "sobrien",
        "zmuller@uni.example",
    ]
    assert out.count("would create line item") == 2

    status, out = _passback(tmp_path, capsys, [str(workspace)], post=True)
    assert status == 0, out
    assert out.count("line item created") == 2 and len(platform.items) == 2
    made = {item["resourceId"]: item for item in platform.items.values()}
    assert {k: (v["tag"], v["scoreMaximum"]) for k, v in made.items()} == {
        "01_tokens": ("shapes", 10.0),
        "02_padding": ("shapes", 12.0),
    }
    assert _lines(out, "posted") == ["jos_", "sobrien", "sobrien", "zmuller@uni.example"]
    not_sent = {
        ln.split()[2].rstrip(":"): ln for ln in out.splitlines() if ln.startswith("  not sent")
    }
    assert "no LTI launch recorded" in not_sent["-dash"]  # launched on another platform only
    assert "HTTP 422" in not_sent["nobody-in-canvas"]  # the platform does not know them
    assert "no submission" in out and "not graded (see report.md)" in out
    zm = _results(platform, "01_tokens")["sub-zm"]
    assert (zm["score"], zm["maximum"], zm["progress"]) == (5.5, 10.0, "PendingManual")
    sob = _results(platform, "01_tokens")["sub-sob"]
    assert (sob["score"], sob["maximum"], sob["progress"]) == (9.0, 10.0, "FullyGraded")
    assert set(_results(platform, "02_padding")) == {"sub-sob"}
    assert "4 score(s) posted" in out and "2 line item(s) created" in out
    posts = len(platform.changes())

    status, out = _passback(tmp_path, capsys, [str(workspace)], post=True)
    assert status == 0 and len(platform.changes()) == posts, out  # a rerun changes nothing
    assert out.count("line item found") == 2 and len(_lines(out, "already there")) == 4

    with Gradebook(f"sqlite:///{workspace / 'course' / 'gradebook.db'}") as gb:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SAWarning)
            written = gb.find_grade("written", "01_tokens", "01_tokens", "zmuller@uni.example")
            written.manual_score, written.needs_manual_grade = 2.0, False
            gb.db.commit()
    status, out = _passback(tmp_path, capsys, [str(workspace)], post=True)
    assert _lines(out, "posted") == ["zmuller@uni.example"] and len(platform.changes()) == posts + 1
    zm = _results(platform, "01_tokens")["sub-zm"]
    assert (zm["score"], zm["progress"]) == (7.5, "FullyGraded")
    _, out = _passback(tmp_path, capsys, [str(workspace)], post=True)
    assert len(platform.changes()) == posts + 1 and not _lines(out, "posted")


def test_moodle_round_trip_with_its_paging_links_zeros_and_pending_grades(tmp_path, capsys):
    """Moodle pages with ``rel=“next”`` (curly quotes), lists a zero and a pending grade without
    ``resultScore``, and carries ``?type_id=`` on every service URL."""
    graded = {("ann", "01_tokens"): (8.0, 2.0), ("bob", "01_tokens"): (0.0, 0.0),
              ("cy", "01_tokens"): (5.0, None), ("dee", "01_tokens"): (3.0, 1.0)}  # fmt: skip
    launched = {
        "ann": (ISSUER, "2"),
        "bob": (ISSUER, "3"),
        "cy": (ISSUER, "4"),
        "dee": (ISSUER, "5"),
    }
    platform, _ = _setup(tmp_path, capsys, "moodle", {"2", "3", "4", "5"}, launched, page_size=1)
    workspace = make_workspace(tmp_path / "grading", {"01_tokens": (8.0, 2.0)}, graded, [])
    try:
        status, out = _passback(tmp_path, capsys, [str(workspace)], post=True)
        assert status == 0 and _lines(out, "posted") == ["ann", "bob", "cy", "dee"], out
        (item,) = platform.results.values()
        assert item["4"]["score"] is None and item["3"]["score"] == 0.0  # Moodle's keeping
        posts = len(platform.changes())
        status, out = _passback(tmp_path, capsys, [str(workspace)], post=True)
        assert len(platform.changes()) == posts, out  # four pages of results all read
        assert _lines(out, "already there") == ["ann", "bob", "cy", "dee"]
        pages = [entry for entry in platform.log if entry[1].endswith("/results")]
        assert len(pages) >= 4, pages
    finally:
        platform.close()


def test_a_platform_that_ignores_the_filters_still_gives_one_line_item_per_lesson(tmp_path, capsys):
    """Line items of other tools and tags, on several pages, are read past, never reused."""
    platform, _ = _setup(tmp_path, capsys, "canvas", ROSTER, LAUNCHED, filters=False, page_size=2)
    for n in range(5):
        resource = "01_tokens" if n == 3 else f"quiz-{n}"  # the same lesson, another tool's
        platform.add_item({"label": f"quiz {n}", "scoreMaximum": 5, "resourceId": resource,
                           "tag": "another-tool"})  # fmt: skip
    workspace = make_workspace(tmp_path / "grading")
    try:
        for _ in range(2):
            status, out = _passback(tmp_path, capsys, [str(workspace)], post=True)
            assert status == 0, out
        mine = [it for it in platform.items.values() if it.get("tag") == "shapes"]
        assert sorted(it["resourceId"] for it in mine) == ["01_tokens", "02_padding"]
        assert out.count("line item found") == 2 and not _lines(out, "posted")
    finally:
        platform.close()


def test_a_forged_assertion_or_too_few_scopes_stops_in_one_line(tmp_path, capsys):
    _, jwk = _tool_key(tmp_path / "other", capsys)  # the platform knows another key
    real, _ = _tool_key(tmp_path, capsys)
    platform = Platform("canvas", jwk, CLIENT, ROSTER)
    conf = {"issuer": ISSUER, "client_id": CLIENT, "token_url": platform.token_url,
            "lineitems": platform.lineitems, "tool_key": str(real)}  # fmt: skip
    (tmp_path / "lti.json").write_text(json.dumps(conf))
    _registry(tmp_path / "lti_users.json", LAUNCHED)
    workspace = make_workspace(tmp_path / "grading")
    try:
        status, out = _passback(tmp_path, capsys, [str(workspace)], post=True)
        assert status == 2 and "invalid_client" in out and platform.changes() == [], out
    finally:
        platform.close()
    narrow = Platform("moodle", json.loads(json.dumps(ags.public_jwk(ags.read_tool_key(real)))),
                      CLIENT, ROSTER, offered=ags.SCOPES[:2])  # fmt: skip
    conf |= {"token_url": narrow.token_url, "lineitems": narrow.lineitems}
    (tmp_path / "lti.json").write_text(json.dumps(conf))
    try:
        status, out = _passback(tmp_path, capsys, [str(workspace)], post=False)
        assert status == 2 and "did not grant the scope(s) result.readonly" in out, out
        assert out.strip().count("\n") <= 1
    finally:
        narrow.close()


def test_the_line_items_url_comes_from_the_launches_when_the_file_has_none(tmp_path, capsys):
    key, _ = _tool_key(tmp_path, capsys)
    conf = {"issuer": ISSUER, "client_id": CLIENT, "token_url": "https://lms.example.edu/token",
            "tool_key": str(key)}  # fmt: skip
    path = tmp_path / "lti.json"
    path.write_text(json.dumps(conf))
    url = "https://lms.example.edu/api/lti/courses/7/line_items"
    users = json.loads(_registry(tmp_path / "r.json", LAUNCHED, url).read_text())["users"]
    assert load_platform(path, users).lineitems == url
    users["lti-0"]["lineitems"] = url.replace("/7/", "/8/")
    with pytest.raises(GradingError, match="launches recorded several"):
        load_platform(path, users)
    conf["lineitems"] = "http://lms.example.edu/api/lti/courses/7/line_items"  # not https
    path.write_text(json.dumps(conf))
    with pytest.raises(GradingError, match="not an https URL"):
        load_platform(path, users)
    key.chmod(0o644)
    with pytest.raises(GradingError, match="can be read by others"):
        load_platform(path, users)
    assert cli.main(["lti-key", str(key)]) == 2  # never over a key
    assert "exists already" in capsys.readouterr().err


def test_links_service_urls_and_what_counts_as_already_there():
    canvas = '<https://c/l?page=1>; rel="current",<https://c/l?page=2>; rel="next"'
    moodle = "<https://m/l?from=0>; rel=“first”, <https://m/l?from=2>; rel=“next”"
    assert ags.next_link(canvas) == "https://c/l?page=2"
    assert ags.next_link(moodle) == "https://m/l?from=2"
    assert ags.next_link(moodle.encode().decode("latin-1")) == "https://m/l?from=2"  # http.client
    assert ags.next_link('<https://c/l?page=1>; rel="current"') is None
    assert ags.service_url("https://m/s.php/7/lineitems/4/lineitem?type_id=3", "scores") == \
        "https://m/s.php/7/lineitems/4/lineitem/scores?type_id=3"  # fmt: skip
    body = {
        "scoreGiven": 9.0,
        "scoreMaximum": 10.0,
        "gradingProgress": "FullyGraded",
        "comment": "c",
    }
    assert already_there({"resultScore": 9.0, "resultMaximum": 10.0, "comment": "c"}, body)
    assert already_there({"resultScore": 90.0, "resultMaximum": 100.0}, body)  # rescaled
    assert not already_there({"resultScore": 8.0, "resultMaximum": 10.0}, body)
    assert not already_there({"resultScore": 9.0, "resultMaximum": 10.0, "comment": "d"}, body)
    assert not already_there({"userId": 2}, body) and not already_there(None, body)
    assert already_there({"userId": 2}, {**body, "scoreGiven": 0.0})  # Moodle's zero
    assert already_there({"userId": 2}, {**body, "gradingProgress": "PendingManual"})


@pytest.mark.classroom
@pytest.mark.skipif(os.geteuid() != 0, reason="run.py refuses anyone but root")
def test_the_classroom_passes_back_the_class_gradebook(tmp_path, capsys):
    """``run.py passback``: the class gradebook (here a SQLite one), the state's lti.json and
    registry, as root; a dry run, then --post, then nothing more."""
    state = tmp_path / "state"
    (state / "secrets").mkdir(parents=True)
    platform, _ = _setup(state, capsys, "canvas", ROSTER, LAUNCHED)
    (state / "lti_users.json").rename(state / "secrets" / "lti_users.json")
    workspace = make_workspace(tmp_path / "grading")
    gradebook = f"sqlite:///{workspace / 'course' / 'gradebook.db'}"
    (state / "secrets" / "gradebook_url").write_text(gradebook)
    (state / "classroom.json").write_text(json.dumps({"course_id": "default_course"}))
    (state / "pids.json").write_text("{}")
    env = {**os.environ, "PATH": wc.nbgrader_env()["PATH"]}
    run = [sys.executable, str(ROOT / "classroom" / "run.py"), "passback", "--state", str(state)]
    try:
        dry = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
        assert dry.returncode == 0 and "dry run" in dry.stdout and not platform.changes(), (
            dry.stderr
        )
        posted = subprocess.run(
            [*run, "--post"], capture_output=True, text=True, env=env, timeout=120
        )
        assert posted.returncode == 0 and "4 score(s) posted" in posted.stdout, (
            posted.stdout + posted.stderr
        )
        count = len(platform.changes())
        again = subprocess.run(
            [*run, "--post"], capture_output=True, text=True, env=env, timeout=120
        )
        assert again.returncode == 0 and len(platform.changes()) == count, again.stdout
    finally:
        platform.close()
