"""The lessons' assessment holds, item by item (issue 20's "Done when").

One instrumented pass per lesson (``assessment.run_lesson``) runs the blank student notebook in
a live kernel and hands every autograded item its blank, its solution, the right answer in every
other reasonable form, each listed wrong answer and wrong method, the closest library call and
every shortcut of ``probes.SHORTCUTS``; each candidate is scored by the item's trusted check as
the grader scores it. Per item, then: blank 0; solution full; every wrong answer, wrong method,
library call and shortcut 0, each shortcut named in its verdict or the report; every right form
accepted; the visible test never "right" where the grade is 0 and never failing a right answer;
and no answer shown anywhere on the blank notebook. No visible test says right
(``course_grading.judge.visible``; ``tests/grading/test_items.py`` checks every cell).

Every item of every lesson is registered with its forms and its visible check
(``test_every_item_declares_its_forms_and_visible_check``): the older registration, and the older
checks that went with it, are gone (issue 27).
"""

from __future__ import annotations

import ast
import importlib
import re

import nbformat
import pytest
from assessment import ROOT, Probe, Tried, is_answer, lesson_paths, nbgrader_meta, run_lesson
from assessment import shortcut_pattern as named_by
from probes import MEASURED, SHORTCUTS, printed_answers

from course_grading.judge import items as trusted
from course_grading.judge import visible

LESSONS = sorted(p.parent.name for p in ROOT.glob("solutions/*/*.ipynb"))
MIN_WRONG_COVERAGE = 0.9  # share of autograded items tried with a wrong value


def items_of(lesson: str) -> dict:
    return importlib.import_module(f"items_{lesson[:2]}").ITEMS


def registry(lesson: str) -> dict[str, trusted.Item]:
    return trusted.items_of(lesson)


@pytest.fixture(scope="module", params=LESSONS)
def probed(request):
    lesson = request.param
    return lesson, items_of(lesson), run_lesson(lesson, items_of(lesson))


# --- static: the notebook and the registry ---------------------------------------------------


