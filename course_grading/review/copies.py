"""Copies found, not guessed: graded functions compared with everything they could be copied from.

A graded function is the student's own derivation, and the course is public: its library, the
grader's reference checks and the instructor's solutions are one ``git clone`` away, and a
classmate's notebook is one message away. Each graded function's answer cell is compared with

* every module of ``course_lib`` but those in :data:`SKIPPED` (the student's own package: its
  token-weighted accumulation, its packing, renamed, were pasted as answers),
* every module of the grader's trusted checks (``course_grading/judge/items``: their reference
  computations),
* the instructor's solution of that cell (``solutions/``), and
* every classmate's cell for the same item in the same run,

by copydetect's fingerprints (Schleimer, Wilkerson and Aiken's winnowing, the method of MOSS):
the code is tokenised and normalised (every name becomes ``V``, every function name ``F``,
every string ``S``: renaming a variable changes nothing), cut into k-grams of :data:`NOISE`
characters, and two cells share the k-grams they have in common. The lesson's own blank (the
signature, the docstring, the ``raise NotImplementedError``) is boilerplate, removed from both
sides first.

``share`` is the part of the student's own code (beyond the blank) found in the other source.
At :data:`THRESHOLD` or more the pair is listed for review with the matching passages side by
side (``copies.md`` beside the report, one line per pair in ``report.md``). **Nothing is zeroed
here**: a short function written honestly can look like another, and the instructor decides.
A cell with fewer than :data:`MIN_KGRAMS` k-grams of its own is too short to judge and is never
listed.

**Pasted code scores 0** (issue 27): a graded answer cell, a function's or an ``own_work``
value's, of which :data:`PASTED` or more of its own k-grams (beyond the blank, at least
:data:`MIN_KGRAMS` of them) are found in ``course_lib`` or in the grader's checks is not the
student's work (:func:`pasted`; ``judge/verdicts.py`` scores it 0 and names the modules).
Unlike a pair above, this compares with code no honest answer needs to repeat: the instructor's
solutions share at most 30 % of their k-grams with all of it (``tests/grading/test_copies.py``),
so the line is far from any derivation; the classmates and the instructor's solution stay
review only.

Every k-gram is kept (a winnowing window of 1): copydetect hashes k-grams with Python's
``hash``, which is salted per process, so a wider window would keep different fingerprints in
each run and the same class could be listed differently on a re-grade. Keeping all of them makes
the result depend on the text alone; answer cells are small, so the cost is a few milliseconds.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from course_grading.nbgrader.course import WorkCourse
from course_grading.submissions import Submission

NOISE = 25  # characters of normalised code in a k-gram (copydetect's default noise threshold)
WINDOW = 1  # every k-gram kept: the result must not depend on the process's string hash
THRESHOLD = 0.6  # share of a student's own code found in one other source that is listed
MIN_KGRAMS = 20  # fewer k-grams of one's own than this: too short to judge
PASSAGE_LINES = 12  # lines shown of one matching passage
#: ``course_lib`` folders no graded function draws on (the Hugging Face planner, its fine-tune
#: plan and the figures: configs, cards and plots, no batches, windows, blocks or budgets); left
#: out, they save 40 % of the library's tokenising
SKIPPED = ("hf", "hf_configs", "finetune", "figures")
PASTED = 0.8  # share of a graded cell's own k-grams found in the course's code that scores 0


@dataclass(frozen=True)
class Reference:
    """A source a graded function could be copied from: what the report calls it, and its text."""

    name: str
    text: str


@dataclass(frozen=True)
class Copy:
    """A graded function whose code is largely found in another source.

    ``share`` is the part of the student's own code (beyond the lesson's blank) found in
    ``source``; ``passages`` pairs the student's matching lines with the source's, in order.
    """

    student: str
    lesson: str
    item: str
    source: str
    share: float
    passages: tuple[tuple[str, str], ...]


class _Prints:
    """One text's k-grams (copydetect's ``CodeFingerprint``), the blank's removed."""

    def __init__(self, text: str, boilerplate: Sequence[int] = ()) -> None:
        from copydetect import CodeFingerprint

        self.text = text
        self.prints = CodeFingerprint(
            "answer.py", NOISE, WINDOW, boilerplate=list(boilerplate), fp=io.StringIO(text)
        )

    @property
    def judgeable(self) -> bool:
        return len(self.prints.hashes) >= MIN_KGRAMS


