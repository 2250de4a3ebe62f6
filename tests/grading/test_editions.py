"""Class editions (``course_grading/judge/editions.py``): a typed answer earns a point only in the
class whose numbers it answers.

The shortcut they close: a question answered by a typed number has one right value, and the
public repository holds it (the solution, the registration's ``expected=``). In a class
edition the same question is asked with numbers the course secret draws, so the public value
typed in scores 0 and the class's own answer full marks. Each side is shown twice: for every
edition-bound item of every lesson by its trusted check alone (fast), and for one lesson through
the whole grading command, released with the secret and graded with it.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
from class_builders import REPO, filled, find, sandbox_problem, write

from course_grading.errors import GradingError
from course_grading.judge import editions, items
from course_grading.judge.items import Evidence
from course_grading.judge.items.model import lesson_of
from course_grading.nbgrader import course as wc
from course_grading.nbgrader.steps import render_editions, render_lesson

#: Three classes' secrets, each as ``python -m course_grading secret`` writes one (strong: the
#: grader refuses a guessable one), in the one-line form: the key is the secret itself.
SECRETS = [
    b"d612b3fbe6d5ff3e022cdffd51c421e2e440cf5636d47169d1ee7ecc9d56c268",
    b"e69267ee31196d2309573f1ec4f05140fa56b70fedc5c58efc58419698147b7d",
    b"ad7b9342ac6233f2093c488f1f90f0f1a2b38fb68a92b85bb7ced1558e6fe667",
]
LESSONS = wc.find_lessons(REPO)
BOUND = [
    (lesson, gid)
    for lesson in LESSONS
    for gid, item in items.items_of(lesson).items()
    if item.edition is not None
]


def _solution(lesson: str) -> nbformat.NotebookNode:
    return nbformat.read(str(REPO / wc.SOURCE_DIR / lesson / f"{lesson}.ipynb"), as_version=4)


def _answers(nb: nbformat.NotebookNode, item: items.Item) -> dict[str, object]:
    """The values the answer cell's solution sets, run as plain Python (the questions are
    arithmetic on the question's numbers)."""
    code = find(nb, item.answer).source
    lines = [
        ln for ln in code.splitlines() if not ln.startswith(("ensure_answered", "if ", "    "))
    ]
    namespace: dict = {"math": math}
    exec("\n".join(lines), namespace)  # noqa: S102 - the course's own solution cell
    return {name: namespace[name] for name in item.values}


def _points(item: items.Item, values: dict, secret: bytes | None) -> float:
    ev = Evidence(item, "ann", values=values, answer_source="typed", secret=secret)
    return items.verdict(item, ev, []).points


def public_source(root) -> object:
    """The self-study edition's instructor notebook (templates rendered with public numbers)."""
    path = root / wc.SOURCE_DIR / LESSON / f"{LESSON}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    render_lesson(nb, LESSON, None)
    out = path.parent.parent.parent / "self-study.ipynb"
    nbformat.write(nb, str(out))
    return out


def _class_solution(lesson: str, secret: bytes | None) -> nbformat.NotebookNode:
    nb = _solution(lesson)
    render_lesson(nb, lesson, secret)
    return nb


def test_some_items_of_every_lesson_with_typed_questions_are_edition_bound():
    lessons = {lesson for lesson, _ in BOUND}
    assert "05_choosing_the_numbers" in lessons, BOUND
    assert len(BOUND) >= 3


def test_every_template_gives_its_cell_in_the_self_study_edition():
    for lesson in LESSONS:
        nb = _solution(lesson)
        edition = lesson_of(lesson).edition
        templated = [c for c in nb.cells if editions.template_of(c) is not None]
        assert bool(templated) == (edition is not None), lesson
        if edition is not None:
            assert editions.template_problems(nb, edition.names(edition.public())) == [], lesson


def test_a_template_out_of_step_with_its_cell_is_named():
    lesson = "05_choosing_the_numbers"
    nb = _solution(lesson)
    cell = find(nb, "intro-31")
    cell.source = cell.source.replace(
        "per_device_train_batch_size=4", "per_device_train_batch_size=5"
    )
    problems = editions.template_problems(nb, lesson_of(lesson).edition.public())
    assert len(problems) == 1 and problems[0].startswith("intro-31: the template gives"), problems


