"""Record a grading workspace's grades in a class gradebook (the classroom's PostgreSQL one).

The grading command grades in a private workspace (``--out``) with its own gradebook. On a
class server the grades then go to the class gradebook and the graded notebooks to the course's
``autograded/`` folder, exactly where ``nbgrader autograde`` would have put them, through
nbgrader's own ``Gradebook`` API (no copy of its schema): formgrader's manual grading,
``generate_feedback`` and ``export`` work from there. Manual scores already entered are kept.
The grader is the only writer of any gradebook: ``classroom/autograde.py`` calls
:func:`merge_into_class_gradebook`.

From then on the class gradebook is where the workspace's grades live: the workspace records it
(``workspace_gradebook.record_class_gradebook``), so its feedback, report, scores and LMS files
(``python -m course_grading refresh`` and ``export``) read the points entered in the hub's
formgrader, and the workspace's own formgrader writes there too.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning

from course_grading.nbgrader.workspace_gradebook import record_class_gradebook


def _replace_folder(source: Path, dest: Path) -> None:
    if dest.exists():
        for path in dest.rglob("*"):  # nbgrader leaves graded notebooks read-only
            path.chmod(0o644 if path.is_file() else 0o755)
        shutil.rmtree(dest)
    shutil.copytree(source, dest)


def merge_into_class_gradebook(
    workspace: Path, lesson: str, course: Path, class_db: str, course_id: str
) -> int:
    """Copy the workspace's grades of ``lesson`` into ``class_db``; return how many submissions.

    ``workspace`` is a grading run's ``--out`` folder; ``course`` the class's course folder (its
    ``autograded/`` receives the graded notebooks, and each submission's other files, such as
    ``submission_secret.txt`` that ``release_feedback`` needs, are copied beside them).

    Each submission's grades are committed once all of them are copied. Auto scores, auto
    comments, flags and late penalties are the workspace's; a grade that already has a manual
    score keeps it and is no longer marked as needing manual grading. A student's earlier
    ``autograded/`` folder for the lesson is replaced.

    Args:
        workspace: a grading run's ``--out`` folder (its ``course/gradebook.db`` and
            ``course/autograded/``).
        lesson: the lesson (nbgrader assignment id) to merge.
        course: the class's course folder, with the students' ``submitted/`` folders.
        class_db: the class gradebook's SQLAlchemy URL (PostgreSQL on the classroom server).
        course_id: the nbgrader course id the class gradebook files the grades under.

    Returns:
        How many submissions were merged.
    """
    work_db = f"sqlite:///{(Path(workspace) / 'course' / 'gradebook.db').resolve()}"
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
                target = gb.find_submission_notebook(notebook.name, lesson, student)
                target.flagged = notebook.flagged
                # nbgrader's late penalty, decided in the workspace from the class's due date
                target.late_submission_penalty = notebook.late_submission_penalty
            gb.db.commit()
            dest = Path(course) / "autograded" / student / lesson
            _replace_folder(Path(workspace) / "course" / "autograded" / student / lesson, dest)
            for extra in (Path(course) / "submitted" / student / lesson).iterdir():
                if (
                    extra.is_file()
                    and not extra.is_symlink()
                    and extra.suffix != ".ipynb"
                    and not (dest / extra.name).exists()
                ):
                    shutil.copyfile(extra, dest / extra.name)
            copied += 1
    record_class_gradebook(Path(workspace), class_db, course_id)
    return copied