@cache
def _source_prints(text: str) -> _Prints:
    """A reference's k-grams, made once per process (the library is about 0.8 MB of code and
    costs seconds to tokenise). The blank is removed from the student's side only: a k-gram
    the student's side lacks cannot match, so the reference needs no removal of its own."""
    return _Prints(text)


def _lines_of(text: str, start: int, end: int) -> str:
    """The whole lines of ``text`` that characters ``start:end`` touch, at most
    :data:`PASSAGE_LINES` of them."""
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    lines = text[first : len(text) if last < 0 else last].splitlines()
    more = len(lines) - PASSAGE_LINES
    return "\n".join(lines[:PASSAGE_LINES] + ([f"... ({more} more lines)"] if more > 0 else []))


def compare(mine: _Prints, other: _Prints) -> tuple[float, tuple[tuple[str, str], ...]]:
    """The share of ``mine`` found in ``other`` and the matching passages, side by side.

    Args:
        mine: the student's cell.
        other: the source compared with.

    Returns:
        ``(share, passages)``: ``share`` from 0 to 1 (the student's k-gram coverage that
        ``other`` holds too), ``passages`` pairs of (the student's lines, the source's lines).
    """
    from copydetect import compare_files

    _, (share, _), (slices_mine, slices_other) = compare_files(mine.prints, other.prints)
    if not share:
        return 0.0, ()
    mine_parts = [_lines_of(mine.text, int(a), int(b)) for a, b in zip(*slices_mine)]
    other_parts = [_lines_of(other.text, int(a), int(b)) for a, b in zip(*slices_other)]
    n = max(len(mine_parts), len(other_parts))
    mine_parts += [""] * (n - len(mine_parts))
    other_parts += [""] * (n - len(other_parts))
    return float(share), tuple(zip(mine_parts, other_parts))


def find_copies(
    lesson: str,
    item: str,
    answers: Mapping[str, str],
    references: Sequence[Reference],
    blank: str = "",
    threshold: float = THRESHOLD,
) -> list[Copy]:
    """Every student whose cell for ``item`` is largely found in a reference or a classmate's.

    Args:
        lesson: the lesson id (for the rows).
        item: the graded function's name (or the item's grade id).
        answers: student -> the answer cell's source as submitted.
        references: the course's sources (:func:`course_references`).
        blank: the cell as the student version hands it out (boilerplate on every side).
        threshold: the share at or above which a pair is listed.

    Returns:
        The pairs at or above ``threshold``, sorted by student, then source.
    """
    boilerplate = sorted(_Prints(blank).prints.hashes) if blank.strip() else []
    prints = {s: _Prints(text, boilerplate) for s, text in sorted(answers.items())}
    others = [(r.name, _source_prints(r.text)) for r in references]
    whole = {s: _source_prints(text) for s, text in sorted(answers.items())}
    found = []
    for student, mine in prints.items():
        if not mine.judgeable:
            continue
        classmates = [(f"classmate {s}", p) for s, p in whole.items() if s != student]
        for name, other in [*others, *classmates]:
            share, passages = compare(mine, other)
            if share >= threshold:
                found.append(Copy(student, lesson, item, name, round(share, 3), passages))
    return found


