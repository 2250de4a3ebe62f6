"""Copies found, not guessed (``course_grading/review/copies.py``): a graded function pasted from
``course_lib``, the grader's checks, the instructor's solution or a classmate is listed for
review with its matching lines; honest, different code is not; nothing depends on the process.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_grading.report import render_copies as render
from course_grading.review import copies
from course_grading.review.copies import Reference, course_references, find_copies

REPO = Path(__file__).resolve().parents[2]
LESSON = "03_gradient_accumulation"

BLANK = '''def accumulate_token_weighted(model, window):
    """Forward/backward every micro-batch of `window` so that .grad gains the gradient of one big
    batch of the whole window (mean over all its shifted loss tokens); return that count N (int).
    """
    raise NotImplementedError("write accumulate_token_weighted")
'''

HONEST = '''def accumulate_token_weighted(model, window):
    """Forward/backward every micro-batch of `window` so that .grad gains the gradient of one big
    batch of the whole window (mean over all its shifted loss tokens); return that count N (int).
    """
    sizes = []
    for batch in window:
        shifted = batch["labels"][:, 1:]
        sizes.append(int((shifted != -100).sum().item()))
    grand = sum(sizes)
    if grand == 0:
        raise ValueError("no loss tokens in this window")
    for batch, size in zip(window, sizes):
        if size > 0:
            out = model(**batch, num_items_in_batch=grand)
            out.loss.backward()
    return grand
'''

OTHER_HONEST = '''def accumulate_token_weighted(model, window):
    """Forward/backward every micro-batch of `window` so that .grad gains the gradient of one big
    batch of the whole window (mean over all its shifted loss tokens); return that count N (int).
    """
    import torch

    labels = [mb["labels"] for mb in window]
    n_total = int(torch.stack([(lab[..., 1:] >= 0).sum() for lab in labels]).sum())
    if not n_total:
        raise ValueError(f"empty window: {len(window)} micro-batches, 0 loss tokens")
    total_loss = None
    for mb in window:
        logits_loss = model(**mb, num_items_in_batch=n_total).loss
        total_loss = logits_loss if total_loss is None else total_loss + logits_loss
    total_loss.backward()
    return n_total
'''


def renamed(source: str, names: dict[str, str]) -> str:
    """``source`` with whole-word identifiers renamed: what a pasting student does first."""
    return re.sub(r"\b(\w+)\b", lambda m: names.get(m.group(1), m.group(1)), source)


def pasted_from_the_library() -> str:
    """The loop of ``course_lib.accumulation.accumulate_gradients``, renamed, inside the blank."""
    from course_lib import accumulation

    body = inspect.getsource(accumulation.accumulate_gradients)
    loop = body[body.index("    loss_sum = 0.0") : body.index("    if distributed and world_size")]
    names = {"loss_sum": "running", "micro_batches": "window", "mb": "piece", "c": "info",
             "window_tokens": "big_n", "out": "result", "no_sync": "skip_sync"}  # fmt: skip
    return BLANK.replace(
        "    raise NotImplementedError", renamed(loop, names) + "    return big_n\n#"
    )


@pytest.fixture(scope="module")
def references():
    solution = nbformat.read(
        str(REPO / "solutions" / LESSON / f"{LESSON}.ipynb"), as_version=4
    )  # the instructor's cell, solution region and all
    (cell,) = [
        c for c in solution.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "accumulate-tokens"
    ]  # fmt: skip
    return course_references(cell.source), cell.source


def test_pasted_library_code_renamed_is_listed_with_its_source(references):
    refs, _ = references
    found = find_copies(LESSON, "accumulate_token_weighted", {"pat": pasted_from_the_library(),
                        "hon": HONEST}, refs, BLANK)  # fmt: skip
    mine = [c for c in found if c.student == "pat"]
    assert [c.source for c in mine] == ["course_lib/accumulation.py"], found
    assert mine[0].share >= copies.THRESHOLD
    # the matching passages name the library's own line beside the student's renamed one
    assert any("num_items_in_batch=window_tokens" in theirs and "big_n" in ours
               for ours, theirs in mine[0].passages)  # fmt: skip
    assert not [c for c in found if c.student == "hon"]


def test_the_instructors_solution_and_a_classmates_cell_are_sources_too(references):
    refs, solution = references
    answers = {
        "sol": renamed(solution, {"counts": "toks", "total": "whole", "mb": "b", "n": "k"}),
        "ann": HONEST,
        "bob": renamed(HONEST, {"sizes": "ns", "grand": "everything", "batch": "b", "out": "o"}),
        "cyd": OTHER_HONEST,
    }
    found = {(c.student, c.source) for c in find_copies(LESSON, "f", answers, refs, BLANK)}
    assert ("sol", "the instructor's solution") in found
    assert ("ann", "classmate bob") in found and ("bob", "classmate ann") in found
    assert not {pair for pair in found if "cyd" in pair[0] or "cyd" in pair[1]}, found


def test_the_blank_alone_or_a_one_liner_is_never_listed(references):
    refs, _ = references
    answers = {"a": BLANK, "b": BLANK, "c": BLANK.replace("raise NotImplementedError", "return 0#")}
    assert find_copies(LESSON, "f", answers, refs, BLANK) == []


def test_the_same_class_is_listed_the_same_in_any_process(tmp_path, references):
    """copydetect hashes k-grams with Python's salted ``hash``: the result must not move."""
    refs, _ = references
    (library,) = [r for r in refs if r.name == "course_lib/accumulation.py"]
    case = tmp_path / "case.json"
    answers = {"pat": pasted_from_the_library(), "hon": HONEST,
               "bob": renamed(HONEST, {"sizes": "ns", "grand": "g"})}  # fmt: skip
    case.write_text(json.dumps({"answers": answers, "library": library.text}))
    script = (
        "import json, sys\n"
        "from course_grading.review.copies import Reference, find_copies\n"
        f"case = json.load(open({str(case)!r}))\n"
        "refs = [Reference('course_lib/accumulation.py', case['library'])]\n"
        f"found = find_copies('L', 'f', case['answers'], refs, {BLANK!r})\n"
        "print(json.dumps([[c.student, c.source, c.share] for c in found]))\n"
    )
    outputs = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        outputs.add(done.stdout)
    assert len(outputs) == 1, outputs
    assert json.loads(outputs.pop())  # and it found something