@pytest.mark.parametrize(("lesson", "gid"), BOUND)
def test_the_public_answer_typed_scores_nothing_in_a_class_the_class_answer_full(lesson, gid):
    item = items.items_of(lesson)[gid]
    public = _answers(_solution(lesson), item)
    assert _points(item, public, None) == item.points  # the self-study edition: right
    for secret in SECRETS:
        own = _answers(_class_solution(lesson, secret), item)
        assert own != public, (secret, own)
        assert _points(item, own, secret) == item.points, (secret, own)
        assert _points(item, public, secret) == 0, (secret, public)
        assert _points(item, own, None) == 0  # and a class's answer is no self-study answer


def test_the_draw_is_the_same_every_time_and_the_label_reveals_nothing():
    edition = lesson_of("05_choosing_the_numbers").edition
    drawn = [edition.draw(s) for s in SECRETS]
    assert drawn == [edition.draw(s) for s in SECRETS]
    assert len({tuple(sorted(d.items())) for d in drawn}) == len(SECRETS)
    assert edition.draw(None) == edition.public()
    assert edition.label(None) == "self-study edition"
    label = edition.label(SECRETS[0])
    assert label.startswith("class edition ") and len(label) == len("class edition ") + 8


#: Each edition-bound item asks a class one of at least this many answers besides the public one
#: (issue 42: lesson 1's target practice had 2, its question 1 3: a class's answer was likely
#: another class's, or last year's).
MIN_CLASS_ANSWERS = 5


def _class_answers(lesson: str, enough: int | None = None) -> dict[str, set[tuple]]:
    """Every answer a class can be asked for, per edition-bound item of ``lesson``: the item's
    right values, as its forms read them, under each combination of numbers the draw keeps
    (every one: ``Edition.draw`` redraws until a combination is kept). With ``enough``, the
    walk stops once every item has that many (lesson 5 has 676,512 combinations)."""
    registry = lesson_of(lesson)
    edition, bound = registry.edition, [i for i in registry.items.values() if i.edition]
    names, found = sorted(edition.numbers), {item.grade_id: set() for item in bound}
    for combination in itertools.product(*(edition.numbers[n].choices for n in names)):
        numbers = dict(zip(names, combination))
        if not all(keeps(numbers) for keeps in edition.answers):
            continue
        for item in bound:
            values = item.expected_values(numbers)
            found[item.grade_id].add(
                tuple(item.forms[n].canonical(values[n]) for n in sorted(item.forms))
            )
        if enough and all(len(answers) >= enough for answers in found.values()):
            break
    return found


@pytest.mark.parametrize("lesson", sorted({lesson for lesson, _ in BOUND}))
def test_every_edition_bound_item_asks_a_class_one_of_five_answers_or_more(lesson):
    """Before: lesson 1's target practice had 2 class answers, question 1 3. All of them now
    (``_class_answers`` without ``enough``): lesson 1 30, 11 and 6; lesson 2 80; lesson 3 6;
    lesson 5 235, 28 and 23."""
    answers = _class_answers(lesson, enough=MIN_CLASS_ANSWERS)
    public = {
        item.grade_id: tuple(
            item.forms[n].canonical(item.expected_values()[n]) for n in sorted(item.forms)
        )
        for item in lesson_of(lesson).items.values()
        if item.edition
    }
    for gid, found in answers.items():
        assert len(found) >= MIN_CLASS_ANSWERS and public[gid] not in found, (gid, found)


def test_each_card_is_far_from_every_measured_peak_of_its_budget():
    """Target practice's answer is measured (counted bytes on the CPU); a GPU's allocator peaks
    run a little higher. A card 15 % or more from every split's peak picks the same split on
    both; the check can fail: a card at a peak (86.9 MiB at 4,096 tokens) is named."""
    from course_grading.judge.items import lesson_01

    def too_close(tokens: int, card: float) -> list[str]:
        peaks = lesson_01._split_peaks(tokens)
        return [f"{card} MiB is within 15 % of {seq}'s {peak / 2**20:.1f} MiB"
                for seq, peak in peaks.items()
                if 1 / 1.15 < card * 2**20 / peak < 1.15]  # fmt: skip

    for tokens, cards in lesson_01.CARDS.items():
        for card in cards:
            assert not too_close(tokens, card), (tokens, too_close(tokens, card))
        seqs = {lesson_01._target({"tp_tokens": tokens, "tp_card": i})["target_seq_len"]
                for i in range(len(cards))}  # fmt: skip
        assert seqs == {128, 256, 512, 1024}, (tokens, seqs)  # one card per split
    assert too_close(4096, 87) and too_close(2048, 50)


