"""What formgrader's *Autograde* and *Generate Feedback* buttons run in the classroom.

The docs once disagreed (sandboxed, or "unsandboxed, do not use it"). The buttons run nbgrader's
``Autograde`` and ``GenerateFeedback`` with the configuration formgrader loads, so this builds
that configuration the way formgrader does (``FormgradeExtension.initialize`` and the handler's
``load_config_file``, then the API's converters) from the classroom's own instructor folder
(``classroom/course_folder.write_role_configs``), the instructor's environment and a course folder
holding the course's ``nbgrader_config.py``, and reads which steps the buttons would run. No
server, no kernel: a subprocess, so no traitlets singleton is left behind.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json
from nbgrader.apps.api import NbGraderAPI
from nbgrader.converters import Autograde, GenerateFeedback
from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension

formgrader = FormgradeExtension()  # as nbgrader's load_jupyter_server_extension makes it
formgrader.root_dir = "/"
formgrader.initialize([])
formgrader.load_config_file()  # as every formgrader API handler does first
api = NbGraderAPI(formgrader.coursedir, parent=formgrader)
autograde = Autograde(coursedir=api.coursedir, parent=api)
feedback = GenerateFeedback(coursedir=api.coursedir, parent=api)
print(json.dumps({
    "root": api.coursedir.root,
    "execute": str(autograde.autograde_preprocessors[0]),
    "grades": [str(p) for p in autograde.autograde_preprocessors],
    "sanitize": [str(p) for p in autograde.sanitize_preprocessors],
    "feedback": [str(p) for p in feedback.preprocessors],
    "hook": getattr(feedback.post_convert_hook, "__name__", None),
}))
"""


def _role_configs(etc: Path) -> Path:
    spec = importlib.util.spec_from_file_location(
        "course_folder", ROOT / "classroom" / "course_folder.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_role_configs(etc)["instructor"]


def buttons(tmp: Path, course_config: bool = True) -> dict:
    """The steps formgrader's buttons would run for an instructor set up as the classroom sets
    one up (``course_config=False``: a course folder without the course's config)."""
    course, home = tmp / "course", tmp / "home"
    course.mkdir()
    home.mkdir()
    if course_config:
        shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    env = {
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "HOME": str(home),
        "JUPYTER_CONFIG_PATH": str(_role_configs(tmp / "etc")),
        "SHAPES_COURSE_ROOT": str(course),
        "SHAPES_COURSE_ID": "shapes",
        "SHAPES_EXCHANGE_ROOT": str(tmp / "exchange"),
        "SHAPES_GRADEBOOK_URL": f"sqlite:///{tmp / 'gradebook.db'}",
    }
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_formgraders_autograde_button_runs_the_sandbox_and_the_trusted_checks(tmp_path):
    found = buttons(tmp_path)
    assert found["root"] == str(tmp_path / "course")
    assert found["execute"] == "course_grading.nbgrader.steps.SandboxedExecute"
    assert "course_grading.judge.verdicts.SaveTrustedGrades" in found["grades"]
    assert "nbgrader.preprocessors.SaveAutoGrades" not in found["grades"]
    assert "course_grading.nbgrader.overwrite.RestoreLockedCells" in found["sanitize"]
    assert "course_grading.pages.feedback.WithholdInstructorMaterial" in found["feedback"]
    assert found["hook"] == "remove_withheld_pages"


def test_without_the_courses_config_the_button_would_run_nbgraders_own_execute(tmp_path):
    """What the check tells apart: a course folder without the course's nbgrader_config.py
    (nbgrader's defaults) would run student code in nbgrader's own, unsandboxed Execute."""
    found = buttons(tmp_path, course_config=False)
    assert "SandboxedExecute" not in found["execute"] and "Execute" in found["execute"]
