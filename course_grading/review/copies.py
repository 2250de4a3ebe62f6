"""Copies, grouped for review: graded cells that are the same program, or nearly, as each other
or as the course's own code. Evidence for a person, never a grade.

A graded answer is the student's own work, and the course is public: its library, the grader's
reference checks and the instructor's solutions are one ``git clone`` away, and a classmate's
notebook one message away. So each graded function's answer cell is compared with

* the cells of every classmate for the same item in the same run,
* the instructor's solution of that cell (``solutions/``),
* every function of ``course_lib`` but those in :data:`SKIPPED` (a body of the library, renamed,
  pasted in place of its import), and every function of the grader's checks
  (``course_grading/judge/items``: their reference computations),

by fingerprints (``fingerprints.py``: names, layout and comments do not count). Two pieces of
code are *near-identical* when :data:`THRESHOLD` or more of the smaller one's k-grams are in the
other: measured on the smaller side, a copy with dead lines added, or pasted inside more code of
its own, is still found, and a copy with its statements reordered keeps most of its k-grams.
Every student is put in a *cluster* with everyone and everything they are near-identical to,
transitively; a cluster that holds a student and anything else is listed (``copies.md``, one
line per cluster with its matching lines once, and a line in ``report.md``). A cluster holding
the instructor's solution, a library function or a check says so.

**Nothing is taken off a grade here.** Short functions written from the same rules look alike,
and a share of k-grams cannot tell derived from copied: of the 95 answers of the honest corpus
(written independently, ``tests/grading/honest_corpus``) 2 are listed, a term-by-term
derivation that is the instructor's program line for line and a comprehension that is the
grader's reference; 131 of its 140 copies are found. What does score 0 is *read*, not guessed: an
import, a ``globals()`` lookup or a call of a ``course_lib`` function the item forbids
(``uses.py``, ``judge/verdicts.py``). The threshold was chosen on that corpus
(``benchmarks/review_calibration.py`` prints the false-positive rate of the listing per
function, and the share of copies it finds).
"""

from __future__ import annotations

import ast
import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

from course_grading.nbgrader.course import WorkCourse
from course_grading.review.fingerprints import (
    Fingerprint,
    blank_grams,
    fingerprint,
    without_solution_marks,
)
from course_grading.submissions import Submission

THRESHOLD = 0.75  # share of the smaller code's k-grams found in the other: near-identical
PASSAGE_LINES = 16  # lines shown of a cluster's matching code
#: ``course_lib`` folders no graded item draws on (the Hugging Face planner, its fine-tune plan
#: and the figures: configs, cards and plots, no batches, windows, blocks or budgets)
SKIPPED = ("hf", "hf_configs", "finetune", "figures")
SOLUTION = "the instructor's solution"


@dataclass(frozen=True)
class Reference:
    """A source a graded cell could be copied from: what the page calls it, and its code."""

    name: str
    text: str


@dataclass(frozen=True)
class Cluster:
    """Students whose cells for one item are the same program or nearly, with the sources their
    cells are near-identical to.

    ``share`` is the lowest share (of the smaller side's k-grams) among the links that joined
    the cluster; ``identical`` says every student's cell is the same program; ``lines`` are the
    first student's lines that the others (or the sources) share, once.
    """

    lesson: str
    item: str
    students: tuple[str, ...]
    sources: tuple[str, ...]
    share: float
    identical: bool
    lines: str

    @property
    def with_solution(self) -> bool:
        return SOLUTION in self.sources


def find_clusters(
    lesson: str,
    item: str,
    answers: Mapping[str, str],
    references: Sequence[Reference],
    blank: str = "",
    threshold: float = THRESHOLD,
) -> list[Cluster]:
    """The clusters of one item (module docstring).

    Args:
        lesson: the lesson id (for the clusters).
        item: the graded function's name, or the item's answer cell.
        answers: student -> the answer cell's source as submitted.
        references: the sources (:func:`course_references`).
        blank: the cell as the student version hands it out (boilerplate on every side).
        threshold: the share at or above which two cells are near-identical.

    Returns:
        Every cluster holding a student and anything else, those with a source first, then the
        largest, then by their first student.
    """
    groups: dict[str, list[tuple[str, Fingerprint]]] = defaultdict(list)
    for student, text in sorted(answers.items()):
        if (p := _answer_print(text, blank)).judgeable:
            groups[p.digest].append((student, p))  # the same program: one node
    students = [(tuple(s for s, _ in group), group[0][1]) for group in groups.values()]
    wanted = set().union(*(p.grams for _, p in students)) if students else set()
    sources = [((r.name,), p) for r in references if (p := _source_print(r.text)).judgeable]
    nodes = students + [(name, p) for name, p in sources if wanted.intersection(p.grams)]
    links = _links(nodes, len(students), wanted, threshold)
    return _clusters(lesson, item, nodes, len(students), links)