def test_an_edition_too_narrow_to_change_an_answer_is_refused():
    from course_grading.judge.items import Integer, Lesson

    narrow = Lesson("98_narrow", edition={"n": editions.choices(3, (3,))})

    @narrow.item("test-a", answer="a", points=1, values={"a": Integer()},
                 expected=lambda n: {"a": n["n"] * 2}, edition=True)  # fmt: skip
    def a(ev):
        return ev.expect_all()

    with pytest.raises(GradingError, match="no edition changes every answer"):
        narrow.edition.draw(SECRETS[0])
    with pytest.raises(ValueError, match="needs the lesson's edition"):
        Lesson("98_none").item("t", answer="a", points=1, values={"a": Integer()},
                               expected={"a": 1}, edition=True)(a)  # fmt: skip


def test_a_template_naming_an_unknown_number_says_which_and_computes_nothing_else():
    with pytest.raises(GradingError, match="«rows \\* nope».*no number named 'nope'"):
        editions.render("x = «rows * nope»", {"rows": 2})
    for bad in ("__import__('os').system('true')", "rows.__class__", "(1,)[0]", "[rows]"):
        with pytest.raises(GradingError, match="is not allowed in a template"):
            editions.render(f"«{bad}»", {"rows": 2})
    assert editions.render("«'a' if (rows, 1) == (2, 1) else 'b'» «-rows ** 2»", {"rows": 2}) == (
        "a -4"
    )
    assert editions.render("«n:,» and «n * 2»", {"n": 1024}) == "1,024 and 2048"