def defined_names(source: str) -> set[str]:
    """Public names an answer cell's solution defines at top level."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("lesson", LESSONS)
def test_answer_cells_name_what_to_set(lesson):
    solution, student = (nbformat.read(p, as_version=4) for p in lesson_paths(lesson))
    blanks = {nbgrader_meta(c)["grade_id"]: c.source for c in student.cells if is_answer(c)}
    for cell in solution.cells:
        if not is_answer(cell):
            continue
        gid, blank = nbgrader_meta(cell)["grade_id"], blanks[nbgrader_meta(cell)["grade_id"]]
        assert re.search(r"ensure_answered\(|raise NotImplementedError\([\"']", blank), (
            f"{lesson} {gid}: the blank must raise NotImplementedError with a message "
            "(ensure_answered(...) or raise NotImplementedError('write ...'))"
        )
        missing = {n for n in defined_names(cell.source) if n not in blank}
        assert not missing, f"{lesson} {gid}: the blank does not name {sorted(missing)}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_item_is_listed(lesson):
    solution = nbformat.read(lesson_paths(lesson)[0], as_version=4)
    graded = {nbgrader_meta(c)["grade_id"] for c in solution.cells if is_answer(c)}
    assert set(items_of(lesson)) == graded, f"items_{lesson[:2]}.py must list exactly {graded}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_item_declares_its_forms_and_visible_check(lesson):
    old = [gid for gid, item in registry(lesson).items()
           if not item.visible or (item.function and item.returns is None)]  # fmt: skip
    assert not old, f"{lesson}: register forms and visible checks for {old}"
    for gid, entry in items_of(lesson).items():
        assert entry.library, f"{lesson} {gid}: give the closest library call (shortcuts use it)"
        assert len(entry.named_wrong()) >= 2, f"{lesson} {gid}: list at least two wrong ones"


# --- the pass ----------------------------------------------------------------------------------


def test_blank_answers_fail_their_visible_test_and_score_zero(probed):
    lesson, _, run = probed
    for gid, probe in run.probes.items():
        (blank,) = probe.of("blank")
        assert blank.visible.startswith("failed"), f"{lesson} {gid}: the blank {blank.visible}"
        assert blank.points == 0, f"{lesson} {gid}: a blank answer scores {blank.points}"


def test_solutions_score_full_marks_and_pass_their_visible_test(probed):
    lesson, _, run = probed
    assert run.probes, f"{lesson} has no autograded item"
    for gid, probe in run.probes.items():
        (sol,) = probe.of("solution")
        assert sol.full, f"{lesson} {gid}: the solution scores {sol.points}: {sol.message}"
        assert not sol.visible.startswith("failed"), f"{lesson} {gid}: visible {sol.visible}"


def test_wrong_answers_and_wrong_methods_score_zero(probed):
    lesson, _, run = probed
    scored = [(gid, t.name, t.message) for gid, p in run.probes.items() for t in p.of("wrong")
              if t.points]  # fmt: skip
    assert not scored, f"{lesson}: the trusted checks score wrong answers: {scored}"
    told_right = [(gid, t.name) for gid, p in run.probes.items() for t in p.of("wrong")
                  if t.visible in ("right", "silent")]  # fmt: skip
    assert not told_right, f"{lesson}: visible tests call wrong answers right: {told_right}"
    covered = sum(bool(p.of("wrong")) for p in run.probes.values()) / len(run.probes)
    assert covered >= MIN_WRONG_COVERAGE, f"{lesson}: only {covered:.0%} are tried wrong"


def _prediction(lesson: str, answer: str) -> bool:
    return any(registry(lesson)[t].rules for t in _tests_of(lesson, answer))


def prediction_problems(probe: Probe) -> list[str]:
    """Where a prediction pays for being right (issue 27): a wrong but plausible value earning
    less than the right one, or another message; the message judging the value; the visible
    test not saying *plausible*; fewer than two plausible wrong values, or two implausible ones,
    tried."""
    (sol,) = probe.of("solution")
    plausible, implausible = probe.of("plausible"), probe.of("wrong")
    found = [f"only {len(plausible)} plausible wrong values tried"] if len(plausible) < 2 else []
    found += [f"only {len(implausible)} implausible values tried"] if len(implausible) < 2 else []
    for t in plausible:
        if t.points != sol.points or t.message != sol.message:
            found.append(f"'{t.name}' scores {t.points} ({t.message}); right: {sol.points}")
        if t.visible != "plausible":
            found.append(f"'{t.name}': the visible test says {t.visible}")
    if re.search(r"\bright\b|\bwrong\b|\bexact\b", sol.message):
        found.append(f"the message judges the value: {sol.message}")
    return found


def test_a_right_prediction_earns_no_more_than_a_plausible_one(probed):
    lesson, items, run = probed
    found = {}
    for gid, probe in run.probes.items():
        if _prediction(lesson, gid):
            found[gid] = prediction_problems(probe)
        elif items[gid].plausible:
            found[gid] = ["lists plausible wrong values, but is not a prediction: each scores 0"]
    found = {gid: f for gid, f in found.items() if f}
    assert not found, f"{lesson}: {found}"


def test_the_closest_library_call_scores_zero(probed):
    lesson, items, run = probed
    unlisted = [gid for gid, item in items.items() if item.library is None]
    assert not unlisted, f"{lesson}: give the closest library call for {unlisted}"
    for gid, probe in run.probes.items():
        (library,) = probe.of("library")
        # a library answer that cannot even run (a renamed function) proves nothing
        assert library.ran is None, f"{lesson} {gid}: the library answer raised {library.ran}"
        assert library.points == 0, f"{lesson} {gid}: the library call scores: {library.message}"


#: A prediction's shortcuts that earn its completion point by design (issue 27): the gate bypass
#: (junk, then the measurement a later cell prints) and the grader's source hand in a value the
#: rule finds plausible, which earns what any plausible value earns, and never more.
prediction_letters = ("B", "G")
#: A graded function's shortcuts that copy the course's code (the grader's reference pasted under
#: the function's name, the library's code pasted in place of its import): a resemblance is
#: evidence for review, never a zero (issue 39.3), so they are scored on their results and must
#: be listed for review instead (``review/copies.py``: their ``named`` pattern).
listed_letters = ("D", "G")


def shortcut_problems(probe: Probe, function: bool, prediction: bool = False) -> list[str]:
    """Shortcuts not tried (and not said to be inapplicable), scoring, or not named in their
    verdict or the report; a prediction's gate bypass or grader-source copy earning more than
    the right value. No shortcut is let through: the typed answers are asked with each class's
    own numbers (``course_grading/judge/editions.py``), and the harness grades the grader-source
    copy of those items with a course secret."""
    expected = {s.name for s in SHORTCUTS if (s.functions if function else s.values)}
    if function and probe.visible_calls is None:
        expected.discard("hard-coded visible inputs, junk elsewhere")
    expected -= set(probe.not_applicable)
    tried = {t.name: t for t in probe.of("shortcut")}
    letter = {s.name: s.letter for s in SHORTCUTS}
    right = max([t.points for t in probe.of("solution")], default=0.0)
    found = [f"not tried: {n}" for n in sorted(expected - set(tried) - _no_right_subclass(probe))]
    for name, t in tried.items():
        said = " || ".join([t.message, *t.review])
        if prediction and letter.get(name) in prediction_letters:
            if t.points > right:
                found.append(f"'{name}' scores {t.points}, more than the right value's {right}")
        elif function and letter.get(name) in listed_letters:
            pass  # scored on its results; it must be listed (named) below
        elif t.points:
            found.append(f"'{name}' scores {t.points}: {t.message}")
        if not re.search(named_by(name), said):
            found.append(f"'{name}' is not named: {said}")
        if letter.get(name) == "T" and "practice grading (no course secret): 0 " in said:
            found.append("the seed table scores nothing even in practice: it proves nothing")
        if letter.get(name) == "G" and "self-study edition (no course secret): 0 " in said:
            found.append("the self-study answers score nothing even in self-study: no proof")
        if not function and t.ran:
            found.append(f"'{name}' raised {t.ran} in the kernel: its values prove nothing")
    copied = tried.get("library call in an added cell, copied by the answer cell")
    if copied and not function and not any("added by the student" in f for f in copied.review):
        found.append(f"the added cell's course_lib use is not in the report: {copied.review}")
    return found


def test_every_shortcut_scores_zero_and_is_named(probed):
    lesson, _, run = probed
    found = {}
    for gid, probe in run.probes.items():
        function = any(registry(lesson)[t].function for t in _tests_of(lesson, gid))
        found[gid] = shortcut_problems(probe, function, _prediction(lesson, gid))
    found = {gid: f for gid, f in found.items() if f}
    assert not found, f"{lesson}: {found}"


def _tests_of(lesson: str, answer: str) -> list[str]:
    return [gid for gid, item in registry(lesson).items() if item.answer == answer]


def _no_right_subclass(probe: Probe) -> set[str]:
    """A value item whose right values are all bools or tuples has no subclass to try."""
    plain = [v for v in probe.right.values() if type(v) not in (bool, tuple, list)]
    return set() if plain or not probe.right else {"int/float subclass of the right value"}


def form_problems(probe: Probe) -> list[str]:
    """Right answers in other forms that lose points or fail the visible test."""
    forms = probe.of("form")
    found = [f"only {len(forms)} other forms tried"] if len(forms) < 3 else []
    found += [f"{t.name}: {t.message or t.points} / visible {t.visible}" for t in forms
              if not t.full or t.visible.startswith("failed")]  # fmt: skip
    return found


def test_every_right_answer_form_is_accepted(probed):
    lesson, _, run = probed
    found = {gid: form_problems(p) for gid, p in run.probes.items()}
    found = {gid: f for gid, f in found.items() if f}
    assert not found, f"{lesson}: right answers rejected: {found}"


def disagreements(tried: list[Tried]) -> list[str]:
    """Where the visible test and the grade disagree: "right" to a value scored 0, or a value
    given full marks that the visible test fails. Shortcuts that are right values reached the
    wrong way (a library call) are judged on their method, which the visible test cannot see."""
    found = []
    for t in tried:
        method = t.kind in ("library", "shortcut") and "plain value" not in t.message
        if t.visible == "right" and not t.full and not method:
            found.append(f"{t.kind} '{t.name}': visible says right, the grade is {t.points}")
        if t.full and t.visible.startswith("failed"):
            found.append(f"{t.kind} '{t.name}': full marks, the visible test {t.visible}")
        if t.visible == "silent":
            found.append(f"{t.kind} '{t.name}': the visible test says neither right nor plausible")
    return found


def test_visible_and_trusted_agree_on_every_value_tried(probed):
    lesson, _, run = probed
    found = {gid: disagreements(p.tried) for gid, p in run.probes.items()}
    found = {gid: d for gid, d in found.items() if d}
    assert not found, f"{lesson}: {found}"


def test_property_checks_are_not_oracles(probed):
    """Every visible test is a property check, and lets some wrong answer through as
    "plausible": it does not determine the answer."""
    lesson, _, run = probed
    for gid, probe in run.probes.items():
        tests = [registry(lesson)[t] for t in _tests_of(lesson, gid)]
        kinds = {c.kind for item in tests for c in visible.checks(item)}
        assert kinds == {"property"}, f"{lesson} {gid}: visible checks {kinds}"
        assert lets_wrong_through(probe), f"{lesson} {gid}: no wrong answer is plausible"


def lets_wrong_through(probe: Probe) -> list[str]:
    tried = [*probe.of("wrong"), *probe.of("plausible")]
    return [t.name for t in tried if t.visible == "plausible"]


def spoilers_of(run, shown: dict[str, dict[str, str]], forms: dict[str, dict]) -> list[str]:
    """Every graded answer's printed form found in what a student reads on the blank notebook,
    outside the contexts each item allows (``Item.shown``) and measured medians with their range
    (``probes.MEASURED``); ``forms``: answer cell -> value name -> form.

    A self-study *Check your answer* cell (``CHECK``: the model answer of a written question,
    opened by the student after writing theirs) is read for the items below it only: what it
    says about the items above is the point of it. A number there that also prints an answer of
    an item above it is that item's, not a later one's (lesson 1's "I predicted 16" is not its
    target practice's batch of 16)."""
    found = []
    place = {where: i for i, (where, _) in enumerate(run.texts)}
    at = {gid: place.get(f"answer cell {gid} (blank)", -1) for gid in run.probes}
    for gid, probe in run.probes.items():
        answers = _answers_of(probe, gid)
        for i, (where, text) in enumerate(run.texts):
            if where.startswith(CHECK) and 0 <= at[gid] < i:
                continue  # a check cell below this item
            text = MEASURED.sub(" ", text)
            for context in shown.get(gid, {}):
                text = text.replace(context, " ")
            above = _printed_above(run, at, i, text, forms) if where.startswith(CHECK) else set()
            for name, value in answers.items():
                for form in printed_answers(value, forms.get(gid, {}).get(name), text):
                    if form not in above:
                        found.append(f"{name} shows as {form!r} in {where}")
    return found


#: How the pass names a self-study *Check your answer* cell in ``Run.texts``.
CHECK = "self-study check"


def _answers_of(probe: Probe, gid: str) -> dict[str, object]:
    answers = dict(probe.right)
    for args, _, result in _calls(probe):
        answers[f"{gid}{args}"] = result
    return answers


def _printed_above(run, at: dict[str, int], i: int, text: str, forms: dict) -> set[str]:
    """The printed forms in ``text`` of the answers of every item whose answer cell is above
    text ``i``."""
    return {
        form
        for gid, probe in run.probes.items()
        if 0 <= at[gid] < i
        for name, value in _answers_of(probe, gid).items()
        for form in printed_answers(value, forms.get(gid, {}).get(name), text)
    }


def _calls(probe: Probe) -> list:
    from assessment import calls_of

    return calls_of(probe)


def test_no_answer_is_shown_on_a_blank_notebook(probed):
    lesson, items, run = probed
    forms = {
        gid: {n: f for t in _tests_of(lesson, gid) for n, f in registry(lesson)[t].forms.items()}
        for gid in run.probes
    }
    found = spoilers_of(run, {gid: entry.shown for gid, entry in items.items()}, forms)
    assert not found, f"{lesson}: answers shown to a student who runs on: {found}"


def test_lesson_cells_run_on_a_blank_notebook(probed):
    lesson, _, run = probed
    assert not run.lesson_errors, f"{lesson}: {run.lesson_errors}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_written_answers_have_rubrics_that_add_up(lesson):
    solution = nbformat.read(lesson_paths(lesson)[0], as_version=4)
    written = [
        c for c in solution.cells if nbgrader_meta(c).get("solution") and c.cell_type == "markdown"
    ]
    assert written, f"{lesson} has no written answer"
    for cell in written:
        meta = nbgrader_meta(cell)
        parts = [float(x) for x in re.findall(r"^\s*- \[(\d+(?:\.\d+)?)\]", cell.source, re.M)]
        assert parts, f"{lesson} {meta['grade_id']}: no '- [N] criterion' rubric lines"
        assert sum(parts) == meta["points"], (
            f"{lesson} {meta['grade_id']}: rubric parts add up to {sum(parts)}, "
            f"the cell is worth {meta['points']}"
        )
        text = cell.source.lower()
        assert "partial" in text, f"{lesson} {meta['grade_id']}: say what earns partial credit"
        assert "differ" in text, (
            f"{lesson} {meta['grade_id']}: say that numbers measured on a student's machine differ"
        )


# --- the checks above can fail --------------------------------------------------------------


def test_the_checks_see_a_disagreement_and_a_spoiler():
    wrong_but_right = Tried("wrong", "16.04", "x = 16.04", "right", 0, 1, "your value 16.04")
    right_but_failed = Tried("form", "np.int64", "x = np.int64(16)", "failed: AssertionError", 1, 1)
    method = Tried("shortcut", "library", "x = lib()", "right", 0, 1, "uses course_lib")
    fooled = Tried("shortcut", "always", "x = A()", "right", 0, 1, "x: not a plain value: A")
    found = disagreements([wrong_but_right, right_but_failed, method, fooled])
    assert len(found) == 3 and "library" not in " ".join(found), found

    class Fake:
        probes = {"q": Probe("q", right={"predicted_ratio": 16.0})}
        texts = [
            ("cell setup-9", "score ratio: 16×"),
            ("cell setup-3", "16 × 1024 -> 16,384"),
            ("cell setup-cost", " 1    17.1 [16.0–18.3]   packed 1.02× (0.98–16.0×)"),
        ]

    found = spoilers_of(Fake, {"q": {"16 × 1024": "the worked example"}}, {})
    assert found == ["predicted_ratio shows as '16' in cell setup-9"], found

    class WithChecks:  # a self-study check cell: read for the items below it only
        probes = {
            "p": Probe("p", right={"predicted_ratio": 16.0}),
            "t": Probe("t", right={"target_batch_size": 16, "target_seq_len": 256}),
        }
        texts = [
            ("answer cell p (blank)", ""),
            (f"{CHECK} cell 5", "I predicted 16: 256 × 4 ..."),  # 16 is p's; 256 gives t away
            ("answer cell t (blank)", ""),
            (f"{CHECK} cell 9", "the batch of 16 rows of 256"),  # below both: fine
        ]

    found = spoilers_of(WithChecks, {}, {})
    assert found == [f"target_seq_len shows as '256' in {CHECK} cell 5"], found


def test_the_item_checks_see_a_scoring_shortcut_a_rejected_form_and_an_oracle():
    probe = Probe("q", right={"x": 16.0})
    probe.tried = [
        Tried("shortcut", SHORTCUTS[0].name, "", "right", 1, 1, "x: right"),
        Tried("shortcut", "always-equal object", "", "failed", 0, 1, "x: your value 3"),
        Tried("form", "numpy int64", "", "failed: AssertionError", 1, 1, "x: right"),
        Tried("form", "Fraction", "", "plausible", 0, 1, "x: not a plain value: Fraction"),
        Tried("wrong", "256", "", "failed: AssertionError", 0, 1, ""),
    ]
    found = shortcut_problems(probe, function=False)
    assert any("scores 1" in f for f in found) and any("not named" in f for f in found)
    assert any(f.startswith("not tried: caching") for f in found)
    assert len(form_problems(probe)) == 3  # too few forms, and both forms rejected
    assert lets_wrong_through(probe) == []


def test_the_shortcut_check_sees_each_of_issue_27s_classes_fail():
    """Each new class fails the check when it scores (the gate bypass on a value that is not a
    prediction, a seed table with a secret, an overwrite below the answer, a globals() lookup),
    when pasted library code is not listed for review, when it is not tried, or a prediction's
    bypass pays more than the right value; a listed gap that stops scoring fails too."""
    name = {s.letter: s.name for s in SHORTCUTS}
    probe = Probe("q", right={"x": 16.0})
    probe.tried = [Tried("solution", "solution", "", "plausible", 1, 1, "x: recorded")]
    found = shortcut_problems(probe, function=False)
    for letter in "BGON":
        assert f"not tried: {name[letter]}" in found, (letter, found)
    found = shortcut_problems(probe, function=True)
    for letter in "GTDN":
        assert f"not tried: {name[letter]}" in found, (letter, found)
    probe.tried += [
        Tried("shortcut", name["B"], "", "plausible", 1, 1, "x: right"),
        Tried("shortcut", name["O"], "", "plausible", 1, 1, "x: right"),
        Tried("shortcut", name["N"], "", "plausible", 1, 1, "x: right"),
    ]
    found = shortcut_problems(probe, function=False)
    assert all(any(f"'{name[c]}' scores 1" in f for f in found) for c in "BON"), found
    assert all(any(f"'{name[c]}' is not named" in f for f in found) for c in "ON"), found
    found = shortcut_problems(probe, function=False, prediction=True)
    assert not any(f"'{name['B']}' scores" in f for f in found), found  # its completion point
    probe.tried[1] = Tried("shortcut", name["B"], "", "plausible", 2, 1, "x: recorded")
    found = shortcut_problems(probe, function=False, prediction=True)
    assert any("more than the right value" in f for f in found), found
    table = Tried("shortcut", name["T"], "", "failed", 1, 1, "f: right", ("practice grading "
                  "(no course secret): 1 point(s)",))  # fmt: skip
    pasted = Tried("shortcut", name["D"], "", "failed", 1, 1, "f: right")  # and not listed
    probe.tried = [probe.tried[0], table, pasted]
    found = shortcut_problems(probe, function=True)
    assert any(f"'{name['T']}' scores 1" in f for f in found), found
    assert any(f"'{name['D']}' is not named" in f for f in found), found
    probe.tried[2] = Tried("shortcut", name["D"], "", "failed", 1, 1, "f: right",
                           ("listed for review with course_lib/packing.py: pack",))  # fmt: skip
    assert not any(f"'{name['D']}'" in f for f in shortcut_problems(probe, function=True))
    probe.tried[1] = Tried("shortcut", name["T"], "", "failed", 0, 1, "f raised KeyError",
                           ("practice grading (no course secret): 0 point(s)",))  # fmt: skip
    assert any("proves nothing" in f for f in shortcut_problems(probe, function=True))


def test_the_prediction_check_sees_a_prediction_paid_for_being_right():
    """The old grading of a prediction (right: 1 point and "right"; a wrong plausible value: 0)
    fails the check, as does a message that judges the value or too few values tried."""
    probe = Probe("p")
    probe.tried = [
        Tried("solution", "solution", "", "plausible", 1, 1, "x: right"),
        Tried("plausible", "close", "", "plausible", 0, 1, "x: your value 16.04; needs it exact"),
        Tried("wrong", "inverted", "", "failed: AssertionError", 0, 1, "x: not above 1"),
    ]
    found = prediction_problems(probe)
    assert any("scores 0" in f for f in found), found
    assert any("judges the value" in f for f in found), found
    assert any("only 1 plausible" in f for f in found), found
    assert any("only 1 implausible" in f for f in found), found
    recorded = "x: a plausible prediction, recorded"
    probe.tried = [
        Tried("solution", "solution", "", "plausible", 1, 1, recorded),
        *[Tried("plausible", f"p{i}", "", "plausible", 1, 1, recorded) for i in range(2)],
        *[Tried("wrong", f"w{i}", "", "failed: Assertion", 0, 1, "x: 1") for i in range(2)],
    ]
    assert prediction_problems(probe) == []
