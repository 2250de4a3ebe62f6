"""One course secret on every route: the classroom takes the instructor's file and keeps it.

Before, ``run.py start`` made a secret of its own in the instructor's home (the old one-line
format), which ``run.py clean`` removed with the home: a class released in the hub and graded
with ``make grade SECRET_FILE=...`` was graded on other numbers than it was asked, and so was a
class regraded after a clean. Now (``classroom/course_secret.py``):

- ``start`` without ``--secret-file`` refuses, naming the command that makes one, before it
  makes anything; so does a secret inside the state folder (``clean`` would remove it), a weak
  or readable one, and one other than the secret the classroom's lessons were released with;
- the instructor's servers and ``run.py autograde`` get a copy of exactly the given file (the
  key the grader draws with is the file's);
- ``clean`` leaves the instructor's file, and refuses to remove a home holding the only copy
  of a class's secret (a classroom from before ``--secret-file``).

Needs root (``prepare`` makes the demo accounts; ``clean`` removes them). No hub is started:
the end-to-end classroom test (``test_classroom.py``) releases and grades with the same file.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from course_grading.judge import secret as course_secret

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "classroom" / "run.py"
WHY_NOT = (
    "needs root on Linux: the classroom makes Unix accounts"
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("useradd")
    else ""
)
pytestmark = [pytest.mark.classroom, pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT)]


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "SHAPES_COURSE_SECRET_FILE"}
    return subprocess.run([sys.executable, str(RUN), *args], capture_output=True, text=True,
                          timeout=120, env={**environment, **(env or {})})  # fmt: skip


@pytest.fixture
def room(tmp_path, monkeypatch):
    """The classroom's ``room`` module (a sibling import, as run.py makes it), a state folder
    and a secret outside it; the demo accounts removed afterwards whatever happened."""
    monkeypatch.syspath_prepend(str(ROOT / "classroom"))
    # no hub starts here: prepare only records where the proxy is, so any program will do
    monkeypatch.setenv("SHAPES_PROXY", shutil.which("true") or "/bin/true")
    import room as room_module

    state, prefix = tmp_path / "state", f"sec{secrets.token_hex(3)}"
    secret_file = course_secret.create(tmp_path / "keep" / "shapes-secret", term="Fall-2026")
    made = types.SimpleNamespace(module=room_module, state=state, prefix=prefix, secret=secret_file)
    yield made
    for name in (f"{prefix}-instructor", f"{prefix}-student1"):
        subprocess.run(["userdel", "--remove", name], capture_output=True)


def _args(made, secret_file: Path) -> types.SimpleNamespace:
    return types.SimpleNamespace(students=1, prefix=made.prefix, instructor=None, student=None,
                                 ip="127.0.0.1", port=0, secret_file=secret_file)  # fmt: skip


def test_start_without_a_secret_file_refuses_and_says_how_to_make_one(tmp_path):
    state = tmp_path / "state"
    done = _run("start", "--state", str(state), "--port", "0")
    assert done.returncode != 0
    assert "python -m course_grading secret" in done.stderr and "--secret-file" in done.stderr
    assert not state.exists(), "it made the state folder before refusing"


def test_start_refuses_a_secret_clean_would_delete_or_a_guessable_one(tmp_path):
    state = tmp_path / "state"
    inside = course_secret.create(state / "mine")
    done = _run("start", "--state", str(state), "--secret-file", str(inside))
    assert done.returncode != 0 and "inside the state folder" in done.stderr, done.stderr
    weak = tmp_path / "weak"
    weak.write_text("Shapes-Fall-2026\n")
    weak.chmod(0o600)
    done = _run("start", "--state", str(tmp_path / "s2"), "--secret-file", str(weak))
    assert done.returncode != 0 and "could be guessed" in done.stderr, done.stderr
    readable = course_secret.create(tmp_path / "readable")
    readable.chmod(0o644)
    done = _run(
        "start", "--state", str(tmp_path / "s3"), env={"SHAPES_COURSE_SECRET_FILE": str(readable)}
    )
    assert done.returncode != 0 and "can be read by others" in done.stderr, done.stderr


def test_the_classroom_draws_with_the_instructors_file_and_clean_leaves_it(room):
    given = room.secret.read_bytes()
    made = room.module.Classroom(room.state).prepare(_args(room, room.secret))
    settings = made["settings"]
    copy = Path(settings["course_secret"])
    teacher = pwd.getpwnam(f"{room.prefix}-instructor")
    # the file the hub and run.py autograde name is the instructor's, byte for byte
    assert copy.read_bytes() == given and copy != room.secret
    assert (copy.stat().st_uid, copy.stat().st_mode & 0o777) == (teacher.pw_uid, 0o600)
    assert bytes(course_secret.load(copy)) == bytes(course_secret.load(room.secret))
    assert course_secret.load(copy).edition_id == course_secret.load(room.secret).edition_id
    assert settings["secret_file"] == str(room.secret.resolve())
    on_disk = (room.state / "classroom.json").read_text()
    value = course_secret.parse(given.decode(), "")["secret"]
    assert json.loads(on_disk)["course_secret"] == str(copy) and value not in on_disk
    # a second start with another secret is refused: the lessons were released with this one
    other = course_secret.create(room.secret.parent / "another")
    done = _run(
        "start", "--state", str(room.state), "--prefix", room.prefix, "--secret-file", str(other)
    )
    assert done.returncode != 0 and "released with another course secret" in done.stderr
    assert copy.read_bytes() == given
    done = _run("clean", "--state", str(room.state))
    assert done.returncode == 0, done.stderr
    assert not room.state.exists() and room.secret.read_bytes() == given
    # regraded after a clean: a new classroom from the same file draws the same numbers
    again = room.module.Classroom(room.state).prepare(_args(room, room.secret))
    assert Path(again["settings"]["course_secret"]).read_bytes() == given
    assert _run("clean", "--state", str(room.state)).returncode == 0


def test_clean_keeps_a_home_holding_the_only_copy_of_a_class_secret(room):
    """A classroom from before --secret-file made its own secret in the instructor's home: the
    only copy of what its class was released and graded with. clean stops and says where."""
    made = room.module.Classroom(room.state).prepare(_args(room, room.secret))
    copy = Path(made["settings"]["course_secret"])
    settings_file = room.state / "classroom.json"
    old = {k: v for k, v in json.loads(settings_file.read_text()).items() if k != "secret_file"}
    settings_file.write_text(json.dumps(old))
    copy.write_text(f"{secrets.token_hex(32)}\n")  # the old one-line secret, its own
    done = _run("clean", "--state", str(room.state))
    assert done.returncode != 0 and "only copy" in done.stderr and str(copy) in done.stderr
    assert copy.is_file() and pwd.getpwnam(f"{room.prefix}-instructor")
    copy.unlink()  # the instructor moved it out: now clean removes everything
    assert _run("clean", "--state", str(room.state)).returncode == 0 and not room.state.exists()