def _links(
    nodes: list[tuple[tuple[str, ...], Fingerprint]],
    n_students: int,
    wanted: set[int],
    threshold: float,
) -> list[tuple[int, int, float, frozenset[int]]]:
    """``(i, j, share, shared k-grams)`` for every near-identical pair of nodes with a student
    node ``i`` (the students handing in one program, the first ``n_students`` nodes), through an
    index of the students' k-grams: only pairs that share some are counted."""
    index: dict[int, list[int]] = defaultdict(list)
    for j, (_, p) in enumerate(nodes):
        for h in wanted.intersection(p.grams) if j >= n_students else p.grams:
            index[h].append(j)
    found = []
    for i in range(n_students):
        mine = nodes[i][1].grams
        counts: dict[int, int] = defaultdict(int)
        for h in mine:
            for j in index[h]:
                if j > i:
                    counts[j] += 1
        for j, common in counts.items():
            share = common / min(len(mine), len(nodes[j][1].grams))
            if share >= threshold:
                shared = frozenset(mine.keys() & nodes[j][1].grams.keys())
                found.append((i, j, share, shared))
    return found


def _clusters(
    lesson: str,
    item: str,
    nodes: list[tuple[tuple[str, ...], Fingerprint]],
    n_students: int,
    links: list[tuple[int, int, float, frozenset[int]]],
) -> list[Cluster]:
    """The connected parts of ``links`` that hold a student and anything else (another student
    or a source), as :class:`Cluster` s."""
    parent = list(range(len(nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    lowest: dict[int, float] = {}
    for i, j, share, _ in sorted(links, key=lambda link: -link[2]):
        a, b = root(i), root(j)
        if a != b:
            parent[b] = a
            lowest[a] = min(share, lowest.get(a, 1.0), lowest.pop(b, 1.0))
    parts: dict[int, list[int]] = defaultdict(list)
    for i in range(len(nodes)):
        parts[root(i)].append(i)
    found = []
    for top, members in parts.items():
        who = [i for i in members if i < n_students]
        names = sorted(s for i in who for s in nodes[i][0])
        if not who or len(names) + len(members) - len(who) < 2:
            continue
        first = min(who, key=lambda i: nodes[i][0])
        shared = set().union(*(s for i, j, _, s in links if first in (i, j) and j in members))
        shown = _passage(nodes[first][1], shared or set(nodes[first][1].grams))
        sources = tuple(nodes[i][0][0] for i in members if i >= n_students)
        share = round(lowest.get(top, 1.0), 3)
        same = len(who) == 1 and len(names) > 1
        found.append(Cluster(lesson, item, tuple(names), sources, share, same, shown))
    return sorted(found, key=lambda c: (not c.sources, -len(c.students), c.students))


def _passage(print_: Fingerprint, shared: set[int]) -> str:
    """The lines of ``print_``'s code that ``shared`` k-grams come from, at most
    :data:`PASSAGE_LINES` of them, a ``...`` line where lines are left out."""
    lines = print_.text.splitlines()
    wanted = [n for n in print_.lines_of(shared) if 0 < n <= len(lines)]
    out: list[str] = []
    for previous, number in zip([0, *wanted], wanted):
        if number != previous + 1 and out:
            out.append("...")
        out.append(lines[number - 1])
    more = len(out) - PASSAGE_LINES
    return "\n".join(out[:PASSAGE_LINES] + ([f"... ({more} more lines)"] if more > 0 else []))


@lru_cache(maxsize=65536)
def _answer_print(text: str, blank: str) -> Fingerprint:
    """A student's cell's fingerprint, the blank's k-grams removed (kept: a regrade or a
    calibration compares the same cells again)."""
    return fingerprint(text, blank_grams(blank))


@cache
def _source_print(text: str) -> Fingerprint:
    """A source's fingerprint, made once per process (no blank: a k-gram the student's side
    lacks cannot match)."""
    return fingerprint(text)


def course_references(lesson_solution: str = "") -> list[Reference]:
    """The public sources a graded cell could be copied from: every function of the installed
    ``course_lib`` and of the grader's checks (what a student's clone holds), and the
    instructor's cell.

    Args:
        lesson_solution: the instructor's version of the answer cell, when there is one (its
            solution delimiters are removed).

    Returns:
        One :class:`Reference` per function (``course_lib/memory/predict.py: activation_bytes``,
        ``the grader's checks (lesson_04.py): _reference``), then the solution.
    """
    refs = list(_library_functions())
    if lesson_solution.strip():
        refs.append(Reference(SOLUTION, without_solution_marks(lesson_solution)))
    return refs


@cache
def _library_functions() -> tuple[Reference, ...]:
    import course_grading.judge.items as checks
    import course_lib

    found: list[Reference] = []
    library = Path(course_lib.__file__).parent
    for path in sorted(library.rglob("*.py")):
        rel = path.relative_to(library).as_posix()
        if rel.split("/")[0] not in SKIPPED:
            found += _functions_of(_read(path), f"course_lib/{rel}")
    for path in sorted(Path(checks.__file__).parent.glob("lesson_*.py")):
        found += _functions_of(_read(path), f"the grader's checks ({path.name})")
    return tuple(found)


def _functions_of(text: str, where: str) -> list[Reference]:
    """Every function (and method) of a module's code, each a :class:`Reference` of its lines."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.splitlines(keepends=True)
    return [
        Reference(
            f"{where}: {node.name}",
            textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno])),
        )
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def class_copies(work: WorkCourse, subs: Sequence[Submission]) -> list[Cluster]:
    """The clusters of a graded class: every graded function of every lesson, each student's
    cell as staged in the work course (repaired and within limits), with the course's sources
    and the lesson's solution cell.

    Args:
        work: the run's nbgrader course (its ``submitted/`` copies, source and release).
        subs: the class's graded submissions.

    Returns:
        The clusters (:func:`find_clusters`), lesson by lesson, item by item.
    """
    import nbformat

    from course_grading.judge import items as trusted

    found: list[Cluster] = []
    for lesson in sorted({s.lesson for s in subs}):
        graded = trusted.items_of(lesson).values()
        answers = sorted({i.answer: i.function for i in graded if i.function}.items())
        if not answers:
            continue
        source = _cell_sources(nbformat.read(str(work.source_notebook(lesson)), as_version=4))
        release = _cell_sources(nbformat.read(str(work.release_notebook(lesson)), as_version=4))
        staged = {}
        for sub in sorted((s for s in subs if s.lesson == lesson), key=lambda s: s.student):
            path = work.submitted / sub.student / lesson / f"{lesson}.ipynb"
            if path.is_file():
                staged[sub.student] = _staged_sources(path)
        for answer, name in answers:
            cells = {s: c[answer] for s, c in staged.items() if answer in c}
            refs = course_references(source.get(answer, ""))
            found += find_clusters(lesson, name, cells, refs, release.get(answer, ""))
    return found


def _staged_sources(path: Path) -> dict[str, str]:
    """Grade id -> source of a staged notebook's nbgrader cells, read as JSON (a class of 300
    stages 1,500 notebooks: nbformat's validation would be a third of the review's time); a
    notebook of another shape is read by nbformat."""
    import json

    import nbformat

    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        if nb.get("nbformat") == 4 and isinstance(nb.get("cells"), list):
            return {
                str(gid): "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in nb["cells"]
                if isinstance(c, dict)
                and (gid := (c.get("metadata") or {}).get("nbgrader", {}).get("grade_id"))
            }
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return _cell_sources(nbformat.read(str(path), as_version=4))


def _cell_sources(nb: object) -> dict[str, str]:
    """Grade id -> source of a notebook's nbgrader cells (a repeated id: its last copy)."""
    return {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in nb.cells  # type: ignore[attr-defined]
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    }
