"""Every lesson opens with an *Open in Colab* link, the two-line "how to answer" note and a
locked install cell (``scripts/links.py``, one place for the repository's address), in
``solutions/`` and in the released ``notebooks/`` alike. The install cell installs the course
in Colab and, anywhere else, does nothing: no output, no subprocess, no network (the grader's
sandbox has none)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted(p.parent.name for p in ROOT.glob("solutions/*/*.ipynb"))

spec = importlib.util.spec_from_file_location("links", ROOT / "scripts" / "links.py")
links = importlib.util.module_from_spec(spec)
spec.loader.exec_module(links)

# Runs the install cell's source with subprocess.run replaced by a recorder; prints what it saw.
PROBE = """
import json, subprocess, sys
calls = []
subprocess.run = lambda *a, **k: calls.append([list(a[0]), k])
exec(compile(sys.stdin.read(), "install-cell", "exec"))
print("CALLS" + json.dumps(calls))
"""


def run_install_cell(env_extra: dict[str, str], colab_module: bool = False) -> tuple[str, list]:
    """The install cell run in a fresh interpreter: (what it printed, the subprocess calls)."""
    env = {k: v for k, v in os.environ.items() if k != "COLAB_RELEASE_TAG"} | env_extra
    prelude = "import sys, types; sys.modules['google.colab'] = types.ModuleType('colab')\n"
    done = subprocess.run(
        [sys.executable, "-c", (prelude if colab_module else "") + PROBE],
        input=links.install_source(),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    printed, _, calls = done.stdout.rpartition("CALLS")
    return printed + done.stderr, json.loads(calls)


def test_every_lessons_links_and_install_cell_are_in_step_with_the_one_address():
    assert links.main(["--check"]) == 0, "run .venv/bin/python scripts/links.py, then make release"


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_a_lesson_opens_with_its_colab_link_note_and_locked_install_cell(folder, lesson):
    nb = nbformat.read(ROOT / folder / lesson / f"{lesson}.ipynb", as_version=4)
    first = nb.cells[0].source
    assert first.startswith(links.colab_link(lesson) + "\n\n# Lesson"), first[:200]
    assert first.endswith(links.how_to_answer())
    assert (ROOT / "notebooks" / lesson / f"{lesson}.ipynb").is_file()  # what Colab opens
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].source == links.install_source()
    meta = code[0].metadata["nbgrader"]
    assert meta["locked"] and not meta["grade"] and not meta["solution"], meta


def test_the_how_to_answer_note_is_two_lines_of_prose_and_a_link():
    note = links.how_to_answer()
    assert note.count("\n") == 2 and len(note.split()) < 70, note
    assert "docs/students.md" in note and (ROOT / "docs" / "students.md").is_file()


def test_the_install_cell_does_nothing_outside_colab():
    printed, calls = run_install_cell({})
    assert printed == "" and calls == []


def test_the_install_cell_installs_the_plain_package_in_colab():
    for env, module in (({"COLAB_RELEASE_TAG": "release-colab_20261201-060000_RC00"}, False),
                        ({}, True)):  # fmt: skip
        printed, calls = run_install_cell(env, colab_module=module)
        assert printed == "" and len(calls) == 1, (printed, calls)
        (argv, kwargs) = calls[0]
        assert argv[1:4] == ["-m", "pip", "install"] and kwargs == {"check": True}
        assert argv[-1] == f"course_lib @ git+https://github.com/{links.REPOSITORY}@{links.BRANCH}"


def test_the_check_sees_a_lesson_out_of_step(tmp_path):
    path = ROOT / "solutions" / LESSONS[0] / f"{LESSONS[0]}.ipynb"
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    assert not links.stamp(nb, LESSONS[0])  # in step: nothing to change
    nb.cells[0].source = nb.cells[0].source.replace(links.REPOSITORY, "someone/else")
    assert links.stamp(nb, LESSONS[0])
    install = next(c for c in nb.cells if c.get("id") == links.INSTALL_ID)
    nb.cells.remove(install)
    nb.cells.append(install)  # moved to the end: no longer the first code cell
    assert links.stamp(nb, LESSONS[0])
    assert [c.get("id") for c in nb.cells if c.cell_type == "code"][0] == links.INSTALL_ID
    assert json.dumps(nb).count(links.INSTALL_ID) == 2  # the cell id and its grade id, once
