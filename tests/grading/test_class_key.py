"""One course secret, every route: the answer key of a class edition, and a class released the
classroom's way graded with ``make grade``.

Before, a class's own answers sat undocumented in a grading workspace's ``course/source/``, and
nothing else wrote them; ``python -m course_grading key`` (``make key SECRET_FILE=...``) now
writes them: each lesson's solutions rendered with the class's numbers and a table of the
answers an edition changes (``course_grading/nbgrader/answer_key.py``). The key's answers score
full marks when graded with the secret, by the trusted checks alone (fast, every edition-bound
item of three lessons) and through the grading command (lesson 3, released as the classroom
releases it: ``nbgrader generate_assignment`` with ``SHAPES_COURSE_SECRET_FILE`` naming a copy
of the instructor's file, then graded with ``make grade SECRET_FILE=`` the file itself).
"""

from __future__ import annotations

import csv
import math
import shutil
import subprocess
import sys

import nbformat
import pytest
from class_builders import REPO, filled, find, sandbox_problem, write

from course_grading import cli
from course_grading.judge import items
from course_grading.judge import secret as course_secret
from course_grading.judge.items import Evidence
from course_grading.nbgrader import course as wc
from course_grading.nbgrader.answer_key import ANSWERS, edition_answers

LESSON = "03_gradient_accumulation"
FAST = ["02_padding_and_packing", LESSON, "05_choosing_the_numbers"]


def _answers(nb: nbformat.NotebookNode, item: items.Item) -> dict[str, object]:
    """The values an answer cell of the key sets, its lines run as plain Python (the edition's
    questions are arithmetic on the question's numbers)."""
    code = find(nb, item.answer).source
    lines = [
        ln for ln in code.splitlines() if not ln.startswith(("ensure_answered", "if ", "    "))
    ]
    namespace: dict = {"math": math}
    exec("\n".join(lines), namespace)  # noqa: S102 - the course's own solution cell
    return {name: namespace[name] for name in item.values}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("key")
    secret_file = course_secret.create(tmp / "secret", term="Fall-2026")
    assert cli.main(["key", "--secret-file", str(secret_file), "--out", str(tmp / "key"),
                     "--lessons", *FAST]) == 0  # fmt: skip
    return tmp, secret_file, course_secret.load(secret_file)


def test_the_key_answers_every_edition_question_of_the_class_and_only_that_class(keyed):
    tmp, _, key = keyed
    page = (tmp / "key" / ANSWERS).read_text(encoding="utf-8")
    bound = 0
    for lesson in FAST:
        nb = nbformat.read(str(tmp / "key" / lesson / f"{lesson}.ipynb"), as_version=4)
        assert "«" not in nbformat.writes(nb)  # rendered: no template left
        for gid, item in items.items_of(lesson).items():
            if item.edition is None:
                continue
            bound += 1
            values = _answers(nb, item)
            with_key = Evidence(item, "ann", values=values, answer_source="typed", secret=key)
            assert items.verdict(item, with_key, []).points == item.points, (lesson, gid)
            public = Evidence(item, "ann", values=values, answer_source="typed", secret=None)
            if values != item.expected_values():  # the key answers this class, not self-study
                assert items.verdict(item, public, []).points == 0, (lesson, gid)
        rows = edition_answers(lesson, key)
        for row in rows:  # the table says the same answers
            assert f"| `{row.item}` | `{row.value}` | **{row.answer}** |" in page
        for gid in {row.item for row in rows}:  # each item's answers differ from self-study's
            assert any(r.answer != r.self_study for r in rows if r.item == gid), (lesson, gid)
    assert bound >= 5
    for path in [tmp / "key", *(tmp / "key").rglob("*")]:
        assert path.stat().st_mode & 0o077 == 0, path  # the answers: the owner's only


def test_the_key_goes_only_into_a_new_folder_and_needs_a_secret(keyed, tmp_path, capsys):
    tmp, secret_file, _ = keyed
    again = [
        "key",
        "--secret-file",
        str(secret_file),
        "--out",
        str(tmp / "key"),
        "--lessons",
        LESSON,
    ]
    assert cli.main(again) == 2 and "not an empty folder" in capsys.readouterr().err
    assert cli.main(["key", "--out", str(tmp_path / "k")]) == 2
    assert "self-study edition's key is solutions/" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()


@pytest.mark.skipif(bool(sandbox_problem()), reason="bubblewrap cannot sandbox here")
def test_a_class_released_the_classroom_way_and_graded_with_make_grade_scores_the_key(keyed):
    tmp, secret_file, key = keyed
    course = tmp / "course"  # the classroom's course folder: the repository's config and lesson
    shutil.copytree(REPO / wc.SOURCE_DIR / LESSON, course / wc.SOURCE_DIR / LESSON)
    shutil.copy(REPO / wc.CONFIG_FILE, course / wc.CONFIG_FILE)
    copy = tmp / "instructor-copy"  # what run.py start gives the instructor's account
    shutil.copy(secret_file, copy)
    copy.chmod(0o600)
    env = {**wc.nbgrader_env(), "SHAPES_COURSE_SECRET_FILE": str(copy)}
    command = [sys.executable, "-m", "nbgrader", "generate_assignment", LESSON, "--force"]
    made = subprocess.run(command, cwd=course, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-2000:]
    released = course / wc.RELEASE_DIR / LESSON / f"{LESSON}.ipynb"
    # the same numbers make release SECRET_FILE= asks
    out = tmp / "class-release"
    run = [
        sys.executable,
        "scripts/release.py",
        "--secret-file",
        str(secret_file),
        "--out",
        str(out),
    ]
    assert subprocess.run(run, cwd=REPO, capture_output=True).returncode == 0
    ours = nbformat.read(str(out / LESSON / f"{LESSON}.ipynb"), as_version=4)
    hub = nbformat.read(str(released), as_version=4)
    assert [c.source for c in hub.cells] == [c.source for c in ours.cells]
    assert (
        hub.metadata["shapes"]["edition"]
        == ours.metadata["shapes"]["edition"]
        != "self-study edition"
    )
    # a student answers the hub's notebook with the key; make grade's command, the same file
    keyed_nb = tmp / "key" / LESSON / f"{LESSON}.ipynb"
    write(tmp / "submitted" / "ann" / LESSON / f"{LESSON}.ipynb", filled(released, keyed_nb))
    grade = [
        sys.executable,
        "-m",
        "course_grading",
        str(tmp / "submitted"),
        "--out",
        str(tmp / "graded"),
        "--secret-file",
        str(secret_file),
    ]  # = make grade SECRET_FILE=
    done = subprocess.run(grade, cwd=REPO, capture_output=True, text=True, timeout=1500,
                          env=wc.nbgrader_env())  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp / "graded" / "report.csv", newline="", encoding="utf-8") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["status"] == "ok" and row["failed_tests"] == "", row
    assert float(row["auto_score"]) == float(row["auto_max"]) > 0, row
    assert key.edition_id and "practice grading" not in (tmp / "graded" / "report.md").read_text()
