"""Autograde one lesson into the class gradebook, student code in the course's sandbox.

Run as the instructor in the course folder (``python classroom/run.py autograde LESSON`` does
that), after ``nbgrader collect``:

1. ``python -m course_grading submitted --lessons LESSON --out grading`` grades every
   collected submission in a private workspace, each notebook in its own bubblewrap sandbox
   (no network, read-only system, limits), and writes its report (``grading/report.md``);
2. the grades it recorded (``grading/course/gradebook.db``, with its corrections: a deleted or
   cheated test scores 0) and the graded notebooks (``grading/course/autograded/``) are then
   recorded in the class gradebook (``SHAPES_GRADEBOOK_URL``) and the course's ``autograded/``,
   through nbgrader's own Gradebook API, exactly where ``nbgrader autograde`` would have put
   them. Formgrader (manual grading), ``generate_feedback`` and ``export`` work from there;
   manual scores already entered are kept.

There is no unsandboxed fallback: where bubblewrap cannot run, the grader stops with one line
and so does this.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning

WORKSPACE = Path("grading")


def record_in_class_gradebook(lesson: str, course: Path, class_db: str, course_id: str) -> int:
    """Copy the workspace's grades of ``lesson`` into the class gradebook; submissions copied."""
    work_db = f"sqlite:///{(WORKSPACE / 'course' / 'gradebook.db').resolve()}"
    copied = 0
    with (
        Gradebook(work_db) as work,
        Gradebook(class_db, course_id=course_id) as gb,
        warnings.catch_warnings(),
    ):
        # nbgrader's own autograde makes SQLAlchemy warn here too (autoflush of a new submission)
        warnings.simplefilter("ignore", SAWarning)
        for graded in work.assignment_submissions(lesson):
            student = graded.student_id
            gb.update_or_create_student(student)
            gb.update_or_create_submission(lesson, student, timestamp=graded.timestamp)
            for notebook in graded.notebooks:
                for grade in notebook.grades:
                    target = gb.find_grade(grade.name, notebook.name, lesson, student)
                    target.auto_score = grade.auto_score
                    target.needs_manual_grade = grade.needs_manual_grade and (
                        target.manual_score is None
                    )
                for comment in notebook.comments:
                    target = gb.find_comment(comment.name, notebook.name, lesson, student)
                    target.auto_comment = comment.auto_comment
                gb.find_submission_notebook(
                    notebook.name, lesson, student
                ).flagged = notebook.flagged
            gb.db.commit()
            source = WORKSPACE / "course" / "autograded" / student / lesson
            dest = course / "autograded" / student / lesson
            if dest.exists():
                for path in dest.rglob("*"):  # nbgrader leaves graded notebooks read-only
                    path.chmod(0o644 if path.is_file() else 0o755)
                shutil.rmtree(dest)
            shutil.copytree(source, dest)
            # nbgrader autograde copies every other file of the submission too; release_feedback
            # needs submission_secret.txt, which the grader's workspace leaves out.
            for extra in (course / "submitted" / student / lesson).iterdir():
                if (
                    extra.is_file()
                    and extra.suffix != ".ipynb"
                    and not (dest / extra.name).exists()
                ):
                    shutil.copyfile(extra, dest / extra.name)
            copied += 1
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lesson")
    args = parser.parse_args(argv)
    course = Path.cwd()
    graded = subprocess.run(
        [sys.executable, "-m", "course_grading", "submitted", "--root", str(course),
         "--out", str(WORKSPACE), "--lessons", args.lesson],
    )  # fmt: skip
    if graded.returncode != 0:
        return graded.returncode
    copied = record_in_class_gradebook(
        args.lesson, course, os.environ["SHAPES_GRADEBOOK_URL"], os.environ["SHAPES_COURSE_ID"]
    )
    print(
        f"{copied} submission(s) of {args.lesson} graded in the sandbox and recorded in the class "
        f"gradebook; the grader's report: {(WORKSPACE / 'report.md').resolve()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