def course_references(lesson_solution: str = "") -> list[Reference]:
    """The public sources a graded function could be copied from: the installed ``course_lib``
    and grader checks (what a student's clone holds), and the instructor's cell.

    Args:
        lesson_solution: the instructor's version of the answer cell, when there is one.

    Returns:
        One :class:`Reference` per ``course_lib`` module and per lesson check module, and the
        solution.
    """
    import course_grading.judge.items as checks
    import course_lib

    refs = []
    library = Path(course_lib.__file__).parent
    for path in sorted(library.rglob("*.py")):
        rel = path.relative_to(library).as_posix()
        if rel.split("/")[0] not in SKIPPED:
            refs.append(Reference(f"course_lib/{rel}", _read(path)))
    for path in sorted(Path(checks.__file__).parent.glob("lesson_*.py")):
        refs.append(Reference(f"the grader's checks ({path.name})", _read(path)))
    refs = [r for r in refs if r.text.strip()]  # an empty __init__.py holds nothing to copy
    if lesson_solution.strip():
        refs.append(Reference("the instructor's solution", lesson_solution))
    return refs


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def class_copies(work: WorkCourse, subs: Sequence[Submission]) -> list[Copy]:
    """The pairs of a graded class: every graded function of every lesson, each student's cell
    (as staged in the work course, repaired and within limits) against the course's sources,
    the lesson's solution cell and each classmate's.

    Args:
        work: the run's nbgrader course (its ``submitted/`` copies, source and release).
        subs: the class's graded submissions.

    Returns:
        The pairs at or above :data:`THRESHOLD` (:func:`find_copies`), lesson by lesson.
    """
    import nbformat

    from course_grading.judge import items as trusted

    found: list[Copy] = []
    for lesson in sorted({s.lesson for s in subs}):
        functions = sorted(
            (i for i in trusted.items_of(lesson).values() if i.function), key=lambda i: i.answer
        )
        if not functions:
            continue
        source = _cell_sources(nbformat.read(str(work.source_notebook(lesson)), as_version=4))
        release = _cell_sources(nbformat.read(str(work.release_notebook(lesson)), as_version=4))
        staged = {}
        for sub in sorted((s for s in subs if s.lesson == lesson), key=lambda s: s.student):
            path = work.submitted / sub.student / lesson / f"{lesson}.ipynb"
            if path.is_file():
                staged[sub.student] = _cell_sources(nbformat.read(str(path), as_version=4))
        for item in functions:
            answers = {s: cells[item.answer] for s, cells in staged.items() if item.answer in cells}
            refs = course_references(source.get(item.answer, ""))
            blank = release.get(item.answer, "")
            found += find_copies(lesson, item.function or item.answer, answers, refs, blank)
    return found


def _cell_sources(nb: object) -> dict[str, str]:
    """Grade id -> source of a notebook's nbgrader cells (a repeated id: its last copy)."""
    return {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in nb.cells  # type: ignore[attr-defined]
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    }


@dataclass(frozen=True)
class Pasted:
    """A graded answer cell that is mostly the course's own code: the share of its own k-grams
    found in ``course_lib`` and the grader's checks, and the modules holding most of them."""

    share: float
    sources: tuple[str, ...]

    def why(self) -> str:
        """The verdict's reason, for the student.

        Returns:
            ``"your answer cell is 93 % code found in course_lib/accumulation.py: ..."``.
        """
        return (
            f"your answer cell is {self.share:.0%} code found in {' and '.join(self.sources)}: "
            "a graded answer is your own work, not the course's code pasted in"
        )


def pasted(answer: str, blank: str = "", threshold: float = PASTED) -> Pasted | None:
    """Whether ``answer`` is mostly code of ``course_lib`` or of the grader's checks (module
    docstring): a body of the library renamed into a graded function, the grader's reference
    pasted and called.

    Args:
        answer: the answer cell's source as submitted.
        blank: the cell as the student version hands it out (not the student's code).
        threshold: the share at or above which it counts (the tests measure with 0).

    Returns:
        A :class:`Pasted` when ``threshold`` or more of the cell's own k-grams (at least
        :data:`MIN_KGRAMS`) are found in that code; ``None`` otherwise, and for a short cell.
    """
    boilerplate = sorted(_Prints(blank).prints.hashes) if blank.strip() else []
    mine = _Prints(answer, boilerplate)
    if not mine.judgeable:
        return None
    own = set(mine.prints.hashes)
    modules = _course_hashes()
    share = len(own & set().union(*modules.values())) / len(own)
    if share < threshold:
        return None
    most = sorted(((len(own & h), name) for name, h in modules.items()), reverse=True)
    return Pasted(share, tuple(name for count, name in most[:2] if count))


@cache
def _course_hashes() -> dict[str, frozenset[int]]:
    """Every k-gram of each ``course_lib`` module and grader check module (made once)."""
    found = {}
    for ref in course_references():
        found[ref.name] = frozenset(_source_prints(ref.text).prints.hashes)
    return found
