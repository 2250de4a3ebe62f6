"""The review page of a class of 300: its size and the time to build it, measured.

    .venv/bin/python benchmarks/review_scale.py [--students 300] [--seed 0]

A synthetic class is staged as a grading run stages one (a work course with every student's
notebook of every lesson under ``submitted/``), and its review is built as ``python -m
course_grading`` builds it: ``review.copies.class_copies`` (every graded function of every
lesson, each student's cell against the classmates', the solution's and every function of
``course_lib`` and of the grader's checks), then ``copies.md`` and ``report.md``'s section
(``report.write_reports``). Printed: the class, the time of each step, the clusters, the page's
size, and which planted copies the page shows with their source.

The class: every student answers every graded function with an honest answer of the corpus
(``tests/grading/honest_corpus``) written again in their own way (``corpus.individual``:
renamed, nested calls taken apart, ``+=`` and comparisons turned round, statements reordered);
5 % leave one blank. Planted among them: students pasting the instructor's solution (renamed,
with dead lines), the library's code (class D) and the grader's reference (class G, with ten
dead lines), and copy rings of 2 to 5 passing one answer round (renamed, reordered, padded).

The corpus holds 95 answers for 8 functions, so a class of 300 hands in each of them about 25
times, each time re-written: those 25 cells are one program, and the page lists them as a
cluster, as it should. The page is therefore longer than a real class's (whose honest answers
are not 25 re-writes of 12): an upper bound on its length, and the number of clusters it
printed are mostly these. Times are wall-clock on this machine; the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "grading"))

from corpus import (  # noqa: E402
    copies_of,
    dead_code,
    graded_functions,
    honest,
    individual,
    renamed,
    reordered,
)

from course_grading.nbgrader.course import WorkCourse  # noqa: E402
from course_grading.report import Row, write_reports  # noqa: E402
from course_grading.review.copies import SOLUTION, class_copies  # noqa: E402
from course_grading.submissions import Submission  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _disguised(code: str, function: str, rng: random.Random) -> str:
    how = rng.choice(("renamed", "padded", "all"))
    if how == "renamed":
        return renamed(code, function, rng.randrange(10**6))
    if how == "padded":
        return dead_code(code, rng.randint(3, 10), rng.randrange(10**6))
    return dead_code(reordered(renamed(code, function, rng.randrange(10**6))), 10, rng.randrange(9))


def make_class(n: int, seed: int) -> tuple[dict, list[tuple[str, str, str]]]:
    """``{student: {function: cell}}`` and the planted copies ``(student, function, source)``:
    source ``"solution"``, ``"library"``, ``"grader"`` or ``"peer:<student>"``."""
    rng = random.Random(seed)
    functions = graded_functions()
    if n < 80:
        raise SystemExit(f"--students {n}: at least 80 are needed for the planted copies")
    students = [f"student{i:03}" for i in range(n)]
    cells: dict[str, dict[str, str]] = {s: {} for s in students}
    for name in functions:
        corpus = honest(name)
        stems = sorted(corpus)
        for s in students:
            if rng.random() < 0.05:
                continue  # left blank
            cells[s][name] = individual(corpus[rng.choice(stems)], name, rng.randrange(10**6))
    planted: list[tuple[str, str, str]] = []
    pool = list(students)
    rng.shuffle(pool)
    for name, graded in sorted(functions.items()):  # two solution pastes per function
        for s in (pool.pop(), pool.pop()):
            cells[s][name] = _disguised(graded.solution, name, rng)
            planted.append((s, name, "solution"))
    for name, graded in sorted(functions.items()):  # the library's and the grader's code
        for what, code, source in copies_of(graded, honest(name)):
            if source in ("library", "grader") and what.endswith(("as is", "ten dead lines")):
                s = pool.pop()
                cells[s][name] = code
                planted.append((s, name, source))
    for size in (2, 2, 3, 3, 4, 5):  # copy rings
        name = rng.choice(sorted(functions))
        ring = [pool.pop() for _ in range(size)]
        first = ring[0]
        for s in ring[1:]:
            cells[s][name] = _disguised(
                cells[first].get(name) or functions[name].solution, name, rng
            )
            planted.append((s, name, f"peer:{first}"))
    return cells, planted


def stage(cells: dict, folder: Path) -> tuple[WorkCourse, list[Submission]]:
    """A work course holding every student's notebooks, as a grading run stages them."""
    functions = graded_functions()
    lessons = sorted({g.lesson for g in functions.values()})
    work = WorkCourse(folder, tuple(lessons))
    subs = []
    for lesson in lessons:
        for part, kept in (("source", "solutions"), ("release", "notebooks")):
            (folder / part / lesson).mkdir(parents=True)
            shutil.copy(REPO / kept / lesson / f"{lesson}.ipynb", folder / part / lesson)
        release = nbformat.read(str(work.release_notebook(lesson)), as_version=4)
        answers = {g.answer: name for name, g in functions.items() if g.lesson == lesson}
        for student, theirs in cells.items():
            nb = nbformat.from_dict(release)
            for cell in nb.cells:
                name = answers.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
                if name in theirs:
                    cell.source = theirs[name]
            path = work.submitted / student / lesson / f"{lesson}.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(nb, str(path))
            subs.append(Submission(student, lesson, path))
    return work, subs


