"""Copies grouped for review, never zeroed by a resemblance (``course_grading/review/copies.py``;
issues 39.3 and 40.5).

Both sides of every claim: the library, the grader's reference, the instructor's solution and a
classmate's cell, pasted and disguised, are listed with their source; honest answers written
independently (``honest_corpus/``, each checked right here) are listed no more often than the
docs say; ten students handing in one cell make one line, not one per pair; a cell that looks
like the course's code is scored on its results, while a ``course_lib`` use the grader reads
still scores 0; nothing depends on the process; the page is inert.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from corpus import (
    CORPUS,
    caught_copies,
    dead_code,
    graded_functions,
    honest,
    listed_honest,
    renamed,
    reordered,
)

from course_grading.judge import items as trusted
from course_grading.judge.functions import FunctionSandbox
from course_grading.judge.lesson import LessonSpec
from course_grading.judge.verdicts import decide
from course_grading.report import Row, cluster_line, refresh_copies, render_copies, write_reports
from course_grading.review import copies
from course_grading.review.cheats import CHEAT_CALLS, _match
from course_grading.review.copies import SOLUTION, Cluster, course_references, find_clusters

REPO = Path(__file__).resolve().parents[2]
LESSON = "03_gradient_accumulation"
#: The listing's figures on the honest corpus and the copies, as the docs quote them
#: (``benchmarks/review_calibration.py`` prints them per function).
HONEST_LISTED, HONEST_TOTAL = 2, 95
COPIES_FOUND, COPIES_TOTAL = 139, 148  # 8 of them copies of count_saved_bytes (lesson 4)


@pytest.fixture(scope="module")
def accumulate():
    return graded_functions()["accumulate_token_weighted"]


def _with(student: str, clusters: list[Cluster]) -> list[Cluster]:
    return [c for c in clusters if student in c.students]


def _pasted_library() -> str:
    """The loop of ``course_lib.accumulation.accumulate_gradients``, renamed, inside the blank:
    what a student pastes in place of the import the item forbids."""
    import inspect

    from course_lib import accumulation

    body = inspect.getsource(accumulation.accumulate_gradients)
    loop = body[body.index("    loss_sum = 0.0") : body.index("    if distributed and world_size")]
    names = {
        "loss_sum": "running",
        "micro_batches": "window",
        "mb": "piece",
        "c": "info",
        "window_tokens": "big_n",
        "out": "result",
        "no_sync": "skip_sync",
    }
    loop = re.sub(r"\b(\w+)\b", lambda m: names.get(m.group(1), m.group(1)), loop)
    return "def accumulate_token_weighted(model, window):\n" + loop + "    return big_n\n"


def test_pasted_library_code_renamed_is_listed_with_its_source(accumulate):
    refs = course_references(accumulate.solution)
    answers = {**honest("accumulate_token_weighted"), "pat": _pasted_library()}
    found = find_clusters(LESSON, "f", answers, refs, accumulate.blank)
    (mine,) = _with("pat", found)
    assert "course_lib/accumulation.py: accumulate_gradients" in mine.sources, mine
    assert mine.students == ("pat",) and "big_n" in mine.lines  # the student's own lines
    assert [c.students for c in found] == [("pat",)], "no honest answer is listed beside it"


def test_the_solution_and_classmates_are_grouped_whatever_the_disguise(accumulate):
    refs = course_references(accumulate.solution)
    corpus = honest("accumulate_token_weighted")
    sol = accumulate.solution
    answers = {
        **corpus,
        "sol1": renamed(sol, "accumulate_token_weighted", 1),
        "sol2": dead_code(reordered(renamed(sol, "accumulate_token_weighted", 2)), 10, 3),
        "ann": corpus["04_helper_count"],
        "bob": renamed(corpus["04_helper_count"], "accumulate_token_weighted", 5),
    }
    found = find_clusters(LESSON, "f", answers, refs, accumulate.blank)
    (with_solution,) = [c for c in found if c.with_solution]
    assert set(with_solution.students) == {"sol1", "sol2"}, found
    ring = _with("ann", found)[0]
    assert set(ring.students) == {"04_helper_count", "ann", "bob"} and ring.identical
    assert len(found) == 2, [c.students for c in found]


def test_ten_students_with_one_cell_make_one_line(tmp_path, accumulate):
    """Issue 40.5: ``copies.md`` had 120 rows (248 KB) for 10 students, every pair at 100 %."""
    refs = course_references(accumulate.solution)
    sol = renamed(accumulate.solution, "accumulate_token_weighted", 7)
    answers = {f"s{i:02}": sol for i in range(10)}
    found = find_clusters(LESSON, "accumulate_token_weighted", answers, refs, accumulate.blank)
    assert len(found) == 1 and found[0].identical and found[0].with_solution
    assert len(found[0].students) == 10
    rows = [Row(f"s{i:02}", LESSON, "ok", 4, 4) for i in range(10)]
    write_reports(tmp_path, rows, copies=found)
    page = (tmp_path / "copies.md").read_text(encoding="utf-8")
    assert page.count(cluster_line(found[0])) == 1 and len(page) < 3000
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert report.split(copies_heading())[1].count("| 03") == 1


def copies_heading() -> str:
    from course_grading.report import COPIES_HEADING

    return COPIES_HEADING


def test_the_blank_alone_or_a_one_liner_is_never_listed(accumulate):
    refs = course_references(accumulate.solution)
    blank = accumulate.blank
    answers = {"a": blank, "b": blank, "c": blank.replace("raise NotImplementedError", "return 0#")}
    assert find_clusters(LESSON, "f", answers, refs, blank) == []


def test_the_same_class_is_listed_the_same_in_any_process(tmp_path, accumulate):
    """No salted hash decides anything: the same class is listed the same under any seed."""
    case = tmp_path / "case.json"
    answers = {"pat": _pasted_library(), **honest("accumulate_token_weighted")}
    answers["bob"] = renamed(answers["03_torch_stack"], "accumulate_token_weighted", 1)
    case.write_text(json.dumps({"answers": answers, "blank": accumulate.blank}))
    script = (
        "import json\n"
        "from course_grading.review.copies import course_references, find_clusters\n"
        f"case = json.load(open({str(case)!r}))\n"
        "found = find_clusters('L', 'f', case['answers'], course_references(), case['blank'])\n"
        "print(json.dumps([[c.students, c.sources, c.share, c.lines] for c in found]))\n"
    )
    outputs = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1, outputs
    assert len(json.loads(outputs.pop())) == 2  # pat with the library, and bob's pair


def test_the_page_is_inert_markdown():
    from markdown_it import MarkdownIt

    evil = "![x](https://evil.example/a.png) <script>alert(1)</script> [a](javascript:x) |"
    text = f"def f(model, window):\n    {evil}\n```\n<img src=x>\n\treturn 1\n"
    cluster = Cluster(
        LESSON, "f", ("<b>eve</b>", "[bob](http://x)"), ("course_lib/x.py: f",), 0.9, False, text
    )
    rows = [
        Row(
            "<i>ann</i>",
            LESSON,
            "flagged",
            reasons=("for review: answers the self-study edition: test-q2 <script>",),
        )
    ]
    page = render_copies([cluster], rows)
    html = MarkdownIt("gfm-like").render(page)
    assert "<script" not in html and "<img" not in html and "href" not in html
    assert "<b>eve" not in html and "<i>ann" not in html and "test-q2" in html
    assert "No copies found." in render_copies([])


def test_references_are_every_function_of_the_library_and_the_grader():
    names = [r.name for r in course_references("def f():\n    ### BEGIN SOLUTION\n    pass\n")]
    assert "course_lib/accumulation.py: accumulate_gradients" in names
    assert "the grader's checks (lesson_04.py): _reference" in names
    assert names[-1] == SOLUTION and "BEGIN SOLUTION" not in course_references("x = 1")[-1].text
    assert not [n for n in names if n.startswith("course_lib/figures")]


def test_a_regrade_keeps_the_report_whole_when_copies_are_listed(tmp_path):
    """``--student`` splices one student's rows into ``report.md``'s table: the copies section is
    written anew from the class's clusters, and ``copies.md`` removed when it has nothing."""
    from course_grading.grading_run import Options
    from course_grading.regrade_reports import merge_student

    pair = Cluster(LESSON, "f", ("ann", "bob"), (), 0.9, True, "a")
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
    assert report.count("## Possible copies, for review") == 1 and "| ann, bob |" in report


