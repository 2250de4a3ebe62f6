"""``python -m course_grading export``: a grading run's scores as a file an LMS imports.

    python -m course_grading export GRADING_OUT [GRADING_OUT ...] --format canvas \\
        --gradebook CANVAS_EXPORT.csv --out canvas.csv
    python -m course_grading export GRADING_OUT --format moodle --out moodle.csv \\
        [--gradebook MOODLE_EXPORT.csv] [--id username|email]

The scores are read from each workspace (``scores.from_workspace``: manual grades entered in
its formgrader included); the file the LMS exported is only read; a new file is written (never
over an existing one), with a review file beside it listing every student who could not be
matched, every ambiguous one, and every score worth a look. ``nbgrader_export.py`` does the
same from an nbgrader gradebook, as ``nbgrader export --exporter ...``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from course_grading.errors import GradingError
from course_grading.lms import review as rv
from course_grading.lms.canvas import ID_COLUMNS, CanvasGradebook
from course_grading.lms.canvas import WHAT as CANVAS_FILE
from course_grading.lms.canvas_upload import canvas_upload
from course_grading.lms.csv_files import read_table, write_new
from course_grading.lms.moodle import ID_FIELDS, moodle_upload
from course_grading.lms.moodle import WHAT as MOODLE_FILE
from course_grading.lms.scores import ClassScores, from_workspace

FORMATS = ("canvas", "moodle")


def column_names(pairs: list[str], lessons: list[str]) -> dict[str, str]:
    """``--column LESSON=NAME`` options as a dict, each lesson checked.

    Args:
        pairs: the options' values.
        lessons: the lessons being exported.

    Returns:
        Lesson -> the column (header or title) it fills.

    Raises:
        GradingError: a value without ``=``, an unknown lesson, or a lesson given twice.
    """
    names: dict[str, str] = {}
    for pair in pairs:
        lesson, sep, name = pair.partition("=")
        if not sep or not name.strip():
            raise GradingError(f"--column {pair!r}: give LESSON=COLUMN")
        if lesson not in lessons:
            raise GradingError(f"--column {pair!r}: {lesson!r} is not among {', '.join(lessons)}")
        if lesson in names:
            raise GradingError(f"--column names {lesson} twice")
        names[lesson] = name.strip()
    return names


def only_lessons(scores: ClassScores, lessons: list[str] | None) -> ClassScores:
    """``scores`` restricted to ``lessons`` (all of them when ``None``).

    Args:
        scores: the graded class.
        lessons: the lessons to export.

    Returns:
        A table holding only those lessons' scores (every student kept).

    Raises:
        GradingError: a lesson has no score in the grading output.
    """
    if not lessons:
        return scores
    if unknown := sorted(set(lessons) - set(scores.lessons)):
        raise GradingError(f"no scores for {', '.join(unknown)} in the grading output")
    kept = ClassScores(names=scores.names)
    kept.scores = {key: s for key, s in scores.scores.items() if key[1] in lessons}
    return kept


def _keys(fmt: str, match: str | None) -> tuple[str, ...]:
    allowed = tuple(ID_COLUMNS) if fmt == "canvas" else tuple(ID_FIELDS)
    keys = tuple(k.strip() for k in match.split(",")) if match else ()
    if bad := [k for k in keys if k not in allowed]:
        raise GradingError(f"--match {match}: {', '.join(bad)} is not one of {', '.join(allowed)}")
    return keys or (allowed if fmt == "canvas" else ())


def export_grades(
    scores: ClassScores,
    fmt: str,
    out: Path,
    *,
    lms_file: Path | None = None,
    columns: dict[str, str] | None = None,
    match: str | None = None,
    rescale: bool = False,
    id_field: str = "username",
) -> list[rv.Note]:
    """Write ``out`` (and its review file) for the LMS ``fmt``; return the notes.

    Args:
        scores: the graded class.
        fmt: ``canvas`` or ``moodle``.
        out: the new file; it and its review file (``review.review_path``) must not exist.
        lms_file: the LMS's own export: required for Canvas (the gradebook), optional for
            Moodle (a roster to match against).
        columns: lesson -> the column it fills (``--column``).
        match: the ids to match by, comma-separated (``--match``); all when ``None``.
        rescale: Canvas: enter scores out of a column's points possible where they differ.
        id_field: Moodle: ``username`` or ``email``.

    Returns:
        The notes for the instructor, also written to the review file.

    Raises:
        GradingError: a bad option, an LMS file that breaks its LMS's rules, or an output
            that exists already.
    """
    if fmt not in FORMATS:
        raise GradingError(f"--format {fmt}: give one of {', '.join(FORMATS)}")
    if not scores.scores:
        raise GradingError("the grading output holds no scores")
    names, keys = columns or {}, _keys(fmt, match)
    if fmt == "canvas":
        if lms_file is None:
            raise GradingError("--format canvas needs --gradebook: Canvas's Grades > Export file")
        book = CanvasGradebook(read_table(lms_file, CANVAS_FILE))
        table, notes = canvas_upload(book, scores, names, keys, rescale)
    else:
        roster = read_table(lms_file, MOODLE_FILE) if lms_file else None
        table, notes = moodle_upload(scores, names, id_field, roster, keys)
    write_new([(Path(out), table), (rv.review_path(Path(out)), rv.review_table(notes))])
    return notes


def build_parser() -> argparse.ArgumentParser:
    """The ``export`` command's options.

    Returns:
        The parser.
    """
    parser = argparse.ArgumentParser(
        prog="python -m course_grading export",
        description="Write a grading run's scores as a new CSV file Canvas or Moodle imports, "
        "and a review file beside it (unmatched and ambiguous students, scores to look at). "
        "The LMS's own file is only read; nothing is overwritten.",
    )
    add = parser.add_argument
    add("grading_out", nargs="+", type=Path, help="grading workspace(s): --out of a grading run")
    add("--format", required=True, choices=FORMATS, help="the LMS the file is for")
    add("--out", required=True, type=Path, help="the file to write (must not exist)")
    add(
        "--gradebook",
        type=Path,
        help="the LMS's export: Canvas's gradebook (Grades > Export; required for canvas), or "
        "Moodle's grade export or another CSV with Username / Email address columns (optional)",
    )
    add(
        "--column",
        action="append",
        default=[],
        metavar="LESSON=COLUMN",
        help="the column a lesson fills: an existing one (its header or title) or a new one "
        "(default: the lesson's name)",
    )
    add("--lessons", nargs="+", help="only these lessons (default: all in the grading output)")
    add(
        "--match",
        help="ids to match students by, comma-separated: canvas login,sis,id (default all); "
        "moodle username,email,idnumber (default: all the roster has)",
    )
    add(
        "--rescale",
        action="store_true",
        help="canvas: enter scores out of an existing column's points possible",
    )
    add("--id", default="username", choices=("username", "email"), help="moodle: user field")
    return parser


def export_main(argv: list[str]) -> int:
    """``export ...``: write the file and print what to review.

    Args:
        argv: the arguments after ``export``.

    Returns:
        0 once the file is written (the notes are printed and in the review file).

    Raises:
        GradingError: anything that keeps the file from being written (one line, exit 2).
    """
    args = build_parser().parse_args(argv)
    scores = ClassScores()
    for folder in args.grading_out:
        from_workspace(folder, scores)
    scores = only_lessons(scores, args.lessons)
    notes = export_grades(
        scores,
        args.format,
        args.out,
        lms_file=args.gradebook,
        columns=column_names(args.column, scores.lessons),
        match=args.match,
        rescale=args.rescale,
        id_field=args.id,
    )
    lessons, review = len(scores.lessons), rv.review_path(args.out)
    left_out = {
        n.student for n in notes if n.kind in (rv.NOT_IN_LMS, rv.AMBIGUOUS, rv.UNREADABLE_ID)
    }
    filled = len(set(scores.students) - left_out)
    print(
        f"wrote {args.out} ({lessons} lesson column(s); the scores of {filled} of "
        f"{len(scores.students)} graded student(s))"
    )
    if not filled:
        print("  nobody's score is in it: no graded student matched a row of the LMS file")
    print(f"review before uploading: {review} ({len(notes)} note(s))")
    for line in rv.summary(notes):
        print(f"  {line}")
    return 0
