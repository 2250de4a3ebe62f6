"""Open JupyterLab on the course, as root or as anyone else: what ``make lab`` runs.

    .venv/bin/python scripts/lab.py                     # the student notebooks (notebooks/)
    .venv/bin/python scripts/lab.py FOLDER [OPTIONS]    # another folder; OPTIONS go to Lab
    .venv/bin/python scripts/lab.py --instructor FOLDER # with nbgrader's instructor tools

What it adds to a plain ``jupyter lab FOLDER``:

* **root**: JupyterLab refuses to start as root ("Running as root is not recommended. Use
  --allow-root to bypass."), and containers, cloud VMs and teaching images often run as root.
  As root this adds ``--allow-root`` and says so on stderr; as anyone else it adds nothing.
* **the repository's Lab configuration** (``jupyter-config/``, first on ``JUPYTER_CONFIG_PATH``):
  no "get notified about Jupyter news?" toast over the plots and no update check
  (``labconfig/default_setting_overrides.json``, ``jupyter_server_config.d/shapes_lab.json``,
  as the classroom's role folders do), and formgrader's Content-Security-Policy
  (``jupyter_server_config.d/course_grading.json``). It works the same for the plain-pip and
  conda routes, whose editable installs skip ``pyproject.toml``'s data files.
* **a student's Lab**: nbgrader's instructor tools (the *Create Assignment* sidebar, the
  *Formgrader* and course list menus, and their server extensions) are switched off by
  ``jupyter-config/student/`` (first on the path), as the classroom's student role does; the
  *Validate* button stays. ``--instructor`` (what ``make formgrader`` passes) leaves that folder
  out, so formgrader works.

The process becomes JupyterLab (``exec``), so Ctrl-C and a signal to ``make lab`` reach the server
directly; the working folder is kept (nbgrader's Validate button reads ``nbgrader_config.py``
from it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG = REPO_ROOT / "jupyter-config"
STUDENT_CONFIG = CONFIG / "student"
INSTRUCTOR_FLAG = "--instructor"
ROOT_NOTICE = (
    "scripts/lab.py: running as root, so JupyterLab is started with --allow-root (it refuses "
    "root otherwise). Any user's code in these notebooks runs as root too."
)


def lab_command(argv: list[str], euid: int, python: str = sys.executable) -> list[str]:
    """The JupyterLab command line for ``argv`` (this script's arguments) run by ``euid``.

    Args:
        argv: this script's arguments: an optional folder (``notebooks`` when the first
            argument is missing or an option), then options for ``jupyter lab``.
        euid: the effective user id the server will run as (0: root).
        python: the interpreter whose JupyterLab runs.

    Returns:
        ``[python, "-m", "jupyterlab", FOLDER, *options]``, with ``--allow-root`` added for
        root unless it is given already.
    """
    if not argv or argv[0].startswith("-"):
        folder, options = "notebooks", argv
    else:
        folder, options = argv[0], argv[1:]
    command = [python, "-m", "jupyterlab", folder, *options]
    if euid == 0 and not any(arg.startswith("--allow-root") for arg in options):
        command.append("--allow-root")
    return command


def lab_environment(environ: dict[str, str], instructor: bool = False) -> dict[str, str]:
    """``environ`` with the repository's ``jupyter-config/`` first on ``JUPYTER_CONFIG_PATH``.

    Args:
        environ: the environment to start from (not changed).
        instructor: keep nbgrader's instructor tools; ``False`` (a student's Lab) puts
            ``jupyter-config/student/`` first, which switches them off.

    Returns:
        A copy whose ``JUPYTER_CONFIG_PATH`` starts with ``jupyter-config/student/`` (a
        student's Lab) and ``jupyter-config/``; what it held before follows.
    """
    env = dict(environ)
    ours = [str(CONFIG)] if instructor else [str(STUDENT_CONFIG), str(CONFIG)]
    paths = [*ours, *filter(None, env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep))]
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(paths)
    return env


def main(argv: list[str] | None = None) -> int:
    """Start JupyterLab in this process (see the module docstring).

    Args:
        argv: this script's arguments (``sys.argv[1:]`` when ``None``); ``--instructor``
            anywhere among them keeps nbgrader's instructor tools.

    Returns:
        Nothing when JupyterLab starts (``os.execve`` replaces this process); 2 when the
        folder (or notebook) to open does not exist.
    """
    argv = sys.argv[1:] if argv is None else argv
    instructor = INSTRUCTOR_FLAG in argv
    argv = [arg for arg in argv if arg != INSTRUCTOR_FLAG]
    command = lab_command(argv, os.geteuid())
    if not Path(command[3]).exists():
        print(f"scripts/lab.py: there is no {command[3]!r} to open here", file=sys.stderr)
        return 2
    if "--allow-root" in command and "--allow-root" not in argv:
        print(ROOT_NOTICE, file=sys.stderr, flush=True)
    os.execve(command[0], command, lab_environment(dict(os.environ), instructor))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