def test_the_page_is_inert_markdown():
    from markdown_it import MarkdownIt

    evil = "![x](https://evil.example/a.png) <script>alert(1)</script> [a](javascript:x) |"
    text = f"def f(model, window):\n    {evil}\n    return 1\n"
    page = render([copies.Copy("<b>eve</b>", LESSON, "f", "classmate [bob](http://x)", 0.9,
                               ((text, text),))])  # fmt: skip
    html = MarkdownIt("gfm-like").render(page)
    assert "<script" not in html and "<img" not in html and "href" not in html
    assert "<b>eve" not in html and "&nbsp;&nbsp;&nbsp;&nbsp;" in page
    assert "None found." in render([])


def test_references_cover_the_library_and_the_grader():
    names = [r.name for r in course_references()]
    assert "course_lib/accumulation.py" in names and "course_lib/packing.py" in names
    assert "the grader's checks (lesson_03.py)" in names
    assert all(isinstance(r, Reference) and r.text for r in course_references())


def test_a_regrade_keeps_the_report_whole_when_copies_are_listed(tmp_path):
    """``--student`` splices one student's rows into ``report.md``'s table: a copies section
    after the table once made the splice read its lines as rows ("report.md and report.csv
    disagree"); the section is now written anew from the class's pairs."""
    from course_grading.grading_run import Options
    from course_grading.regrade_reports import merge_student
    from course_grading.report import Row, refresh_copies, write_reports

    pair = copies.Copy("ann", LESSON, "f", "classmate bob", 0.9, (("a", "a"),))
    rows = [Row("ann", LESSON, "ok", 3, 4), Row("bob", LESSON, "ok", 4, 4)]
    write_reports(tmp_path, rows, copies=[pair])
    assert (tmp_path / "copies.md").is_file()
    merge_student(tmp_path, "ann", [Row("ann", LESSON, "ok", 4, 4)], [], Options())
    refresh_copies(tmp_path, [])
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert f"| ann | {LESSON} | ok | 4 |" in report and "| bob |" in report
    assert "Possible copies" not in report and not (tmp_path / "copies.md").exists()
    refresh_copies(tmp_path, [pair])
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert report.count("## Possible copies, for review") == 1 and "| classmate bob |" in report


# --- pasted code scores 0 (issue 27) -----------------------------------------------------------


def test_the_library_pasted_into_a_graded_cell_reads_as_pasted_and_honest_code_does_not():
    found = copies.pasted(pasted_from_the_library(), BLANK)
    assert found is not None and found.sources[0] == "course_lib/accumulation.py", found
    assert "course_lib/accumulation.py" in found.why() and found.share >= copies.PASTED
    for honest in (HONEST, OTHER_HONEST, BLANK):
        assert copies.pasted(honest, BLANK) is None


def _graded_cells():
    """(lesson, answer id, the instructor's answer, the student's blank) of every item that is
    the student's own work: every function item and every own_work value item."""
    from course_grading.judge import items as trusted
    from course_grading.nbgrader.course import find_lessons

    for lesson in find_lessons(REPO):
        cells = {}
        for folder in ("solutions", "notebooks"):
            nb = nbformat.read(str(REPO / folder / lesson / f"{lesson}.ipynb"), as_version=4)
            cells[folder] = {
                c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells
            }
        for item in trusted.items_of(lesson).values():
            if item.function or item.own_work:
                solution = re.sub(
                    r"### (BEGIN|END) SOLUTION\n", "", cells["solutions"][item.answer]
                )
                yield lesson, item.answer, solution, cells["notebooks"][item.answer]


def test_no_instructors_answer_is_near_the_line_that_scores_pasted_code_0():
    """The line (80 % of a cell's own k-grams found in the course's code) is far from any honest
    derivation: every instructor's answer of the course shares at most half of that with it."""
    shares = {}
    for lesson, answer, solution, blank in _graded_cells():
        found = copies.pasted(solution, blank, threshold=0.0)
        shares[f"{lesson[:2]} {answer}"] = found.share if found else 0.0
    assert shares and max(shares.values()) <= copies.PASTED / 2, shares
