"""The grading command line: ``python -m course_grading SUBMISSIONS [options]``, and
``python -m course_grading secret PATH`` (a course secret); ``key`` (the class edition's answer
key) is ``course_grading.nbgrader.answer_key``; ``export`` (scores into an LMS's file) is
``course_grading.lms.export``; ``refresh`` (every output again after manual grading)
``course_grading.refresh``; ``passback`` and ``lti-key`` (scores into the LMS through LTI
Advantage) are ``course_grading.lms.passback_cli``.

This is the only place a ``GradingError`` becomes a message and an exit status: one line on
stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from course_grading import cluster, cluster_certs, cluster_connect, regrade
from course_grading.autograde import Options
from course_grading.errors import GradingError
from course_grading.grading_run import add_time_options
from course_grading.judge import secret as course_secret
from course_grading.lms import downloads
from course_grading.nbgrader.course import SOURCE_DIR
from course_grading.run import grade
from course_grading.sandbox.bwrap import MAX_SLOTS, Limits

NO_SANDBOX_WARNING = (
    "WARNING: --no-sandbox: student code runs as {user}, unsandboxed: it can read, change and "
    "delete anything this account can (the work course, the gradebook, the solutions, other "
    "students' files) and use the network. Use it only for submissions you trust."
)


def _default_root() -> Path:
    """The course root: the working folder if it holds ``solutions/``, else this checkout."""
    here = Path.cwd()
    if (here / SOURCE_DIR).is_dir():
        return here
    return Path(__file__).resolve().parents[1]


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    add_time_options(parser)
    add = parser.add_argument
    add(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="notebooks graded at once, each in its own sandbox (default: the number of cores)",
    )
    add(
        "--memory",
        type=float,
        default=4,
        help="GiB of memory per sandbox, and of address space per process in it (4)",
    )
    add("--tmp-size", type=int, default=512, help="MiB of its /tmp and of its home, each (512)")
    add("--max-processes", type=int, default=256, help="processes/threads per sandbox (256)")
    add("--max-output", type=float, default=16, help="MiB of output kept per notebook (16)")
    add(
        "--no-sandbox",
        action="store_true",
        help="run student code unsandboxed, as yourself (unsafe; said in the output and report)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The command's options (``--help`` needs nothing beyond the base install).

    Returns:
        The parser of ``python -m course_grading SUBMISSIONS [options]``.
    """
    parser = argparse.ArgumentParser(
        prog="python -m course_grading",
        description="Autograde student submissions with nbgrader in a private workspace, each "
        "notebook in its own bubblewrap sandbox, every point decided by the lessons' trusted "
        "checks outside the student's kernel; generate feedback without hidden tests or "
        "solutions, and write a report of scores and problems. Submitted files are only read.",
        epilog="Instructors: `python -m course_grading secret PATH` makes a course secret; "
        "`... key --secret-file PATH --out FOLDER` writes your class edition's answer key; "
        "`... refresh GRADING_OUT` makes the feedback, report and scores again after manual "
        "grading (`--due LESSON=WHEN`: a due date decided now); "
        "`... export GRADING_OUT --format canvas|moodle ...` writes the scores as a file Canvas "
        "or Moodle imports; `... passback GRADING_OUT --platform lti.json --registry "
        "lti_users.json` posts them to the LMS through LTI Advantage (a dry run without --post).",
    )
    add = parser.add_argument
    add(
        "submissions",
        type=Path,
        help="folder of submissions: <student>/<lesson>/<lesson>.ipynb "
        "(nbgrader's submitted/ layout) and/or <student>_<lesson>.ipynb; or Canvas's or "
        "Moodle's submissions download, the zip or its folder",
    )
    add("--out", type=Path, default=Path("grading"), help="workspace (default ./grading)")
    add(
        "--root",
        type=Path,
        default=None,
        help="course root holding solutions/ and nbgrader_config.py "
        "(default: the working folder, else this checkout)",
    )
    _add_class_options(parser)
    _add_run_options(parser)
    cluster_connect.add_options(parser)  # --scheduler, --resume, --worker-wait
    return parser


def _add_class_options(parser: argparse.ArgumentParser) -> None:
    """Which lessons and students, and the class's own settings (due dates, the secret)."""
    add = parser.add_argument
    add(
        "--lessons",
        nargs="+",
        default=None,
        help="the lessons that were due: only these are graded, and a student without one "
        "is reported as missing (default: every lesson somebody submitted)",
    )
    add(
        "--force",
        action="store_true",
        help="replace a workspace holding manual grades (with --student: discard that "
        "student's manual grades)",
    )
    _add_course_options(parser)
    downloads.add_options(parser)  # --roster


def _add_course_options(parser: argparse.ArgumentParser) -> None:
    """The options about whom and what is graded: one student, due dates, the course secret."""
    add = parser.add_argument
    add(
        "--student",
        metavar="ID",
        default=None,
        help="regrade only this student (the id as the report writes it) in the graded "
        "workspace --out: every other student's rows, files and manual grades stay as they are",
    )
    add(
        "--due",
        metavar="LESSON=WHEN",
        action="append",
        default=None,
        help="the lesson's due date (UTC unless it says otherwise, e.g. "
        "01_tokens_and_attention_memory=2026-12-01T17:00Z; repeat per lesson): nbgrader's late "
        "penalty from each timestamp.txt (c.LateSubmissionPlugin in nbgrader_config.py)",
    )
    add(
        "--secret-file",
        type=Path,
        default=os.environ.get(course_secret.ENVIRONMENT) or None,
        help="the course secret hidden inputs are drawn with, readable by you only (default: "
        f"${course_secret.ENVIRONMENT}; none: practice grading, said in the report); make one "
        "with `python -m course_grading secret PATH --term TERM`",
    )