def test_a_class_release_holds_no_template_and_goes_only_into_a_new_folder(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRETS[0])
    secret_file.chmod(0o600)
    out = tmp_path / "class"
    run = [sys.executable, "scripts/release.py", "--secret-file", str(secret_file), "--out"]
    proc = subprocess.run([*run, str(out)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lesson = "05_choosing_the_numbers"
    text = (out / lesson / f"{lesson}.ipynb").read_text(encoding="utf-8")
    assert "«" not in text and '"edition": "class edition ' in text
    assert "per_device_train_batch_size=4`" not in text  # the self-study question is not asked
    public = (REPO / wc.RELEASE_DIR / lesson / f"{lesson}.ipynb").read_text(encoding="utf-8")
    assert "«" not in public and '"edition": "self-study edition"' in public
    again = subprocess.run([*run, str(out)], capture_output=True, text=True, cwd=REPO)
    assert again.returncode == 1 and "not an empty folder" in again.stderr
    alone = subprocess.run(run[:4], capture_output=True, text=True, cwd=REPO)
    assert alone.returncode == 2 and "go together" in alone.stderr


def test_nbgraders_own_generate_assignment_releases_the_secrets_edition(tmp_path):
    """The classroom's path: ``nbgrader generate_assignment`` in a course folder made from the
    repository, with the secret in ``SHAPES_COURSE_SECRET_FILE``, releases what the grading
    command's workspace releases; without it, the self-study edition."""
    lesson = "05_choosing_the_numbers"
    for secret in (SECRETS[1], None):
        root = tmp_path / ("class" if secret else "self-study")
        shutil.copytree(REPO / wc.SOURCE_DIR / lesson, root / wc.SOURCE_DIR / lesson)
        shutil.copy(REPO / wc.CONFIG_FILE, root / wc.CONFIG_FILE)
        env = wc.nbgrader_env()
        env.pop("SHAPES_COURSE_SECRET_FILE", None)
        if secret:
            (root / "secret").write_bytes(secret)
            (root / "secret").chmod(0o600)
            env["SHAPES_COURSE_SECRET_FILE"] = str(root / "secret")
        command = [sys.executable, "-m", "nbgrader", "generate_assignment", lesson, "--force"]
        proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        got = nbformat.read(str(root / wc.RELEASE_DIR / lesson / f"{lesson}.ipynb"), 4)
        want = _class_solution(lesson, secret)
        for gid in ("intro-31", "test-q1", "intro-33", "test-q3"):
            visible = find(want, gid).source.split("### BEGIN HIDDEN TESTS")[0]
            assert find(got, gid).source.rstrip() == visible.rstrip(), (secret, gid)
        assert got.metadata["shapes"]["edition"] == lesson_of(lesson).edition.label(secret)
        assert not any(editions.template_of(c) for c in got.cells)


# --- one lesson through the grading command -------------------------------------------------

LESSON = "05_choosing_the_numbers"
SANDBOX = not sandbox_problem()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Lesson 5 released in a class edition and graded with its secret: the class's own
    solution, the self-study solution handed in to the class, and the class's blank."""
    tmp = tmp_path_factory.mktemp("editions")
    root = tmp / "root"
    shutil.copytree(REPO / wc.SOURCE_DIR / LESSON, root / wc.SOURCE_DIR / LESSON)
    shutil.copy(REPO / wc.CONFIG_FILE, root / wc.CONFIG_FILE)
    secret_file = tmp / "secret"
    secret_file.write_bytes(SECRETS[0])
    secret_file.chmod(0o600)
    work = wc.make_work_course(root, tmp / "release")
    render_editions(work, SECRETS[0])
    wc.generate_assignments(work)
    release = work.release_notebook(LESSON)
    rendered = work.source_notebook(LESSON)  # the class edition's solutions
    subs = tmp / "submitted"
    public = nbformat.read(str(root / wc.SOURCE_DIR / LESSON / f"{LESSON}.ipynb"), as_version=4)
    typed = filled(release, rendered)
    for gid in ("q1", "q2", "q3"):  # the self-study answers, typed into the class's notebook
        find(typed, gid).source = "\n".join(
            ln for ln in find(public, gid).source.splitlines() if "SOLUTION" not in ln
        )
    write(subs / "classright" / LESSON / f"{LESSON}.ipynb", filled(release, rendered))
    write(subs / "publictyped" / LESSON / f"{LESSON}.ipynb", typed)
    write(subs / "blank" / LESSON / f"{LESSON}.ipynb", nbformat.read(str(release), as_version=4))
    self_study = REPO / wc.RELEASE_DIR / LESSON / f"{LESSON}.ipynb"  # the public notebook
    write(subs / "selfstudy" / LESSON / f"{LESSON}.ipynb", filled(self_study, public_source(root)))
    out = tmp / "out"
    command = [sys.executable, "-m", "course_grading", str(subs), "--out", str(out), "--root"]
    command += [str(root), "--secret-file", str(secret_file), "--jobs", "2"]
    command += [] if SANDBOX else ["--no-sandbox"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1500, cwd=REPO,
                          env=wc.nbgrader_env(), check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "report.csv", newline="", encoding="utf-8") as fh:
        rows = {row["student"]: row for row in csv.DictReader(fh)}
    page = out / "copies.md"
    return {**rows, "copies.md": page.read_text(encoding="utf-8") if page.exists() else ""}


def test_the_class_solution_scores_full_marks_unflagged(graded):
    row = graded["classright"]
    assert row["status"] == "ok" and row["failed_tests"] == "", row
    assert float(row["auto_score"]) == float(row["auto_max"]) > 0, row


def test_the_self_study_answers_in_a_class_score_nothing_on_those_questions(graded):
    row, full = graded["publictyped"], graded["classright"]
    failed = set(re.findall(r"(?:^|; )(test-[\w-]+) \(0/", row["failed_tests"]))
    assert failed == {"test-q1", "test-q2", "test-q3"}, row["failed_tests"]
    assert float(row["auto_score"]) == float(full["auto_score"]) - 3, row


def test_the_self_study_answers_in_a_class_are_flagged_and_on_the_review_page(graded):
    """Issue 40.5: the student who typed the public answers was status ``ok``, the signal only
    in the failed items' text. The row is flagged and names the items; the page lists it."""
    row = graded["publictyped"]
    assert row["status"] == "flagged", row
    said = "answers the self-study edition: test-q1, test-q2, test-q3"
    assert said in row["reasons"], row["reasons"]
    section = graded["copies.md"].split("## Answers of the self-study edition", 1)[1]
    assert f"| publictyped | {LESSON} | test-q1, test-q2, test-q3" in section.replace("\\", "")
    for honest in ("classright", "blank"):
        assert "answers the self-study" not in graded[honest]["reasons"], graded[honest]
        assert f"| {honest} |" not in section


def test_a_notebook_of_another_edition_is_flagged_and_its_answers_score_nothing(graded):
    """An instructor who released ``notebooks/`` and grades with the secret finds out at once."""
    row = graded["selfstudy"]
    assert row["status"] == "flagged", row
    assert (
        "handed in on the self-study edition, graded on this class's class edition"
        in (row["reasons"])
    )
    assert float(row["auto_score"]) == float(graded["classright"]["auto_score"]) - 3, row
    assert "handed in on" not in graded["classright"]["reasons"]


def test_the_class_blank_scores_nothing(graded):
    assert float(graded["blank"]["auto_score"]) == 0, graded["blank"]