def _shown(clusters, student: str, function: str, source: str) -> bool:
    for c in clusters:
        if c.item != function or student not in c.students:
            continue
        if source == "solution" and SOLUTION in c.sources:
            return True
        if source == "library" and any(x.startswith("course_lib/") for x in c.sources):
            return True
        if source == "grader" and any(x.startswith("the grader's checks") for x in c.sources):
            return True
        if source.startswith("peer:") and source[5:] in c.students:
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    clock = time.perf_counter()
    cells, planted = make_class(args.students, args.seed)
    made = time.perf_counter() - clock
    with tempfile.TemporaryDirectory() as tmp:
        clock = time.perf_counter()
        work, subs = stage(cells, Path(tmp) / "course")
        staged = time.perf_counter() - clock
        n_cells = sum(len(c) for c in cells.values())
        print(f"class: {args.students} students, {len(work.lessons)} lessons, {n_cells} graded "
              f"cells answered; {len(planted)} planted copies (made in {made:.0f} s, staged in "
              f"{staged:.0f} s)")  # fmt: skip
        clock = time.perf_counter()
        clusters = class_copies(work, subs)
        compared = time.perf_counter() - clock
        rows = [Row(s.student, s.lesson, "ok") for s in subs]
        out = Path(tmp) / "out"
        out.mkdir()
        clock = time.perf_counter()
        write_reports(out, rows, copies=clusters)
        written = time.perf_counter() - clock
        page = (out / "copies.md").read_bytes()
        section = (out / "report.md").read_text(encoding="utf-8").split("## Possible copies")[1]
    listed = {(s, c.item) for c in clusters for s in c.students}
    shown = [p for p in planted if _shown(clusters, *p)]
    print(f"review built in {compared + written:.1f} s: clusters {compared:.1f} s (reading "
          f"{len(subs)} notebooks, fingerprints, clustering), pages {written:.1f} s")  # fmt: skip
    print(f"clusters: {len(clusters)}; with a source: {sum(bool(c.sources) for c in clusters)}; "
          f"largest: {max((len(c.students) for c in clusters), default=0)} students; cells "
          f"listed: {len(listed)} of {n_cells}")  # fmt: skip
    lines, section_lines = page.count(b"\n"), section.count("\n")
    print(
        f"copies.md: {len(page) / 1024:.0f} KB, {lines} lines; report.md's section: "
        f"{len(section.encode()) / 1024:.0f} KB, {section_lines} lines"
    )
    print(f"planted copies shown with their source: {len(shown)} of {len(planted)}")
    for s, name, source in sorted(set(planted) - set(shown)):
        print(f"    not shown: {s} {name} ({source})")


if __name__ == "__main__":
    main()