def options_from(args: argparse.Namespace) -> Options:
    """The run's options from parsed arguments.

    Args:
        args: the parsed command line (:func:`build_parser`).

    Returns:
        The options: limits in bytes from the flags' GiB and MiB, each sandbox's threads the
        machine's cores shared by ``--jobs``, the course secret read.

    Raises:
        GradingError: ``--jobs`` outside 1 to ``MAX_SLOTS - 1``, ``--notebook-floor`` outside 1
            to ``--notebook-timeout``, or a secret file that cannot be used (the command says
            it in one line and exits 2).
    """
    if not 1 <= args.jobs <= MAX_SLOTS - 1:  # the last slot's uid runs graded functions
        raise GradingError(f"--jobs {args.jobs}: give 1 to {MAX_SLOTS - 1}")
    cores = os.cpu_count() or 1
    limits = Limits(
        memory_bytes=int(args.memory * 2**30),
        processes=args.max_processes,
        tmpfs_bytes=args.tmp_size * 2**20,
        output_bytes=int(args.max_output * 2**20),
        threads=max(1, cores // args.jobs),
    )
    if not 0 < args.notebook_floor <= args.notebook_timeout:
        raise GradingError(
            f"--notebook-floor {args.notebook_floor}: give 1 to --notebook-timeout "
            f"({args.notebook_timeout})"
        )
    return Options(
        cell_timeout=args.timeout,
        lesson_timeout=args.lesson_timeout,
        budget_factor=args.budget_factor,
        notebook_floor=args.notebook_floor,
        notebook_timeout=args.notebook_timeout,
        jobs=args.jobs,
        sandbox=not args.no_sandbox,
        limits=limits,
        secret=course_secret.load(args.secret_file),
    )


def main(argv: list[str] | None = None) -> int:
    """Command line entry point.

    Args:
        argv: the arguments; ``None``: ``sys.argv[1:]``.

    Returns:
        0 when the run finished (problems are in the report), 2 with one line on stderr when it
        could not (a ``GradingError``).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        commands = {"secret": course_secret.secret_main, "cluster-certs": cluster_certs.certs_main}
        if argv[:1] and argv[0] in commands:  # (cluster-certs imports cryptography when run)
            return commands[argv[0]](argv[1:])
        if argv[:1] == ["key"]:
            from course_grading.nbgrader.answer_key import key_main

            return key_main(argv[1:], _default_root())
        if argv[:1] == ["export"]:
            from course_grading.lms.export import export_main  # nbgrader's API only when used

            return export_main(argv[1:])
        if argv[:1] == ["refresh"]:
            from course_grading.refresh import refresh_main

            return refresh_main(argv[1:])
        if argv[:1] in (["passback"], ["lti-key"]):
            from course_grading.lms.passback_cli import key_main, passback_main

            return (passback_main if argv[0] == "passback" else key_main)(argv[1:])
        return _grade_main(argv)
    except GradingError as err:
        print(f"python -m course_grading: {err}", file=sys.stderr)
        return 2


def _grade_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    options = options_from(args)
    warning = NO_SANDBOX_WARNING.format(user=os.environ.get("USER") or f"uid {os.getuid()}")
    if not options.sandbox:
        print(warning, file=sys.stderr)
    root = args.root or _default_root()
    timings: dict[str, float] = {}
    if args.student is not None and args.lessons:
        raise GradingError(
            "--lessons does not go with --student: the student is regraded in the lessons the "
            "workspace was graded for"
        )
    with cluster.engine(args, options) as on_cluster:  # None without --scheduler
        if args.student is not None:
            rows = regrade.regrade_student(
                args.submissions, args.out, root, args.student, options=options, due=args.due,
                force=args.force,
            )  # fmt: skip
        else:
            rows = grade(
                args.submissions,
                args.out,
                root,
                options=options,
                lessons=args.lessons,
                force=args.force,
                timings=timings,
                due=args.due,
                cluster=on_cluster,
                roster=args.roster,
            )
            regrade.record_class_run(args.out, options, args.lessons, args.roster)
    out = args.out.resolve()
    flagged = [r for r in rows if r.status != "ok"]
    print(
        f"graded {len(rows)} row(s), {len(flagged)} need attention; report: "
        f"{out / 'report.md'}, scores: {out / 'scores.csv'}, feedback: {out / 'feedback'}"
    )
    for r in flagged:
        print(f"  {r.student} / {r.lesson}: {r.status}: {'; '.join(r.reasons)}")
    sandbox = "no sandbox" if not options.sandbox else f"{options.jobs} sandbox(es) at a time"
    sandbox = f"on the Dask cluster at {args.scheduler}" if args.scheduler else sandbox
    steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in timings.items())
    if steps:
        print(f"took {steps} ({sandbox})")
    if not options.sandbox:
        print(warning, file=sys.stderr)
    return 0