# --- similarity is evidence, never a zero (issue 39.3) -------------------------------------------


def _graded(lesson: str, gid: str, cell: str):
    """The grader's whole decision on one answer cell (``verdicts.decide``)."""
    spec = LessonSpec.from_notebooks(
        lesson,
        REPO / "solutions" / lesson / f"{lesson}.ipynb",
        REPO / "notebooks" / lesson / f"{lesson}.ipynb",
    )
    item = trusted.items_of(lesson)[gid]
    return decide(item, spec, "ann", {}, cell, FunctionSandbox(None))


L4, SVPT = "04_activation_checkpointing", "test-saved-values-per-token"


def test_the_graders_check_pasted_with_dead_lines_scores_on_its_results_and_is_listed():
    """Before: the grader's reference with ten dead lines scored 5/5 unflagged, while an honest
    answer written from the lesson's formula (``13_comprehension_moments``: 87 % of its k-grams in
    the grader's check module) scored 0/5 as "pasted". Now both are scored on what they return,
    and both are listed beside the check, for a person to tell them apart."""
    graded = graded_functions()["saved_values_per_token"]
    refs = course_references(graded.solution)
    answers = {**honest("saved_values_per_token"), "pat": dead_code(_grader_pasted(graded), 10, 1)}
    found = find_clusters(L4, "saved_values_per_token", answers, refs, graded.blank)
    (pat,) = _with("pat", found)
    assert "the grader's checks (lesson_04.py): _reference" in pat.sources, pat
    assert {s for c in found for s in c.students} == {"pat", "13_comprehension_moments"}
    for cell in (answers["pat"], answers["13_comprehension_moments"]):
        verdict = _graded(L4, SVPT, cell)
        assert verdict.full, verdict.message  # scored on what it returns, never on a likeness


