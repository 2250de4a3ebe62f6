"""The instructor's course folder and the per-role Jupyter configuration of the classroom.

The course folder is made from this repository: its ``nbgrader_config.py`` and ``solutions/``
copied into the instructor's home (``~/<course_id>/``), owned by the instructor. ``notebooks/``
is deliberately not copied: the instructor generates each lesson (formgrader's *Generate* or
``nbgrader generate_assignment``), which is also what records the lesson's cells in the class
gradebook; a lesson released without that step could not be autograded.

Each role gets a folder on ``JUPYTER_CONFIG_PATH`` (set per user by ``jupyterhub_config.py``):

- ``etc/instructor``: ``nbgrader_config.py`` pointing nbgrader (CLI and formgrader) at the
  course folder, the exchange and the PostgreSQL gradebook, its collect step taking a
  submission only from the student it names (``course_grading.nbgrader.collect``), and the
  server extension that puts formgrader's pages under a strict Content-Security-Policy
  (``course_grading.pages.formgrader_csp``);
- ``etc/student``: the exchange, the course id and, under the LTI login, the student's nbgrader
  id (``SHAPES_STUDENT_ID``), and the instructor-only extensions (formgrader,
  create-assignment, course list) switched off, as nbgrader's guide advises.

Every deployment-dependent value is read from the environment (``SHAPES_COURSE_ID``,
``SHAPES_EXCHANGE_ROOT``, ``SHAPES_GRADEBOOK_URL``, ``SHAPES_COURSE_ROOT``), which the hub sets
per user: that environment is the one place these settings come from.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
from pathlib import Path

INSTRUCTOR_NBGRADER = '''\
"""Written by classroom/course_folder.py: nbgrader for the instructor of this classroom."""
import os

c = get_config()  # noqa: F821
c.CourseDirectory.root = os.environ["SHAPES_COURSE_ROOT"]
c.CourseDirectory.course_id = os.environ["SHAPES_COURSE_ID"]
c.Exchange.root = os.environ["SHAPES_EXCHANGE_ROOT"]
c.CourseDirectory.db_url = os.environ["SHAPES_GRADEBOOK_URL"]
# Collect takes a submission only from the student it names: its folder's owner, or the id the
# LTI login gave that owner (course_grading/nbgrader/collect.py).
c.ExchangeFactory.collect = "course_grading.nbgrader.collect.OwnerCheckedCollect"
'''

STUDENT_NBGRADER = '''\
"""Written by classroom/course_folder.py: nbgrader for a student of this classroom."""
import os

c = get_config()  # noqa: F821
c.CourseDirectory.course_id = os.environ["SHAPES_COURSE_ID"]
c.Exchange.root = os.environ["SHAPES_EXCHANGE_ROOT"]
# Under the LTI login the student's nbgrader id is their LMS login, not their account's name.
c.CourseDirectory.student_id = os.environ.get("SHAPES_STUDENT_ID") or "*"
# The Validate button runs the lesson top to bottom: the same per-cell limit as the course's
# nbgrader_config.py (`import torch` alone takes seconds on a busy machine).
c.Execute.timeout = 60
'''

INSTRUCTOR_ONLY_LAB = [
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:course-list",
]
INSTRUCTOR_ONLY_SERVER = [
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.course_list",
    # Formgrader's Content-Security-Policy; it lives in the grader, which students cannot see.
    "course_grading.pages.formgrader_csp",
]
#: Switched on for the instructor whatever the environment's own configuration says.
INSTRUCTOR_SERVER = {"course_grading.pages.formgrader_csp": True}
QUIET_LAB = {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate"}
# Lab settings defaults for everyone in the classroom (a user's own settings still win): no
# "get notified about Jupyter news?" toast, no update check.
LAB_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}
}


def write_role_configs(etc: Path) -> dict[str, Path]:
    """Write ``etc/instructor`` and ``etc/student`` (world-readable, no secrets in them)."""
    roles = {"instructor": etc / "instructor", "student": etc / "student"}
    for role, folder in roles.items():
        (folder / "labconfig").mkdir(parents=True, exist_ok=True)
        (folder / "lab-settings").mkdir(exist_ok=True)
        (folder / "lab-settings" / "overrides.json").write_text(json.dumps(LAB_OVERRIDES, indent=2))
        server: dict = {"LabApp": {**QUIET_LAB, "app_settings_dir": str(folder / "lab-settings")}}
        page: dict = {}
        if role == "student":
            server["ServerApp"] = {
                "jpserver_extensions": dict.fromkeys(INSTRUCTOR_ONLY_SERVER, False)
            }
            page["disabledExtensions"] = dict.fromkeys(INSTRUCTOR_ONLY_LAB, True)
        else:
            server["ServerApp"] = {"jpserver_extensions": dict(INSTRUCTOR_SERVER)}
        text = INSTRUCTOR_NBGRADER if role == "instructor" else STUDENT_NBGRADER
        (folder / "nbgrader_config.py").write_text(text)
        (folder / "jupyter_server_config.json").write_text(json.dumps(server, indent=2))
        (folder / "labconfig" / "page_config.json").write_text(json.dumps(page, indent=2))
    for path in [etc, *etc.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return roles


def build(repo: Path, instructor: str, course_id: str) -> Path:
    """Copy the course into ``~instructor/<course_id>`` unless it is there; the folder."""
    account = pwd.getpwnam(instructor)
    folder = Path(account.pw_dir) / course_id
    if (folder / "nbgrader_config.py").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(repo / "nbgrader_config.py", folder / "nbgrader_config.py")
    shutil.copytree(
        repo / "solutions",
        folder / "solutions",
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
        dirs_exist_ok=True,
    )
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid)
    return folder


def install_grader(repo: Path, instructor: str) -> Path:
    """A private copy of ``course_grading`` for the instructor; the folder to put on PYTHONPATH.

    The grader holds the trusted item checks (what a right answer is), so the hub's mount view
    shows students nothing of it: ``private_view`` bares only ``.venv``, ``course_lib`` and
    ``classroom`` of the checkout. The instructor's server (formgrader's autograde and feedback
    steps name ``course_grading`` in ``nbgrader_config.py``) and ``run.py autograde`` import it
    from ``~instructor/.shapes-grader/`` (mode 0700) instead. The copy is made anew on every
    start, so it is never older than the checkout; nothing the instructor writes lives there.
    """
    account = pwd.getpwnam(instructor)
    folder = Path(account.pw_dir) / ".shapes-grader"
    if folder.is_symlink():
        folder.unlink()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700)
    shutil.copytree(
        repo / "course_grading",
        folder / "course_grading",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
    folder.chmod(0o700)
    return folder


if __name__ == "__main__":  # for an image: python classroom/course_folder.py /etc/shapes
    import sys

    for role, path in write_role_configs(Path(sys.argv[1])).items():
        print(f"{role}: JUPYTER_CONFIG_PATH={path}")
