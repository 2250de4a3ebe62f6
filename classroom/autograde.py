"""Autograde one lesson into the class gradebook, student code in the course's sandbox.

Run as the instructor in the course folder (``python classroom/run.py autograde LESSON`` does
that), after ``nbgrader collect``:

1. ``python -m course_grading submitted --lessons LESSON --out grading/LESSON`` (with ``--due``
   when the class gradebook holds the lesson's due date, set in formgrader) grades every
   collected submission in a private workspace, one per lesson, each notebook in its own
   bubblewrap sandbox (no network, read-only system, limits), and writes its report
   (``grading/LESSON/report.md``);
2. the grades it recorded (its ``course/gradebook.db``: the trusted checks' verdicts, a deleted
   test scoring 0) and the graded notebooks (its ``course/autograded/``) are then recorded in
   the class gradebook (``SHAPES_GRADEBOOK_URL``) and the course's ``autograded/`` by the grader
   itself (``course_grading.nbgrader.class_gradebook``), exactly where ``nbgrader autograde``
   would have put them, late penalties included. Formgrader (manual grading),
   ``generate_feedback`` and ``export`` work from there; manual scores already entered are
   kept. The workspace records that its grades live there now, so ``python -m course_grading
   refresh grading/LESSON`` and ``export grading/LESSON`` read the points entered in the hub.

There is no unsandboxed fallback: where bubblewrap cannot run, the grader stops with one line
and so does this.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from course_grading.due import class_due_argument
from course_grading.nbgrader.class_gradebook import merge_into_class_gradebook

#: The lessons' grading workspaces: ``grading/<lesson>/``, one per lesson.
WORKSPACES = Path("grading")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lesson")
    parser.add_argument(
        "--scheduler",
        help="grade on this Dask cluster (tls://HOST:PORT); the course folder's grading/ must be "
        "shared with its workers at the same path (docs/instructors.md, section 3.8)",
    )
    parser.add_argument(
        "--cluster-certs",
        help="with --scheduler: the grading command's certificate folder (the client/ folder of "
        "`python -m course_grading cluster-certs`)",
    )
    args = parser.parse_args(argv)
    course = Path.cwd()
    class_db, course_id = os.environ["SHAPES_GRADEBOOK_URL"], os.environ["SHAPES_COURSE_ID"]
    due = class_due_argument(class_db, course_id, args.lesson)  # formgrader's due date, if set
    workspace = WORKSPACES / args.lesson
    graded = subprocess.run(
        [sys.executable, "-m", "course_grading", "submitted", "--root", str(course),
         "--out", str(workspace), "--lessons", args.lesson, *due,
         *(["--scheduler", args.scheduler] if args.scheduler else []),
         *(["--cluster-certs", args.cluster_certs] if args.cluster_certs else [])],
    )  # fmt: skip
    if graded.returncode != 0:
        return graded.returncode
    copied = merge_into_class_gradebook(workspace, args.lesson, course, class_db, course_id)
    print(
        f"{copied} submission(s) of {args.lesson} graded in the sandbox and recorded in the class "
        f"gradebook; the grader's report: {(workspace / 'report.md').resolve()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