def _grader_pasted(graded) -> str:
    from corpus import _attacks, _entry

    item = next(i for i in trusted.items_of(graded.lesson).values() if i.function)
    return _attacks().grader_source(item, {}, _entry(graded).grader)


@pytest.mark.parametrize(
    "cell",
    [
        "from course_lib.memory import activation_bytes\n\n"
        "def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):\n"
        "    return activation_bytes(n_layers, d_model)\n",
        "def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):\n"
        "    return globals()['activation_bytes'](n_layers, d_model)\n",
    ],
    ids=["an import", "a globals() lookup"],
)
def test_a_course_lib_use_the_grader_reads_still_scores_0(cell):
    verdict = _graded(L4, SVPT, cell)
    assert verdict.points == 0 and "course_lib" in verdict.message, verdict.message


def test_the_marshalled_bytecode_of_a_check_is_flagged_for_review():
    """Code built from bytes cannot be read, so it cannot be compared either: it is named."""

    for name in ("marshal.loads", "types.FunctionType", "types.CodeType"):
        assert _match(name, CHEAT_CALLS) == "builds code from bytes", name
    assert _match("types.SimpleNamespace", CHEAT_CALLS) is None


# --- the honest corpus, and the listing's figures on it ------------------------------------------


def _load(path: Path, name: str):
    namespace: dict = {}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    return namespace[name]


def _right_pure(name: str, f) -> str:
    """What is wrong with ``f`` (an honest answer of a plain-Python function), or ``""``."""
    rng = random.Random(0)
    solution = _load_solution(name)
    for _ in range(60):
        if name == "saved_per_token":
            args = (
                rng.randint(1, 512),
                rng.randint(1, 2048),
                rng.randint(1, 32),
                rng.randint(1, 4096),
            )
        elif name == "saved_values_per_token":
            depth = rng.randint(1, 30)
            args = (
                depth,
                rng.randint(1, 512),
                rng.randint(1, 2048),
                rng.randint(1, 32),
                rng.randint(0, depth + 2),
            )
        elif name == "predict_micro_batch":
            args = (rng.randint(0, 10**12), rng.randint(0, 10**12), rng.randint(1, 10**9))
        else:
            return _right_search(f)
        if tuple(map(int, _tuple(f(*args)))) != tuple(map(int, _tuple(solution(*args)))):
            return f"{args}: {f(*args)} against {solution(*args)}"
    return ""


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _load_solution(name: str):
    namespace: dict = {}
    exec(graded_functions()[name].solution, namespace)
    return namespace[name]


def _right_search(f) -> str:
    for limit in (1, 2, 3, 37, 64, 1000):
        for guess in (0, 1, 2, 36, 37, 38, 63, 500, 2000):
            calls: list[int] = []

            def fits(n: int, calls: list[int] = calls, limit: int = limit) -> bool:
                calls.append(n)
                return 1 <= n <= limit

            got = f(fits, guess)
            budget = 2 + 2 * math.ceil(math.log2(abs(limit - max(1, guess)) + 1))
            if got != limit or len(calls) != len(set(calls)) or len(calls) > budget:
                return f"limit {limit}, guess {guess}: {got} in {calls}"
    try:
        f(lambda n: False, 5)
    except ValueError:
        return ""
    return "no ValueError when nothing fits"


