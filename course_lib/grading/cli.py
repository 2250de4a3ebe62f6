"""The grading command line: ``python -m course_lib.grading SUBMISSIONS [options]``."""

from __future__ import annotations

import argparse
from pathlib import Path

from course_lib.grading.course import SOURCE_DIR
from course_lib.grading.run import grade


def _default_root() -> Path:
    """The course root: the working folder if it holds ``solutions/``, else this checkout."""
    here = Path.cwd()
    if (here / SOURCE_DIR).is_dir():
        return here
    return Path(__file__).resolve().parents[2]


def build_parser() -> argparse.ArgumentParser:
    """The command's options (``--help`` needs nothing beyond the base install)."""
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.grading",
        description="Autograde student submissions with nbgrader in a private workspace, "
        "generate feedback without hidden tests, and write a report of scores and "
        "problems. Submitted files are only read, never changed.",
    )
    parser.add_argument(
        "submissions",
        type=Path,
        help="folder of submissions: <student>/<lesson>/<lesson>.ipynb "
        "(nbgrader's submitted/ layout) and/or <student>_<lesson>.ipynb",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("grading"),
        help="workspace for the nbgrader course, feedback and reports "
        "(default: ./grading; rebuilt on every run)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="course root holding solutions/ and nbgrader_config.py "
        "(default: the working folder, else this checkout)",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=60,
        help="seconds a cell of student code may run before it is stopped (default 60)",
    )
    parser.add_argument(
        "--lesson-timeout",
        type=int,
        default=600,
        help="seconds one of the lesson's own cells may run (default 600); if "
        "it overruns, nbgrader may give up on the whole notebook",
    )
    parser.add_argument(
        "--lessons",
        nargs="+",
        default=None,
        help="the lessons that were due: only these are graded, and a student "
        "without one of them is reported as missing (default: every "
        "lesson that somebody submitted)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a workspace even if its gradebook holds manual grades",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; exits 0 when the run finished (problems are in the report)."""
    args = build_parser().parse_args(argv)
    rows = grade(
        args.submissions,
        args.out,
        args.root or _default_root(),
        cell_timeout=args.timeout,
        lesson_timeout=args.lesson_timeout,
        lessons=args.lessons,
        force=args.force,
    )
    out = args.out.resolve()
    flagged = [r for r in rows if r["status"] != "ok"]
    print(
        f"graded {len(rows)} row(s), {len(flagged)} need attention; report: "
        f"{out / 'report.md'}, scores: {out / 'scores.csv'}, feedback: {out / 'feedback'}"
    )
    for r in flagged:
        print(f"  {r['student']} / {r['lesson']}: {r['status']}: {r['reasons']}")
    return 0