def _right_row(f) -> str:
    for lengths, capacity in (([3, 2], 6), ([1, 1, 4], 6), ([5], 5), ([2, 1], 8), ([4, 4], 12)):
        positions, allowed = f(lengths, capacity)
        sizes = [*lengths] + ([capacity - sum(lengths)] if sum(lengths) < capacity else [])
        doc = torch.tensor([i for i, n in enumerate(sizes) for _ in range(n)])
        want = (doc[:, None] == doc[None, :]) & torch.ones(capacity, capacity).tril().bool()
        if positions != [p for n in sizes for p in range(n)] or not torch.equal(allowed, want):
            return f"{lengths}, {capacity}"
    for bad in ([3, 0], [5, 4]):
        with pytest.raises(ValueError):
            f(bad, 8)
    return ""


def _model(attn_impl: str = "eager"):
    from course_lib.model import TinyGPT, TinyGPTConfig

    torch.manual_seed(0)
    return TinyGPT(
        TinyGPTConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=256, attn_impl=attn_impl)
    )


def _right_model_function(name: str, f) -> str:
    from course_lib.data import make_instruction_dataset
    from course_lib.isolation import check_isolation
    from course_lib.lessons.accumulation import (
        full_sequence_labels,
        step_errors,
        window_from_completion_lens,
        window_loop_error,
    )

    examples = make_instruction_dataset(120, seed=1, max_len=128)
    if name == "packed_forward":
        docs = [ex["input_ids"][:n] for ex, n in zip(examples, (40, 1, 88, 1, 64, 30, 1, 100))]
        for impl in ("eager", "sdpa", "varlen"):
            report = check_isolation(
                _model(impl),
                docs,
                128,
                call=lambda m, b: f(
                    m, {"input_ids": b["input_ids"], "position_ids": b["position_ids"]}
                ),
            )
            if not report.isolated:
                return f"{impl}: {report}"
        return ""
    window = window_from_completion_lens(examples, [[4, 9], [0], [25, 25, 25]], start=10)
    window[:1] = full_sequence_labels(window[:1])
    if name == "accumulate_token_weighted":
        got = window_loop_error(f, _model(), window)
        tokens = sum(int((mb["labels"][..., 1:] != -100).sum()) for mb in window)
        return "" if got.error < 1e-5 and int(got.returned) == tokens else f"{got}"
    loader = window + window_from_completion_lens(examples, [[7], [3, 3], [12], [1]], start=40)
    got = step_errors(f, _model(), loader, 3)
    ok = got.steps_taken == got.steps_expected == got.returned == 2 and max(got.errors) < 1e-5
    return "" if ok else f"{got}"


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.iterdir() if p.is_dir()))
def test_every_honest_answer_of_the_corpus_is_right(name, one_thread):
    """The corpus is honest work, not near-misses: each answer does what its item asks (checked
    here in-process against the solution and the lessons' own measures; under the trusted
    checks each scored full marks when the corpus was written)."""
    wrong = {}
    for path in sorted((CORPUS / name).glob("*.py")):
        f = _load(path, name)
        if name == "packed_row":
            why = _right_row(f)
        elif name in ("packed_forward", "accumulate_token_weighted", "fixed_train"):
            why = _right_model_function(name, f)
        else:
            why = _right_pure(name, f)
        if why:
            wrong[path.name] = why
    assert len(list((CORPUS / name).glob("*.py"))) >= 10
    assert not wrong, wrong


def test_the_listing_lists_honest_work_and_finds_copies_as_the_docs_say():
    """The figures ``docs/instructors.md`` quotes: 2 honest answers of 95 listed (a term-by-term
    derivation that is the instructor's program line for line, and a comprehension that is the
    grader's reference), and 139 of 148 copies found."""
    listed = judged = found = total = 0
    for graded in graded_functions().values():
        names, n = listed_honest(graded)
        caught = caught_copies(graded)
        listed, judged = listed + len(names), judged + n
        found, total = found + sum(ok for _, ok in caught), total + len(caught)
    assert (judged, total) == (HONEST_TOTAL, COPIES_TOTAL)
    assert listed <= HONEST_LISTED and found >= COPIES_FOUND, (listed, found)
    stricter = sum(len(listed_honest(g, threshold=0.6)[0]) for g in graded_functions().values())
    assert stricter > listed  # the check can fail: a lower line lists honest work
    assert copies.THRESHOLD == 0.75
